"""The hand-rolled signers against eth-account: EIP-191, EIP-712 (random structs) and EIP-3009, byte for byte."""

from __future__ import annotations

import re

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct, encode_typed_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.chain.address import keccak256
from automaton_min.chain.eip191 import personal_message_digest, recover_personal_signer, sign_personal_message
from automaton_min.chain.eip712 import (
    domain_separator,
    encode_type,
    hash_struct,
    sign_typed_data,
    type_hash,
    typed_data_digest,
)
from automaton_min.chain.eip3009 import (
    TRANSFER_WITH_AUTHORIZATION_TYPES,
    TokenDomain,
    TransferAuthorization,
    authorization_digest,
    sign_authorization,
)
from automaton_min.chain.signing import recover_signer, sign_digest
from automaton_min.chain.wallet import SECP256K1_ORDER, Wallet

ORACLE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

KEYS = st.integers(min_value=1, max_value=SECP256K1_ORDER - 1).map(lambda n: n.to_bytes(32, "big"))
ADDRESSES = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
USDC_BASE = TokenDomain("USD Coin", "2", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")


def signature_bytes(signed) -> bytes:
    return bytes(signed.signature)


# --------------------------------------------------------------------------- known values


def test_spec_example_digest_of_eip712() -> None:
    types = {
        "EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                         {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"}],
        "Person": [{"name": "name", "type": "string"}, {"name": "wallet", "type": "address"}],
        "Mail": [{"name": "from", "type": "Person"}, {"name": "to", "type": "Person"}, {"name": "contents", "type": "string"}],
    }
    data = {
        "types": types,
        "primaryType": "Mail",
        "domain": {"name": "Ether Mail", "version": "1", "chainId": 1, "verifyingContract": "0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC"},
        "message": {"from": {"name": "Cow", "wallet": "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826"},
                    "to": {"name": "Bob", "wallet": "0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB"},
                    "contents": "Hello, Bob!"},
    }
    assert encode_type("Mail", types) == "Mail(Person from,Person to,string contents)Person(string name,address wallet)"
    assert typed_data_digest(data).hex() == "be609aee343fb3c4b28e1df9e632fca64fcfaede20f02e86244efddf30957bd2"
    cow = Wallet(keccak256(b"cow"))
    assert cow.address == "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826"
    assert sign_typed_data(cow, data) == (
        "0x4355c47d63924e8a72e509b65029052eb6c299d53a04e167c5775fd466751c9d"
        "07299936d304c153f6443dfa05f40ff007d72911b6f72307f996231605b915621c"
    )


def test_usdc_typehash_and_base_domain_separator() -> None:
    assert type_hash("TransferWithAuthorization", TRANSFER_WITH_AUTHORIZATION_TYPES).hex() == (
        "7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
    assert domain_separator(USDC_BASE.as_dict()).hex() == (
        "02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f")


# --------------------------------------------------------------------------- EIP-191


@ORACLE
@given(key=KEYS, message=st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_personal_sign_matches_eth_account(key: bytes, message: str | bytes) -> None:
    wallet = Wallet(key)
    signable = encode_defunct(text=message) if isinstance(message, str) else encode_defunct(primitive=message)
    expected = Account.sign_message(signable, key)
    ours = sign_personal_message(wallet, message)
    assert bytes.fromhex(ours[2:]) == signature_bytes(expected)
    assert recover_personal_signer(message, ours) == wallet.address


def test_personal_digest_counts_bytes_not_characters() -> None:
    assert personal_message_digest("é") == keccak256(b"\x19Ethereum Signed Message:\n2" + "é".encode())


def test_recovery_of_a_tampered_message_names_someone_else() -> None:
    wallet = Wallet(b"\x07" * 32)
    signature = sign_personal_message(wallet, "pay 5 USDC")
    assert recover_personal_signer("pay 500 USDC", signature) != wallet.address


@pytest.mark.parametrize("bad", [b"\0" * 65, b"\1" * 64 + b"\x1d", b"\1" * 64])
def test_unrecoverable_signatures_raise_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        recover_signer(b"\2" * 32, bad)


def test_signatures_are_low_s_and_v_is_27_or_28() -> None:
    wallet = Wallet(b"\x09" * 32)
    for i in range(50):
        signature = sign_digest(wallet, keccak256(bytes([i])))
        assert signature[64] in (27, 28)
        assert int.from_bytes(signature[32:64], "big") <= SECP256K1_ORDER // 2


# --------------------------------------------------------------------------- EIP-712, random structs

STRUCT_NAMES = ["Zeta", "Alpha", "Mail", "Person", "Order", "Beta"]
ATOMIC_VALUES = {
    "bool": st.booleans(),
    "address": ADDRESSES,
    "string": st.text(max_size=40),
    "bytes": st.binary(max_size=70).map(lambda b: "0x" + b.hex()),
    **{f"uint{n}": st.integers(0, (1 << n) - 1) for n in (8, 32, 64, 128, 256)},
    **{f"int{n}": st.integers(-(1 << (n - 1)), (1 << (n - 1)) - 1) for n in (8, 64, 256)},
    **{f"bytes{n}": st.binary(min_size=n, max_size=n).map(lambda b: "0x" + b.hex()) for n in (1, 4, 20, 32)},
}
ARRAY = re.compile(r"(.+)\[(\d*)\]")


def _value(draw, type_name: str, types: dict) -> object:
    if match := ARRAY.fullmatch(type_name):
        element, length = match.groups()
        count = int(length) if length else draw(st.integers(0, 3))
        return [_value(draw, element, types) for _ in range(count)]
    if type_name in types:
        return {field["name"]: _value(draw, field["type"], types) for field in types[type_name]}
    return draw(ATOMIC_VALUES[type_name])


@st.composite
def random_typed_data(draw) -> dict:
    names = draw(st.permutations(STRUCT_NAMES))[: draw(st.integers(1, 4))]
    types: dict[str, list[dict[str, str]]] = {}
    for index, name in enumerate(names):
        fields = []
        for position in range(draw(st.integers(1, 5))):
            base = draw(st.sampled_from(sorted(ATOMIC_VALUES) + names[index + 1:]))
            suffix = draw(st.sampled_from(["", "", "", "[]", "[2]", "[][]"]))
            fields.append({"name": f"field{position}", "type": base + suffix})
        types[name] = fields
    for index, name in enumerate(names[1:], start=1):  # eth-account wants every struct reachable from the primary
        holder = types[names[draw(st.integers(0, index - 1))]]
        holder.append({"name": f"field{len(holder)}", "type": name + draw(st.sampled_from(["", "[]", "[1]"]))})
    domain_fields = draw(st.sets(st.sampled_from(["name", "version", "chainId", "verifyingContract", "salt"]), min_size=1))
    domain_values = {"name": st.text(max_size=20), "version": st.text(max_size=5), "chainId": st.integers(1, 1 << 64),
                     "verifyingContract": ADDRESSES, "salt": st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex())}
    order = ["name", "version", "chainId", "verifyingContract", "salt"]
    kinds = {"name": "string", "version": "string", "chainId": "uint256", "verifyingContract": "address", "salt": "bytes32"}
    domain = {key: draw(domain_values[key]) for key in order if key in domain_fields}
    types["EIP712Domain"] = [{"name": key, "type": kinds[key]} for key in order if key in domain]
    return {"types": types, "primaryType": names[0], "domain": domain, "message": _value(draw, names[0], types)}


@ORACLE
@given(key=KEYS, data=random_typed_data())
def test_typed_data_matches_eth_account(key: bytes, data: dict) -> None:
    signable = encode_typed_data(full_message=data)
    assert domain_separator(data["domain"], data["types"]) == signable.header
    assert hash_struct(data["primaryType"], data["message"], data["types"]) == signable.body
    wallet = Wallet(key)
    ours = sign_typed_data(wallet, data)
    assert bytes.fromhex(ours[2:]) == signature_bytes(Account.sign_typed_data(key, full_message=data))
    assert recover_signer(typed_data_digest(data), bytes.fromhex(ours[2:])) == wallet.address


@pytest.mark.parametrize(
    ("type_name", "value", "problem"),
    [
        ("uint8", 256, "out of range"),
        ("uint256", -1, "out of range"),
        ("int8", -129, "out of range"),
        ("uint256", True, "boolean"),
        ("uint256", "12abc", "whole number"),
        ("bytes4", "0x0102030405", "at most 4 bytes"),
        ("bytes", "0x123", "hex"),
        ("address", "0x1234", "40-hex-digit"),
        ("bool", 2, "true or false"),
        ("string", 5, "text"),
        ("uint7", 1, "not a valid type"),
        ("bytes33", "0x00", "not a valid type"),
        ("Missing", {}, "unknown type"),
        ("uint8[2]", [1], "expected 2 items"),
    ],
)
def test_bad_values_are_refused_with_the_reason(type_name: str, value: object, problem: str) -> None:
    data = {"types": {"T": [{"name": "v", "type": type_name}]}, "primaryType": "T", "domain": {"chainId": 1}, "message": {"v": value}}
    with pytest.raises(ValueError, match=problem):
        typed_data_digest(data)


def test_missing_field_is_named() -> None:
    data = {"types": {"T": [{"name": "amount", "type": "uint256"}]}, "primaryType": "T", "domain": {"chainId": 1}, "message": {}}
    with pytest.raises(ValueError, match="T.amount: missing"):
        typed_data_digest(data)


# --------------------------------------------------------------------------- EIP-3009


@st.composite
def authorizations(draw) -> tuple[bytes, TransferAuthorization, TokenDomain]:
    key = draw(KEYS)
    after = draw(st.integers(0, 2**40))
    authorization = TransferAuthorization(
        sender=Wallet(key).address,
        recipient=draw(ADDRESSES),
        value=draw(st.integers(0, (1 << 256) - 1)),
        valid_after=after,
        valid_before=after + draw(st.integers(1, 2**40)),
        nonce=draw(st.binary(min_size=32, max_size=32)),
    )
    domain = draw(st.sampled_from([
        USDC_BASE,
        TokenDomain("USDC", "2", 84532, "0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        TokenDomain("USD Coin", "2", 8453, draw(ADDRESSES)),
    ]))
    return key, authorization, domain


@ORACLE
@given(case=authorizations())
def test_transfer_with_authorization_matches_eth_account(case) -> None:
    key, authorization, domain = case
    wallet = Wallet(key)
    ours = sign_authorization(wallet, authorization, domain)
    expected = Account.sign_typed_data(
        key,
        domain_data=domain.as_dict(),
        message_types=TRANSFER_WITH_AUTHORIZATION_TYPES,
        message_data={**authorization.message(), "nonce": authorization.nonce},
    )
    assert bytes.fromhex(ours[2:]) == signature_bytes(expected)
    assert recover_signer(authorization_digest(authorization, domain), bytes.fromhex(ours[2:])) == wallet.address


def test_a_wallet_signs_only_its_own_transfers() -> None:
    wallet = Wallet(b"\x05" * 32)
    other = TransferAuthorization("0x" + "11" * 20, "0x" + "22" * 20, 5, 0, 10, b"\0" * 32)
    with pytest.raises(ValueError, match="not this wallet"):
        sign_authorization(wallet, other, USDC_BASE)


def test_authorization_wire_form_is_all_strings() -> None:
    authorization = TransferAuthorization("0x" + "11" * 20, "0x" + "22" * 20, 10000, 0, 1795304307, b"\xab" * 32)
    assert authorization.wire() == {
        "from": "0x" + "11" * 20, "to": "0x" + "22" * 20, "value": "10000", "validAfter": "0",
        "validBefore": "1795304307", "nonce": "0x" + "ab" * 32,
    }


@pytest.mark.parametrize("kwargs", [{"nonce": b"\0" * 31}, {"valid_before": 0}, {"value": -1}])
def test_malformed_authorizations_are_refused(kwargs: dict) -> None:
    base = {"sender": "0x" + "11" * 20, "recipient": "0x" + "22" * 20, "value": 1, "valid_after": 0,
            "valid_before": 10, "nonce": b"\0" * 32}
    with pytest.raises(ValueError):
        TransferAuthorization(**{**base, **kwargs})
