"""Issue 33, item 3: commands find the owner's tools. A ``python3`` that is a version manager's shim (pyenv, asdf,
rbenv, nodenv: a script in ``<root>/shims`` that runs ``<root>/.../<tool>``) works inside the confinement, through
the real spawner: the manager's root is read and executed, never written.

A faked pyenv layout (a shim that execs the root's own ``libexec`` program, which picks ``versions/<v>/bin``) runs on
any machine; the machine's real pyenv is tried too where it has one.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from automaton_min.confine.plan import make_plan
from test_confine import agent_home, start  # noqa: F401 (fixture)


def fake_pyenv(root: Path) -> Path:
    """A pyenv-like root: ``shims/python3`` -> ``libexec/pyenv exec`` -> ``versions/3.x/bin/python3``."""
    (root / "versions" / "3.x" / "bin").mkdir(parents=True)
    (root / "libexec").mkdir()
    (root / "shims").mkdir()
    real = root / "versions" / "3.x" / "bin" / "python3"
    real.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    manager = root / "libexec" / "pyenv"
    manager.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        [ "$1" = exec ] && shift
        program="$1"; shift
        exec "{root}/versions/$(cat {root}/version)/bin/$program" "$@"
        """))
    (root / "version").write_text("3.x\n")
    shim = root / "shims" / "python3"
    shim.write_text(f"#!/bin/sh\nexec \"{manager}\" exec \"${{0##*/}}\" \"$@\"\n")
    for path in (real, manager, shim):
        path.chmod(0o755)
    return root / "shims"


@pytest.fixture
def shim_first(tmp_path, monkeypatch) -> Path:
    owner = tmp_path / "owner"
    shims = fake_pyenv(owner / ".pyenv")
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    return shims


def test_a_shims_manager_root_is_readable_and_never_writable(shim_first, agent_home) -> None:
    plan = make_plan(agent_home, agent_home / "workspace", agent_home.parent / "tmp")
    root = shim_first.parent
    assert root in plan.read_only and shim_first not in plan.read_only  # the root holds the shims
    assert all(root not in (path, *path.parents) for path in (plan.workspace, plan.tmp))


def test_the_owners_home_is_no_managers_root(tmp_path, agent_home, monkeypatch) -> None:
    """Shims straight in a home (``~/shims``) would open the whole home: only a root with versions counts."""
    home = tmp_path / "owner"
    (home / "shims").mkdir(parents=True)
    (home / ".ssh").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{home / 'shims'}:{os.environ['PATH']}")
    plan = make_plan(agent_home, agent_home / "workspace", agent_home.parent / "tmp")
    assert home not in plan.read_only


def test_a_shims_entry_that_is_no_folder_opens_nothing(tmp_path, agent_home, monkeypatch) -> None:
    """A PATH entry named ``shims`` that does not exist opens nothing, though its parent holds versions."""
    root = tmp_path / "secrets"
    (root / "versions").mkdir(parents=True)
    (root / "id_ed25519").write_text("key")
    monkeypatch.setenv("PATH", f"{root / 'shims'}:{os.environ['PATH']}")
    plan = make_plan(agent_home, agent_home / "workspace", agent_home.parent / "tmp")
    assert root not in plan.read_only


def test_a_root_others_may_write_opens_nothing(shim_first, agent_home) -> None:
    """A manager's root anyone may write is not the owner's install: what lies there is not trusted to run."""
    shim_first.parent.chmod(0o777)
    plan = make_plan(agent_home, agent_home / "workspace", agent_home.parent / "tmp")
    assert shim_first.parent not in plan.read_only


@pytest.mark.parametrize("method", ["landlock", "namespace"])
def test_python3_through_a_pyenv_shim_runs_in_a_confined_command(shim_first, agent_home, method) -> None:
    sandbox = start(agent_home, method)
    try:
        ran = sandbox.exec("command -v python3; python3 -c 'print(6 * 7)'")
        assert ran.exit_code == 0 and ran.stdout.splitlines() == [str(shim_first / "python3"), "42"], ran
        wrote = sandbox.exec(f"echo planted > {shim_first.parent}/versions/3.x/bin/python3")
        assert wrote.exit_code != 0  # read and execute only: no interpreter is planted there
    finally:
        sandbox.close()


MACHINE_SHIMS = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims"


@pytest.mark.skipif(not (MACHINE_SHIMS / "python3").exists(), reason="no pyenv on this machine")
def test_the_machines_own_pyenv_shim_runs_in_a_confined_command(agent_home, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{MACHINE_SHIMS}:{os.environ['PATH']}")
    sandbox = start(agent_home, "landlock")
    try:
        ran = sandbox.exec("python3 -c 'import sys; print(sys.version_info[0])'")
        assert ran.exit_code == 0 and ran.stdout.strip() == "3", ran
    finally:
        sandbox.close()
