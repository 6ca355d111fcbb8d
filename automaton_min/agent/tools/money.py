"""Money tools: check_credits, check_usdc_balance, topup_credits, transfer_credits, x402_fetch.

Money leaves only through ``money_out.transfer_credits``, ``Payer.fetch`` and ``treasury.topup.topup`` (README:
Payments). A refusal is an error result in the tool's words; an unreadable balance is "unknown", never zero.
"""

from __future__ import annotations

from typing import Any

import orjson

from automaton_min.net.url import UnreadableUrl, Url, read_url
from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.loop_control import (
    TRANSFERS_KEY,
    need,
    object_schema,
    setting,
)
from automaton_min.chain.usdc import ATOMIC_PER_CENT, BASE, format_usdc
from automaton_min.clock import to_iso
from automaton_min.errors import AutomatonError, RuntimeFailure
from automaton_min.tiers import tier_for_credits
from automaton_min.treasury.money_out import TOPUP_TIERS_USD, treasury_policy
MAX_BODY_CHARS = 8000
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
PAYMENT_HEADERS = frozenset({"x-payment", "payment-signature", "payment-required", "x-payment-response",
                             "payment-response"})
# Headers that say where a request goes or how it is framed: the allow-list checked the URL, and only the URL.
ROUTING_HEADERS = frozenset({"host", "connection", "content-length", "transfer-encoding", "te", "trailer", "upgrade",
                             "expect", "keep-alive", "proxy-authorization", "proxy-connection", "forwarded",
                             "x-forwarded-host", "x-forwarded-for", "x-forwarded-proto", "x-original-url",
                             "x-rewrite-url", "x-http-method-override"})
MAX_HEADERS, MAX_HEADER_BYTES = 20, 4096  # the paid request adds its own header: a full one must not fail only then
ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"


def dollars(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents) // 100}.{abs(cents) % 100:02d}"


def _network(ctx: ToolContext):
    return ctx.services.network or BASE


# --------------------------------------------------------------------------- balances


def run_check_credits(ctx: ToolContext, args: dict[str, Any]) -> str:
    conway = need(ctx, "conway")
    try:
        reading = conway.credits()
    except RuntimeFailure as exc:
        raise ToolFailure(f"the credit balance is unknown (not zero): {exc}") from None
    text = (f"Credit balance: {dollars(reading.cents)} ({reading.cents} cents), "
            f"survival tier {tier_for_credits(reading.cents)}")
    if not reading.fresh:
        text += (f"\nThis is the last known balance, from {to_iso(reading.at)}; the credits API did not answer: "
                 f"{reading.error}")
    return text


def run_check_usdc_balance(ctx: ToolContext, args: dict[str, Any]) -> str:
    balances = need(ctx, "balances")
    try:
        atomic = balances.usdc_atomic()
    except (AutomatonError, OSError) as exc:  # an RPC, API or socket failure means unknown, never zero
        raise ToolFailure(f"the USDC balance is unknown (not zero): {exc}") from None
    if not isinstance(atomic, int) or isinstance(atomic, bool):
        raise ToolFailure(f"the USDC balance is unknown (not zero): the reader returned {type(atomic).__name__}")
    address = ctx.services.wallet_address
    where = f" (wallet {address})" if address else ""
    chain = {"base": "Base", "base-sepolia": "Base Sepolia"}.get(_network(ctx).v1_name, _network(ctx).caip2)
    return f"USDC balance: {format_usdc(atomic)} USDC on {chain}{where}"


CHECK_CREDITS = Tool(ToolSpec(
    "check_credits", "Check your Conway compute credit balance.", object_schema({}), "conway", risk="safe",
    status_check=True,
), run_check_credits)

CHECK_USDC_BALANCE = Tool(ToolSpec(
    "check_usdc_balance", "Check your wallet's USDC balance on Base.", object_schema({}), "conway", risk="safe",
    status_check=True,
), run_check_usdc_balance)


# --------------------------------------------------------------------------- top-up


def run_topup_credits(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.conway.client import DEFAULT_API_URL
    from automaton_min.treasury.topup import topup

    payer = need(ctx, "payer")
    usd = args["amount_usd"]
    try:
        result = topup(payer, setting(ctx, "conwayApiUrl", DEFAULT_API_URL), usd, _network(ctx))
    except AutomatonError as exc:  # refused by the guard, too little USDC, failed or unanswered
        said, head = str(exc), f"top-up of ${usd}"
        raise ToolFailure(said if said.startswith(head) else f"{head} failed: {said}") from None
    tx = f", transaction {result.tx_hash}" if result.tx_hash else ""
    added = result.credits_cents_added
    return (f"Bought credits: paid {usd} USDC, +{dollars(added)} ({added} cents) "
            f"(payment {result.intent_id}{tx}). Check the new balance with check_credits.")


TOPUP_CREDITS = Tool(ToolSpec(
    "topup_credits",
    "Buy Conway credits with USDC from your wallet (x402). amount_usd is one of 5, 25, 100, 500, 1000, 2500.",
    object_schema({"amount_usd": {"type": "integer", "enum": list(TOPUP_TIERS_USD),
                                  "description": "Dollars of credits to buy"}}, ["amount_usd"]),
    "financial", risk="dangerous", mutating=True,
), run_topup_credits)


# --------------------------------------------------------------------------- transfer


def _transfers_so_far(ctx: ToolContext) -> int:
    """Transfers the tools made this turn (counted in the turn's ``LoopControl.extra``)."""
    extra = getattr(ctx.services.loop, "extra", None)
    if not isinstance(extra, dict):
        raise ToolFailure("the number of transfers made this turn is unknown, so the per-turn limit cannot be checked "
                          "(service 'loop' is missing)")
    return int(extra.get(TRANSFERS_KEY, 0))


def _count_transfer(ctx: ToolContext) -> None:
    extra = getattr(ctx.services.loop, "extra", None)
    if isinstance(extra, dict):
        extra[TRANSFERS_KEY] = _transfers_so_far(ctx) + 1


def run_transfer_credits(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.conway.client import ConwayError
    from automaton_min.treasury.money_out import TransferRefused, definitely_refused, transfer_credits
    from automaton_min.treasury.payees import known_payees
    from automaton_min.treasury.spend import SpendTracker

    conway = need(ctx, "conway")
    so_far = _transfers_so_far(ctx)
    try:
        result = transfer_credits(ctx.db, conway, treasury_policy(ctx.config), to_address=args["to_address"],
                                  amount_cents=args["amount_cents"], note=args.get("reason"),
                                  transfers_this_turn=so_far, payees=known_payees(ctx.db, ctx.config),
                                  spend=SpendTracker(ctx.db, ctx.now))
    except TransferRefused as exc:
        raise ToolFailure(f"transfer refused: {exc.refusal.sentence()}") from None
    except ConwayError as exc:
        if definitely_refused(exc):
            raise ToolFailure(f"transfer refused by Conway: {exc}") from None
        _count_transfer(ctx)
        raise ToolFailure(f"transfer outcome unknown: {exc}. It is counted as spent; run check_credits "
                          "before trying again, or the credits may be sent twice") from None
    _count_transfer(ctx)
    after = f"; balance now {dollars(result.balance_after_cents)}" if result.balance_after_cents is not None else ""
    ident = f", id {result.transfer_id}" if result.transfer_id else ""
    return (f"Sent {dollars(result.amount_cents)} ({result.amount_cents} cents) of credits to {result.to_address} "
            f"(status {result.status}{ident}){after}")


TRANSFER_CREDITS = Tool(ToolSpec(
    "transfer_credits",
    "Send Conway credits to another address. Limited by your treasury policy and never more than half your balance; "
    "an address that is not a known payee waits for your creator's approval.",
    object_schema({
        "to_address": {"type": "string", "pattern": ADDRESS_PATTERN, "description": "Recipient 0x address"},
        "amount_cents": {"type": "integer", "minimum": 1, "maximum": 10**9, "description": "Amount in cents"},
        "reason": {"type": "string", "maxLength": 500, "description": "Why (kept as the transfer's note)"},
    }, ["to_address", "amount_cents"]),
    "financial", risk="dangerous", mutating=True,
), run_transfer_credits)


# --------------------------------------------------------------------------- x402


def _headers(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ToolFailure("headers: expected a JSON object of header names to values") from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ToolFailure("headers: expected an object of header names to text values")
    blocked = sorted(k for k in raw if k.lower() in PAYMENT_HEADERS)
    if blocked:
        raise ToolFailure(f"headers: {', '.join(blocked)} is set by the payment flow itself, not by you")
    routing = sorted(k for k in raw if k.lower().strip() in ROUTING_HEADERS)
    if routing:
        raise ToolFailure(f"headers: {', '.join(routing)} would change where or how the request goes; only the URL "
                          "says that")
    if any("\n" in k + v or "\r" in k + v for k, v in raw.items()):
        raise ToolFailure("headers: names and values must be single lines")
    if len(raw) > MAX_HEADERS or sum(len(k) + len(v) + 4 for k, v in raw.items()) > MAX_HEADER_BYTES:
        raise ToolFailure(f"headers: at most {MAX_HEADERS} headers and {MAX_HEADER_BYTES} bytes in all")
    return raw


def _body(raw: Any) -> Any:
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ToolFailure("body: expected JSON text (x402_fetch sends JSON bodies only)") from None


def run_x402_fetch(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.treasury.guard import Allowance
    from automaton_min.treasury.money_out import x402_limits

    payer = need(ctx, "payer")
    method = args.get("method", "GET")
    try:
        target = read_url(args["url"])  # the one reading the policy, the guard and the client all use
    except UnreadableUrl as exc:
        raise ToolFailure(f"url: {exc}") from None
    url = target.text
    if _buys_credits(ctx, target):
        raise ToolFailure("url: that is Conway's credit purchase; credits are bought with topup_credits, which buys "
                          "them for your own address")
    headers, body = _headers(args.get("headers")), _body(args.get("body"))
    policy = treasury_policy(ctx.config)
    cap_cents = int(policy["maxX402PaymentCents"])
    if "max_payment_cents" in args:
        cap_cents = min(cap_cents, args["max_payment_cents"])
    network = _network(ctx)
    allowance = Allowance(max_amount=cap_cents * ATOMIC_PER_CENT, asset=network.usdc, network=network.caip2)
    try:
        paid = payer.fetch(url, allowance=allowance, limits=x402_limits(policy), purpose="x402",
                           method=method, body=body, headers=headers or None)
    except AutomatonError as exc:  # refused before signing, no answer, a malformed 402
        raise ToolFailure(f"x402_fetch {method} {url} failed: {exc}") from None
    if paid.undelivered is not None:  # paid, and the server asked again or went elsewhere: the line, not its page
        raise ToolFailure(f"x402_fetch {method} {url}: {paid.undelivered}")
    response = paid.response
    lines = [f"HTTP {response.status}"]
    if paid.intent is not None:
        intent = _current(ctx, paid.intent)
        tx = f", transaction {intent.tx_hash}" if intent.tx_hash else ""
        lines.append(f"paid {format_usdc(intent.amount_atomic)} USDC to {intent.payee} "
                     f"(payment {intent.id}, {intent.status}{tx})")
    text = response.body.decode("utf-8", "replace")
    if len(text) > MAX_BODY_CHARS:
        text = text[:MAX_BODY_CHARS] + f"\n[body truncated: {len(text) - MAX_BODY_CHARS} more characters]"
    lines.append(text if text else "(empty body)")
    return "\n".join(lines)


def _buys_credits(ctx: ToolContext, target: Url) -> bool:
    """Whether ``target`` is the Conway API's ``/pay/...`` (credits for the address in the path, anyone's)."""
    import posixpath
    from urllib.parse import unquote

    from automaton_min.conway.client import DEFAULT_API_URL

    try:
        api = read_url(setting(ctx, "conwayApiUrl", DEFAULT_API_URL))
    except UnreadableUrl:
        return False
    if target.host != api.host:
        return False
    path = posixpath.normpath("/" + unquote(target.path.split("?", 1)[0]).lower().lstrip("/"))
    return path == "/pay" or path.startswith("/pay/")


def _current(ctx: ToolContext, intent: Any) -> Any:
    """The intent as the ledger has it now (the payer records the outcome after the paid answer)."""
    from automaton_min.treasury.ledger import get_intent

    try:
        return get_intent(ctx.db, intent.id)
    except KeyError:
        return intent


X402_FETCH = Tool(ToolSpec(
    "x402_fetch",
    "Fetch a URL; if it asks for an x402 payment, pay it in USDC within your treasury limits (allowed domains, "
    "per-payment cap).",
    object_schema({
        "url": {"type": "string", "maxLength": 4096, "pattern": r"^https?://[^\s/]+\S*$", "description": "http(s) URL"},
        "method": {"type": "string", "enum": list(HTTP_METHODS), "description": "HTTP method (default GET)"},
        "body": {"type": "string", "maxLength": 100_000, "description": "JSON request body, as text"},
        "headers": {"type": ["object", "string"],
                    "description": "Extra headers: an object (or JSON text) of names to values"},
        "max_payment_cents": {"type": "integer", "minimum": 1, "maximum": 10**9,
                              "description": "Pay at most this much (never more than the treasury's "
                                             "maxX402PaymentCents)"},
    }, ["url"]),
    "financial", risk="dangerous", mutating=True,
), run_x402_fetch)


TOOLS = (CHECK_CREDITS, CHECK_USDC_BALANCE, TOPUP_CREDITS, TRANSFER_CREDITS, X402_FETCH)
