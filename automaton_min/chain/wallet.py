"""The agent's EVM wallet: one secp256k1 key in ``wallet.json`` (README: The home directory).

The key lives only inside a ``Wallet``, which never renders it (``repr``, ``str``, errors, logs). The address is
derived at setup and stored; a wallet loaded with it is checked against its key at its first signature.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import orjson

from automaton_min.chain.address import address_from_public_key, is_address
from automaton_min.chain.secp256k1 import N as SECP256K1_ORDER
from automaton_min.chain.secp256k1 import public_key
from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.errors import WalletError
from automaton_min.fileio import atomic_write, file_mode, open_to_others
from automaton_min.log import get_logger, register_secret


_PRIVATE_KEY = re.compile(r"0x[0-9a-fA-F]{64}")  # used with fullmatch: `$` would let a trailing newline through

log = get_logger(__name__)


class Wallet:
    """An EVM account. ``address`` is EIP-55 checksummed (derived from the key, or the stored one when given);
    the key stays private."""

    __slots__ = ("_key", "_checked", "address", "created_at", "path")

    def __init__(self, key: bytes, created_at: str | None = None, path: Path | None = None, *,
                 address: str | None = None) -> None:
        if len(key) != 32 or not 0 < int.from_bytes(key, "big") < SECP256K1_ORDER:
            raise WalletError("privateKey: not a valid secp256k1 private key")
        self._key = key
        self.created_at = created_at
        self.path = path
        if address is not None and not is_address(address):
            raise WalletError("the stored wallet address is not a 0x-prefixed 40-hex-digit address")
        self._checked = address is None
        self.address = derive_address(key) if address is None else address
        register_secret("0x" + key.hex())

    def key_bytes(self) -> bytes:
        """The raw key, for the key guard to recognise; signers take ``signing_key``."""
        return self._key

    def signing_key(self) -> bytes:
        """The key, for the chain signers, once it is known to be ``address``'s: a stored address is checked
        against the key on the first signature (``WalletError`` when they differ: nothing is signed)."""
        if not self._checked:
            derived = derive_address(self._key)
            if derived.lower() != self.address.lower():
                raise WalletError(f"wallet.json's key is the address {derived}, not {self.address} (walletAddress in "
                                  "automaton.json); nothing was signed. Run: automaton-min setup")
            self._checked = True
        return self._key

    def __repr__(self) -> str:
        return f"Wallet(address={self.address})"

    __str__ = __repr__

    def __reduce__(self):  # pickling or copying would carry the key out of this object
        raise TypeError("a Wallet cannot be serialized")


def derive_address(key: bytes) -> str:
    """The checksummed address of a private key."""
    return address_from_public_key(public_key(key))


def new_private_key() -> bytes:
    """32 bytes from the OS CSPRNG that form a valid secp256k1 private key."""
    while True:
        key = secrets.token_bytes(32)
        if 0 < int.from_bytes(key, "big") < SECP256K1_ORDER:
            return key


def load_wallet(path: Path, address: str | None = None) -> Wallet:
    """Read ``wallet.json``, refusing files others can read, Solana wallets and malformed keys. ``address``
    (``walletAddress``) is taken as the wallet's until it signs; without it the address is derived."""
    if not path.exists():
        raise WalletError(f"no wallet at {path}; run: automaton-min init")
    if not path.is_file():
        raise WalletError(f"{path} is not a file; move it aside and run: automaton-min init")
    if open_to_others(path):
        raise WalletError(
            f"{path} is readable by group or others (mode {file_mode(path):04o}); fix it with: chmod 600 {path}"
        )
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        raise WalletError(f"{path} is not valid JSON; restore it from a backup") from None
    except PermissionError:
        raise WalletError(f"{path}: permission denied; run as the wallet's owner") from None
    if not isinstance(data, dict):
        raise WalletError(f"{path}: expected a JSON object")
    chain_type = data.get("chainType", "evm")
    if chain_type == "solana":
        raise WalletError(
            f"{path} holds a Solana wallet and automaton-min supports EVM wallets only;"
            " use another --home, or move wallet.json aside and run: automaton-min init"
        )
    if chain_type != "evm":
        raise WalletError(f'{path}: chainType: expected "evm"')
    raw_key = data.get("privateKey")
    if not isinstance(raw_key, str) or not _PRIVATE_KEY.fullmatch(raw_key):
        raise WalletError(f"{path}: privateKey: expected 0x followed by 64 hex digits")
    created_at = data.get("createdAt") if isinstance(data.get("createdAt"), str) else None
    try:
        return Wallet(bytes.fromhex(raw_key[2:]), created_at, path, address=address or None)
    except WalletError as exc:
        raise WalletError(f"{path}: {exc}") from None


def create_wallet(path: Path, now: Clock = system_now) -> Wallet:
    """Write a fresh wallet to ``path`` (mode 0600); never overwrites an existing file."""
    key = new_private_key()
    created_at = to_iso(now())
    document = {"chainType": "evm", "privateKey": "0x" + key.hex(), "createdAt": created_at}
    atomic_write(path, orjson.dumps(document), 0o600, replace=False)
    wallet = Wallet(key, created_at, path)
    log.info("created a new wallet", extra={"address": wallet.address})
    return wallet


def ensure_wallet(path: Path, now: Clock = system_now) -> tuple[Wallet, bool]:
    """Load the wallet at ``path``, creating it first if there is none. Returns (wallet, created)."""
    if path.exists():
        return load_wallet(path), False
    try:
        return create_wallet(path, now), True
    except FileExistsError:  # another process created it between our check and our write
        return load_wallet(path), False
