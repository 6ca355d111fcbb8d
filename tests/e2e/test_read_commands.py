"""Read commands (``status``, ``logs``) never create, migrate or write ``state.db``, and survive a closed pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import apsw
import pytest

from automaton_min.errors import EXIT_FAILURE
from automaton_min.home import Home

READ_COMMANDS = [("status",), ("status", "--json"), ("logs",), ("logs", "--json")]


def sql(home: Home, statement: str, params: tuple = ()) -> list[tuple]:
    connection = apsw.Connection(str(home.default_db_path))
    try:
        with connection:
            return list(connection.execute(statement, params))
    finally:
        connection.close()


def one_error_line(result, code: int) -> str:
    assert "Traceback" not in result.stdout + result.stderr
    assert result.code == code, (result.code, result.stderr)
    assert len(result.stderr_lines) == 1 and result.stderr_lines[0].startswith("Error: "), result.stderr
    assert result.stdout == ""
    return result.stderr_lines[0]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_a_missing_database_is_reported_and_not_created(cli, set_up, args):
    for suffix in ("", "-wal", "-shm"):
        path = set_up.root / f"state.db{suffix}"
        if path.exists():
            path.unlink()
    line = one_error_line(cli(*args), EXIT_FAILURE)
    assert "state.db" in line and "missing" in line
    assert not set_up.default_db_path.exists()


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_an_empty_database_is_reported_and_left_empty(cli, set_up, args):
    set_up.default_db_path.write_bytes(b"")
    line = one_error_line(cli(*args), EXIT_FAILURE)
    assert "state.db" in line and "empty" in line
    assert set_up.default_db_path.stat().st_size == 0


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_read_commands_do_not_migrate(cli, set_up, args):
    latest = sql(set_up, "SELECT MAX(version) FROM schema_version")[0][0]
    sql(set_up, "DELETE FROM schema_version WHERE version = ?", (latest,))
    result = cli(*args)
    assert result.code == 0, result.stderr
    assert sql(set_up, "SELECT COUNT(*) FROM schema_version WHERE version = ?", (latest,)) == [(0,)]


def test_status_shows_the_tier_and_balances_it_last_knew(cli, set_up):
    sql(set_up, "INSERT INTO kv (key, value) VALUES ('last_known_balance', ?), ('last_known_usdc', ?)",
        (json.dumps({"cents": 40, "at": "2026-11-22T10:00:00.000Z"}), json.dumps({"atomic": 5_250_000, "at": "2026-11-22T10:01:00.000Z"})))
    status = json.loads(cli("status", "--json").stdout)
    assert (status["tier"], status["creditsCents"], status["usdcAtomic"]) == ("low_compute", 40, 5_250_000)
    assert status["running"] is False and status["lastError"] is None
    text = cli("status").stdout
    assert "low_compute" in text and "$0.40" in text and "5.250000" in text and "stopped" in text


def test_status_without_balances_says_unknown_or_that_credits_do_not_apply(cli, set_up):
    status = json.loads(cli("status", "--json").stdout)
    assert status["tier"] is None and status["creditsCents"] is None and status["parts"]["conway"]["state"] == "off"
    text = cli("status").stdout
    assert "normal (credits do not apply: the Conway API is off)" in text and "off (no conwayApiKey)" in text
    assert cli("config", "set", "conwayApiKey", input="cnwy_k_status_test").code == 0
    assert "unknown (no credit balance read yet)" in cli("status").stdout


def test_status_says_why_a_conway_agent_cannot_spawn_a_child(cli, set_up):
    assert "cannot spawn" not in cli("status").stdout  # a local agent has no children to expect
    assert json.loads(cli("status", "--json").stdout)["children"]["cannotSpawn"] is None
    assert cli("config", "set", "conwayApiKey", input="cnwy_k_status_test").code == 0
    children = json.loads(cli("status", "--json").stdout)["children"]
    assert (children["alive"], children["total"]) == (0, 0) and "no release key" in children["cannotSpawn"]
    assert "  children       none; cannot spawn: this program has no release key" in cli("status").stdout


@pytest.mark.parametrize("args", [("status",), ("logs",), ("--help",)], ids=" ".join)
def test_a_closed_pipe_ends_quietly(set_up, args):
    """``status | head -1``: the reader is gone before the command writes; no "Broken pipe", no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "automaton_min", *args], stdout=write_end, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True, env=dict(os.environ), timeout=60)
    finally:
        os.close(write_end)
    assert "Broken pipe" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == ("No turns yet: the agent has not taken one in this home (start it with: automaton-min run).\n"
                           if args == ("logs",) else "")


def test_status_head_one_in_a_shell(set_up):
    proc = subprocess.run(f"{sys.executable} -m automaton_min status | head -1", shell=True, capture_output=True,
                          text=True, env=dict(os.environ), timeout=60)
    assert proc.stdout.startswith("ada")
    assert proc.stderr == "", proc.stderr
