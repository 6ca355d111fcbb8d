"""Fuzz argument vectors for a few commands: exit code 0, 1 or 2 and a clear message, never a traceback.

In process with click's CliRunner for the random vectors (a process per example would be too slow), and a
sample through the real CLI. Commands that reach remote services on their own (run, provision, topup, fund,
wallet, ``heartbeat run``) or never end (``logs --follow``) are left out."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from automaton_min.cli.main import cli as cli_group
from automaton_min.config import RULES

from conftest import keep_offline

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])
COMMANDS = [["status"], ["logs"], ["config"], ["config", "show"], ["config", "set"], ["config", "unset"],
            ["heartbeat"], ["heartbeat", "list"], ["heartbeat", "enable"], ["heartbeat", "disable"], ["wake"],
            ["send"], ["nosuchcommand"], []]
tokens = st.one_of(
    st.sampled_from(["--json", "--tail", "-n", "--help", "-h", "--", "-", "--reply-to", "--log-level", "debug", "LOUD",
                     "-V", "--nope", "-x", "0", "-1", "99999999999999999999999", "1e3", "", " ", "\x00", "\ud800",
                     "0x" + "ab" * 20, "0x12", "check_social_inbox", "treasuryPolicy.maxX402PaymentCents",
                     "treasuryPolicy", "{}", "[]", "null", '"x"', "{" * 2000, "x" * 100_000]),
    st.sampled_from(sorted(RULES)),
    st.text(max_size=30).filter(lambda t: not t.startswith("--home") and t not in ("-f", "--follow")),
)
values = st.one_of(tokens, st.integers(min_value=-(2**70), max_value=2**70).map(str), st.floats().map(str))
well_formed = st.one_of(  # the shapes the commands expect, with drawn values: past the usage check into the code
    st.tuples(st.sampled_from(sorted(RULES)) | tokens, values).map(lambda kv: ["config", "set", *kv]),
    st.sampled_from(sorted(RULES)).map(lambda key: ["config", "unset", key]),
    st.tuples(st.sampled_from(["enable", "disable"]), tokens).map(lambda p: ["heartbeat", *p]),
    st.tuples(st.sampled_from(["-n", "--tail"]), values).map(lambda p: ["logs", *p, "--json"]),
    st.tuples(values, values).map(lambda p: ["send", *p]),
    st.sampled_from([["status", "--json"], ["config", "show"], ["heartbeat", "list"], ["wake", "--json"]]),
)
vectors = st.tuples(st.sampled_from(COMMANDS), st.lists(tokens, max_size=4)).map(lambda p: p[0] + p[1]) | well_formed


@pytest.fixture
def offline_home(set_up, tmp_path, monkeypatch):
    keep_offline(set_up)
    monkeypatch.chdir(tmp_path)
    return set_up, set_up.config_path.read_bytes()


@SETTINGS
@given(vectors)
def test_random_argument_vectors_exit_0_1_or_2_without_a_traceback(offline_home, argv: list[str]) -> None:
    home, config_bytes = offline_home
    home.config_path.write_bytes(config_bytes)  # ``config set`` in an earlier example changed nothing for this one
    result = CliRunner().invoke(cli_group, argv, prog_name="automaton-min")
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exception is None or isinstance(result.exception, SystemExit), (argv, result.exc_info)
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, output[-500:])
    assert "Traceback" not in output
    event(f"{ascii(' '.join(argv[:2]))[:26]} exit {result.exit_code}")


SAMPLE = [
    ["logs", "--tail", "99999999999999999999999"], ["logs", "-n", "-1"], ["config", "set", "{" * 2000, "1"],
    ["config", "set", "treasuryPolicy.maxX402PaymentCents", "1e999"], ["config", "set", "heartbeatTimezone", "a" * 5000],
    ["heartbeat", "enable", "x" * 10_000], ["send", "0x12", "hi"], ["status", "--json", "--nope"], ["--log-level", "LOUD"],
]


def test_a_sample_through_the_real_cli(offline_home, cli) -> None:
    for argv in SAMPLE:  # one home for all: setting one up is a process of its own
        result = cli(*argv)
        assert result.code in (0, 1, 2), (argv[:3], result)
        assert "Traceback" not in result.stdout + result.stderr, argv[:3]
        if result.code:
            assert len(result.stderr_lines) >= 1


def test_a_tail_past_sqlite_integers_is_a_usage_error(offline_home, cli) -> None:
    """Regression: --tail 99999999999999999999999 reached SQLite and died with OverflowError and a traceback."""
    result = cli("logs", "--tail", "99999999999999999999999")
    assert result.code == 2 and "Traceback" not in result.stderr
    assert "--tail" in result.stderr


def test_an_argument_that_is_not_utf8_is_a_usage_error(offline_home, cli) -> None:
    """Regression: a stray byte on the command line (a lone surrogate in sys.argv) reached orjson, SQLite or
    stderr and died with TypeError/UnicodeEncodeError and a traceback."""
    for argv in (["config", "set", "agentId", "\udcff"], ["config", "set", "name", "a\udcffb"],
                 ["send", "0x" + "ab" * 20, "\udcff"], ["heartbeat", "enable", "\udcff"], ["status", "--json", "\udcff"]):
        result = cli(*argv)  # subprocess encodes the surrogate back to the raw byte 0xff
        assert result.code == 2, (argv, result)
        assert "Traceback" not in result.stderr and "not valid UTF-8" in result.stderr
    assert cli("config", "set", "name", "ok").code == 0  # valid text still goes through
