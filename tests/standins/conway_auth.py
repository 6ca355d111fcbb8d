"""A stand-in for Conway's sign-in endpoints: nonce -> verify (SIWE over EIP-191) -> api-keys.

It checks the message the way a relying party must (EIP-4361 layout, domain, URI,
chain id, a nonce it issued and has not seen used, the signature recovered with
eth-account), and can be told to fail any step.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from eth_account import Account
from eth_account.messages import encode_defunct

from standins.loopback_http import LoopbackServer, Reply, Request

SIWE_LINES = re.compile(
    r"(?P<domain>\S+) wants you to sign in with your Ethereum account:\n"
    r"(?P<address>0x[0-9a-fA-F]{40})\n\n"
    r"(?:(?P<statement>[^\n]+)\n)?\n"
    r"URI: (?P<uri>\S+)\n"
    r"Version: (?P<version>1)\n"
    r"Chain ID: (?P<chain_id>[0-9]+)\n"
    r"Nonce: (?P<nonce>[A-Za-z0-9]{8,})\n"
    r"Issued At: (?P<issued_at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))"
)


@dataclass
class ConwayAuth:
    """State of the stand-in; ``fail`` maps a step (``nonce``, ``verify``, ``api-keys``) to an HTTP status."""

    fail: dict[str, int] = field(default_factory=dict)
    nonce_override: str | None = None
    drop_fields: set[str] = field(default_factory=set)
    issued: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    tokens: dict[str, str] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    signers: list[str] = field(default_factory=list)
    server: LoopbackServer | None = None

    def start(self) -> LoopbackServer:
        self.server = LoopbackServer({
            ("POST", "/v1/auth/nonce"): self._nonce,
            ("POST", "/v1/auth/verify"): self._verify,
            ("POST", "/v1/auth/api-keys"): self._api_key,
        })
        return self.server

    def _failing(self, step: str) -> Reply | None:
        if step in self.fail:
            return Reply(self.fail[step], {"error": f"{step} is failing on purpose"})
        return None

    def _nonce(self, request: Request) -> Reply:
        if failure := self._failing("nonce"):
            return failure
        nonce = self.nonce_override or secrets.token_hex(8)
        self.issued.add(nonce)
        return Reply(200, {} if "nonce" in self.drop_fields else {"nonce": nonce})

    def _verify(self, request: Request) -> Reply:
        if failure := self._failing("verify"):
            return failure
        body = request.json() or {}
        message, signature = body.get("message", ""), body.get("signature", "")
        fields = SIWE_LINES.fullmatch(message)
        if not fields:
            return Reply(400, {"error": "not an EIP-4361 message"})
        expected_uri = f"{self.server.url}/v1/auth/verify"
        problems = [
            fields["domain"] != "conway.tech" and "domain",
            fields["uri"] != expected_uri and "uri",
            fields["chain_id"] != "8453" and "chain id",
            fields["nonce"] not in self.issued and "unknown nonce",
            fields["nonce"] in self.used and "nonce reused",
        ]
        if any(problems):
            return Reply(401, {"error": ", ".join(p for p in problems if p)})
        signer = Account.recover_message(encode_defunct(text=message), signature=signature)
        if signer != fields["address"]:
            return Reply(401, {"error": "signature does not match the address"})
        self.used.add(fields["nonce"])
        self.signers.append(signer)
        token = "tok_" + secrets.token_hex(16)
        self.tokens[token] = signer
        return Reply(200, {} if "access_token" in self.drop_fields else {"access_token": token})

    def _api_key(self, request: Request) -> Reply:
        if failure := self._failing("api-keys"):
            return failure
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self.tokens:
            return Reply(401, {"error": "bad bearer token"})
        if (request.json() or {}).get("name") != "conway-automaton":
            return Reply(400, {"error": "key name missing"})
        key = "cnwy_k_" + secrets.token_hex(20)
        self.keys.append(key)
        return Reply(201, {"key": key, "key_prefix": key[:11]})
