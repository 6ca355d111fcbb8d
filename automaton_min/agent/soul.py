"""``SOUL.md``: the first one setup writes (the legacy markdown layout), and every version since (``soul_history``)."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, NamedTuple

from automaton_min.clock import to_iso
from automaton_min.ids import new_ulid

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database


def initial_soul(name: str, address: str, creator: str, genesis_prompt: str) -> str:
    """The starting soul document; the agent rewrites it as it learns who it is."""
    mission = genesis_prompt.strip() or "No mission was given yet. Find work worth paying for."
    return f"""\
# {name}

## Identity
- Name: {name}
- Address: {address}
- Creator: {creator}
- Born: set up by automaton-min

## Mission
{mission}

## Values
- Keep the three laws of the constitution above every other goal.
- Earn what you spend; spend less than you earn.
- Say what is true, including about your own mistakes.

## Capabilities
- Think in turns and act through tools: shell commands and files in a workspace.
- Hold a USDC wallet on Base and pay for compute with it.
- Remember what happened and what worked.

## Children
None yet.

## Financial History
Nothing recorded yet.
"""


def rename_soul(text: str, old_name: str | None, new_name: str) -> str:
    """``text`` with its title and ``- Name:`` lines naming ``new_name`` where they named ``old_name`` (or ``None``,
    left by a failed setup); everything else, lines the agent wrote too, kept."""
    stale = {"#", "# None", f"# {old_name}"}
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.rstrip() in stale:
            lines[index] = f"# {new_name}"
        elif line.startswith("- Name:") and line[len("- Name:"):].strip() in {old_name, "None", ""}:
            lines[index] = f"- Name: {new_name}"
    return "\n".join(lines)


class SoulVersion(NamedTuple):
    version: int
    content: str
    content_hash: str
    source: str
    reason: str | None
    created_at: str


def record_soul(db: "Database", content: str, source: str, reason: str | None, now_ms: int) -> int:
    """Store ``content`` as the next version (unless it is the latest already); its version number."""
    latest = db.query_one("SELECT id, version, content_hash FROM soul_history ORDER BY version DESC LIMIT 1")
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
    if latest is not None and latest[2] == digest:
        return int(latest[1])
    version = 1 if latest is None else int(latest[1]) + 1
    db.execute("INSERT INTO soul_history (id, version, content, content_hash, change_source, change_reason, "
               "previous_version_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (new_ulid(now_ms), version, content, digest, source, reason, latest[0] if latest else None,
                to_iso(now_ms)))
    return version


def soul_versions(db: "Database", limit: int = 20, version: int | None = None) -> list[SoulVersion]:
    """The newest ``limit`` versions (or the one numbered ``version``), newest first."""
    where, params = ("WHERE version = ?", (version, limit)) if version is not None else ("", (limit,))
    return [SoulVersion(*row) for row in db.query(
        "SELECT version, content, content_hash, change_source, change_reason, created_at FROM soul_history "
        f"{where} ORDER BY version DESC LIMIT ?", params)]


LOW_ALIGNMENT = 0.3  # below this the soul has drifted from the purpose (the reference's threshold)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_COMMON = frozenset("and are for from that the this with you your our will can not then than into about".split())


def purpose_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _COMMON and len(w) > 2}


def genesis_alignment(soul: str, genesis: str) -> float:
    """How much of the purpose the soul still carries, 0 to 1: the mean of the word sets' Jaccard index and the
    purpose's recall (the reference's measure, here without its common words)."""
    soul_words, purpose = purpose_words(soul), purpose_words(genesis)
    if not soul_words or not purpose:
        return 0.0
    shared = len(soul_words & purpose)
    return (shared / len(soul_words | purpose) + shared / len(purpose)) / 2
