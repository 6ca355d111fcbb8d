"""The payment guard: a 402 may ask only for what the caller allowed and the limits permit.

The limits come from ``money_out`` (``x402_limits``, ``topup_limits``). Every check runs before anything is
signed; a refusal names the field that disagreed.
"""

from __future__ import annotations

from dataclasses import dataclass

from automaton_min.chain.usdc import ATOMIC_PER_CENT, format_usdc
from automaton_min.chain.x402 import PaymentRequirement
from automaton_min.errors import RuntimeFailure
from automaton_min.net.url import UnreadableUrl, Url, read_url, within
from automaton_min.treasury.money_out import Limits


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
    shown, allowed = format_usdc(amount), format_usdc(allowance.max_amount)
    if not requirement.supported:
        raise PaymentRefused("scheme", f"scheme {requirement.scheme!r} on network {requirement.network_name!r} "
                                       "is not supported")
    if requirement.network.caip2 != allowance.network:
        raise PaymentRefused("network", f"network {requirement.network.caip2} is not the allowed {allowance.network}")
    if requirement.asset.lower() != allowance.asset.lower():
        raise PaymentRefused("asset", f"asset {requirement.asset} is not the allowed {allowance.asset}")
    if allowance.payee and requirement.pay_to.lower() != allowance.payee.lower():
        raise PaymentRefused("payee", f"payee {requirement.pay_to} is not the allowed {allowance.payee}")
    if allowance.exact_amount and amount != allowance.max_amount:
        raise PaymentRefused("amount", f"amount {shown} USDC is not the requested {allowed} USDC")
    if amount > allowance.max_amount:
        raise PaymentRefused("amount", f"amount {shown} USDC is above the allowed {allowed} USDC")
    if limits.allowed_domains is not None and not domain_allowed(url, limits.allowed_domains):
        raise PaymentRefused("domain", f"{_host_of(url)} is not in the allowed domains {list(limits.allowed_domains)}")
    cap, hourly, daily = limits.per_payment_cents, limits.hourly_cents, limits.daily_cents
    if cap is not None and cents > cap:
        raise PaymentRefused("per_payment_cap", f"{cents} cents is above the per-payment cap of {cap} cents")
    if hourly is not None and spent_last_hour_cents + cents > hourly:
        raise PaymentRefused("hourly_cap", f"{spent_last_hour_cents} + {cents} cents would pass the hourly cap of "
                                           f"{hourly} cents")
    if daily is not None and spent_last_day_cents + cents > daily:
        raise PaymentRefused("daily_cap", f"{spent_last_day_cents} + {cents} cents would pass the daily cap of "
                                          f"{daily} cents")
    reserve = limits.minimum_reserve_cents
    if balance is None:
        if reserve:
            raise PaymentRefused("reserve", "the USDC balance is unknown, so the minimum reserve cannot be checked")
        return
    if balance < amount:
        raise PaymentRefused("balance", f"the wallet holds {format_usdc(balance)} USDC, less than {shown}")
    if reserve and balance - amount < reserve * ATOMIC_PER_CENT:
        raise PaymentRefused("reserve", f"paying would leave {format_usdc(balance - amount)} USDC, below the reserve "
                                        f"of {reserve} cents")
