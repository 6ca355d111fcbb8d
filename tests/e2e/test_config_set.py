"""``automaton-min config set|unset``: dotted keys, JSON or text values, the load rules, atomic writes that keep the
file's other keys and its mode, secrets masked, unknown keys refused with the nearest known one."""

from __future__ import annotations

import json
import os
import stat

import pytest

from automaton_min.errors import EXIT_OK, EXIT_USAGE
from automaton_min.home import Home

CONWAY_KEY = "cwk-live-9876543210fedcbaQRST"


def read(home: Home) -> dict:
    return json.loads(home.config_path.read_text())


def mode_of(home: Home) -> int:
    return stat.S_IMODE(os.stat(home.config_path).st_mode)


def ok(result) -> str:
    assert result.code == EXIT_OK, (result.code, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def error_line(result, code: int = EXIT_USAGE) -> str:
    assert "Traceback" not in result.stdout + result.stderr
    assert result.code == code, (result.code, result.stdout, result.stderr)
    lines = [line for line in result.stderr_lines if line.startswith("Error: ")]
    assert len(lines) == 1 and len(result.stderr_lines) == 1, result.stderr
    return lines[0]


def test_a_nested_key_is_set_and_its_section_kept(cli, set_up):
    out = ok(cli("config", "set", "treasuryPolicy.maxSingleTransferCents", "2000"))
    assert "treasuryPolicy.maxSingleTransferCents: 5000 -> 2000" in out
    policy = read(set_up)["treasuryPolicy"]
    assert policy["maxSingleTransferCents"] == 2000
    assert policy["maxHourlyTransferCents"] == 10000 and policy["x402AllowedDomains"] == ["conway.tech"]
    assert json.loads(ok(cli("config", "show", "--json")))["treasuryPolicy"]["maxSingleTransferCents"] == 2000
    assert "unchanged" in ok(cli("config", "set", "treasuryPolicy.maxSingleTransferCents", "2000"))


def test_a_nested_key_in_a_section_the_file_lacks(cli, set_up):
    ok(cli("config", "set", "memoryBudget.working", "800"))
    assert read(set_up)["memoryBudget"] == {"working": 800}


@pytest.mark.parametrize(("key", "value", "stored"), [
    ("logLevel", "debug", "debug"),  # not JSON: text
    ("name", '"42"', "42"),  # JSON text
    ("genesisPrompt", "Earn, then rest.", "Earn, then rest."),
    ("soulConfig.enableSoulReflection", "false", False),
    ("soulConfig.soulAlignmentThreshold", "0.75", 0.75),
    ("treasuryPolicy.x402AllowedDomains", '["conway.tech", "example.org"]', ["conway.tech", "example.org"]),
    ("treasuryPolicy.minimumReserveCents", "0", 0),
], ids=["text", "quoted-json-text", "text-with-spaces", "bool", "float", "list", "zero"])
def test_the_value_is_json_when_it_parses_else_text(cli, set_up, key, value, stored):
    ok(cli("config", "set", key, value))
    node = read(set_up)
    for part in key.split("."):
        node = node[part]
    assert node == stored and type(node) is type(stored)


@pytest.mark.parametrize(("key", "value", "needles"), [
    ("treasuryPolicy.maxSingleTransferCents", "-5", ("treasuryPolicy.maxSingleTransferCents", "expected a whole number from 0")),
    ("treasuryPolicy.maxSingleTransferCents", "12.5", ("expected a whole number",)),
    ("logLevel", "loud", ("logLevel", "expected one of debug")),
    ("creatorAddress", "0x123", ("creatorAddress", "0x-prefixed 40-hex-digit address")),
    ("name", "42", ("name: expected a string", "quote it")),
    ("treasuryPolicy", "{}", ("treasuryPolicy is a section", "treasuryPolicy.")),
    ("logLevel", "null", ("config unset logLevel",)),
])
def test_an_invalid_value_is_refused_with_the_rule_and_nothing_is_written(cli, set_up, key, value, needles):
    before = set_up.config_path.read_bytes()
    line = error_line(cli("config", "set", key, value))
    for needle in needles:
        assert needle in line, (needle, line)
    assert "nothing was changed" in line or "section" in line or "unset" in line
    assert set_up.config_path.read_bytes() == before


@pytest.mark.parametrize(("key", "nearest"), [
    ("treasuryPolicy.maxSingleTransfer", "treasuryPolicy.maxSingleTransferCents"),
    ("maxSingleTransferCents", "treasuryPolicy.maxSingleTransferCents"),
    ("loglevel", "logLevel"),
    ("modelStrategy.inferenceModle", "modelStrategy.inferenceModel"),
])
def test_an_unknown_key_names_the_nearest_known_one(cli, set_up, key, nearest):
    before = set_up.config_path.read_bytes()
    line = error_line(cli("config", "set", key, "1"))
    assert f"unknown key {key}; did you mean {nearest}?" in line
    assert set_up.config_path.read_bytes() == before


def test_an_unknown_key_as_json(cli, set_up):
    result = cli("config", "set", "--json", "loglevel", "debug")
    assert result.code == EXIT_USAGE
    assert json.loads(result.stdout) == {"error": "unknown key loglevel", "fix": "did you mean logLevel?"}


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_the_write_is_atomic_and_keeps_unknown_keys_and_the_mode(cli, set_up, mode):
    data = read(set_up)
    data["myOwnNote"] = {"keep": ["me", 1]}
    data["treasuryPolicy"]["myOwnLimitCents"] = 42
    set_up.config_path.write_text(json.dumps(data))
    os.chmod(set_up.config_path, mode)
    inode = os.stat(set_up.config_path).st_ino

    ok(cli("config", "set", "treasuryPolicy.maxDailyTransferCents", "9000"))
    after = read(set_up)
    assert after["myOwnNote"] == {"keep": ["me", 1]}
    assert after["treasuryPolicy"]["myOwnLimitCents"] == 42
    assert after["treasuryPolicy"]["maxDailyTransferCents"] == 9000
    assert {k: v for k, v in after.items() if k != "treasuryPolicy"} == {k: v for k, v in data.items() if k != "treasuryPolicy"}
    assert mode_of(set_up) == mode
    assert os.stat(set_up.config_path).st_ino != inode  # renamed into place, not rewritten
    assert not [p.name for p in set_up.root.iterdir() if p.name.endswith(".tmp")]

    # A key only the file knows may be changed too.
    ok(cli("config", "set", "treasuryPolicy.myOwnLimitCents", "43"))
    assert read(set_up)["treasuryPolicy"]["myOwnLimitCents"] == 43


def test_a_secret_is_never_echoed_nor_taken_from_the_command_line(cli, set_up):
    """A key on the command line is readable by every process here (/proc/PID/cmdline, a confined command's too):
    refused; from standard input it is stored and never echoed."""
    result = cli("config", "set", "conwayApiKey", input=CONWAY_KEY + "\n")
    assert "conwayApiKey: (unset) -> \"****QRST\"" in ok(result)
    assert read(set_up)["conwayApiKey"] == CONWAY_KEY
    result = cli("config", "set", "--json", "conwayApiKey", "-", input=CONWAY_KEY.replace("QRST", "WXYZ"))
    data = json.loads(ok(result))
    assert (data["old"], data["new"], data["changed"]) == ("****QRST", "****WXYZ", True)
    refused = cli("config", "set", "conwayApiKey", "cwk-live-on-the-command-line")
    assert "readable by every process" in error_line(refused) and "| automaton-min" in error_line(refused)
    assert read(set_up)["conwayApiKey"] == CONWAY_KEY.replace("QRST", "WXYZ")
    assert "readable by every process" in error_line(cli("setup", "--openai-api-key", "sk-x", "--yes"))
    assert "no value" in error_line(cli("config", "set", "openaiApiKey", input=""))
    for output in (result.stdout + result.stderr, refused.stdout + refused.stderr):
        assert CONWAY_KEY[:-4] not in output and "cwk-live" not in output


def test_json_output_and_the_running_agent(cli, set_up):
    from automaton_min.runtime.run_lock import RunLock

    data = json.loads(ok(cli("config", "set", "--json", "maxTurnsPerCycle", "7")))
    assert data == {"key": "maxTurnsPerCycle", "old": 25, "new": 7, "changed": True, "file": str(set_up.config_path),
                    "running": False, "pid": None, "notes": []}
    assert "next start" not in ok(cli("config", "set", "maxTurnsPerCycle", "8"))

    lock = RunLock(set_up)
    lock.acquire()  # this test process stands in for a running agent
    try:
        out = ok(cli("config", "set", "maxTurnsPerCycle", "9"))
        assert f"running agent (pid {os.getpid()}) picks this up at its next start" in out
        assert json.loads(ok(cli("config", "set", "--json", "maxTurnsPerCycle", "10")))["running"] is True
    finally:
        lock.release()


def test_unset_brings_the_default_back(cli, set_up):
    ok(cli("config", "set", "treasuryPolicy.maxSingleTransferCents", "2000"))
    out = ok(cli("config", "unset", "treasuryPolicy.maxSingleTransferCents"))
    assert "treasuryPolicy.maxSingleTransferCents: 2000 -> 5000" in out
    assert "maxSingleTransferCents" not in read(set_up)["treasuryPolicy"]
    assert json.loads(ok(cli("config", "show")))["treasuryPolicy"]["maxSingleTransferCents"] == 5000


def test_set_without_a_home(cli, home):
    line = error_line(cli("config", "set", "logLevel", "debug"))
    assert "automaton-min setup" in line
