"""A real EVM in process: eth-tester + py-evm with TestUSDC's runtime code at the Base USDC address.

``LocalChain`` runs chain id 8453 (Base), so the EIP-712 domain the contract computes from
``block.chainid`` and ``address(this)`` is exactly USDC-on-Base's:
``{name: "USD Coin", version: "2", chainId: 8453, verifyingContract: 0x8335...2913}``.

All public methods take one lock: the chain may be shared by the test thread, the JSON-RPC
stand-in and the x402 stand-in (each serves from its own threads).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from eth_abi import decode, encode
from eth_tester import EthereumTester, PyEVMBackend
from eth_tester.exceptions import TransactionFailed
from eth_utils import keccak, to_canonical_address, to_checksum_address

USDC_ADDRESS = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
MULTICALL3_ADDRESS = "0xcA11bde05977b3631167028862bE2a173976CA11"
BASE_CHAIN_ID = 8453
BASE_NETWORK = "eip155:8453"  # CAIP-2 (x402 v2)
BASE_NETWORK_V1 = "base"  # legacy name (x402 v1)
USDC_NAME = "USD Coin"
USDC_VERSION = "2"
USDC_DECIMALS = 6

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
ARTIFACT_PATH = DATA_DIR / "TestUSDC.json"
MULTICALL_ARTIFACT_PATH = DATA_DIR / "TryAggregate.json"

TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak(
    text="TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,"
    "uint256 validBefore,bytes32 nonce)"
)
EIP712_TYPES = {
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ]
}
AUTH_TYPES = ["address", "address", "uint256", "uint256", "uint256", "bytes32"]
DEFAULT_GAS = 500_000


def selector(signature: str) -> bytes:
    """First 4 bytes of keccak(signature), e.g. ``selector("balanceOf(address)") == 0x70a08231``."""
    return keccak(text=signature)[:4]


def _to_bytes(value: bytes | str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return bytes.fromhex(value.removeprefix("0x"))


def _hex(value: bytes) -> str:
    return "0x" + bytes(value).hex()


def load_artifact(path: Path = ARTIFACT_PATH) -> dict[str, Any]:
    """The committed solc output: ``{"abi", "bytecode", "runtime", "solc", "settings"}``."""
    return json.loads(path.read_text())


def authorization_args(authorization: Mapping[str, Any]) -> list[Any]:
    """Wire-shape authorization (camelCase, values as strings or ints) -> ABI argument list."""
    return [
        to_checksum_address(authorization["from"]),
        to_checksum_address(authorization["to"]),
        int(authorization["value"]),
        int(authorization["validAfter"]),
        int(authorization["validBefore"]),
        _to_bytes(authorization["nonce"]),
    ]


def encode_transfer_with_authorization(
    authorization: Mapping[str, Any],
    signature: bytes | str,
    overload: Literal["vrs", "bytes"] = "vrs",
) -> bytes:
    """Calldata for ``transferWithAuthorization`` from a wire authorization and a 65-byte r||s||v signature.

    ``overload="vrs"`` is the (…, uint8 v, bytes32 r, bytes32 s) form the x402 facilitator calls for EOAs;
    v is passed as found in the signature (27/28 expected; the contract refuses 0/1 in this form).
    ``overload="bytes"`` is the (…, bytes signature) form (v may be 0/1 or 27/28).
    """
    sig = _to_bytes(signature)
    args = authorization_args(authorization)
    if overload == "bytes":
        types = [*AUTH_TYPES, "bytes"]
        return selector(f"transferWithAuthorization({','.join(types)})") + encode(types, [*args, sig])
    if len(sig) != 65:
        raise ValueError(f"signature must be 65 bytes, got {len(sig)}")
    types = [*AUTH_TYPES, "uint8", "bytes32", "bytes32"]
    return selector(f"transferWithAuthorization({','.join(types)})") + encode(
        types, [*args, sig[64], sig[:32], sig[32:64]]
    )


def revert_reason(error: BaseException) -> str:
    """The revert string of an eth-tester ``TransactionFailed`` (empty when none)."""
    reason = error.args[0] if error.args else ""
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    return str(reason)


def encode_revert_data(reason: str) -> str:
    """ABI ``Error(string)`` revert data, as nodes return it in a JSON-RPC error's ``data``."""
    return _hex(selector("Error(string)") + encode(["string"], [reason]))


class Reverted(Exception):
    """An ``eth_call`` reverted. ``str()`` reads "execution reverted: <reason>" like geth's message,
    which is what the x402 SDK's revert classifiers look for."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"execution reverted: {reason}" if reason else "execution reverted")
        self.reason = reason


@dataclass(frozen=True)
class TxOutcome:
    """What happened to one transaction the chain mined."""

    ok: bool
    tx_hash: str
    reason: str | None  # the revert reason when not ok (from a simulation just before sending)
    block_number: int
    gas_used: int
    logs: list[dict[str, Any]] = field(default_factory=list)


class LocalChain:
    """An in-process EVM with TestUSDC at the Base USDC address and a few ETH-funded accounts.

    ``accounts[0]`` is the relayer that sends every transaction this class sends (gas is free for
    the payer, as with EIP-3009). The funded accounts are eth-tester's well-known keys 1, 2, 3...
    (see ``private_key``); test payers do not need ETH.

    With ``multicall`` (default) Multicall3's ``tryAggregate`` (tests/data/TryAggregate.sol) sits at
    Multicall3's address, as on Base: the x402 facilitator uses it to name the reason a transfer
    simulation failed (without it a replay is reported as a generic simulation failure).

    Block time: a real Base chain makes a block every 2 s, so ``block.timestamp`` in an ``eth_call``
    is never far behind the wall clock. With ``auto_blocks`` (default) the chain mines an empty block
    before a call or a send whenever its latest block is more than ``block_time`` seconds old.
    """

    def __init__(
        self,
        *,
        chain_id: int = BASE_CHAIN_ID,
        token_address: str = USDC_ADDRESS,
        num_accounts: int = 3,
        multicall: bool = True,
        auto_blocks: bool = True,
        block_time: int = 2,
    ) -> None:
        self.lock = threading.RLock()
        self.chain_id = chain_id
        self.token = to_checksum_address(token_address)
        self.auto_blocks = auto_blocks
        self.block_time = block_time
        self.artifact = load_artifact()

        genesis_state = PyEVMBackend.generate_genesis_state(num_accounts=num_accounts)
        genesis_state[to_canonical_address(self.token)] = {
            "balance": 0,
            "nonce": 1,
            "code": _to_bytes(self.artifact["runtime"]),
            "storage": {},
        }
        if multicall:
            genesis_state[to_canonical_address(MULTICALL3_ADDRESS)] = {
                "balance": 0,
                "nonce": 1,
                "code": _to_bytes(load_artifact(MULTICALL_ARTIFACT_PATH)["runtime"]),
                "storage": {},
            }
        backend = PyEVMBackend(genesis_state=genesis_state)
        # eth-tester hard-codes its chain id as a class attribute of the py-evm chain it builds;
        # py-evm reads ``self.chain_id`` for every VM it creates, so an instance attribute wins.
        backend.chain.chain_id = chain_id
        # eth-tester makes one key per genesis entry, contracts included: keep the funded ones.
        backend.account_keys = backend.account_keys[:num_accounts]
        self.backend = backend
        self.tester = EthereumTester(backend)
        self.accounts: list[str] = [to_checksum_address(a) for a in self.tester.get_accounts()]
        self.relayer = self.accounts[0]

    # ------------------------------------------------------------------ accounts and time

    def private_key(self, address: str) -> bytes:
        """The 32-byte private key of one of the funded accounts."""
        for key in self.backend.account_keys:
            if key.public_key.to_checksum_address() == to_checksum_address(address):
                return key.to_bytes()
        raise KeyError(address)

    def block_number(self) -> int:
        with self.lock:
            return self.tester.get_block_by_number("latest")["number"]

    def latest_block(self) -> dict[str, Any]:
        with self.lock:
            return self.tester.get_block_by_number("latest")

    def now(self) -> int:
        """``block.timestamp`` of the latest block."""
        return self.latest_block()["timestamp"]

    def mine(self, blocks: int = 1) -> None:
        with self.lock:
            self.tester.mine_blocks(blocks)

    def time_travel(self, timestamp: int) -> None:
        """Mine a block at ``timestamp`` (must be later than the pending block's)."""
        with self.lock:
            self.tester.time_travel(int(timestamp))

    def catch_up(self) -> None:
        """Mine an empty block stamped now if the latest block is older than ``block_time``."""
        with self.lock:
            wall = int(time.time())
            if self.tester.get_block_by_number("latest")["timestamp"] >= wall - self.block_time:
                return
            if self.tester.get_block_by_number("pending")["timestamp"] < wall:
                self.tester.time_travel(wall)
            else:
                self.tester.mine_blocks(1)

    def _fresh(self) -> None:
        if self.auto_blocks:
            self.catch_up()

    def snapshot(self) -> int:
        with self.lock:
            return self.tester.take_snapshot()

    def revert_to(self, snapshot_id: int) -> None:
        with self.lock:
            self.tester.revert_to_snapshot(snapshot_id)

    # ------------------------------------------------------------------ raw calls and transactions

    def call(self, to: str, data: bytes | str, *, sender: str | None = None, block: str | int = "latest") -> bytes:
        """``eth_call``; raises ``Reverted`` (with the reason string) when the call reverts."""
        with self.lock:
            self._fresh()
            tx = {"from": to_checksum_address(sender or self.relayer), "to": to_checksum_address(to),
                  "data": _hex(_to_bytes(data))}
            try:
                return _to_bytes(self.tester.call(tx, block))
            except TransactionFailed as error:
                raise Reverted(revert_reason(error)) from None

    def estimate_gas(self, to: str | None, data: bytes | str, *, sender: str | None = None, value: int = 0) -> int:
        with self.lock:
            self._fresh()
            tx: dict[str, Any] = {"from": to_checksum_address(sender or self.relayer),
                                  "data": _hex(_to_bytes(data)), "value": value}
            if to:
                tx["to"] = to_checksum_address(to)
            try:
                return self.tester.estimate_gas(tx)
            except TransactionFailed as error:
                raise Reverted(revert_reason(error)) from None

    def transact(
        self, to: str, data: bytes | str, *, sender: str | None = None, gas: int = DEFAULT_GAS, value: int = 0
    ) -> TxOutcome:
        """Send a transaction from a funded account (the relayer by default) and mine it.

        A reverting transaction is still mined (status 0), as on a real chain; its reason comes from
        an ``eth_call`` simulation against the pending block just before sending.
        """
        with self.lock:
            self._fresh()
            sender = to_checksum_address(sender or self.relayer)
            tx = {"from": sender, "to": to_checksum_address(to), "data": _hex(_to_bytes(data)),
                  "gas": gas, "value": value}
            reason = None
            try:
                self.tester.call({k: v for k, v in tx.items() if k != "gas"}, "pending")
            except TransactionFailed as error:
                reason = revert_reason(error) or "execution reverted"
            tx_hash = self.tester.send_transaction(tx)
            return self._outcome(tx_hash, reason)

    def send_raw_transaction(self, raw: bytes | str) -> str:
        """Broadcast a signed transaction (``eth_sendRawTransaction``); it is mined at once."""
        with self.lock:
            self._fresh()
            return self.tester.send_raw_transaction(_hex(_to_bytes(raw)))

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        """eth-tester's receipt dict (snake_case keys, int quantities), or None if unknown."""
        from eth_tester.exceptions import TransactionNotFound

        with self.lock:
            try:
                return self.tester.get_transaction_receipt(tx_hash)
            except TransactionNotFound:
                return None

    def _outcome(self, tx_hash: str, reason: str | None) -> TxOutcome:
        receipt = self.tester.get_transaction_receipt(tx_hash)
        ok = receipt["status"] == 1
        return TxOutcome(
            ok=ok,
            tx_hash=tx_hash,
            reason=None if ok else (reason or "execution reverted"),
            block_number=receipt["block_number"],
            gas_used=receipt["gas_used"],
            logs=[normalize_log(log) for log in receipt["logs"]],
        )

    def eth_balance(self, address: str) -> int:
        with self.lock:
            return self.tester.get_balance(to_checksum_address(address))

    def get_code(self, address: str) -> bytes:
        with self.lock:
            return _to_bytes(self.tester.get_code(to_checksum_address(address)))

    def get_nonce(self, address: str) -> int:
        with self.lock:
            return self.tester.get_nonce(to_checksum_address(address))

    # ------------------------------------------------------------------ the token

    def mint(self, address: str, atomic: int) -> str:
        """Mint ``atomic`` units (6 decimals: 1 USDC = 1_000_000) to ``address``; returns the tx hash."""
        outcome = self.transact(self.token, selector("mint(address,uint256)")
                                + encode(["address", "uint256"], [to_checksum_address(address), int(atomic)]))
        assert outcome.ok, outcome.reason
        return outcome.tx_hash

    def transfer(self, sender: str, to: str, atomic: int) -> TxOutcome:
        """ERC-20 ``transfer`` sent by one of the funded accounts."""
        return self.transact(self.token, selector("transfer(address,uint256)")
                             + encode(["address", "uint256"], [to_checksum_address(to), int(atomic)]), sender=sender)

    def balance_of(self, address: str) -> int:
        data = selector("balanceOf(address)") + encode(["address"], [to_checksum_address(address)])
        return decode(["uint256"], self.call(self.token, data))[0]

    def total_supply(self) -> int:
        return decode(["uint256"], self.call(self.token, selector("totalSupply()")))[0]

    def authorization_used(self, authorizer: str, nonce: bytes | str) -> bool:
        data = selector("authorizationState(address,bytes32)") + encode(
            ["address", "bytes32"], [to_checksum_address(authorizer), _to_bytes(nonce)]
        )
        return decode(["bool"], self.call(self.token, data))[0]

    def domain_separator(self) -> bytes:
        return self.call(self.token, selector("DOMAIN_SEPARATOR()"))

    def submit_transfer_with_authorization(
        self,
        authorization: Mapping[str, Any],
        signature: bytes | str,
        *,
        overload: Literal["vrs", "bytes"] = "vrs",
        sender: str | None = None,
    ) -> TxOutcome:
        """Relay an EIP-3009 authorization (wire shape: from, to, value, validAfter, validBefore, nonce)
        with its 65-byte r||s||v signature, from the relayer. ``outcome.ok`` tells whether the
        transfer happened; otherwise ``outcome.reason`` is the contract's revert string, one of:
        "FiatTokenV2: authorization is not yet valid" / "... is expired" / "... is used or canceled" /
        "FiatTokenV2: invalid signature" / "ERC20: transfer amount exceeds balance"."""
        data = encode_transfer_with_authorization(authorization, signature, overload)
        return self.transact(self.token, data, sender=sender)


def normalize_log(log: Mapping[str, Any]) -> dict[str, Any]:
    """An eth-tester log as hex strings: {"address", "topics": [hex32...], "data": hex}."""
    return {
        "address": to_checksum_address(log["address"]),
        "topics": [t if isinstance(t, str) else _hex(t) for t in log["topics"]],
        "data": log["data"] if isinstance(log["data"], str) else _hex(log["data"]),
        "logIndex": log.get("log_index", 0),
    }


# ---------------------------------------------------------------------- an eth-account oracle for tests


def make_authorization(
    payer: str,
    pay_to: str,
    value: int,
    *,
    valid_after: int = 0,
    valid_before: int | None = None,
    nonce: bytes | None = None,
) -> dict[str, str]:
    """A wire-shape EIP-3009 authorization (all values strings, as x402 sends them).
    ``valid_before`` defaults to now + 300 s, ``nonce`` to 32 random bytes."""
    import os

    return {
        "from": to_checksum_address(payer),
        "to": to_checksum_address(pay_to),
        "value": str(int(value)),
        "validAfter": str(int(valid_after)),
        "validBefore": str(int(valid_before if valid_before is not None else time.time() + 300)),
        "nonce": _hex(nonce if nonce is not None else os.urandom(32)),
    }


def eth_account_sign_authorization(
    private_key: bytes | str,
    authorization: Mapping[str, Any],
    *,
    chain_id: int = BASE_CHAIN_ID,
    token: str = USDC_ADDRESS,
    name: str = USDC_NAME,
    version: str = USDC_VERSION,
) -> str:
    """Sign TransferWithAuthorization with eth-account (the dev-only oracle). Returns 0x r||s||v (v = 27/28)."""
    from eth_account import Account

    message = {
        "from": to_checksum_address(authorization["from"]),
        "to": to_checksum_address(authorization["to"]),
        "value": int(authorization["value"]),
        "validAfter": int(authorization["validAfter"]),
        "validBefore": int(authorization["validBefore"]),
        "nonce": _to_bytes(authorization["nonce"]),
    }
    domain = {"name": name, "version": version, "chainId": chain_id, "verifyingContract": to_checksum_address(token)}
    signed = Account.sign_typed_data(private_key, domain_data=domain, message_types=EIP712_TYPES, message_data=message)
    return _hex(signed.signature)
