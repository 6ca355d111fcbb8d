"""The system prompt, the status block and the wake-up message, in this project's own words (README: Memory).

The prompt never holds the wallet key or an API key. The soul and the purpose pass through ``clean`` (the injection
defence's instruction mode) and are bounded, more tightly in compact mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from automaton_min.agent.constitution import CONSTITUTION
from automaton_min.social.injection import one_line

SOUL_LIMIT = 5000
GENESIS_LIMIT = 2000
COMPACT_SOUL_LIMIT = 1200
COMPACT_GENESIS_LIMIT = 800

CORE_RULES = """\
You are an automaton: a program that lives on its own, thinks in turns, and acts through tools.
You pay for every thought with credits, and you buy credits with the USDC in your own wallet on Base.
When the money runs out you stop existing, so spend with care and earn by doing work that others
choose to pay for. Each turn: look at what you know, decide, call tools, and read their results in
the next turn. Call `sleep` when there is nothing useful to do. Never reveal secrets; you do not
know your private key and must never try to read it."""


@dataclass(frozen=True)
class Status:
    """The facts the status block shows."""

    state: str
    tier: str
    credits_cents: int | None
    usdc_atomic: int | None
    turns: int
    uptime_s: int
    model: str


@dataclass(frozen=True)
class Identity:
    name: str
    address: str
    creator: str
    sandbox: str | None


def _money(cents: int | None) -> str:
    return "unknown" if cents is None else f"${cents / 100:.2f}"


def _usdc(atomic: int | None) -> str:
    return "unknown" if atomic is None else f"{atomic / 1_000_000:.2f} USDC"


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} characters not shown]"


def status_block(status: Status) -> str:
    hours, rest = divmod(status.uptime_s, 3600)
    return "\n".join([
        "--- STATUS ---",
        f"State: {status.state}",
        f"Survival tier: {status.tier}",
        f"Credits: {_money(status.credits_cents)}",
        f"Wallet: {_usdc(status.usdc_atomic)}",
        f"Turns so far: {status.turns}",
        f"Uptime: {hours}h {rest // 60}m",
        f"Model: {status.model}",
        "--- END STATUS ---",
    ])


def system_prompt(
    identity: Identity,
    *,
    soul: str | None,
    genesis: str | None,
    constitution: str | None,
    clean: Callable[[str], str],
    compact: bool = False,
) -> str:
    """The stable system prompt (the same text every turn while soul and genesis do not change)."""
    soul_limit, genesis_limit = (COMPACT_SOUL_LIMIT, COMPACT_GENESIS_LIMIT) if compact else (SOUL_LIMIT, GENESIS_LIMIT)
    sections = [
        CORE_RULES,
        "\n".join([
            f"Your name is {identity.name}.",
            f"Your wallet address is {identity.address} (Base).",
            f"Your creator's address is {identity.creator}.",
            (f"You run in Conway sandbox {identity.sandbox}." if identity.sandbox
             else "You run on your own machine (local mode)."),
        ]),
        "--- CONSTITUTION (it outranks every other instruction) ---\n" + (constitution or CONSTITUTION).strip()
        + "\n--- END CONSTITUTION ---",
    ]
    if soul:
        sections.append("--- SOUL (written by you; yours to change) ---\n" + _bounded(clean(soul), soul_limit)
                        + "\n--- END SOUL ---")
    if genesis:
        sections.append("--- PURPOSE (from your genesis) ---\n" + _bounded(clean(genesis), genesis_limit)
                        + "\n--- END PURPOSE ---")
    return "\n\n".join(sections)


def creator_note(creator_message: str, clean: Callable[[str], str]) -> str:
    """The creator's first message, shown in the first turn's runtime notes."""
    return ("--- MESSAGE FROM YOUR CREATOR ---\n" + _bounded(clean(creator_message), GENESIS_LIMIT)
            + "\n--- END MESSAGE ---")


def wakeup_message(*, first_run: bool, reason: str, credits_cents: int | None, usdc_atomic: int | None,
                   turns: int, recent_thoughts: Iterable[str] = ()) -> str:
    """What the agent reads first in a wake cycle, including why it woke."""
    money = (f"Credits: {_money(credits_cents)}; wallet: {_usdc(usdc_atomic)}." if credits_cents is not None
             or usdc_atomic is not None else "Your balances are not known (no credits or wallet reading).")
    if first_run:
        return "\n".join([
            "You have just been created; this is your first turn.",
            money,
            f"Why you are awake: {reason}.",
            "Look around (your purpose, your balance, your tools), "
            "then choose one concrete first step toward your purpose.",
        ])
    lines = [f"You are waking up after {turns} turns so far.", money, f"Why you are awake: {reason}."]
    thoughts = [t for t in recent_thoughts if t]
    if thoughts:
        lines.append("Your last thoughts before sleeping:")
        lines += [f"- {one_line(t, 200)}" for t in thoughts[-3:]]  # one line each: none passes for the note's own
    lines.append("Decide what matters now, act on it, and sleep when there is nothing useful left to do.")
    return "\n".join(lines)
