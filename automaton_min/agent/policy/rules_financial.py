"""Financial rules (priority 500): the treasury policy, checked before a tool that moves money runs.

The limits are not re-implemented here: transfers ask ``SpendTracker.check_transfer``
(per-transfer cap, per-turn count, cooldown, hourly and daily caps, minimum
reserve), x402 fetches read the URL once (``net/url.py``: an ambiguous one is refused) and ask the x402 limits of
``guard.x402_limits``, inference asks ``SpendTracker.check_inference``. The tools
that move money enforce the same limits again where the money moves; refusing
here is defence in depth, and it puts the refusal in ``policy_decisions``.

- ``financial.transfer_limits`` (``transfer_credits``, ``fund_child``):
  ``SPEND_LIMIT_EXCEEDED`` (single, hourly, daily caps), ``TURN_TRANSFER_LIMIT``,
  ``TRANSFER_COOLDOWN``, ``RESERVE_LIMIT`` (also when the balance is unknown:
  the reserve cannot be checked, so the transfer waits). The balance is the one
  the runtime supplies, else the last known balance in KV.
- ``financial.known_payee``: a payee that is not known (``treasury.payees``: the creator,
  ``treasuryPolicy.knownPayees``, payees the creator added by signed message) is quarantined
  (``UNKNOWN_PAYEE``), whatever the amount, the turn or its authority: the call becomes a
  pending approval request the creator releases (``social.approvals``).
- ``financial.require_confirmation``: an amount above
  ``requireConfirmationAboveCents`` is quarantined (``CONFIRMATION_REQUIRED``):
  the call does not run; it becomes a pending approval request that only the
  creator's signed relay message releases (``social.approvals``).
- ``financial.x402_domain_allowlist``: the URL's host must be an allowed domain or
  one of its subdomains; an empty list allows nothing (``DOMAIN_NOT_ALLOWED``).
- ``financial.x402_limits``: a requested ``max_payment_cents`` above
  ``maxX402PaymentCents``, or x402 spending already at its hourly or daily cap
  (10x and 50x of it), is refused (``SPEND_LIMIT_EXCEEDED``).
- ``financial.inference_daily_cap`` (tools of category ``inference``): the daily
  inference budget is spent (``INFERENCE_BUDGET_EXCEEDED``).
"""

from __future__ import annotations

import apsw

from automaton_min.agent.policy.rules_validation import is_whole_number
from automaton_min.agent.policy.types import (
    DB_UNAVAILABLE,
    VALIDATION_FAILED,
    Applies,
    PolicyEnv,
    PolicyRequest,
    Rule,
    Verdict,
    deny,
    quarantine,
    tools,
)
from automaton_min.errors import RuntimeFailure
from automaton_min.net.url import UnreadableUrl, read_url
from automaton_min.treasury.guard import host_allowed, x402_limits
from automaton_min.treasury.payees import UNKNOWN_PAYEE, known_payees
from automaton_min.treasury.spend import DAY_MS, HOUR_MS, SpendTracker

PRIORITY = 500
SPEND_LIMIT_EXCEEDED = "SPEND_LIMIT_EXCEEDED"
TURN_TRANSFER_LIMIT = "TURN_TRANSFER_LIMIT"
TRANSFER_COOLDOWN = "TRANSFER_COOLDOWN"
RESERVE_LIMIT = "RESERVE_LIMIT"
CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"
DOMAIN_NOT_ALLOWED = "DOMAIN_NOT_ALLOWED"
INFERENCE_BUDGET_EXCEEDED = "INFERENCE_BUDGET_EXCEEDED"

TRANSFER_TOOLS = ("transfer_credits", "fund_child")
X402_TOOLS = ("x402_fetch",)

# SpendTracker's limit names -> reason codes.
TRANSFER_CODES = {
    "amount": VALIDATION_FAILED,
    "maxSingleTransferCents": SPEND_LIMIT_EXCEEDED,
    "maxHourlyTransferCents": SPEND_LIMIT_EXCEEDED,
    "maxDailyTransferCents": SPEND_LIMIT_EXCEEDED,
    "maxTransfersPerTurn": TURN_TRANSFER_LIMIT,
    "transferCooldownMs": TRANSFER_COOLDOWN,
    "minimumReserveCents": RESERVE_LIMIT,
}


def known_balance(env: PolicyEnv) -> int | None:
    """The credit balance the runtime supplies, else the last known one (KV ``last_known_balance``), else ``None``."""
    if env.balance_cents is not None:
        try:
            return env.balance_cents()
        except RuntimeFailure:
            return None
    from automaton_min.conway.client import cached_credits

    reading = cached_credits(env.db)
    return reading.cents if reading is not None else None


def _amount(request: PolicyRequest) -> int | None:
    value = request.arguments.get("amount_cents")
    return value if is_whole_number(value) else None


def _transfer_limits(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    amount = _amount(request)
    if amount is None:
        return deny(VALIDATION_FAILED, "amount_cents must be a positive whole number")
    earlier = sum(1 for name in request.calls_this_turn if name in TRANSFER_TOOLS)
    try:
        denial = SpendTracker(env.db, env.now).check_transfer(
            amount, env.treasury(), transfers_this_turn=earlier, balance_cents=known_balance(env))
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    if denial is None:
        return None
    return deny(TRANSFER_CODES.get(denial.limit, SPEND_LIMIT_EXCEEDED), f"{denial.limit}: {denial.message}")


def _known_payee(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    to = request.arguments.get("to_address")
    if not isinstance(to, str):
        return deny(VALIDATION_FAILED, "to_address must be a 0x address")
    try:
        payees = known_payees(env.db, env.config)
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"the known payees could not be read ({type(exc).__name__}); refused")
    return None if payees.why_known(to) else quarantine(UNKNOWN_PAYEE, payees.refusal(to))


def _require_confirmation(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    amount = _amount(request)
    threshold = env.treasury()["requireConfirmationAboveCents"]
    if amount is not None and amount > threshold:
        return quarantine(CONFIRMATION_REQUIRED,
                          f"{amount} cents is above requireConfirmationAboveCents ({threshold}); it needs the creator's confirmation")
    return None


def _x402_domain(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    url = request.arguments.get("url")
    domains = tuple(env.treasury().get("x402AllowedDomains") or ())
    if not domains:
        return deny(DOMAIN_NOT_ALLOWED, "x402AllowedDomains is empty, so no paid fetch is allowed")
    if not isinstance(url, str):
        return deny(DOMAIN_NOT_ALLOWED, "url must be text")
    try:
        target = read_url(url)
    except UnreadableUrl as exc:
        return deny(DOMAIN_NOT_ALLOWED, f"{url[:200]!r}: {exc}")
    if not host_allowed(target, domains):
        return deny(DOMAIN_NOT_ALLOWED, f"{target.host} is not in x402AllowedDomains ({', '.join(domains)})"
                    + (" (a sandbox host of another Conway user is allowed only by naming it)" if target.on(domains) else ""))
    return None


def _x402_limits(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    limits = x402_limits(env.treasury())
    asked = request.arguments.get("max_payment_cents")
    if is_whole_number(asked) and limits.per_payment_cents is not None and asked > limits.per_payment_cents:
        return deny(SPEND_LIMIT_EXCEEDED, f"max_payment_cents {asked} is above maxX402PaymentCents ({limits.per_payment_cents})")
    spend = SpendTracker(env.db, env.now)
    try:
        for window, cap, label in ((HOUR_MS, limits.hourly_cents, "hourly"), (DAY_MS, limits.daily_cents, "daily")):
            spent = spend.spent("x402", window)
            if cap is not None and spent >= cap:
                return deny(SPEND_LIMIT_EXCEEDED, f"the {label} x402 cap of {cap} cents is used up ({spent} cents spent)")
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    return None


def _inference_daily_cap(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    try:
        denial = SpendTracker(env.db, env.now).check_inference(1, env.treasury())
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    return deny(INFERENCE_BUDGET_EXCEEDED, denial.message) if denial else None


def financial_rules() -> list[Rule]:
    return [
        Rule("financial.transfer_limits", PRIORITY, tools(*TRANSFER_TOOLS), _transfer_limits,
             "credit transfers within the treasury policy (cap, per turn, cooldown, hourly, daily, reserve)"),
        Rule("financial.known_payee", PRIORITY, tools(*TRANSFER_TOOLS), _known_payee,
             "credits go to an unknown payee only with the creator's approval"),
        Rule("financial.require_confirmation", PRIORITY, tools(*TRANSFER_TOOLS), _require_confirmation,
             "large transfers wait for a confirmation"),
        Rule("financial.x402_domain_allowlist", PRIORITY, tools(*X402_TOOLS), _x402_domain,
             "paid fetches only from allowed domains"),
        Rule("financial.x402_limits", PRIORITY, tools(*X402_TOOLS), _x402_limits,
             "paid fetches within the x402 caps"),
        Rule("financial.inference_daily_cap", PRIORITY, Applies(categories=frozenset({"inference"})), _inference_daily_cap,
             "tools that run inference stop when the daily inference budget is spent"),
    ]
