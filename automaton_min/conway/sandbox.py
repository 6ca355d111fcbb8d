"""Where the agent's commands and files live: a Conway sandbox (remote) or this machine (local mode), both a
``Sandbox``. Local mode is when ``sandboxId`` is empty, ``None``, ``"undefined"`` or ``"null"`` (the reference's
rule).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from automaton_min.conway.local import ExecResult, PortInfo

LOCAL_SANDBOX_IDS = ("", "undefined", "null")


@runtime_checkable
class Sandbox(Protocol):
    """The five operations the tools need, wherever they run."""

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, content: str) -> None: ...

    def expose_port(self, port: int) -> PortInfo: ...

    def remove_port(self, port: int) -> None: ...

    def describe(self) -> str:
        """Which confinement holds the commands, in a few words (banner, ``status``, ``doctor``)."""
        ...

    def close(self) -> None:
        """Release what the sandbox holds (the confined spawner in local mode)."""
        ...

    def cancel(self) -> None:
        """End a local command under way because the agent is stopping (a remote one runs to its timeout)."""
        ...


def is_local_sandbox_id(sandbox_id: object) -> bool:
    """True when ``sandbox_id`` means "no Conway sandbox": run locally."""
    return sandbox_id is None or (isinstance(sandbox_id, str) and sandbox_id.strip() in LOCAL_SANDBOX_IDS)
