"""The one-file binary updates itself from a signed release served on loopback (README: Updates).

Needs, besides ``AUTOMATON_BINARY``: ``AUTOMATON_NEXT_BINARY`` (a later version built with the same release key) and
``AUTOMATON_RELEASE_SEED`` (that key's private half, a throwaway one): .ci/run makes all three.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

from binary.test_binary import BINARY, Bare, Running, call
from standins.model_servers import OpenAIServer, openai_answer
from standins.releases import ReleaseServer, manifest
from test_update import stop_post

NEXT = os.environ.get("AUTOMATON_NEXT_BINARY", "")
SEED = os.environ.get("AUTOMATON_RELEASE_SEED", "")
pytestmark = pytest.mark.skipif(not (BINARY and NEXT and SEED),
                                reason="set AUTOMATON_BINARY, AUTOMATON_NEXT_BINARY and AUTOMATON_RELEASE_SEED "
                                       "(.ci/run builds and signs them)")
ARCH = f"linux-{os.uname().machine}"


def spawners_below(pid: int) -> list[int]:
    """The confined spawners among ``pid``'s descendants."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue

    def below(child: int) -> bool:
        while child > 1:
            child = parents.get(child, 0)
            if child == pid:
                return True
        return False

    found = []
    for child in parents:
        try:
            if below(child) and b"__confined-spawner__" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def test_the_binary_updates_itself_and_the_restart_runs_and_keeps_the_new_version(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "automaton-min"
    binary.parent.mkdir()
    shutil.copy2(BINARY, binary)
    bare = Bare(str(binary), tmp_path)
    old_version = bare("--version").stdout.split()[1]
    new_version = subprocess.run([NEXT, "--version"], capture_output=True, text=True).stdout.split()[1]
    new_bytes = Path(NEXT).read_bytes()
    seed = bytes.fromhex(Path(SEED).read_text().split()[-1])  # release.py keygen: "ed25519-private-seed <hex>"

    with ReleaseServer() as releases, OpenAIServer(mode="llamacpp") as model:
        releases.publish(manifest(new_version, {ARCH: new_bytes}, _now_ms()), {ARCH: new_bytes}, seed=seed)
        model.script(openai_answer(None, [call("exec", command="echo before-the-swap")]),
                     openai_answer(None, [call("sleep", duration_seconds=3600, reason="done")]))
        bare.setup(model.url, updateManifestUrl=releases.manifest_url, actionMode="direct")
        assert "is available" in bare("update", "--check").stdout

        old = Running(bare)
        try:
            old.wait_for('"msg":"asleep"')
            updated = bare("update")
            assert updated.returncode == 0 and f"-> {new_version}" in updated.stdout, updated
            assert bare("--version").stdout.split()[1] == new_version  # the file; the agent still runs the old one
            # A spawner started after the swap runs the binary this agent runs, not the new file.
            first = spawners_below(old.proc.pid)
            assert first, old.output
            for pid in first:
                os.kill(pid, signal.SIGKILL)
            model.script(openai_answer(None, [call("exec", command="echo after-the-swap")]),
                         openai_answer(None, [call("sleep", duration_seconds=3600, reason="done")]))
            assert bare("wake", "run one more command").returncode == 0
            old.wait_for('"msg":"asleep"', count=2)
            again = [pid for pid in spawners_below(old.proc.pid) if pid not in first]
            assert again and all(os.stat(f"/proc/{pid}/exe").st_ino == os.stat(f"/proc/{old.proc.pid}/exe").st_ino
                                 for pid in again), old.output[-3000:]
            stopped = old.stop()
        finally:
            old.stop()
        results = [m.get("content") or "" for r in model.requests for m in r.body["messages"] if m.get("role") == "tool"]
    assert stopped == 75, old.output  # stopped with a new binary in place: "restart me"
    assert any("after-the-swap" in text and "failed" not in text for text in results), old.output

    stop_post(binary, "exit-code")  # the unit's ExecStopPost after the old binary's exit
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    env = {**bare.env, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "2000000"}
    new = Running.__new__(Running)
    super(Running, new).__init__(env, [str(binary), "run"], cwd=bare.user)
    try:
        new.wait_for('"msg":"update confirmed"')
        assert new.stop() == 0, new.output
    finally:
        new.stop()
        notify.close()
    banner = next(orjson.loads(line) for line in new.lines if '"msg":"automaton-min started"' in line)
    assert banner["version"] == new_version, banner
    assert not binary.with_name("automaton-min.update").exists()
    assert binary.with_name("automaton-min.previous").read_bytes() == Path(BINARY).read_bytes()
    status = orjson.loads(bare("status", "--json").stdout)
    assert status["version"] == new_version and status["lastUpdateChange"]["type"] == "update_confirmed"
    assert old_version != new_version

    back = bare("update", "--rollback")  # the owner goes back by hand: the version left is not applied again
    assert back.returncode == 0 and bare("--version").stdout.split()[1] == old_version, back
    with ReleaseServer() as releases:
        releases.publish(manifest(new_version, {ARCH: new_bytes}, _now_ms()), {ARCH: new_bytes}, seed=seed)
        again = bare("update", "--manifest-url", releases.manifest_url)
        releases.missing = b"\x1b]0;PWNED\x07\x1b[2J\x1b[1;31mUpdated to 9.9.9"  # a hostile server's error page
        hostile = bare("update", "--check", "--manifest-url", releases.manifest_url.replace("release.json", "gone"))
    assert again.returncode == 1 and "rolled back" in again.stderr, again
    assert bare("--version").stdout.split()[1] == old_version
    assert hostile.returncode == 1 and "answered 404; check updateManifestUrl" in hostile.stderr, hostile
    assert "\x1b" not in hostile.stderr + hostile.stdout and "PWNED" not in hostile.stderr, hostile


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
