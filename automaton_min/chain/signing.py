"""secp256k1 signatures over 32-byte digests, in Ethereum's r || s || v form (v = 27 or 28)."""

from __future__ import annotations

from automaton_min.chain import secp256k1
from automaton_min.chain.address import address_from_public_key
from automaton_min.chain.wallet import Wallet


def sign_digest(wallet: Wallet, digest: bytes) -> bytes:
    """A deterministic (RFC 6979), low-s signature of ``digest``: 65 bytes r || s || v."""
    r, s, parity = secp256k1.sign(wallet.signing_key(), digest)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big") + bytes([27 + parity])


def recover_signer(digest: bytes, signature: bytes) -> str:
    """The checksummed address whose key produced ``signature`` over ``digest``."""
    if len(digest) != 32 or len(signature) != 65:
        raise ValueError("expected a 32-byte digest and a 65-byte signature")
    v = signature[64]
    if v not in (0, 1, 27, 28):
        raise ValueError("signature v must be 27 or 28")
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:64], "big")
    try:
        public_key = secp256k1.recover(digest, r, s, v % 27)
    except secp256k1.SignatureError as exc:
        raise ValueError(f"signature cannot be recovered ({exc})") from None
    return address_from_public_key(public_key)


def signature_from_hex(text: str) -> bytes:
    """Parse a ``0x``-prefixed 65-byte signature."""
    raw = bytes.fromhex(text[2:] if text.startswith("0x") else text)
    if len(raw) != 65:
        raise ValueError("a signature is 65 bytes")
    return raw
