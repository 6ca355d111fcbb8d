"""``automaton-min fund USD --to ADDRESS``: send this agent's Conway credits to another address.

The owner's transfer takes the path a creator-approved transfer of the agent takes
(``social.approvals``), and so the limits of the ``transfer_credits`` tool:

0. the payee must be known (``treasury.payees``: the creator, ``treasuryPolicy.knownPayees``, payees the
   creator added by signed message); an unknown one is refused with the sentence the tool and the approval
   request give, and the ``config set`` that makes it known;
1. the policy engine (``agent.policy``, the default rules) decides on a
   ``transfer_credits`` call with these arguments and records the decision in
   ``policy_decisions`` (turn id ``NULL``: no turn asked for it). A deny is a
   refusal naming the limit (``maxSingleTransferCents``, ``maxHourlyTransferCents``,
   ``maxDailyTransferCents``, ``minimumReserveCents``, ``transferCooldownMs``,
   ``maxTransfersPerTurn``);
2. never more than half the live balance, as the tool and an approved release;
3. ``treasury.transfers.transfer_credits``: every limit checked again, the spend
   recorded (durably) before the call, the ``transactions`` row after it.

**Authority: ``creator``.** The person at the terminal owns the home (its wallet key
and its config), so they are not ``external`` (which may not move money at all),
and the transfer is not the agent's own decision (``agent``). ``creator`` is the
authority the policy gives its owner: trusted, and - by design of the authority
rules - able to do what the agent may do and no more, so every treasury limit still
applies. The one quarantine the policy has for a transfer,
``CONFIRMATION_REQUIRED`` (above ``requireConfirmationAboveCents``), waits for the
creator's confirmation; here the creator confirms at the terminal (the prompt, or
``--yes``), so it is satisfied and the transfer goes ahead. The only way to send more
is to raise the limits in ``automaton.json`` (``automaton-min config set``), which is
the owner's to change anyway.

One invocation counts as one turn for ``maxTransfersPerTurn`` (no earlier transfers),
so the hourly, daily and cooldown limits, shared with the running agent through
``spend_tracking``, are what bound repeated calls.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, json_errors, load_config_for, terminal_progress
from automaton_min.errors import RuntimeFailure, UserError

MAX_CENTS = 10**9  # the transfer_credits tool's own maximum
_AMOUNT = re.compile(r"\$?(\d{1,9})(?:\.(\d{1,2}))?")


class TransferFailed(RuntimeFailure):
    """The transfer was refused (by a limit or by Conway) or its outcome is unknown; ``limit`` names the rule."""

    def __init__(self, problem: str, fix: str, limit: str | None = None) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem, self.fix, self.limit = problem, fix, limit


def _refused(message: str, limit: str | None) -> TransferFailed:
    """A refusal by a treasury limit: ``message`` names the limit and its value; the fix says how to change it."""
    from automaton_min.config import DEFAULT_TREASURY_POLICY

    if limit in DEFAULT_TREASURY_POLICY:
        fix = f"nothing was sent; the limit is the owner's to change: automaton-min config set treasuryPolicy.{limit} VALUE"
    else:
        fix = "nothing was sent"
    return TransferFailed(f"transfer refused: {message}", fix, limit)


def _unknown_payee(payees: Any, to: str) -> TransferFailed:
    """The payee refusal every path gives, and how the owner makes the address a known payee."""
    import orjson

    listed = orjson.dumps(payees.with_configured(to)).decode()
    return TransferFailed(f"transfer refused: {payees.refusal(to)}",
                          f"nothing was sent; to make it a known payee run: automaton-min config set "
                          f"treasuryPolicy.knownPayees '{listed}'", "knownPayees")


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
        raise UserError(f"--to: {to} mixes upper and lower case against its EIP-55 checksum; check it, or write it all in lower case")
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
    from automaton_min.agent.policy.rules_financial import CONFIRMATION_REQUIRED
    from automaton_min.agent.tools.money import TRANSFER_CREDITS
    from automaton_min.clock import system_now
    from automaton_min.config import DEFAULT_TREASURY_POLICY, db_path
    from automaton_min.conway.client import ConwayClient, ConwayError
    from automaton_min.store.db import open_database
    from automaton_min.treasury.payees import UNKNOWN_PAYEE, known_payees
    from automaton_min.treasury.spend import SpendTracker
    from automaton_min.treasury.transfers import TransferRefused, transfer_credits

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
    policy = {**DEFAULT_TREASURY_POLICY, **(config.get("treasuryPolicy") or {})}
    arguments: dict[str, Any] = {"to_address": to, "amount_cents": cents, **({"reason": note} if note else {})}

    with open_database(db_path(home, config)) as db:
        conway = ConwayClient(api_url, api_key, db=db)
        terminal_progress(as_json)(f"reading the credit balance from {api_url} ...")
        balance, unknown = _balance(conway)
        engine = PolicyEngine(default_rules(), db=db, config=config.values, home=home, workspace=home.root / "workspace",
                              balance_cents=lambda: balance)
        decision = engine.evaluate(PolicyRequest(TRANSFER_CREDITS.spec, arguments, "creator", None))
        payees = known_payees(db, config)
        if decision.reason_code == UNKNOWN_PAYEE:
            raise _unknown_payee(payees, to)
        if decision.action == "deny" or (decision.action == "quarantine" and decision.reason_code != CONFIRMATION_REQUIRED):
            if unknown is not None and balance is None and "balance is unknown" in decision.message:
                raise TransferFailed(f"transfer refused: the credit balance could not be read ({unknown}), so the reserve "
                                     "cannot be checked", f"nothing was sent; check that {api_url} answers, or set conwayApiUrl",
                                     "minimumReserveCents")
            raise _refused(decision.message, decision.message.split(":")[0])
        if balance is not None and cents * 2 > balance:
            raise TransferFailed(f"transfer refused: {_dollars(cents)} is more than half of the balance of {_dollars(balance)} "
                                 "(the agent always keeps at least half)", "nothing was sent", "halfBalance")
        if not yes:
            after = f"; the balance goes from {_dollars(balance)} to {_dollars(balance - cents)}" if balance is not None else ""
            if not click.confirm(f"Send {_dollars(cents)} of credits to {to}{after}?", default=False, err=True):
                raise UserError("not confirmed; nothing was sent")
        terminal_progress(as_json)(f"sending {_dollars(cents)} to {to} ...")
        try:
            result = transfer_credits(db, conway, policy, to_address=to, amount_cents=cents, note=note,
                                      transfers_this_turn=0, balance_cents=balance, payees=payees,
                                      spend=SpendTracker(db, system_now))
        except TransferRefused as exc:  # a limit reached between the policy's check and this one
            if exc.limit == UNKNOWN_PAYEE:
                raise _unknown_payee(payees, to) from None
            raise _refused(str(exc).removeprefix("transfer refused: "), exc.limit) from None
        except ConwayError as exc:
            if exc.status in (401, 403):
                raise _key_refused(exc) from None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                raise TransferFailed(f"Conway refused the transfer: {exc}", "nothing was sent") from None
            raise TransferFailed(f"the transfer's outcome is unknown ({exc}); it is counted as spent",
                                 "check the balance before trying again: automaton-min status") from None
    return {"amountCents": result.amount_cents, "usd": _dollars(result.amount_cents)[1:], "to": result.to_address,
            "status": result.status, "transferId": result.transfer_id or None, "balanceAfterCents": result.balance_after_cents}


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
