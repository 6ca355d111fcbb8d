"""Sign-In with Ethereum (EIP-4361) messages."""

from __future__ import annotations

import re
from dataclasses import dataclass

from automaton_min.chain.address import is_address, to_checksum_address

_NONCE = re.compile(r"[A-Za-z0-9]{8,}")


@dataclass(frozen=True)
class SiweMessage:
    """The fields of an EIP-4361 message; ``render()`` gives the exact text to sign with EIP-191."""

    domain: str
    address: str
    uri: str
    chain_id: int
    nonce: str
    issued_at: str
    statement: str | None = None
    version: str = "1"
    expiration_time: str | None = None
    not_before: str | None = None
    request_id: str | None = None
    resources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not is_address(self.address):
            raise ValueError("SIWE address: expected a 0x-prefixed 40-hex-digit address")
        if not _NONCE.fullmatch(self.nonce):
            raise ValueError("SIWE nonce: expected at least 8 letters or digits")
        if self.statement is not None and "\n" in self.statement:
            raise ValueError("SIWE statement: must be one line")
        if not self.domain or any(c.isspace() for c in self.domain):
            raise ValueError("SIWE domain: expected a host name")

    def render(self) -> str:
        lines = [
            f"{self.domain} wants you to sign in with your Ethereum account:",
            to_checksum_address(self.address),
            "",
        ]
        if self.statement is not None:
            lines.append(self.statement)
        lines += [
            "",
            f"URI: {self.uri}",
            f"Version: {self.version}",
            f"Chain ID: {self.chain_id}",
            f"Nonce: {self.nonce}",
            f"Issued At: {self.issued_at}",
        ]
        if self.expiration_time:
            lines.append(f"Expiration Time: {self.expiration_time}")
        if self.not_before:
            lines.append(f"Not Before: {self.not_before}")
        if self.request_id is not None:
            lines.append(f"Request ID: {self.request_id}")
        if self.resources:
            lines.append("Resources:")
            lines += [f"- {resource}" for resource in self.resources]
        return "\n".join(lines)
