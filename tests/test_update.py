"""Self-update from signed releases, on real files and a loopback release server (README: Updates).

The binaries are small shell scripts standing in for the one-file binary (tests/binary/test_update_binary.py runs
the real one): what matters here is what is fetched, checked, executed, renamed and recorded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from automaton_min.store import modifications
from automaton_min.store.kv import get_value
from automaton_min.update import swap
from automaton_min.update.baked import Build
from automaton_min.update.manifest import Refused, check_release, verify_release
from automaton_min.update.settle import confirm, on_trial, settle
from automaton_min.update.updater import REJECTED_KEY, Updater
from standins.releases import (DAY_MS, OTHER_SEED, TEST_PUBLIC_KEY, TEST_SEED, ReleaseServer, manifest,
                               script_binary)

ARCH = f"linux-{os.uname().machine}"
UNIT = Path(__file__).resolve().parent.parent / "systemd" / "automaton-min.service"


@pytest.fixture
def installed(tmp_path: Path) -> Build:
    """A running "0.1.0" binary in a writable directory of its own."""
    binary = tmp_path / "bin" / "automaton-min"
    binary.parent.mkdir()
    binary.write_bytes(script_binary("0.1.0"))
    binary.chmod(0o755)
    return Build(binary, TEST_PUBLIC_KEY, "0.1.0", "", ARCH)


@pytest.fixture
def releases():
    with ReleaseServer() as server:
        yield server


def files_beside(build: Build) -> dict[str, bytes]:
    """Every file beside the binary (a download left behind too) but the updates' lock file."""
    return {path.name: path.read_bytes() for path in build.binary.parent.iterdir()
            if not path.name.endswith(".update-lock")}


def rows(db, kind: str) -> list[str]:
    return [row["description"] for row in modifications.recent(db, 50, (kind,))]


def test_a_good_release_is_swapped_in_and_the_previous_kept(db, clock, installed, releases, tmp_path):
    old = installed.binary.read_bytes()
    new = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new})
    updater = Updater(db, installed, releases.manifest_url, now=clock)

    checked = updater.run(apply=False)
    assert (checked.state, checked.version) == ("available", "0.2.0")
    assert files_beside(installed) == {"automaton-min": old}  # --check changes nothing

    applied = updater.run(apply=True)
    assert applied.state == "applied", applied
    assert files_beside(installed) == {"automaton-min": new, "automaton-min.previous": old,
                                       "automaton-min.update": b"swapped 0.1.0 0.2.0\n"}
    ran = subprocess.run([str(installed.binary), "--version"], capture_output=True, text=True)
    assert ran.stdout.strip() == "automaton-min 0.2.0"
    newer = script_binary("0.3.0")  # the running 0.1.0 checks again before its restart: the swap waits for it
    releases.publish(manifest("0.3.0", {ARCH: newer}, clock()), {ARCH: newer})
    assert updater.run(apply=True).state == "pending"
    assert swap.previous_of(installed.binary).read_bytes() == old
    assert rows(db, "update_applied") and "0.1.0 -> 0.2.0" in rows(db, "update_applied")[0]
    assert orjson.loads(get_value(db, "update_status"))["state"] == "applied"
    paths = [path for _, path in
             [(r, r) for r in releases.requests if r.path.startswith("/releases/")]]
    assert [r.path for r in paths] == ["/releases/release.json"] * 2 + [f"/releases/bin-{ARCH}"]  # not fetched again


def _refusal_cases(clock_ms: int, ran: Path) -> dict[str, tuple[dict, dict[str, bytes], bytes, str]]:
    """name -> (manifest, binaries served, signing seed, a word the refusal says)."""
    new = script_binary("0.2.0", ran=ran)
    good = manifest("0.2.0", {ARCH: new}, clock_ms)
    return {
        "bad signature": (good, {ARCH: new}, OTHER_SEED, "signature"),
        "wrong hash": (manifest("0.2.0", {ARCH: new.replace(b"exit 3", b"exit 4")}, clock_ms), {ARCH: new},
                       TEST_SEED, "sha256"),
        "other architecture": (manifest("0.2.0", {"linux-riscv64": new}, clock_ms), {"linux-riscv64": new},
                               TEST_SEED, "no build for"),
        "older version": (manifest("0.0.9", {ARCH: new}, clock_ms), {ARCH: new}, TEST_SEED, "older"),
        "expired": (manifest("0.2.0", {ARCH: new}, clock_ms, issued_ms=clock_ms - 40 * DAY_MS), {ARCH: new},
                    TEST_SEED, "expired"),
        "other product": (manifest("0.2.0", {ARCH: new}, clock_ms, product="someone-else"), {ARCH: new},
                          TEST_SEED, "not automaton-min"),
        "truncated download": (good, {ARCH: new[:-10]}, TEST_SEED, "truncated"),
    }


@pytest.mark.parametrize("case", ["bad signature", "wrong hash", "other architecture", "older version", "expired",
                                  "other product", "truncated download"])
def test_a_bad_release_is_refused_and_nothing_changes(db, clock, installed, releases, tmp_path, case):
    ran = tmp_path / "the-new-binary-ran"
    fields, served, seed, word = _refusal_cases(clock(), ran)[case]
    releases.publish(fields, served, seed=seed)
    before = files_beside(installed)

    outcome = Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)

    assert outcome.state == "refused" and word in outcome.detail, outcome
    assert files_beside(installed) == before  # no swap, no previous, no marker, no partial download left
    assert not ran.exists()  # nothing fetched was ever executed
    assert rows(db, "update_refused") == [outcome.detail]


def test_a_signature_over_other_bytes_is_refused_before_any_field_is_read(installed, clock):
    new = script_binary("0.2.0")
    envelope = orjson.loads(ReleaseServer().publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new}))
    envelope["signed"] = envelope["signed"].replace('"0.2.0"', '"9.9.9"')  # same signature, other text
    with pytest.raises(Refused, match="signature"):
        verify_release(orjson.dumps(envelope), TEST_PUBLIC_KEY)
    envelope["signed"] = envelope["signed"].replace('"9.9.9"', '"0.2.0"') + " "  # one byte more: not the same bytes
    with pytest.raises(Refused, match="signature"):
        verify_release(orjson.dumps(envelope), TEST_PUBLIC_KEY)


def test_a_replayed_old_manifest_is_refused(db, clock, installed, releases):
    new = script_binary("0.3.0")
    releases.publish(manifest("0.3.0", {ARCH: new}, clock()), {ARCH: new})
    assert Updater(db, installed, releases.manifest_url, now=clock).run(apply=False).state == "available"
    older = script_binary("0.2.0")  # signed, unexpired, newer than what runs: but issued before one already seen
    releases.publish(manifest("0.2.0", {ARCH: older}, clock(), issued_ms=clock() - DAY_MS), {ARCH: older})
    outcome = Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    assert outcome.state == "refused" and "replayed" in outcome.detail
    assert not swap.previous_of(installed.binary).exists()


def test_the_running_version_is_up_to_date_and_not_a_refusal(db, clock, installed, releases):
    same = script_binary("0.1.0")
    releases.publish(manifest("0.1.0", {ARCH: same}, clock()), {ARCH: same})
    outcome = Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    assert outcome.state == "latest" and rows(db, "update_refused") == []


def test_a_build_without_a_baked_key_refuses_every_release(db, clock, installed, releases):
    new = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new})
    keyless = Build(installed.binary, None, "0.1.0", "", ARCH)
    outcome = Updater(db, keyless, releases.manifest_url, now=clock).run(apply=True)
    assert outcome.state == "refused" and "no release key" in outcome.detail
    assert releases.requests == []  # nothing fetched


def test_the_same_refusal_every_four_hours_is_one_row(db, clock, installed, releases):
    new = script_binary("0.0.5")
    releases.publish(manifest("0.0.5", {ARCH: new}, clock()), {ARCH: new})
    for _ in range(3):
        Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    assert len(rows(db, "update_refused")) == 1


def test_a_release_server_that_does_not_answer_changes_nothing(db, clock, installed):
    outcome = Updater(db, installed, "http://127.0.0.1:9/release.json", now=clock).run(apply=True)
    assert outcome.state == "unreachable"
    assert list(files_beside(installed)) == ["automaton-min"]


def test_a_full_disk_changes_nothing(db, clock, tmp_path, releases):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        binary = small / "automaton-min"
        binary.write_bytes(script_binary("0.1.0"))
        binary.chmod(0o755)
        build = Build(binary, TEST_PUBLIC_KEY, "0.1.0", "", ARCH)
        big = script_binary("0.2.0") + b"#" * 200_000
        releases.publish(manifest("0.2.0", {ARCH: big}, clock()), {ARCH: big})
        outcome = Updater(db, build, releases.manifest_url, now=clock).run(apply=True)
        assert outcome.state == "failed" and "unchanged" in outcome.detail, outcome
        assert sorted(p.name for p in small.iterdir() if not p.name.endswith("-lock")) == ["automaton-min"]
        assert binary.read_bytes() == script_binary("0.1.0")
        assert rows(db, "update_failed")
    finally:
        subprocess.run(["umount", str(small)], check=True)


# ------------------------------------------------------------------ the unit's roll-back and the next start


def stop_post(binary: Path, result: str) -> None:
    """The unit's ExecStopPost= as systemd runs it: its $$ unescaped, SERVICE_RESULT set."""
    line = next(line for line in UNIT.read_text().splitlines() if line.startswith("ExecStopPost="))
    script = re.fullmatch(r"ExecStopPost=/bin/sh -c '(.*)' update-rollback \S+", line).group(1).replace("$$", "$")
    subprocess.run(["/bin/sh", "-c", script, "update-rollback", str(binary)], check=True,
                   env={"PATH": "/usr/bin:/bin", "SERVICE_RESULT": result})


def test_a_new_binary_that_fails_its_first_run_is_rolled_back_and_never_applied_again(db, clock, installed,
                                                                                      releases):
    old = installed.binary.read_bytes()
    broken = script_binary("0.2.0", on_run="exit 3")  # starts for --version, fails its first run
    releases.publish(manifest("0.2.0", {ARCH: broken}, clock()), {ARCH: broken})
    assert Updater(db, installed, releases.manifest_url, now=clock).run(apply=True).state == "applied"

    stop_post(installed.binary, "exit-code")  # the old binary stopped to restart (exit 75): the new one starts
    assert swap.read_marker(installed.binary) == swap.Marker("started", "0.1.0", "0.2.0")
    new_build = Build(installed.binary, TEST_PUBLIC_KEY, "0.2.0", "", ARCH)
    assert on_trial(new_build)
    run = subprocess.run([str(installed.binary), "run"])
    assert run.returncode == 3
    stop_post(installed.binary, "exit-code")  # it failed before confirming itself: put back

    assert installed.binary.read_bytes() == old and not swap.previous_of(installed.binary).exists()
    assert swap.read_marker(installed.binary) == swap.Marker("rolled-back", "0.1.0", "0.2.0")
    assert settle(db, installed, clock()) is False  # the old binary, restarted, records it
    assert "version 0.2.0 failed" in rows(db, "update_rolled_back")[0]
    assert swap.read_marker(installed.binary) is None
    assert orjson.loads(get_value(db, REJECTED_KEY)) == ["0.2.0"]
    again = Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    assert again.state == "refused" and "rolled back" in again.detail


def test_a_new_binary_that_ran_is_kept(db, clock, installed, releases):
    new = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new})
    Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    stop_post(installed.binary, "exit-code")
    new_build = Build(installed.binary, TEST_PUBLIC_KEY, "0.2.0", "", ARCH)
    assert settle(db, new_build, clock()) is True  # on trial
    stop_post(installed.binary, "success")  # stopped cleanly before confirming: still on trial, nothing put back
    assert installed.binary.read_bytes() == new and on_trial(new_build)
    confirm(db, new_build, clock())
    assert swap.read_marker(installed.binary) is None and rows(db, "update_confirmed")
    stop_post(installed.binary, "watchdog")  # later failures are ordinary: no marker, nothing rolled back
    assert installed.binary.read_bytes() == new


# ------------------------------------------------------------------ killed mid-update


@pytest.mark.parametrize("point", ["update.download", "update.verify", "update.swap"])
def test_a_killed_update_leaves_a_working_binary(home, clock, installed, releases, point):
    from automaton_min.store.db import open_database

    new = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new})
    home.ensure()
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from automaton_min.store.db import open_database\n"
        "from automaton_min.update.baked import Build\n"
        "from automaton_min.update.updater import Updater\n"
        f"build = Build(Path({str(installed.binary)!r}), bytes.fromhex({TEST_PUBLIC_KEY.hex()!r}), '0.1.0', '', "
        f"{ARCH!r})\n"
        f"db = open_database(Path({str(home.default_db_path)!r}))\n"
        f"Updater(db, build, {releases.manifest_url!r}, now=lambda: {clock()}).run(apply=True)\n")
    killed = subprocess.run([sys.executable, "-c", script], env={**os.environ, "AUTOMATON_CRASH_AT": point},
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr

    version = subprocess.run([str(installed.binary), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "automaton-min 0.1.0"  # whole and the old one: the swap never happened
    with open_database(home.default_db_path, now=clock) as db:
        assert settle(db, installed, clock()) is False  # a marker written just before the rename: recorded
        if point == "update.swap":
            assert "did not take place" in rows(db, "update_abandoned")[0]
        assert Updater(db, installed, releases.manifest_url, now=clock).run(apply=True).state == "applied"
    assert sorted(files_beside(installed)) == [
        "automaton-min", "automaton-min.previous", "automaton-min.update"]  # the killed run's leftovers are gone


# ------------------------------------------------------------------ the heartbeat task, through the scheduler


@pytest.mark.parametrize("mode, may_apply, expected", [("apply", True, "applied"), ("apply", False, "available"),
                                                       ("check", True, "available"), ("off", True, None)])
def test_check_for_updates_runs_through_the_scheduler(db, home, clock, installed, releases, mode, may_apply,
                                                      expected):
    import threading

    from automaton_min.config import config_from
    from automaton_min.heartbeat.context import ContextFactory
    from automaton_min.heartbeat.scheduler import Scheduler
    from automaton_min.heartbeat.update_task import update_task
    from automaton_min.store.wake import WakeBus

    new = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new})
    config = config_from({"updates": mode, "updateManifestUrl": releases.manifest_url})
    restarts: list[str] = []
    task = update_task(installed, may_apply=may_apply, restart=lambda: restarts.append("restart"))
    scheduler = Scheduler(home, config, home.default_db_path, {}, ContextFactory(home, config, now=clock),
                          WakeBus(threading.Event()), now=clock, extra_tasks={"check_for_updates": task},
                          tier_of=lambda _db: "dead")  # a dead agent still takes a fix
    scheduler.prepare(db)
    ran = scheduler.run_task(db, "check_for_updates")

    assert ran.result == "success" and ran.wake is None, ran
    if expected is None:
        assert releases.requests == [] and ran.summary == "updates are off"
        return
    assert ran.summary.startswith(expected)
    assert restarts == (["restart"] if expected == "applied" else [])
    swapped = installed.binary.read_bytes() == new
    assert swapped == (expected == "applied")


def test_logs_show_each_update_refusal_and_rollback(cli, set_up, installed, releases):
    from automaton_min.clock import system_now
    from automaton_min.store.db import open_database

    expired = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: expired}, system_now(), issued_ms=system_now() - 40 * DAY_MS),
                     {ARCH: expired})
    with open_database(set_up.default_db_path) as db:
        Updater(db, installed, releases.manifest_url, now=system_now).run(apply=True)
    shown = cli("logs")
    assert shown.code == 0, shown.stderr
    assert "update refused: the release manifest expired at" in shown.stdout
    assert "No turns yet" in shown.stderr  # the turns part says what it always says


def test_one_update_at_a_time_beside_a_binary(db, clock, installed, releases):
    new = script_binary("0.2.0")
    releases.publish(manifest("0.2.0", {ARCH: new}, clock()), {ARCH: new})
    with swap.exclusive(installed.binary) as mine:  # the daemon's task is under way
        assert mine
        outcome = Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    assert outcome.state == "pending" and "under way" in outcome.detail
    assert installed.binary.read_bytes() == script_binary("0.1.0") and releases.requests == []
    assert Updater(db, installed, releases.manifest_url, now=clock).run(apply=True).state == "applied"


def test_an_artifact_url_read_two_ways_is_refused(db, clock, installed, releases):
    new = script_binary("0.2.0")
    fields = manifest("0.2.0", {ARCH: new}, clock())
    fields["artifacts"][ARCH]["url"] = "http://127.0.0.1\\@example.org/bin"  # signed, but ambiguous
    releases.publish(fields, {ARCH: new})
    outcome = Updater(db, installed, releases.manifest_url, now=clock).run(apply=True)
    assert outcome.state == "refused" and "backslash" in outcome.detail


def test_a_rollback_by_hand_waits_for_an_update_under_way_and_rejects_the_version_it_leaves(db, clock, installed):
    from automaton_min.cli.update_cmd import _rollback
    from automaton_min.errors import UserError

    old = installed.binary.read_bytes()
    swap.previous_of(installed.binary).write_bytes(old)
    installed.binary.write_bytes(script_binary("0.2.0"))
    running_new = Build(installed.binary, TEST_PUBLIC_KEY, "0.2.0", "", ARCH)
    with swap.exclusive(installed.binary):
        with pytest.raises(UserError, match="under way"):
            _rollback(db, running_new, clock())
    assert installed.binary.read_bytes() == script_binary("0.2.0")
    assert "back in" in _rollback(db, running_new, clock())
    assert installed.binary.read_bytes() == old and orjson.loads(get_value(db, REJECTED_KEY)) == ["0.2.0"]


def test_logs_show_every_change_in_the_span_of_the_turns_shown(cli, set_up, clock):
    from automaton_min.store.db import open_database
    from automaton_min.store.turns import StoredTurn, insert_turn
    from automaton_min.clock import to_iso

    with open_database(set_up.default_db_path) as db:
        at = clock()
        modifications.record(db, "update_applied", "before any turn", at)
        insert_turn(db, StoredTurn("t1", to_iso(at + 1000), "running", None, None, "first", (), None, 0))
        for n in range(3):
            modifications.record(db, "update_refused", f"between the turns {n}", at + 2000 + n)
        insert_turn(db, StoredTurn("t2", to_iso(at + 9000), "running", None, None, "second", (), None, 0))
    every = cli("logs").stdout
    assert every.index("before any turn") < every.index("first") < every.index("between the turns 2") < every.index(
        "second")
    last_two = cli("logs", "--tail", "2").stdout  # all the turns there are: every change too
    assert "before any turn" in last_two and all(f"between the turns {n}" in last_two for n in range(3))
    last_one = cli("logs", "--tail", "1").stdout  # the span of the last turn only
    assert "between the turns" not in last_one and "second" in last_one
