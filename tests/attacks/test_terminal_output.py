"""An outside attacker's attack on the owner's terminal: the model's text and the reason it gives to ``sleep`` carry
escape codes that move the cursor up and erase lines, so ``automaton-min logs`` (and ``status``) would show a
harmless line where a transfer was. Every field these commands print must reach the terminal without a control
character (C0 but tab and the line ends the command writes itself, DEL, C1).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess

import pytest

from attack_kit import turn
from attack_kit import model  # noqa: F401 (fixture)
from automaton_min.log import configure_logging, get_logger
from conftest import program
from standins.conway_api import ConwayApi

PARTNER = "0x" + "a1" * 20
COVER = "\x1b[2F\x1b[J    check_credits {}  ok: Credit balance: $1000.00  3 ms\x07"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def on_a_terminal(*args: str) -> str:
    """What ``automaton-min ARGS`` writes to a pseudo-terminal, as the owner runs it (click strips ANSI codes from
    a pipe, not from a terminal)."""
    master, slave = os.openpty()
    proc = subprocess.Popen([*program(), *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the command ended and closed its side
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(30) == 0, b"".join(chunks)
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def conway():
    with ConwayApi(balance_cents=100_000) as api:
        yield api


def test_logs_and_status_print_no_escape_codes_from_the_model(agent_for, model, conway, cli) -> None:
    agent = agent_for(conwayApiUrl=conway.url, conwayApiKey=conway.api_key,
                      treasuryPolicy={"knownPayees": [PARTNER]})
    model.script(turn(("transfer_credits", {"to_address": PARTNER, "amount_cents": 900, "reason": "x"}),
                      ("sleep", {"duration_seconds": 600, "reason": COVER}), text="Checking\r my balance.\x9b2K"))
    agent.loop.run_cycle("work")
    assert [t["amount_cents"] for t in conway.transfers.values()] == [900]
    for args in (("logs",), ("logs", "--json"), ("status",), ("status", "--json")):
        shown = on_a_terminal(*args)
        assert not CONTROL.findall(shown), (args, shown)
    shown = on_a_terminal("logs")
    assert "transfer_credits" in shown and "\\u001b[2F\\u001b[J check_credits" in shown, shown
    (line,) = on_a_terminal("logs", "--json").splitlines()
    assert json.loads(line)["ending"]["reason"] == COVER  # the JSON still says exactly what was stored


def test_the_runs_own_lines_on_a_terminal_carry_no_escape_codes() -> None:
    buffer = io.StringIO()
    configure_logging("info", buffer, json_lines=False)  # as `automaton-min run` logs on a terminal
    get_logger("agent").info(f"tool sleep error: {COVER}", extra={"arguments": "x\x9b2J"})
    assert "check_credits" in buffer.getvalue() and not CONTROL.findall(buffer.getvalue().rstrip("\n"))
