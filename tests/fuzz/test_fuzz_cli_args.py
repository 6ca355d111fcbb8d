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


def test_a_tail_past_sqlite_integers_is_a_usage_error(offline_home, cli) -> None:
    """Regression: --tail 99999999999999999999999 reached SQLite and died with OverflowError and a traceback."""
    result = cli("logs", "--tail", "99999999999999999999999")
    assert result.code == 2 and "Traceback" not in result.stderr
    assert "--tail" in result.stderr
