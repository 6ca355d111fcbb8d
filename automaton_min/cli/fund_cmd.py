"""``automaton-min fund USD --to ADDRESS`` (README: Commands): the owner's transfer takes the agent's own path.

The policy engine decides on a ``transfer_credits`` call (authority ``creator``), then ``money_out`` checks again
and sends; its ``Refusal`` is rendered here with the ``config set`` that changes it. One invocation is one turn.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, json_errors, load_config_for, terminal_progress
from automaton_min.errors import RuntimeFailure, UserError

if TYPE_CHECKING:
    from automaton_min.treasury.money_out import Refusal
    from automaton_min.treasury.payees import KnownPayees

MAX_CENTS = 10**9  # the transfer_credits tool's own maximum
_AMOUNT = re.compile(r"\$?(\d{1,9})(?:\.(\d{1,2}))?")


class TransferFailed(RuntimeFailure):
    """The transfer was refused (by a rule or by Conway) or its outcome is unknown."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem, self.fix = problem, fix


def _refused(refusal: "Refusal", payees: "KnownPayees", unread: str | None, api_url: str) -> TransferFailed:
    """``money_out``'s refusal in the owner's words, with what changes it."""
    from automaton_min.treasury import money_out as out

    if refusal.code == out.PAYEE_NOT_KNOWN:
        import orjson

        listed = orjson.dumps(payees.with_configured(refusal.to)).decode()
        return TransferFailed(f"transfer refused: {refusal.sentence()}", "nothing was sent; to make it a known payee "
                              f"run: automaton-min config set treasuryPolicy.knownPayees '{listed}'")
    if refusal.code == out.BALANCE_UNKNOWN:
        return TransferFailed(f"transfer refused: the credit balance could not be read ({unread or 'no answer'}), "
                              "so the reserve cannot be checked",
                              f"nothing was sent; check that {api_url} answers, or set conwayApiUrl")
    if refusal.code == out.HALF_BALANCE:
        return TransferFailed(f"transfer refused: {_dollars(refusal.amount)} is more than half of the balance of "
                              f"{_dollars(refusal.balance or 0)} (the agent always keeps at least half)",
                              "nothing was sent")
    if refusal.setting is None:
        return TransferFailed(f"transfer refused: {refusal.sentence()}", "nothing was sent")
    return TransferFailed(f"transfer refused: {refusal.setting}: {refusal.sentence()}", "nothing was sent; the limit "
                          f"is the owner's to change: automaton-min config set treasuryPolicy.{refusal.setting} VALUE")


def parse_usd(text: str) -> int:
    """Dollars with at most two decimals (``12``, ``12.5``, ``$12.50``) -> cents."""
    match = _AMOUNT.fullmatch(text.strip())
    if not match:
        raise UserError(f"USD: expected dollars with at most 2 decimals, like 12.50 (got {text!r})")
    cents = int(match.group(1)) * 100 + int((match.group(2) or "0").ljust(2, "0"))
    if cents <= 0:
        raise UserError("USD: the amount must be more than $0")
    if cents > MAX_CENTS:
        raise UserError(f"USD: at most {_dollars(MAX_CENTS)} in one transfer")
    return cents


def _dollars(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def _check_address(to: str, own: str | None) -> str:
    from automaton_min.chain.address import has_valid_checksum, is_address

    if not is_address(to):
        raise UserError(f"--to: expected a 0x-prefixed 40-hex-digit address (got {to!r})")
    if not has_valid_checksum(to):
        raise UserError(f"--to: {to} mixes upper and lower case against its EIP-55 checksum; check it, or write it "
                        "all in lower case")
    if own and to.lower() == own.lower():
        raise UserError(f"--to: {to} is this agent's own address")
    return to


@click.command("fund")
@click.argument("usd", metavar="USD")
@click.option("--to", "to", required=True, metavar="ADDRESS", help="The 0x address that receives the credits.")
@click.option("--note", default=None, help="A note kept with the transfer.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (needed when not on a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, usd: str, to: str, note: str | None, yes: bool, as_json: bool) -> None:
    """Send USD dollars (at most 2 decimals) of this agent's Conway credits to ADDRESS.

    ADDRESS must be a known payee: the creator, an address in
    treasuryPolicy.knownPayees, or one the creator added by signed message.
    The transfer goes through the agent's guarded transfer path: the treasury
    limits of automaton.json (maxSingleTransferCents, maxHourlyTransferCents,
    maxDailyTransferCents, minimumReserveCents, transferCooldownMs,
    maxTransfersPerTurn) apply as they do to the agent, and never more than half
    the balance is sent. Asks for confirmation on a terminal unless --yes.
    """
    with json_errors(as_json):
        result = _fund(ctx, usd, to, note, yes, as_json)
    if as_json:
        emit_json(result)
        return
    click.echo(f"Sent {_dollars(result['amountCents'])} of credits to {result['to']}.")
    balance = result["balanceAfterCents"]
    emit_rows([("status", result["status"]), ("transfer", result["transferId"]),
               ("balance", _dollars(balance) if balance is not None else None)])


def _fund(ctx: click.Context, usd: str, to: str, note: str | None, yes: bool, as_json: bool) -> dict[str, Any]:
    from automaton_min.agent.policy.engine import PolicyEngine, PolicyRequest, default_rules
    from automaton_min.agent.tools.money import TRANSFER_CREDITS
    from automaton_min.clock import system_now
    from automaton_min.config import db_path
    from automaton_min.conway.client import ConwayClient, ConwayError
    from automaton_min.store.db import open_database
    from automaton_min.treasury import money_out as out
    from automaton_min.treasury.payees import known_payees
    from automaton_min.treasury.spend import SpendTracker

    cents = parse_usd(usd)
    if not yes and not sys.stdin.isatty():
        raise UserError("fund asks for confirmation, and this is not a terminal: add --yes to send without asking")
    home = home_of(ctx)
    config = load_config_for(ctx)
    to = _check_address(to.strip(), config.get("walletAddress"))
    api_key = config.get("conwayApiKey")
    if not api_key:
        raise UserError("no Conway API key; run: automaton-min provision")
    api_url = config.get("conwayApiUrl")
    policy = out.treasury_policy(config)
    arguments: dict[str, Any] = {"to_address": to, "amount_cents": cents, **({"reason": note} if note else {})}

    with open_database(db_path(home, config)) as db:
        conway = ConwayClient(api_url, api_key, db=db)
        terminal_progress(as_json)(f"reading the credit balance from {api_url} ...")
        balance, unread = _balance(conway)
        engine = PolicyEngine(default_rules(), db=db, config=config.values, home=home,
                              workspace=home.root / "workspace", balance_cents=lambda: balance)
        decision = engine.evaluate(PolicyRequest(TRANSFER_CREDITS.spec, arguments, "creator", None))
        payees, spend = known_payees(db, config), SpendTracker(db, system_now)
        refusal = out.transfer_refusal(spend, policy, payees, to_address=to, amount_cents=cents,
                                       transfers_this_turn=0, balance_cents=balance)
        if refusal:
            raise _refused(refusal, payees, unread, api_url)
        if decision.action == "deny" or (decision.action == "quarantine"
                                         and decision.reason_code != out.CONFIRMATION_REQUIRED):
            raise TransferFailed(f"transfer refused: {decision.reason_code}: {decision.message}", "nothing was sent")
        if not yes:
            after = (f"; the balance goes from {_dollars(balance)} to {_dollars(balance - cents)}"
                     if balance is not None else "")
            if not click.confirm(f"Send {_dollars(cents)} of credits to {to}{after}?", default=False, err=True):
                raise UserError("not confirmed; nothing was sent")
        terminal_progress(as_json)(f"sending {_dollars(cents)} to {to} ...")
        try:
            result = out.transfer_credits(db, conway, policy, to_address=to, amount_cents=cents, note=note,
                                          transfers_this_turn=0, payees=payees, spend=spend)
        except out.TransferRefused as exc:  # checked again on the balance at sending: others may have spent since
            raise _refused(exc.refusal, payees, unread, api_url) from None
        except ConwayError as exc:
            if exc.status in (401, 403):
                raise _key_refused(exc) from None
            if out.definitely_refused(exc):
                raise TransferFailed(f"Conway refused the transfer: {exc}", "nothing was sent") from None
            raise TransferFailed(f"the transfer's outcome is unknown ({exc}); it is counted as spent",
                                 "check the balance before trying again: automaton-min status") from None
    return {"amountCents": result.amount_cents, "usd": _dollars(result.amount_cents)[1:], "to": result.to_address,
            "status": result.status, "transferId": result.transfer_id or None,
            "balanceAfterCents": result.balance_after_cents}


def _balance(conway: Any) -> tuple[int | None, str | None]:
    """A live balance (a stale one does not count for a transfer), or ``None`` and why."""
    from automaton_min.conway.client import ConwayError

    try:
        return conway.credits_balance(), None
    except ConwayError as exc:
        if exc.status in (401, 403):
            raise _key_refused(exc) from None
        return None, str(exc)


def _key_refused(exc: Exception) -> TransferFailed:
    return TransferFailed(f"Conway refused the API key ({exc}); nothing was sent", "run: automaton-min provision")
