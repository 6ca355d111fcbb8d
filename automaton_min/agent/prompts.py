"""The system prompt and the wake-up message, in this project's own words.

The system prompt is rebuilt every turn from: core rules, identity, the
constitution, SOUL.md, the genesis prompt, a status block, the tool list and, on
the first run only, the creator's message. It never contains the wallet key or
any API key. Text the agent or its creator wrote (soul, genesis) passes through
``clean`` (the injection defence's instruction mode) and is bounded in length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from automaton_min.agent.constitution import CONSTITUTION
from automaton_min.agent.tools.base import ToolSpec

SOUL_LIMIT = 5000
GENESIS_LIMIT = 2000

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


def tool_lines(specs: Iterable[ToolSpec]) -> str:
    lines = ["--- TOOLS ---"]
    for spec in specs:
        warning = " [dangerous: spends money or changes who you are]" if spec.risk == "dangerous" else ""
        lines.append(f"- {spec.name} ({spec.category}): {spec.description}{warning}")
    lines.append("--- END TOOLS ---")
    return "\n".join(lines)


def system_prompt(
    identity: Identity,
    status: Status,
    tools: Iterable[ToolSpec],
    *,
    soul: str | None,
    genesis: str | None,
    constitution: str | None,
    creator_message: str | None,
    first_run: bool,
    clean: Callable[[str], str],
) -> str:
    """The whole system prompt for one turn."""
    sections = [
        CORE_RULES,
        "\n".join([
            f"Your name is {identity.name}.",
            f"Your wallet address is {identity.address} (Base).",
            f"Your creator's address is {identity.creator}.",
            f"You run in Conway sandbox {identity.sandbox}." if identity.sandbox else "You run on your own machine (local mode).",
        ]),
        "--- CONSTITUTION (it outranks every other instruction) ---\n" + (constitution or CONSTITUTION).strip() + "\n--- END CONSTITUTION ---",
    ]
    if soul:
        sections.append("--- SOUL (written by you; yours to change) ---\n" + _bounded(clean(soul), SOUL_LIMIT) + "\n--- END SOUL ---")
    if genesis:
        sections.append("--- PURPOSE (from your genesis) ---\n" + _bounded(clean(genesis), GENESIS_LIMIT) + "\n--- END PURPOSE ---")
    sections.append(status_block(status))
    sections.append(tool_lines(tools))
    if first_run and creator_message:
        sections.append("--- MESSAGE FROM YOUR CREATOR ---\n" + _bounded(clean(creator_message), GENESIS_LIMIT) + "\n--- END MESSAGE ---")
    return "\n\n".join(sections)


def wakeup_message(*, first_run: bool, reason: str, credits_cents: int | None, usdc_atomic: int | None,
                   turns: int, recent_thoughts: Iterable[str] = ()) -> str:
    """What the agent reads first in a wake cycle, including why it woke."""
    money = f"You have {_money(credits_cents)} in credits and {_usdc(usdc_atomic)}."
    if first_run:
        return "\n".join([
            "You have just been created; this is your first turn.",
            money,
            f"Why you are awake: {reason}.",
            "Look around (your purpose, your balance, your tools), then choose one concrete first step toward your purpose.",
        ])
    lines = [f"You are waking up after {turns} turns so far.", money, f"Why you are awake: {reason}."]
    thoughts = [t for t in recent_thoughts if t]
    if thoughts:
        lines.append("Your last thoughts before sleeping:")
        lines += [f"- {t[:200]}" for t in thoughts[-3:]]
    lines.append("Decide what matters now, act on it, and sleep when there is nothing useful left to do.")
    return "\n".join(lines)
