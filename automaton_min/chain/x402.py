"""The x402 wire format, protocol versions 1 and 2 (README: Payments), no I/O.

Amounts are always atomic units of the asset (USDC: 6 decimals), as the spec says.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from automaton_min.chain.address import is_address
from automaton_min.chain.eip3009 import TokenDomain, TransferAuthorization
from automaton_min.chain.usdc import BASE_SEPOLIA, Network, network_named
from automaton_min.errors import RuntimeFailure
from automaton_min.net.http import header_value

V1_PAYMENT_HEADER = "X-PAYMENT"
V1_RESPONSE_HEADER = "X-PAYMENT-RESPONSE"
V2_REQUIRED_HEADER = "PAYMENT-REQUIRED"
V2_PAYMENT_HEADER = "PAYMENT-SIGNATURE"
V2_RESPONSE_HEADER = "PAYMENT-RESPONSE"

_ATOMIC = re.compile(r"[0-9]{1,78}")


class PaymentFormatError(RuntimeFailure):
    """A 402 answer (or a settlement header) that does not follow the x402 format."""


@dataclass(frozen=True)
class PaymentRequirement:
    """One entry of a 402's ``accepts`` list, normalized."""

    version: int
    scheme: str
    network: Network | None
    network_name: str
    asset: str
    amount: int
    pay_to: str
    max_timeout_seconds: int
    resource: str
    token_name: str | None = None
    token_version: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def supported(self) -> bool:
        return self.scheme == "exact" and self.network is not None

    def token_domain(self) -> TokenDomain:
        """The EIP-712 domain to sign under: ``extra.name``/``extra.version`` when the server gives them."""
        assert self.network is not None
        default_name = "USDC" if self.network is BASE_SEPOLIA else "USD Coin"
        return TokenDomain(self.token_name or default_name, self.token_version or "2", self.network.chain_id,
                           self.asset)


@dataclass(frozen=True)
class PaymentRequired:
    """A parsed 402: the protocol version, the options, and (v2) the resource description."""

    version: int
    requirements: tuple[PaymentRequirement, ...]
    resource: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


def decode_base64_json(value: str, what: str) -> Any:
    try:
        return orjson.loads(base64.b64decode(value.strip(), validate=True))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise PaymentFormatError(f"{what} is not base64-encoded JSON") from None


def encode_base64_json(value: Any) -> str:
    return base64.b64encode(orjson.dumps(value)).decode("ascii")


def parse_payment_required(headers: Mapping[str, str], body: bytes, url: str) -> PaymentRequired:
    """Read the payment options of a 402 answer (v2 header first, then a v1 JSON body)."""
    header = header_value(headers, V2_REQUIRED_HEADER)
    if header:
        document = decode_base64_json(header, f"the {V2_REQUIRED_HEADER} header")
    else:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise PaymentFormatError(
                f"{url} answered 402 without {V2_REQUIRED_HEADER} and without a JSON body") from None
    if not isinstance(document, dict) or not isinstance(document.get("accepts"), list):
        raise PaymentFormatError(f"{url} answered 402 without an 'accepts' list")
    version = document.get("x402Version", 1)
    if version not in (1, 2):
        raise PaymentFormatError(f"{url} speaks x402 version {version!r}; versions 1 and 2 are supported")
    resource = document.get("resource") if isinstance(document.get("resource"), dict) else {}
    requirements = tuple(
        _requirement(entry, version, resource.get("url", url))
        for entry in document["accepts"] if isinstance(entry, dict)
    )
    error = document.get("error") if isinstance(document.get("error"), str) else None
    return PaymentRequired(version, requirements, resource, error)


def _requirement(entry: Mapping[str, Any], version: int, resource_url: str) -> PaymentRequirement:
    amount_text = entry.get("amount") if version >= 2 else entry.get("maxAmountRequired")
    if isinstance(amount_text, int) and not isinstance(amount_text, bool):
        amount_text = str(amount_text)
    if not isinstance(amount_text, str) or not _ATOMIC.fullmatch(amount_text):
        raise PaymentFormatError(f"payment requirement amount {amount_text!r} is not a whole number of atomic units")
    pay_to, asset = entry.get("payTo"), entry.get("asset")
    if not isinstance(pay_to, str) or not is_address(pay_to):
        raise PaymentFormatError(f"payment requirement payTo {pay_to!r} is not an address")
    network_name = str(entry.get("network", ""))
    network = network_named(network_name)
    if asset is None and network is not None:
        asset = network.usdc
    if not isinstance(asset, str) or not is_address(asset):
        raise PaymentFormatError(f"payment requirement asset {asset!r} is not an address")
    timeout = entry.get("maxTimeoutSeconds")
    extra = entry.get("extra") if isinstance(entry.get("extra"), dict) else {}
    return PaymentRequirement(
        version=version,
        scheme=str(entry.get("scheme", "")),
        network=network,
        network_name=network_name,
        asset=asset,
        amount=int(amount_text),
        pay_to=pay_to,
        max_timeout_seconds=(timeout if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0
                             else 300),
        resource=str(entry.get("resource") or resource_url),
        token_name=extra.get("name") if isinstance(extra.get("name"), str) else None,
        token_version=extra.get("version") if isinstance(extra.get("version"), str) else None,
        raw=dict(entry),
    )


def choose_requirement(required: PaymentRequired) -> PaymentRequirement | None:
    """The first ``exact`` option on a network this client can pay on, if any."""
    return next((r for r in required.requirements if r.supported), None)


def payment_header(
    required: PaymentRequired, requirement: PaymentRequirement, authorization: TransferAuthorization, signature: str
) -> tuple[str, str]:
    """The (name, value) of the header that carries a signed payment, for the 402's protocol version."""
    payload = {"signature": signature, "authorization": authorization.wire()}
    if required.version >= 2:
        document: dict[str, Any] = {"x402Version": 2, "payload": payload, "accepted": dict(requirement.raw)}
        if required.resource:
            document["resource"] = dict(required.resource)
        return V2_PAYMENT_HEADER, encode_base64_json(document)
    document = {"x402Version": 1, "scheme": requirement.scheme, "network": requirement.network_name, "payload": payload}
    return V1_PAYMENT_HEADER, encode_base64_json(document)


def settlement(headers: Mapping[str, str]) -> dict[str, Any] | None:
    """The decoded ``PAYMENT-RESPONSE`` / ``X-PAYMENT-RESPONSE`` header, if the server sent one."""
    value = header_value(headers, V2_RESPONSE_HEADER) or header_value(headers, V1_RESPONSE_HEADER)
    if not value:
        return None
    decoded = decode_base64_json(value, "the payment response header")
    return decoded if isinstance(decoded, dict) else None


