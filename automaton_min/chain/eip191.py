"""EIP-191 version 0x45 ("personal_sign") messages: sign and recover."""

from __future__ import annotations

from automaton_min.chain.address import keccak256
from automaton_min.chain.signing import recover_signer, sign_digest, signature_from_hex
from automaton_min.chain.wallet import Wallet


def personal_message_digest(message: str | bytes) -> bytes:
    """keccak256("\\x19Ethereum Signed Message:\\n" + len(message) + message)."""
    data = message.encode("utf-8") if isinstance(message, str) else message
    return keccak256(b"\x19Ethereum Signed Message:\n" + str(len(data)).encode("ascii") + data)


def sign_personal_message(wallet: Wallet, message: str | bytes) -> str:
    """The ``0x`` hex signature ``personal_sign`` would return for ``message``."""
    return "0x" + sign_digest(wallet, personal_message_digest(message)).hex()


def recover_personal_signer(message: str | bytes, signature: str) -> str:
    """The checksummed address that signed ``message`` with ``personal_sign``."""
    return recover_signer(personal_message_digest(message), signature_from_hex(signature))
