"""``automaton-min logs``: turns and tool calls from state.db, ``--tail``, ``--json`` and ``--follow``.

``--follow`` runs as a real subprocess; the test waits for its output lines (events), writes rows
with a separate connection as the runtime would, and stops it with a real SIGINT or a closed pipe.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import apsw
import pytest

from automaton_min.home import Home


def add_turn(home: Home, index: int, *, calls: tuple[tuple[str, dict, str | None], ...] = ()) -> str:
    """A turn (and its tool calls) written straight into state.db, as the runtime writes them."""
    turn_id = f"turn-{index:04d}"
    stamp = f"2026-11-22T10:{index // 60:02d}:{index % 60:02d}.000Z"
    connection = apsw.Connection(str(home.default_db_path))
    try:
        with connection:
            connection.execute("INSERT INTO turns (id, timestamp, state, input_source, thinking) VALUES (?, ?, 'running', 'wakeup', ?)",
                               (turn_id, stamp, f"thought number {index}"))
            for position, (name, arguments, error) in enumerate(calls):
                result = "" if error else f"\n  exit_code: 0\nstdout: {name} said hi\n"
                connection.execute("INSERT INTO tool_calls (id, turn_id, name, arguments, result, duration_ms, error) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                   (f"{turn_id}_{position}", turn_id, name, json.dumps(arguments), result, 7 + position, error))
    finally:
        connection.close()
    return turn_id


def test_logs_shows_turns_and_tool_calls(cli, set_up):
    add_turn(set_up, 1, calls=(("exec", {"command": "echo hi"}, None), ("read_file", {"path": "/nope"}, "no such file")))
    add_turn(set_up, 2)
    result = cli("logs")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "thought number 1" in lines[0] and "2026-11-22T10:00:01.000Z" in lines[0]
    assert "exec" in lines[1] and "echo hi" in lines[1] and "ok: exit_code: 0  7 ms" in lines[1]  # the result's first line
    assert "read_file" in lines[2] and "error: no such file" in lines[2]
    assert "thought number 2" in lines[3] and len(lines) == 4


def test_logs_says_when_the_model_answered_nothing(cli, set_up):
    turn_id = add_turn(set_up, 1)
    connection = apsw.Connection(str(set_up.default_db_path))
    with connection:
        connection.execute("UPDATE turns SET thinking = '' WHERE id = ?", (turn_id,))
    connection.close()
    assert "(the model answered nothing: no text, no tool call)" in cli("logs").stdout


def test_logs_json_and_tail(cli, set_up):
    ids = [add_turn(set_up, i, calls=(("exec", {"command": f"echo {i}"}, None),)) for i in range(5)]
    result = cli("logs", "--tail", "2", "--json")
    assert result.code == 0, result.stderr
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t["id"] for t in turns] == ids[-2:]
    assert turns[0]["toolCalls"] == [{"name": "exec", "arguments": {"command": "echo 3"}, "error": None,
                                      "result": "exit_code: 0", "durationMs": 7}]


def test_logs_of_a_new_agent_says_there_is_nothing_yet(cli, set_up):
    result = cli("logs")
    assert (result.code, result.stdout) == (0, "") and "No turns yet" in result.stderr and "automaton-min run" in result.stderr
    quiet = cli("logs", "--json")
    assert (quiet.code, quiet.stdout, quiet.stderr) == (0, "", "")
    named = cli("--home", str(set_up.root), "logs")  # a hint repeats the --home typed
    assert f"automaton-min --home {set_up.root} run" in named.stderr


def test_logs_of_a_running_agent_without_turns_says_it_runs(cli, set_up):
    from automaton_min.runtime.run_lock import RunLock

    lock = RunLock(set_up)
    lock.acquire()  # this test process stands in for a run that has not finished a turn yet
    try:
        result = cli("logs")
        assert (result.code, result.stdout) == (0, "")
        assert result.stderr.strip() == f"No turns yet: the agent is running (pid {os.getpid()}) and has taken no turn yet."
        env = {**os.environ, "AUTOMATON_HOME": str(set_up.root)}
        watcher = subprocess.Popen([sys.executable, "-m", "automaton_min", "logs", "-f"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
        stuck = threading.Timer(30, watcher.kill)  # a watcher that never says it must not hang the test
        stuck.start()
        try:
            assert watcher.stderr.readline() == result.stderr  # -f says the same, then keeps watching
        finally:
            stuck.cancel()
            watcher.kill()
            watcher.wait(timeout=30)
    finally:
        lock.release()
    assert "start it with: automaton-min run" in cli("logs").stderr  # stopped again


class Follower:
    """``logs --follow --json`` in a subprocess, its stdout lines delivered to a queue."""

    def __init__(self, home: Home, stdout=subprocess.PIPE) -> None:
        env = {**os.environ, "AUTOMATON_HOME": str(home.root)}
        self.proc = subprocess.Popen([sys.executable, "-m", "automaton_min", "logs", "--follow", "--json", "--tail", "1"],
                                     stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        if stdout is subprocess.PIPE:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def next_turn(self, timeout_s: float = 30) -> dict:
        return json.loads(self.lines.get(timeout=timeout_s))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def follower(set_up):
    followers: list[Follower] = []

    def start(**kwargs) -> Follower:
        followers.append(Follower(set_up, **kwargs))
        return followers[-1]

    yield start
    for each in followers:
        each.close()


def test_follow_shows_new_turns_and_stops_on_ctrl_c(set_up, follower):
    add_turn(set_up, 1)
    watcher = follower()
    assert watcher.next_turn()["id"] == "turn-0001"
    add_turn(set_up, 2, calls=(("exec", {"command": "date"}, None),))
    seen = watcher.next_turn()
    assert seen["id"] == "turn-0002" and seen["toolCalls"][0]["name"] == "exec"
    add_turn(set_up, 3)
    assert watcher.next_turn()["id"] == "turn-0003"

    watcher.proc.send_signal(signal.SIGINT)
    assert watcher.proc.wait(timeout=30) == 0
    stderr = watcher.proc.stderr.read()
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


def test_follow_ends_quietly_when_its_reader_goes_away(set_up, follower):
    add_turn(set_up, 1)
    read_end, write_end = os.pipe()
    watcher = follower(stdout=write_end)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        assert json.loads(reader.readline())["id"] == "turn-0001"
    # the reader is gone; the next turn it tries to show meets a closed pipe
    add_turn(set_up, 2)
    assert watcher.proc.wait(timeout=30) != 0
    stderr = watcher.proc.stderr.read()
    assert stderr == "", stderr


# ------------------------------------------------------------------ how each turn ended, from the real agent loop


@pytest.fixture
def model():
    from standins.model_servers import OpenAIServer

    with OpenAIServer(mode="llamacpp") as server:
        yield server


def later(clock, reply):
    """A scripted answer given a second after the last one, so turns have distinct times as in a real run."""
    def answer(body):
        clock.advance(1000)
        return reply(body) if callable(reply) else reply
    return answer


def call(name: str, **arguments) -> tuple[str, str, str]:
    return ("call_0", name, json.dumps(arguments))


def endings_shown(cli) -> list[str]:
    result = cli("logs")
    assert result.code == 0, result.stderr
    return [line.strip() for line in result.stdout.splitlines() if line.startswith("    ended: ")]


def test_logs_tells_how_each_turn_ended_idle_failed_went_on_slept(agent_for, model, clock, cli):
    from standins.loopback_http import Reply
    from standins.model_servers import openai_answer

    agent = agent_for()
    model.script(later(clock, openai_answer("Nothing to do yet.")))
    agent.loop.run_cycle("test")
    model.script(later(clock, Reply(400, {"error": {"message": "bad request: unknown parameter seed"}})),
                 later(clock, openai_answer(None, [call("exec", command="echo hi")])),
                 later(clock, openai_answer("Done.", [call("sleep", duration_seconds=600,
                                                           reason="waiting for my creator")])))
    agent.loop.run_cycle("test")

    idle, failed, went_on, slept = endings_shown(cli)
    assert idle == "ended: idle (answered without using a tool); slept 60 s"
    assert failed.startswith("ended: failed: ") and "bad request: unknown parameter seed" in failed
    assert went_on == "ended: went on to the next turn"
    assert slept == "ended: slept 600 s: waiting for my creator"
    header = next(line for line in cli("logs").stdout.splitlines() if "(the turn failed" in line)
    assert "running <- wakeup" in header

    shown = [json.loads(line) for line in cli("logs", "--json").stdout.splitlines()]
    assert [turn["ending"]["ended"] for turn in shown] == ["idle", "failed", "went on", "slept"]
    assert [turn["failed"] for turn in shown] == [False, True, False, False]
    assert shown[3]["ending"] == {"ended": "slept", "seconds": 600, "reason": "waiting for my creator"}


def test_logs_tells_a_turn_the_budget_refused_and_five_failures_in_a_row(agent_for, model, clock, cli, home):
    from standins.loopback_http import Reply
    from standins.model_servers import openai_answer

    from automaton_min.store.db import open_database
    from automaton_min.treasury.spend import SpendTracker

    agent = agent_for(treasuryPolicy={"maxInferenceDailyCents": 60})  # 10 cents an hour

    def spend_the_hour(body):
        with open_database(home.default_db_path, now=clock) as other:
            SpendTracker(other, clock).record("inference", 11, "inference")
        return openai_answer(None, [call("exec", command="true")])

    model.script(later(clock, spend_the_hour))
    agent.loop.run_cycle("test")
    went_on, refused = endings_shown(cli)
    assert went_on == "ended: went on to the next turn"
    assert refused.startswith("ended: refused: no inference allowed (") and refused.endswith("); slept 600 s")

    other = agent_for(treasuryPolicy=None)
    clock.advance(3_600_000)
    model.script(*(later(clock, Reply(400, {"error": {"message": f"bad request {n}"}})) for n in range(5)))
    other.loop.run_cycle("test")
    *_, fifth = endings_shown(cli)
    assert fifth.startswith("ended: failed: ") and "bad request 4" in fifth
    assert fifth.endswith("; then slept 300 s: 5 turns failed in a row")


def test_logs_says_a_turn_the_runtime_stopped_after(agent_for, model, clock, cli):
    import threading

    from standins.model_servers import openai_answer

    agent = agent_for()
    stop = threading.Event()

    def stopped_meanwhile(body):  # SIGTERM while the model thinks: the turn finishes, no other starts
        stop.set()
        return openai_answer(None, [call("exec", command="true")])

    model.script(later(clock, stopped_meanwhile))
    agent.loop.run_cycle("test", stop, threading.Event())
    assert endings_shown(cli) == ["ended: stopped: the runtime is stopping"]


def test_status_says_how_the_last_turns_ended_in_the_words_logs_uses(agent_for, model, clock, cli):
    from standins.model_servers import openai_answer

    agent = agent_for()
    model.script(later(clock, openai_answer(None, [call("exec", command="true")])),
                 later(clock, openai_answer(None, [call("sleep", duration_seconds=4052)])))
    agent.loop.run_cycle("test")
    went_on, slept = endings_shown(cli)
    assert slept == "ended: slept 4052 s: no reason given"

    result = cli("status")
    assert result.code == 0, result.stderr
    newest, older = [line for line in result.stdout.splitlines() if "; ended: " in line]
    assert "continued: sleep [" in newest and newest.endswith(f"; {slept}")
    assert "wakeup: exec [" in older and older.endswith(f"; {went_on}")
    recent = json.loads(cli("status", "--json").stdout)["recentTurns"]
    assert recent[0]["ending"] == {"ended": "slept", "seconds": 4052, "reason": "no reason given"}


def test_logs_reads_a_database_from_before_endings_were_recorded(cli, set_up):
    add_turn(set_up, 1)
    connection = apsw.Connection(str(set_up.default_db_path))
    with connection:  # what a database migrated by an earlier automaton-min looks like (logs opens it read-only)
        connection.execute("ALTER TABLE turns DROP COLUMN ending; DROP TABLE failed_turns;"
                           " DELETE FROM schema_version WHERE name = 'turn_endings'")
    connection.close()
    result = cli("logs")
    assert result.code == 0, result.stderr
    assert "thought number 1" in result.stdout and "ended:" not in result.stdout
    assert json.loads(cli("logs", "--json").stdout)["ending"] is None
    status = cli("status")  # read-only too: the turn is listed without an ending
    assert status.code == 0 and "thought number 1" in status.stdout and "ended:" not in status.stdout, status.stderr


def test_follow_shows_a_failed_turn_before_its_retry_in_the_same_millisecond(set_up, follower):
    add_turn(set_up, 1)
    watcher = follower()
    assert watcher.next_turn()["id"] == "turn-0001"
    stamp = "2026-11-22T10:00:02.000Z"
    connection = apsw.Connection(str(set_up.default_db_path))
    with connection:  # turn-0002 failed twice and its retry (same id, same millisecond) went through
        for failure in ("F1", "F2"):
            connection.execute("INSERT INTO failed_turns (id, turn_id, timestamp, state, input_source, ending)"
                               " VALUES (?, 'turn-0002', ?, 'running', 'wakeup', ?)",
                               (failure, stamp, json.dumps({"ended": "failed", "error": f"boom {failure}"})))
        connection.execute("INSERT INTO turns (id, timestamp, state, input_source, thinking, ending)"
                           " VALUES ('turn-0002', ?, 'running', 'wakeup', 'third time lucky', ?)",
                           (stamp, json.dumps({"ended": "went on"})))
    connection.close()
    seen = [watcher.next_turn() for _ in range(3)]
    assert [(turn["id"], turn["failed"]) for turn in seen] == [("F1", True), ("F2", True), ("turn-0002", False)]
    assert seen[0]["turnId"] == "turn-0002" and seen[1]["ending"]["error"] == "boom F2"
    add_turn(set_up, 3)
    assert watcher.next_turn()["id"] == "turn-0003"
