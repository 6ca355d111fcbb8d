"""Financial rules (priority 500): ``treasury/money_out.py``'s checks, asked before a tool that moves money runs.

Its refusals become reason codes (``TRANSFER_CODES``), so a refusal is in ``policy_decisions`` before the call;
the tools check again where the money moves. An unknown payee, or an amount above
``requireConfirmationAboveCents``, is quarantined: the call becomes a pending approval (``social.approvals``).
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
from automaton_min.treasury import money_out as out
from automaton_min.treasury.guard import host_allowed
from automaton_min.treasury.payees import known_payees
from automaton_min.treasury.spend import SpendTracker

PRIORITY = 500
SPEND_LIMIT_EXCEEDED = "SPEND_LIMIT_EXCEEDED"
TURN_TRANSFER_LIMIT = "TURN_TRANSFER_LIMIT"
TRANSFER_COOLDOWN = "TRANSFER_COOLDOWN"
RESERVE_LIMIT = "RESERVE_LIMIT"
DOMAIN_NOT_ALLOWED = "DOMAIN_NOT_ALLOWED"
INFERENCE_BUDGET_EXCEEDED = "INFERENCE_BUDGET_EXCEEDED"

TRANSFER_TOOLS = ("transfer_credits", "fund_child")
X402_TOOLS = ("x402_fetch",)

# money_out's refusal codes -> reason codes.
TRANSFER_CODES = {
    out.BAD_AMOUNT: VALIDATION_FAILED,
    out.OVER_SINGLE_CAP: SPEND_LIMIT_EXCEEDED,
    out.OVER_HOURLY_CAP: SPEND_LIMIT_EXCEEDED,
    out.OVER_DAILY_CAP: SPEND_LIMIT_EXCEEDED,
    out.OVER_TURN_COUNT: TURN_TRANSFER_LIMIT,
    out.COOLING_DOWN: TRANSFER_COOLDOWN,
    out.BALANCE_UNKNOWN: RESERVE_LIMIT,
    out.BELOW_RESERVE: RESERVE_LIMIT,
    out.HALF_BALANCE: RESERVE_LIMIT,
}


def _said(refusal: out.Refusal) -> str:
    """The refusal's sentence, led by the setting that would change it."""
    return f"{refusal.setting}: {refusal.sentence()}" if refusal.setting else refusal.sentence()


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


def recipient(request: PolicyRequest, env: PolicyEnv) -> str | None:
    """Where a transfer tool sends: ``to_address``, or for ``fund_child`` the verified wallet of the child named."""
    if request.tool != "fund_child":
        return request.arguments.get("to_address")
    from automaton_min.store.children import fundable_child

    child = fundable_child(env.db, request.arguments.get("child_id"))
    return child.address if child is not None else None


def _amount(request: PolicyRequest) -> int | None:
    value = request.arguments.get("amount_cents")
    return value if is_whole_number(value) else None


def _transfer_limits(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    amount = _amount(request)
    if amount is None:
        return deny(VALIDATION_FAILED, "amount_cents must be a positive whole number")
    earlier = sum(1 for name in request.calls_this_turn if name in TRANSFER_TOOLS)
    try:
        refusal = out.limit_refusal(SpendTracker(env.db, env.now), out.treasury_policy(env.config), amount,
                                    transfers_this_turn=earlier, balance_cents=known_balance(env))
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    return deny(TRANSFER_CODES[refusal.code], _said(refusal)) if refusal else None


def _known_payee(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    try:
        payees = known_payees(env.db, env.config)
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"the known payees could not be read ({type(exc).__name__}); refused")
    if request.tool == "fund_child":
        to = recipient(request, env)
        return None if to else deny(VALIDATION_FAILED, f"{request.arguments.get('child_id')!r} is not a child whose "
                                                       "wallet was verified (list_children)")
    refusal = out.payee_refusal(payees, request.arguments.get("to_address"))
    if refusal is None:
        return None
    if refusal.code == out.BAD_ADDRESS:
        return deny(VALIDATION_FAILED, refusal.sentence())
    return quarantine(out.UNKNOWN_PAYEE, refusal.sentence())


def _require_confirmation(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    amount = _amount(request)
    if amount is None:
        return None
    try:
        refusal = out.confirmation_refusal(SpendTracker(env.db, env.now), out.treasury_policy(env.config),
                                           recipient(request, env), amount)
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    return quarantine(out.CONFIRMATION_REQUIRED, refusal.sentence()) if refusal else None


def _x402_domain(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    url = request.arguments.get("url")
    domains = tuple(out.treasury_policy(env.config).get("x402AllowedDomains") or ())
    if not domains:
        return deny(DOMAIN_NOT_ALLOWED, "x402AllowedDomains is empty, so no paid fetch is allowed")
    if not isinstance(url, str):
        return deny(DOMAIN_NOT_ALLOWED, "url must be text")
    try:
        target = read_url(url)
    except UnreadableUrl as exc:
        return deny(DOMAIN_NOT_ALLOWED, f"{url[:200]!r}: {exc}")
    if not host_allowed(target, domains):
        stranger = " (a sandbox host of another Conway user is allowed only by naming it)" if target.on(domains) else ""
        return deny(DOMAIN_NOT_ALLOWED, f"{target.host} is not in x402AllowedDomains ({', '.join(domains)}){stranger}")
    return None


def _x402_limits(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    try:
        refusal = out.x402_refusal(SpendTracker(env.db, env.now), out.treasury_policy(env.config),
                                   request.arguments.get("max_payment_cents"))
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    return deny(SPEND_LIMIT_EXCEEDED, _said(refusal)) if refusal else None


def _inference_daily_cap(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    try:
        refusal = out.inference_refusal(SpendTracker(env.db, env.now), out.treasury_policy(env.config), 1)
    except apsw.Error as exc:
        return deny(DB_UNAVAILABLE, f"spending could not be read ({type(exc).__name__}); refused")
    return deny(INFERENCE_BUDGET_EXCEEDED, refusal.sentence()) if refusal else None


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
        Rule("financial.inference_daily_cap", PRIORITY, Applies(categories=frozenset({"inference"})),
             _inference_daily_cap,
             "tools that run inference stop when the daily inference budget is spent"),
    ]
