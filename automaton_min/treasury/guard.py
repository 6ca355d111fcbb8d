"""The payment guard: a 402 may ask only for what the caller allowed and the treasury policy permits.

Every check runs before anything is signed; a refusal names the field that disagreed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from automaton_min.net.url import UnreadableUrl, Url, read_url, within

from automaton_min.chain.usdc import ATOMIC_PER_CENT, format_usdc
from automaton_min.chain.x402 import PaymentRequirement
from automaton_min.errors import RuntimeFailure


class PaymentRefused(RuntimeFailure):
    """The payment was refused before signing; ``field`` says which rule disagreed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"payment refused: {message}")
        self.field = field


@dataclass(frozen=True)
class Allowance:
    """What the caller allows this one payment to be."""

    max_amount: int
    asset: str
    network: str
    payee: str | None = None
    exact_amount: bool = False


@dataclass(frozen=True)
class Limits:
    """Treasury limits for one kind of payment (``None`` = not limited by this rule), in cents."""

    per_payment_cents: int | None = None
    hourly_cents: int | None = None
    daily_cents: int | None = None
    minimum_reserve_cents: int | None = None
    allowed_domains: tuple[str, ...] | None = None


def x402_limits(policy: Mapping[str, Any]) -> Limits:
    """Limits for payments the agent makes on its own (x402 fetches): the treasury policy's x402 rules."""
    per_payment = int(policy["maxX402PaymentCents"])
    return Limits(
        per_payment_cents=per_payment,
        hourly_cents=per_payment * 10,
        daily_cents=per_payment * 50,
        minimum_reserve_cents=int(policy["minimumReserveCents"]),
        allowed_domains=tuple(policy["x402AllowedDomains"]),
    )


def topup_limits(api_url: str) -> Limits:
    """Top-ups go only to the configured Conway API; the tier fixes the amount."""
    return Limits(allowed_domains=(read_url(api_url).host,))


def cents_of(atomic: int) -> int:
    """Whole cents covering ``atomic`` USDC units (rounded up, so limits are never undercounted)."""
    return -(-atomic // ATOMIC_PER_CENT)


# Zones where anyone's sandbox gets a host name (Conway exposes a sandbox's port as <port>-<id>.life.conway.tech):
# allowing a domain does not allow the strangers below these; only an entry inside the zone does.
TENANT_ZONES = ("life.conway.tech",)


def host_allowed(url: Url, domains: tuple[str, ...] | list[str]) -> bool:
    """True when ``url``'s host is one of ``domains`` or below one, and not a stranger's host in a tenant zone that
    the allow-list did not name."""
    if not url.on(domains):
        return False
    zone = next((z for z in TENANT_ZONES if url.on((z,))), None)
    return zone is None or any(within(domain, zone) and within(url.host, domain) for domain in domains if domain)


def domain_allowed(url: str, domains: tuple[str, ...]) -> bool:
    """``host_allowed`` for URL text read once (``net/url.py``); a URL that cannot be read one way only is never
    allowed."""
    try:
        return host_allowed(read_url(url), domains)
    except UnreadableUrl:
        return False


def _host_of(url: str) -> str:
    try:
        return read_url(url).host
    except UnreadableUrl as exc:
        return f"{url[:200]!r} ({exc})"


def check_payment(
    requirement: PaymentRequirement,
    allowance: Allowance,
    limits: Limits,
    *,
    url: str,
    spent_last_hour_cents: int,
    spent_last_day_cents: int,
    balance: int | None,
) -> None:
    """Raise ``PaymentRefused`` unless ``requirement`` fits ``allowance`` and ``limits``."""
    amount, cents = requirement.amount, cents_of(requirement.amount)
    if not requirement.supported:
        raise PaymentRefused("scheme", f"scheme {requirement.scheme!r} on network {requirement.network_name!r} is not supported")
    if requirement.network.caip2 != allowance.network:
        raise PaymentRefused("network", f"network {requirement.network.caip2} is not the allowed {allowance.network}")
    if requirement.asset.lower() != allowance.asset.lower():
        raise PaymentRefused("asset", f"asset {requirement.asset} is not the allowed {allowance.asset}")
    if allowance.payee and requirement.pay_to.lower() != allowance.payee.lower():
        raise PaymentRefused("payee", f"payee {requirement.pay_to} is not the allowed {allowance.payee}")
    if allowance.exact_amount and amount != allowance.max_amount:
        raise PaymentRefused("amount", f"amount {format_usdc(amount)} USDC is not the requested {format_usdc(allowance.max_amount)} USDC")
    if amount > allowance.max_amount:
        raise PaymentRefused("amount", f"amount {format_usdc(amount)} USDC is above the allowed {format_usdc(allowance.max_amount)} USDC")
    if limits.allowed_domains is not None and not domain_allowed(url, limits.allowed_domains):
        raise PaymentRefused("domain", f"{_host_of(url)} is not in the allowed domains {list(limits.allowed_domains)}")
    if limits.per_payment_cents is not None and cents > limits.per_payment_cents:
        raise PaymentRefused("per_payment_cap", f"{cents} cents is above the per-payment cap of {limits.per_payment_cents} cents")
    if limits.hourly_cents is not None and spent_last_hour_cents + cents > limits.hourly_cents:
        raise PaymentRefused("hourly_cap", f"{spent_last_hour_cents} + {cents} cents would pass the hourly cap of {limits.hourly_cents} cents")
    if limits.daily_cents is not None and spent_last_day_cents + cents > limits.daily_cents:
        raise PaymentRefused("daily_cap", f"{spent_last_day_cents} + {cents} cents would pass the daily cap of {limits.daily_cents} cents")
    if balance is None:
        if limits.minimum_reserve_cents:
            raise PaymentRefused("reserve", "the USDC balance is unknown, so the minimum reserve cannot be checked")
        return
    if balance < amount:
        raise PaymentRefused("balance", f"the wallet holds {format_usdc(balance)} USDC, less than {format_usdc(amount)}")
    if limits.minimum_reserve_cents and balance - amount < limits.minimum_reserve_cents * ATOMIC_PER_CENT:
        raise PaymentRefused("reserve", f"paying would leave {format_usdc(balance - amount)} USDC, below the reserve of {limits.minimum_reserve_cents} cents")
