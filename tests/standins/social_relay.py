"""A stand-in for the Conway social relay on 127.0.0.1, speaking the reference's wire format.

* ``POST /v1/messages`` ``{from, to, content, signed_at, signature, reply_to?, nonce?}`` -> ``{id}``. Like a real relay it
  checks the signature (with eth-account, the oracle, not our code) over
  ``Conway:send:<to lower>:<keccak(content)>:<signed_at>`` and the sizes; a bad one is a 401/400.
* ``POST /v1/messages/poll`` with ``X-Wallet-Address``, ``X-Signature``, ``X-Timestamp`` over
  ``Conway:poll:<address lower>:<timestamp>``, body ``{cursor, limit}`` -> ``{messages, next_cursor}``; a message
  is ``{id, from, to, content, signedAt, createdAt, replyTo?, nonce?, signature}`` (the sender's nonce passed on). The cursor is the index of the next
  message in the relay's log.
* ``GET /v1/messages/count`` with the same headers -> ``{unread}`` (messages after the last polled cursor).

``relay.inject(message)`` puts any message (forged, stale, oversize, unsigned) straight into the log, as a
compromised or buggy relay would deliver it. ``relay.now`` is the relay's clock (epoch ms) for ``createdAt``;
``relay.fail_next(status)`` answers the next poll with that status. Use:
``with SocialRelay(now=clock) as relay: relay.url``.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from typing import Any, Callable

from standins.loopback_http import LoopbackServer, Reply, Request


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def content_hash(content: str) -> str:
    from eth_utils import keccak

    return "0x" + keccak(content.encode("utf-8")).hex()


def send_canonical(to: str, content: str, signed_at: str) -> str:
    return f"Conway:send:{to.lower()}:{content_hash(content)}:{signed_at}"


def oracle_sign(private_key: bytes, text: str) -> str:
    """EIP-191 personal_sign by eth-account."""
    from eth_account import Account
    from eth_account.messages import encode_defunct

    return "0x" + Account.sign_message(encode_defunct(text=text), private_key).signature.hex().removeprefix("0x")


def oracle_recover(text: str, signature: str) -> str:
    from eth_account import Account
    from eth_account.messages import encode_defunct

    return Account.recover_message(encode_defunct(text=text), signature=signature)


class SocialRelay:
    def __init__(self, now: Callable[[], int]) -> None:
        self.now = now
        self.log: list[dict[str, Any]] = []
        self.read_upto: dict[str, int] = {}
        self.failures: list[int] = []
        self._ids = itertools.count(1)
        self.server: LoopbackServer | None = None

    def __enter__(self) -> "SocialRelay":
        self.server = LoopbackServer({
            ("POST", r"/v1/messages"): self._send,
            ("POST", r"/v1/messages/poll"): self._poll,
            ("GET", r"/v1/messages/count"): self._count,
        }).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.__exit__(*exc)

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def new_id(self) -> str:
        return f"msg-{next(self._ids):06d}"

    def inject(self, message: dict[str, Any]) -> dict[str, Any]:
        """Put a message into the log as is (``id`` and ``createdAt`` filled in when missing)."""
        message = {"id": self.new_id(), "createdAt": _iso(self.now()), **message}
        self.log.append(message)
        return message

    def fail_next(self, status: int) -> None:
        self.failures.append(status)

    def signed_message(self, private_key: bytes, sender: str, to: str, content: str, *, signed_at_ms: int | None = None,
                       **extra: Any) -> dict[str, Any]:
        """A message as a real sender would sign it (by eth-account), not yet in the log."""
        signed_at = _iso(self.now() if signed_at_ms is None else signed_at_ms)
        return {"from": sender.lower(), "to": to.lower(), "content": content, "signedAt": signed_at,
                "signature": oracle_sign(private_key, send_canonical(to, content, signed_at)), **extra}

    # -- routes

    def _send(self, request: Request) -> Reply:
        body = request.json() or {}
        needed = ("from", "to", "content", "signed_at", "signature")
        if not all(isinstance(body.get(k), str) for k in needed):
            return Reply(400, {"error": "missing fields"})
        if len(body["content"]) > 64_000:
            return Reply(400, {"error": "content too long"})
        canonical = send_canonical(body["to"], body["content"], body["signed_at"])
        try:
            signer = oracle_recover(canonical, body["signature"])
        except (ValueError, TypeError):
            return Reply(401, {"error": "invalid signature"})
        if signer.lower() != body["from"].lower():
            return Reply(401, {"error": "signature does not match from"})
        message = {"id": self.new_id(), "from": body["from"].lower(), "to": body["to"].lower(),
                   "content": body["content"], "signedAt": body["signed_at"], "createdAt": _iso(self.now()),
                   "signature": body["signature"]}
        if body.get("reply_to"):
            message["replyTo"] = body["reply_to"]
        if isinstance(body.get("nonce"), str):
            message["nonce"] = body["nonce"]
        self.log.append(message)
        return Reply(201, {"id": message["id"]})

    def _caller(self, request: Request) -> str | None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        address, signature, timestamp = (headers.get("x-wallet-address"), headers.get("x-signature"),
                                         headers.get("x-timestamp"))
        if not (address and signature and timestamp):
            return None
        try:
            signer = oracle_recover(f"Conway:poll:{address.lower()}:{timestamp}", signature)
        except (ValueError, TypeError):
            return None
        return address.lower() if signer.lower() == address.lower() else None

    def _poll(self, request: Request) -> Reply:
        if self.failures:
            return Reply(self.failures.pop(0), {"error": "scripted failure"})
        caller = self._caller(request)
        if caller is None:
            return Reply(401, {"error": "bad poll signature"})
        body = request.json() or {}
        start = int(body.get("cursor") or 0)
        limit = int(body.get("limit") or 50)
        mine = [(i, m) for i, m in enumerate(self.log) if i >= start and str(m.get("to", caller)).lower() == caller]
        page = mine[:limit]
        next_cursor = str(page[-1][0] + 1) if page else (str(start) if start else None)
        self.read_upto[caller] = page[-1][0] + 1 if page else start
        return Reply(200, {"messages": [m for _, m in page], "next_cursor": next_cursor})

    def _count(self, request: Request) -> Reply:
        caller = self._caller(request)
        if caller is None:
            return Reply(401, {"error": "bad poll signature"})
        start = self.read_upto.get(caller, 0)
        return Reply(200, {"unread": sum(1 for i, m in enumerate(self.log)
                                         if i >= start and str(m.get("to", caller)).lower() == caller)})
