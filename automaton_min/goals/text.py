"""Goal-board text as it enters a prompt: titles, results and reasons come from the model, a plan or a child's
report, so each is one line with prompt-boundary markup made inert, and capped."""

from __future__ import annotations

from automaton_min.social.injection import escape_boundaries


def shown(text: str | None, limit: int) -> str:
    """``text`` flattened to one line, its boundary markup escaped, at most ``limit`` characters."""
    flat = escape_boundaries(" ".join((text or "").split()))
    flat = " ".join(flat.split())  # the escapes may bring line breaks back
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
