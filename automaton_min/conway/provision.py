"""Provisioning a Conway API key by signing in with the wallet (SIWE: nonce -> verify -> api-keys). The key is saved to
``config.json`` in the home (0600), where the reference keeps it, and serves as ``conwayApiKey`` when the config has
none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson

from automaton_min.chain.eip191 import sign_personal_message
from automaton_min.chain.siwe import SiweMessage
from automaton_min.chain.wallet import Wallet
from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.errors import RuntimeFailure
from automaton_min.fileio import atomic_write
from automaton_min.home import Home
from automaton_min.net.http import HttpError, NetworkError, Response, expect_ok, request
from automaton_min.log import get_logger, register_secret

SIWE_DOMAIN = "conway.tech"
SIWE_STATEMENT = "Sign in to Conway as an Automaton to provision an API key."
BASE_CHAIN_ID = 8453
API_KEY_NAME = "conway-automaton"

log = get_logger(__name__)


class ProvisionError(RuntimeFailure):
    """A provisioning step failed; the message names the step."""


@dataclass(frozen=True)
class ProvisionResult:
    wallet_address: str
    key_prefix: str
    saved_to: Path


def _step(number: int, title: str, call: Callable[[], Response],
          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    what = f"provisioning step {number} of 3 ({title})"
    if progress is not None:
        progress(f"step {number} of 3: {title} ...")
    try:
        body = expect_ok(call(), what).json()
    except (HttpError, NetworkError) as exc:
        message = str(exc) if str(exc).startswith(what) else f"{what}: {exc}"
        raise ProvisionError(message) from None
    if not isinstance(body, dict):
        raise ProvisionError(f"{what}: expected a JSON object in the answer")
    return body


def _field(body: dict[str, Any], name: str, number: int, title: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ProvisionError(f"provisioning step {number} of 3 ({title}): the answer has no {name!r}")
    return value


def provision(home: Home, wallet: Wallet, api_url: str, now: Clock = system_now, timeout: float = 30.0, *,
              progress: Callable[[str], None] | None = None) -> ProvisionResult:
    """Sign in to Conway with ``wallet`` and save a new API key in the home; ``progress`` hears of each step."""
    base = api_url.rstrip("/")
    nonce_body = _step(1, "get a sign-in nonce", lambda: request("POST", f"{base}/v1/auth/nonce", timeout=timeout),
                       progress)
    nonce = _field(nonce_body, "nonce", 1, "get a sign-in nonce")
    try:
        message = SiweMessage(
            domain=SIWE_DOMAIN,
            address=wallet.address,
            statement=SIWE_STATEMENT,
            uri=f"{base}/v1/auth/verify",
            chain_id=BASE_CHAIN_ID,
            nonce=nonce,
            issued_at=to_iso(now()),
        ).render()
    except ValueError as exc:
        raise ProvisionError(f"provisioning step 1 of 3 (get a sign-in nonce): {exc}") from None

    signature = sign_personal_message(wallet, message)
    verified = _step(2, "verify the signed message", lambda: request(
        "POST", f"{base}/v1/auth/verify", json={"message": message, "signature": signature}, timeout=timeout), progress)
    token = _field(verified, "access_token", 2, "verify the signed message")
    register_secret(token)

    created = _step(3, "create an API key", lambda: request(
        "POST", f"{base}/v1/auth/api-keys", json={"name": API_KEY_NAME},
        headers={"Authorization": f"Bearer {token}"}, timeout=timeout), progress)
    key = _field(created, "key", 3, "create an API key")
    register_secret(key)
    prefix = created.get("key_prefix") if isinstance(created.get("key_prefix"), str) else key[:8]

    record = {"apiKey": key, "walletAddress": wallet.address, "provisionedAt": to_iso(now())}
    home.ensure()
    atomic_write(home.api_key_path, orjson.dumps(record, option=orjson.OPT_INDENT_2), 0o600)
    log.info("provisioned a Conway API key", extra={"key_prefix": prefix, "address": wallet.address})
    return ProvisionResult(wallet.address, prefix, home.api_key_path)
