"""The composition root's choice of sandbox: local (confined by the kernel) or a Conway sandbox, which raises
when it refuses a command and never falls back to local."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from automaton_min.conway.local import ExecResult, PortInfo
from automaton_min.conway.sandbox import Sandbox, is_local_sandbox_id
from automaton_min.errors import ConfigError

if TYPE_CHECKING:
    from automaton_min.confine.client import ConfinedSandbox
    from automaton_min.conway.client import ConwayClient


class RemoteSandbox:
    """A Conway cloud sandbox, reached through ``ConwayClient``."""

    is_local = False

    def __init__(self, client: "ConwayClient", sandbox_id: str) -> None:
        if is_local_sandbox_id(sandbox_id):
            raise ValueError(f"{sandbox_id!r} is not a sandbox id (it means local mode)")
        self.client = client
        self.sandbox_id = sandbox_id

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        return self.client.exec(command, timeout_s, sandbox_id=self.sandbox_id)

    def read_file(self, path: str) -> str:
        return self.client.read_file(path, sandbox_id=self.sandbox_id)

    def write_file(self, path: str, content: str) -> None:
        self.client.write_file(path, content, sandbox_id=self.sandbox_id)

    def expose_port(self, port: int) -> PortInfo:
        return self.client.expose_port(port, sandbox_id=self.sandbox_id)

    def remove_port(self, port: int) -> None:
        self.client.remove_port(port, sandbox_id=self.sandbox_id)

    def describe(self) -> str:
        return f"remote (Conway sandbox {self.sandbox_id})"

    def cancel(self) -> None:
        return None

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"RemoteSandbox({self.sandbox_id!r})"


def sandbox_for(
    config: Any,
    *,
    workspace: Path | None = None,
    client: "ConwayClient | None" = None,
    send: Callable[..., Any] | None = None,
    home: Path | None = None,
    own_cgroup: bool = False,
    launched: "ConfinedSandbox | None" = None,
) -> Sandbox:
    """The sandbox ``config`` (anything with ``.get``) describes. Local mode (no ``sandboxId``, or, given ``home``, the
    one this daemon runs in) runs in ``workspace`` (default: the user's home), confined away from ``home`` when given
    (the running agent always gives it; ``own_cgroup``: a cgroup of their own; ``launched``: the spawner
    ``launch_spawner`` started). Remote mode uses ``client``, or one built from ``conwayApiUrl``/``conwayApiKey`` and
    ``send``."""
    sandbox_id = config.get("sandboxId")
    own = _own_sandbox_id() if home is not None and not is_local_sandbox_id(sandbox_id) else ""
    if is_local_sandbox_id(sandbox_id) or (own and str(sandbox_id).strip() == own):
        local_root = Path(workspace) if workspace is not None else Path.home()
        if home is not None:  # the daemon's own Conway sandbox is this machine: its commands are confined here too
            from automaton_min.confine.client import local_sandbox

            return local_sandbox(Path(home), local_root, config, own_cgroup=own_cgroup, disposable=bool(own),
                                 launched=launched)
        from automaton_min.conway.local import LocalSandbox

        return LocalSandbox(local_root)
    if client is None:
        from automaton_min.conway.client import DEFAULT_API_URL, ConwayClient

        api_key = config.get("conwayApiKey")
        if not api_key:
            raise ConfigError(
                f"sandboxId is {sandbox_id!r} but there is no Conway API key; run: automaton-min provision "
                "(or set conwayApiKey / CONWAY_API_KEY)"
            )
        kwargs = {"send": send} if send is not None else {}
        client = ConwayClient(config.get("conwayApiUrl") or DEFAULT_API_URL, api_key, **kwargs)
    return RemoteSandbox(client, str(sandbox_id).strip())


def launch_spawner(config: Any, home: Path, workspace: Path, *, own_cgroup: bool) -> "ConfinedSandbox | None":
    """When commands run on this machine, its confined spawner started now, to start while the rest is built."""
    sandbox_id = config.get("sandboxId")
    if not is_local_sandbox_id(sandbox_id) and str(sandbox_id).strip() != _own_sandbox_id():
        return None
    from automaton_min.confine.client import launch

    return launch(home, workspace, config, own_cgroup=own_cgroup)


def _own_sandbox_id() -> str:
    from automaton_min.runtime.genesis import detect_sandbox_id

    return detect_sandbox_id()
