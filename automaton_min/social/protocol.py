"""The social relay's wire protocol (README: Social relay): canonical strings, EIP-191 signatures, field limits; no
I/O. The signed time travels as the exact text signed, so verification rebuilds the same string.
"""

from __future__ import annotations

from automaton_min.chain.address import is_address, keccak256
from automaton_min.chain.eip191 import recover_personal_signer, sign_personal_message
from automaton_min.chain.wallet import Wallet
from automaton_min.clock import DAY_MS, MINUTE_MS, to_iso
from automaton_min.errors import UserError

MAX_CONTENT_CHARS = 64_000
MAX_MESSAGE_CHARS = 128_000
ACCEPT_WINDOW_MS = 7 * DAY_MS  # a signed message is taken this long after its signing by the agent's clock
MAX_FUTURE_SKEW_MS = 5 * MINUTE_MS  # and at most this far ahead of it (another machine's clock may run a little fast)
OUTBOUND_PER_HOUR = 100


class MessageRejected(UserError):
    """An outbound message breaks a field rule (address, size); nothing was sent."""


def content_hash(content: str) -> str:
    """``0x`` + hex of keccak256 over the content's UTF-8 bytes."""
    return "0x" + keccak256(content.encode("utf-8")).hex()


def send_canonical(to: str, content: str, signed_at: str) -> str:
    """The string a sender signs for ``POST /v1/messages``."""
    return f"Conway:send:{to.lower()}:{content_hash(content)}:{signed_at}"


def poll_canonical(address: str, timestamp: str) -> str:
    """The string a poller signs for ``POST /v1/messages/poll`` (and ``GET /v1/messages/count``)."""
    return f"Conway:poll:{address.lower()}:{timestamp}"


def check_outbound(to: str, content: str) -> None:
    """Refuse what the relay would refuse: a bad address, empty or oversize content."""
    if not isinstance(to, str) or not is_address(to):
        raise MessageRejected(f"to: expected a 0x-prefixed 40-hex-digit address, got {str(to)[:60]!r}")
    if not isinstance(content, str) or not content:
        raise MessageRejected("content: a message needs some text")
    if len(content) > MAX_CONTENT_CHARS:
        raise MessageRejected(f"content: {len(content)} characters is over the relay's limit of {MAX_CONTENT_CHARS}")


def sign_send(wallet: Wallet, to: str, content: str, now_ms: int) -> tuple[str, str]:
    """``(signed_at, signature)`` for a message from ``wallet`` to ``to``."""
    signed_at = to_iso(now_ms)
    return signed_at, sign_personal_message(wallet, send_canonical(to, content, signed_at))


def sign_poll(wallet: Wallet, now_ms: int) -> tuple[str, str]:
    """``(timestamp, signature)`` for the poll and count headers."""
    timestamp = to_iso(now_ms)
    return timestamp, sign_personal_message(wallet, poll_canonical(wallet.address, timestamp))


def recover_send_signer(to: str, content: str, signed_at: str, signature: str) -> str | None:
    """The lowercase address that signed this message, or None when the signature is not a valid one."""
    try:
        return recover_personal_signer(send_canonical(to, content, signed_at), signature).lower()
    except ValueError:  # not hex, wrong length, bad v, not on the curve
        return None


def signed_digest(to: str, content: str, signed_at: str) -> str:
    """keccak256 of the send canonical string: what a signature covers, whatever its encoding (v, high s)."""
    return keccak256(send_canonical(to, content, signed_at).encode("utf-8")).hex()
