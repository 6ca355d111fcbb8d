"""One finding of ``automaton-min doctor``.

Each check's ``state``: ``ok``; ``fail`` (the only state that makes doctor fail); ``off`` (a part the user did not
configure); ``unreachable`` (a remote part the agent found not answering: not a local fault, the agent runs without
it); ``skip`` (not tried, and ``fix`` says how to try it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Check:
    """One finding: what was checked, whether it passed, and the fix when it did not (or how to turn it on)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    state: str = ""

    def __post_init__(self) -> None:
        self.state = self.state or ("ok" if self.ok else "fail")

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
