"""The stand-in peers work: a real EVM with TestUSDC at the USDC address, a JSON-RPC node over it, and
x402 v2/v1 servers on the official SDK that settle for real. eth-account is the signing oracle here."""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests
from eth_abi import encode
from eth_account import Account
from eth_utils import keccak
from standins.evm import (
    BASE_CHAIN_ID,
    TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
    USDC_ADDRESS,
    Reverted,
    authorization_args,
    encode_transfer_with_authorization,
    eth_account_sign_authorization,
    make_authorization,
)
from standins.x402_server import b64json, unb64json

# Published values for USDC on Base (see /work/shared/reference/testing-peers.md).
USDC_DOMAIN_SEPARATOR = "0x02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
ONE_USDC = 1_000_000


def _account(label: str):
    return Account.from_key(keccak(text=f"standins-test:{label}"))


@pytest.fixture
def payer(chain, request):
    account = _account(f"payer:{request.node.name}")
    chain.mint(account.address, 100 * ONE_USDC)
    return account


def _rpc(url: str, method: str, *params, timeout: float = 5):
    response = requests.post(url, json={"jsonrpc": "2.0", "id": 7, "method": method, "params": list(params)},
                             timeout=timeout)
    return response


# ---------------------------------------------------------------------- the chain and the contract


def test_chain_is_base_and_the_domain_is_usdc_on_base(chain):
    assert chain.chain_id == BASE_CHAIN_ID
    assert chain.token == USDC_ADDRESS
    assert chain.get_code(USDC_ADDRESS)
    assert "0x" + chain.domain_separator().hex() == USDC_DOMAIN_SEPARATOR
    assert chain.call(USDC_ADDRESS, keccak(text="TRANSFER_WITH_AUTHORIZATION_TYPEHASH()")[:4]).hex() == (
        "7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
    assert int.from_bytes(chain.call(USDC_ADDRESS, keccak(text="decimals()")[:4]), "big") == 6


def test_mint_and_transfer(chain):
    alice, bob = chain.accounts[1], _account("bob").address
    supply = chain.total_supply()
    chain.mint(alice, 3 * ONE_USDC)
    assert chain.balance_of(alice) == 3 * ONE_USDC
    assert chain.total_supply() == supply + 3 * ONE_USDC
    assert chain.transfer(alice, bob, ONE_USDC).ok
    assert chain.balance_of(bob) == ONE_USDC
    too_much = chain.transfer(alice, bob, 10 * ONE_USDC)
    assert not too_much.ok and too_much.reason == "ERC20: transfer amount exceeds balance"


def test_signed_authorization_moves_the_balance(chain, payer):
    payee = _account("payee-1").address
    auth = make_authorization(payer.address, payee, 2 * ONE_USDC)
    signature = eth_account_sign_authorization(payer.key, auth)
    assert not chain.authorization_used(payer.address, auth["nonce"])

    outcome = chain.submit_transfer_with_authorization(auth, signature)

    assert outcome.ok, outcome.reason
    assert chain.balance_of(payer.address) == 98 * ONE_USDC
    assert chain.balance_of(payee) == 2 * ONE_USDC
    assert chain.authorization_used(payer.address, auth["nonce"])
    topics = [log["topics"][0] for log in outcome.logs]
    assert "0x" + keccak(text="AuthorizationUsed(address,bytes32)").hex() in topics
    assert "0x" + keccak(text="Transfer(address,address,uint256)").hex() in topics


def test_bytes_overload_takes_the_same_signature_with_v_0_or_27(chain, payer):
    payee = _account("payee-2").address
    for raw_v in (False, True):
        auth = make_authorization(payer.address, payee, ONE_USDC)
        sig = bytes.fromhex(eth_account_sign_authorization(payer.key, auth)[2:])
        if raw_v:
            sig = sig[:64] + bytes([sig[64] - 27])
        assert chain.submit_transfer_with_authorization(auth, sig, overload="bytes").ok
    assert chain.balance_of(payee) == 2 * ONE_USDC


def _high_s(signature: str) -> str:
    sig = bytes.fromhex(signature[2:])
    s = SECP256K1_N - int.from_bytes(sig[32:64], "big")
    return "0x" + (sig[:32] + s.to_bytes(32, "big") + bytes([55 - sig[64]])).hex()  # 27 <-> 28


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("expired", "FiatTokenV2: authorization is expired"),
        ("not_yet_valid", "FiatTokenV2: authorization is not yet valid"),
        ("tampered_value", "FiatTokenV2: invalid signature"),
        ("tampered_to", "FiatTokenV2: invalid signature"),
        ("other_signer", "FiatTokenV2: invalid signature"),
        ("malleable_high_s", "FiatTokenV2: invalid signature"),
        ("wrong_chain_id", "FiatTokenV2: invalid signature"),
        ("over_balance", "ERC20: transfer amount exceeds balance"),
    ],
)
def test_bad_authorizations_revert(chain, payer, case, reason):
    payee = _account(f"payee-{case}").address
    now = int(time.time())
    kwargs = {"expired": {"valid_before": now - 1}, "not_yet_valid": {"valid_after": now + 3600}}.get(case, {})
    auth = make_authorization(payer.address, payee, 1000 * ONE_USDC if case == "over_balance" else ONE_USDC, **kwargs)
    signer_key = _account("someone-else").key if case == "other_signer" else payer.key
    chain_id = 1 if case == "wrong_chain_id" else BASE_CHAIN_ID
    signature = eth_account_sign_authorization(signer_key, auth, chain_id=chain_id)
    if case == "tampered_value":
        auth = dict(auth, value=str(2 * ONE_USDC))
    if case == "tampered_to":
        auth = dict(auth, to=_account("thief").address)
    if case == "malleable_high_s":
        signature = _high_s(signature)
        # the high-s twin is still a valid ECDSA signature of the same digest (eth-account recovers it) ...
        assert Account._recover_hash(_digest(chain, auth), signature=bytes.fromhex(signature[2:])) == payer.address

    outcome = chain.submit_transfer_with_authorization(auth, signature)

    assert not outcome.ok
    assert outcome.reason == reason
    assert chain.balance_of(payer.address) == 100 * ONE_USDC
    assert not chain.authorization_used(payer.address, auth["nonce"])


def _digest(chain, auth) -> bytes:
    struct = keccak(TRANSFER_WITH_AUTHORIZATION_TYPEHASH + encode(
        ["address", "address", "uint256", "uint256", "uint256", "bytes32"], authorization_args(auth)))
    return keccak(b"\x19\x01" + chain.domain_separator() + struct)


def test_replayed_authorization_reverts(chain, payer):
    payee = _account("payee-replay").address
    auth = make_authorization(payer.address, payee, ONE_USDC)
    signature = eth_account_sign_authorization(payer.key, auth)
    assert chain.submit_transfer_with_authorization(auth, signature).ok

    again = chain.submit_transfer_with_authorization(auth, signature)

    assert not again.ok
    assert again.reason == "FiatTokenV2: authorization is used or canceled"
    assert chain.balance_of(payee) == ONE_USDC


# ---------------------------------------------------------------------- JSON-RPC


def test_balance_of_over_raw_json_rpc_matches_the_chain(chain, rpc, payer):
    data = "0x70a08231" + payer.address[2:].lower().rjust(64, "0")

    response = _rpc(rpc.url, "eth_call", {"to": USDC_ADDRESS, "data": data}, "latest")

    assert response.status_code == 200
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 7
    assert int(body["result"], 16) == chain.balance_of(payer.address) == 100 * ONE_USDC


def test_json_rpc_basics(chain, rpc):
    assert _rpc(rpc.url, "eth_chainId").json()["result"] == "0x2105"
    assert int(_rpc(rpc.url, "eth_blockNumber").json()["result"], 16) == chain.block_number()
    assert int(_rpc(rpc.url, "eth_getBalance", chain.relayer, "latest").json()["result"], 16) == chain.eth_balance(
        chain.relayer)
    assert _rpc(rpc.url, "eth_getCode", USDC_ADDRESS, "latest").json()["result"] == "0x" + chain.get_code(
        USDC_ADDRESS).hex()
    assert _rpc(rpc.url, "eth_getCode", chain.relayer, "latest").json()["result"] == "0x"
    batch = requests.post(rpc.url, json=[{"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"},
                                         {"jsonrpc": "2.0", "id": 2, "method": "net_version"}], timeout=5).json()
    assert [item["result"] for item in batch] == ["0x2105", "8453"]
    assert _rpc(rpc.url, "eth_nope").json()["error"]["code"] == -32601
    assert requests.post(rpc.url, data=b"{not json", timeout=5).json()["error"]["code"] == -32700


def test_json_rpc_revert_is_a_geth_shaped_error(chain, rpc, payer):
    auth = make_authorization(payer.address, _account("payee-rpc").address, ONE_USDC,
                              valid_before=int(time.time()) - 60)
    data = encode_transfer_with_authorization(auth, eth_account_sign_authorization(payer.key, auth))

    error = _rpc(rpc.url, "eth_call", {"to": USDC_ADDRESS, "data": "0x" + data.hex()}).json()["error"]

    assert error["code"] == 3
    assert error["message"] == "execution reverted: FiatTokenV2: authorization is expired"
    assert error["data"].startswith("0x08c379a0")
    with pytest.raises(Reverted, match="authorization is expired"):
        chain.call(USDC_ADDRESS, data)


def test_json_rpc_faults(rpc):
    rpc.fail("rpc_error", message="boom")
    assert _rpc(rpc.url, "eth_chainId").json()["error"] == {"code": -32000, "message": "boom"}
    assert _rpc(rpc.url, "eth_chainId").json()["result"] == "0x2105"  # one failure only

    rpc.fail("http_500", times=2)
    assert [_rpc(rpc.url, "eth_chainId").status_code for _ in range(3)] == [500, 500, 200]

    rpc.fail("bad_json")
    with pytest.raises(ValueError):
        _rpc(rpc.url, "eth_chainId").json()

    rpc.fail("rpc_error", times=None, method="eth_call")
    assert "result" in _rpc(rpc.url, "eth_chainId").json()
    assert "error" in _rpc(rpc.url, "eth_call", {"to": USDC_ADDRESS, "data": "0x18160ddd"}).json()
    assert "error" in _rpc(rpc.url, "eth_call", {"to": USDC_ADDRESS, "data": "0x18160ddd"}).json()
    rpc.clear_faults()
    assert "result" in _rpc(rpc.url, "eth_call", {"to": USDC_ADDRESS, "data": "0x18160ddd"}).json()

    rpc.fail("delay", delay=0.5)
    with pytest.raises(requests.exceptions.ReadTimeout):
        _rpc(rpc.url, "eth_chainId", timeout=0.1)
    assert rpc.requests[-1]["method"] == "eth_chainId"


def test_signed_raw_transaction_over_json_rpc(chain, rpc):
    sender = Account.from_key(chain.private_key(chain.accounts[2]))
    receiver = _account("raw-tx-receiver").address
    data = keccak(text="mint(address,uint256)")[:4] + bytes(12) + bytes.fromhex(receiver[2:]) + (5).to_bytes(32, "big")
    nonce = int(_rpc(rpc.url, "eth_getTransactionCount", sender.address, "pending").json()["result"], 16)
    gas_price = int(_rpc(rpc.url, "eth_gasPrice").json()["result"], 16)
    tx = {"chainId": BASE_CHAIN_ID, "nonce": nonce, "to": USDC_ADDRESS, "data": data, "value": 0, "gas": 200_000,
          "maxFeePerGas": gas_price * 2, "maxPriorityFeePerGas": 10**9, "type": 2}
    raw = "0x" + sender.sign_transaction(tx).raw_transaction.hex()

    tx_hash = _rpc(rpc.url, "eth_sendRawTransaction", raw).json()["result"]
    receipt = _rpc(rpc.url, "eth_getTransactionReceipt", tx_hash).json()["result"]

    assert receipt["status"] == "0x1"
    assert receipt["logs"][0]["address"] == USDC_ADDRESS
    assert chain.balance_of(receiver) == 5


# ---------------------------------------------------------------------- x402 v2 (the SDK's Flask middleware)


def _v2_header(server, path, payer, *, mutate=None):
    """402 -> decode PAYMENT-REQUIRED (base64 JSON) -> sign with eth-account -> the PAYMENT-SIGNATURE value."""
    first = requests.get(server.url + path, timeout=10)
    assert first.status_code == 402
    required = json.loads(base64.b64decode(first.headers["PAYMENT-REQUIRED"]))
    assert required["x402Version"] == 2
    accepted = required["accepts"][0]
    auth = make_authorization(payer.address, accepted["payTo"], int(accepted["amount"]))
    payload = {
        "x402Version": 2,
        "payload": {"signature": eth_account_sign_authorization(payer.key, auth), "authorization": auth},
        "accepted": accepted,
        "resource": required["resource"],
    }
    if mutate:
        mutate(payload)
    return required, base64.b64encode(json.dumps(payload).encode()).decode()


def _v2_pay(server, path, payer, *, mutate=None):
    """The whole client flow by hand: the header above, then the retry with it."""
    required, header = _v2_header(server, path, payer, mutate=mutate)
    return required, header, requests.get(server.url + path, headers={"PAYMENT-SIGNATURE": header}, timeout=10)


def test_v2_402_names_usdc_on_base(x402_v2, merchant):
    response = requests.get(x402_v2.url + "/paid", timeout=10)

    assert response.status_code == 402
    required = unb64json(response.headers["PAYMENT-REQUIRED"])
    assert required["resource"]["url"] == x402_v2.url + "/paid"
    assert required["accepts"] == [{
        "scheme": "exact", "network": "eip155:8453", "asset": USDC_ADDRESS, "amount": "10000",
        "payTo": merchant.address, "maxTimeoutSeconds": 300, "extra": {"name": "USD Coin", "version": "2"},
    }]
    assert requests.get(x402_v2.url + "/free", timeout=10).json() == {"ok": True, "paid": False}


def test_v2_payment_settles_on_chain_and_a_replay_is_refused(chain, x402_v2, payer, merchant):
    before = chain.balance_of(merchant.address)

    _, header, paid = _v2_pay(x402_v2, "/paid", payer)

    assert paid.status_code == 200, unb64json(paid.headers.get("PAYMENT-REQUIRED", b64json({})))
    assert paid.json() == {"ok": True, "paid": True}
    settled = unb64json(paid.headers["PAYMENT-RESPONSE"])
    assert settled["success"] is True and settled["payer"] == payer.address and settled["network"] == "eip155:8453"
    assert chain.receipt(settled["transaction"])["status"] == 1
    assert chain.balance_of(merchant.address) == before + 10_000
    assert chain.balance_of(payer.address) == 100 * ONE_USDC - 10_000

    replay = requests.get(x402_v2.url + "/paid", headers={"PAYMENT-SIGNATURE": header}, timeout=10)

    assert replay.status_code == 402
    assert unb64json(replay.headers["PAYMENT-REQUIRED"])["error"] == "invalid_exact_evm_nonce_already_used"
    assert chain.balance_of(merchant.address) == before + 10_000


def test_v2_credit_topup_route(chain, x402_v2, payer, merchant):
    before = chain.balance_of(merchant.address)

    required, _, paid = _v2_pay(x402_v2, f"/pay/5/{payer.address}", payer)

    assert required["accepts"][0]["amount"] == "5000000"
    assert paid.status_code == 200
    assert paid.json() == {"credits_cents": 500, "amount_usd": 5, "address": payer.address}
    assert chain.balance_of(merchant.address) == before + 5 * ONE_USDC


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("accepted_missing", "Payment required"),
        ("accepted_payto_lowercase", "No matching payment requirements"),
        ("amount_short", "invalid_exact_evm_payload_authorization_value_mismatch"),
        ("signature_tampered", "invalid_exact_evm_payload_signature"),
    ],
)
def test_v2_refuses_bad_payments(chain, x402_v2, payer, case, error):
    def mutate(payload):
        auth = payload["payload"]["authorization"]
        if case == "accepted_missing":
            del payload["accepted"]
        elif case == "accepted_payto_lowercase":
            payload["accepted"]["payTo"] = payload["accepted"]["payTo"].lower()
        elif case == "amount_short":
            auth["value"] = str(int(auth["value"]) - 1)
            payload["payload"]["signature"] = eth_account_sign_authorization(payer.key, auth)
        elif case == "signature_tampered":
            auth["validBefore"] = str(int(auth["validBefore"]) + 1)

    _, _, response = _v2_pay(x402_v2, "/paid", payer, mutate=mutate)

    assert response.status_code == 402
    assert unb64json(response.headers["PAYMENT-REQUIRED"])["error"] == error
    assert chain.balance_of(payer.address) == 100 * ONE_USDC


def test_v2_refuses_a_payer_without_funds(chain, x402_v2):
    broke = _account("broke")

    _, _, response = _v2_pay(x402_v2, "/paid", broke)

    assert response.status_code == 402
    assert unb64json(response.headers["PAYMENT-REQUIRED"])["error"] == "invalid_exact_evm_insufficient_balance"


def test_v2_ignores_x_payment(chain, x402_v2, payer):
    _, header = _v2_header(x402_v2, "/paid", payer)
    response = requests.get(x402_v2.url + "/paid", headers={"X-PAYMENT": header}, timeout=10)
    assert response.status_code == 402
    assert unb64json(response.headers["PAYMENT-REQUIRED"])["error"] == "Payment required"
    assert chain.balance_of(payer.address) == 100 * ONE_USDC


def test_v2_faults(chain, x402_v2, payer):
    x402_v2.fail_next(status=503)
    assert requests.get(x402_v2.url + "/paid", timeout=10).status_code == 503

    x402_v2.fail_next_settle("unexpected_settle_error")
    _, _, response = _v2_pay(x402_v2, "/paid", payer)

    assert response.status_code == 402
    assert "PAYMENT-REQUIRED" not in response.headers
    settled = unb64json(response.headers["PAYMENT-RESPONSE"])
    assert settled["success"] is False and settled["errorReason"] == "unexpected_settle_error"
    assert chain.balance_of(payer.address) == 100 * ONE_USDC
    assert x402_v2.facilitator_calls[-1]["kind"] == "settle"


# ---------------------------------------------------------------------- x402 v1


def _v1_payment(payer, requirements, **overrides):
    auth = make_authorization(payer.address, requirements["payTo"], int(requirements["maxAmountRequired"]))
    payment = {"x402Version": 1, "scheme": "exact", "network": "base",
               "payload": {"signature": eth_account_sign_authorization(payer.key, auth), "authorization": auth}}
    payment["payload"]["authorization"].update(overrides)
    return payment


def test_v1_facilitator_verifies_an_eth_account_payment_and_rejects_a_tampered_one(chain, x402_v1, payer, merchant):
    requirements = x402_v1.requirements("/paid")
    assert requirements["network"] == "base" and requirements["maxAmountRequired"] == "10000"
    payment = _v1_payment(payer, requirements)

    assert x402_v1.verify(b64json(payment), requirements) == {"isValid": True, "payer": payer.address}

    tampered = json.loads(json.dumps(payment))
    tampered["payload"]["authorization"]["to"] = _account("thief").address
    assert x402_v1.verify(tampered, requirements)["invalidReason"] == "invalid_exact_evm_payload_recipient_mismatch"
    tampered = json.loads(json.dumps(payment))
    valid_before = int(payment["payload"]["authorization"]["validBefore"])
    tampered["payload"]["authorization"]["validBefore"] = str(valid_before - 1)
    assert x402_v1.verify(tampered, requirements)["invalidReason"] == "invalid_exact_evm_payload_signature"

    before = chain.balance_of(merchant.address)
    settled = x402_v1.settle(payment, requirements)
    assert settled["success"] is True and settled["network"] == "base"
    assert chain.balance_of(merchant.address) == before + 10_000
    assert x402_v1.verify(payment, requirements)["invalidReason"] == "invalid_exact_evm_nonce_already_used"


def test_v1_http_flow(chain, x402_v1, payer, merchant):
    first = requests.get(x402_v1.url + f"/pay/5/{payer.address}", timeout=10)
    assert first.status_code == 402
    body = first.json()
    assert body["x402Version"] == 1 and body["error"] == "X-PAYMENT header is required"
    requirements = body["accepts"][0]
    assert requirements["maxAmountRequired"] == "5000000" and requirements["payTo"] == merchant.address
    header = b64json(_v1_payment(payer, requirements))
    before = chain.balance_of(merchant.address)

    paid = requests.get(x402_v1.url + f"/pay/5/{payer.address}", headers={"X-PAYMENT": header}, timeout=10)

    assert paid.status_code == 200
    assert paid.json()["credits_cents"] == 500
    settled = unb64json(paid.headers["X-PAYMENT-RESPONSE"])
    assert settled["success"] is True and settled["payer"] == payer.address and settled["network"] == "base"
    assert chain.balance_of(merchant.address) == before + 5 * ONE_USDC

    replay = requests.get(x402_v1.url + f"/pay/5/{payer.address}", headers={"X-PAYMENT": header}, timeout=10)
    assert replay.status_code == 402
    assert replay.json()["error"] == "invalid_exact_evm_nonce_already_used"
    assert chain.balance_of(merchant.address) == before + 5 * ONE_USDC
