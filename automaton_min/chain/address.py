"""keccak-256 and EIP-55 checksummed addresses."""

from __future__ import annotations

import re

_HEX_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")  # used with fullmatch: `$` would let a trailing newline through


def keccak256(data: bytes) -> bytes:
    """The Ethereum keccak-256 digest of ``data``."""
    from Crypto.Hash import keccak

    return keccak.new(digest_bits=256, data=data).digest()


def to_checksum_address(address: bytes | str) -> str:
    """EIP-55 mixed-case form of a 20-byte address (bytes or hex text)."""
    if isinstance(address, bytes):
        if len(address) != 20:
            raise ValueError("an address is 20 bytes")
        lower = address.hex()
    else:
        if not _HEX_ADDRESS.fullmatch(address):
            raise ValueError("expected a 0x-prefixed 40-hex-digit address")
        lower = address[2:].lower()
    digest = keccak256(lower.encode("ascii")).hex()
    return "0x" + "".join(c.upper() if int(digest[i], 16) >= 8 else c for i, c in enumerate(lower))


def is_address(text: str) -> bool:
    """True for a 0x-prefixed 40-hex-digit string (any case)."""
    return bool(_HEX_ADDRESS.fullmatch(text))


def has_valid_checksum(address: str) -> bool:
    """True unless ``address`` mixes cases against its EIP-55 checksum (all-lower or all-upper hex has none)."""
    digits = address[2:]
    if digits == digits.lower() or digits == digits.upper():
        return True
    return to_checksum_address(address) == address


def address_from_public_key(public_key: bytes) -> str:
    """Checksummed address of a 64-byte uncompressed secp256k1 public key (no 0x04 prefix)."""
    if len(public_key) != 64:
        raise ValueError("expected a 64-byte public key")
    return to_checksum_address(keccak256(public_key)[-20:])
