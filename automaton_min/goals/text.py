"""Goal-board text as it enters a prompt: titles, results and reasons come from the model, a plan or a child's
report, so each is one line with prompt-boundary markup made inert, and capped (the injection defence's rule)."""

from __future__ import annotations

from automaton_min.social.injection import one_line as shown

__all__ = ["shown"]
