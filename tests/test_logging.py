"""Logs: JSON lines off a terminal, readable lines on one, logLevel honoured, secrets scrubbed."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

import orjson

from automaton_min.clock import is_stored_format
from automaton_min.home import Home
from automaton_min.log import configure_logging, get_logger, register_secret


def capture(level: str = "debug", json_lines: bool | None = None) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(level, stream, json_lines)
    return stream


def test_json_lines_carry_time_level_logger_message_and_fields() -> None:
    stream = capture(json_lines=True)
    get_logger("test").info("paid", extra={"amount_cents": 500, "payee": "0xabc"})
    entry = orjson.loads(stream.getvalue().splitlines()[0])
    assert entry["level"] == "info"
    assert entry["logger"] == "automaton_min.test"
    assert entry["msg"] == "paid"
    assert entry["amount_cents"] == 500 and entry["payee"] == "0xabc"
    assert is_stored_format(entry["ts"])


def test_exceptions_are_one_json_line_with_the_traceback_inside() -> None:
    stream = capture(json_lines=True)
    try:
        raise ValueError("boom")
    except ValueError:
        get_logger("test").exception("loop failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert "ValueError: boom" in orjson.loads(lines[0])["exc"]


def test_level_filters_lower_messages() -> None:
    stream = capture("warn")
    log = get_logger("test")
    log.info("quiet")
    log.warning("loud")
    assert "quiet" not in stream.getvalue()
    assert "loud" in stream.getvalue()


def test_registered_secrets_are_scrubbed_in_every_form() -> None:
    secret = "0x" + "c0ffee" * 10 + "abcd"
    register_secret(secret)
    stream = capture(json_lines=True)
    get_logger("test").error("leaked %s and %s", secret.upper()[2:], secret[2:], extra={"key": secret})
    text = stream.getvalue()
    assert "c0ffee" not in text.lower()
    assert text.count("[redacted]") == 3


def _status_logs(cli, home: Home, level: str) -> str:
    config = orjson.loads(home.config_path.read_bytes())
    home.config_path.write_bytes(orjson.dumps({**config, "logLevel": level}))
    result = cli("status")
    assert result.code == 0, result.stderr
    return result.stderr


def test_config_log_level_is_honoured(cli, set_up: Home) -> None:
    debug = _status_logs(cli, set_up, "debug")
    entries = [orjson.loads(line) for line in debug.splitlines()]
    assert any(e["msg"] == "opened database" and e["level"] == "debug" for e in entries)
    assert _status_logs(cli, set_up, "info") == ""


def test_log_level_flag_overrides_the_config(cli, set_up: Home) -> None:
    _status_logs(cli, set_up, "error")
    result = cli("--log-level", "debug", "status")
    assert "opened database" in result.stderr


def test_piped_stderr_gets_json_and_a_terminal_gets_text(cli, home: Home) -> None:
    piped = cli("--log-level", "info", "init")  # init says what it made itself: its log lines only when asked
    assert orjson.loads(piped.stderr.splitlines()[0])["msg"] == "created a new wallet"

    other = Home(home.root.parent / "second-home")
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "automaton_min", "--home", str(other.root), "--log-level", "info", "init"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, timeout=60,
        )
        os.close(slave)
        slave = -1
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal closes once the child is gone
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0
    line = seen.decode().strip().splitlines()[0]
    assert "info" in line and "created a new wallet" in line
    assert not line.startswith("{")
