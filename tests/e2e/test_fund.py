"""``automaton-min fund USD --to ADDRESS``: the owner's credit transfer through the agent's guarded transfer path,
against the Conway API stand-in (tests/standins/conway_api.py)."""

from __future__ import annotations

import json

import apsw
import pytest

from automaton_min.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from automaton_min.home import Home

from conftest import keep_offline
from standins.conway_api import ConwayApi

TO = "0x" + "ab" * 20
TRANSFER = "/v1/credits/transfer"


@pytest.fixture
def api():
    with ConwayApi(balance_cents=100_000) as stand_in:
        yield stand_in


@pytest.fixture
def funded(set_up: Home, api) -> Home:
    """A set-up home whose Conway API is the stand-in, with its key."""
    keep_offline(set_up, conwayApiUrl=api.url, conwayApiKey=api.api_key, treasuryPolicy={"knownPayees": [TO]})
    return set_up


def rows(home: Home, sql: str) -> list[tuple]:
    connection = apsw.Connection(str(home.default_db_path))
    try:
        return list(connection.execute(sql))
    finally:
        connection.close()


def error_line(result, code: int) -> str:
    assert "Traceback" not in result.stdout + result.stderr
    assert result.code == code, (result.code, result.stdout, result.stderr)
    lines = [line for line in result.stderr_lines if line.startswith("Error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def sent(api) -> list[dict]:
    return [r.json() for r in api.requests if r.path.startswith(TRANSFER)]


def test_fund_sends_the_amount_to_the_address(cli, funded, api):
    result = cli("fund", "12.34", "--to", TO, "--yes", "--note", "for the sibling")
    assert result.code == EXIT_OK, result.stderr
    assert f"Sent $12.34 of credits to {TO}." in result.stdout
    assert "$987.66" in result.stdout  # the balance after, as Conway reports it
    assert sent(api) == [{"to_address": TO, "amount_cents": 1234, "note": "for the sibling"}]
    assert api.balance_cents == 100_000 - 1234
    # The same records the agent's own transfers leave: the policy's decision, the spend, the transaction.
    (decision, reason), = rows(funded, "SELECT decision, reason FROM policy_decisions WHERE tool_name = 'transfer_credits'")
    assert decision == "quarantine" and reason.startswith("CONFIRMATION_REQUIRED")  # above $10: confirmed by --yes
    assert rows(funded, "SELECT category, amount_cents, recipient FROM spend_tracking") == [("transfer", 1234, TO)]
    assert rows(funded, "SELECT type, amount_cents FROM transactions") == [("transfer_out", 1234)]


@pytest.mark.parametrize(("usd", "cents"), [("5", 500), ("0.5", 50), ("$7.05", 705)])
def test_fund_json(cli, funded, api, usd, cents):
    result = cli("fund", usd, "--to", TO, "--yes", "--json")
    assert result.code == EXIT_OK, result.stderr
    data = json.loads(result.stdout)
    assert data["amountCents"] == cents and data["to"] == TO and data["status"] == "completed"
    assert data["usd"] == f"{cents // 100}.{cents % 100:02d}"
    assert data["transferId"].startswith("tr_") and data["balanceAfterCents"] == 100_000 - cents
    assert sent(api) == [{"to_address": TO, "amount_cents": cents}]


@pytest.mark.parametrize(("usd", "balance", "limit", "value"), [
    ("50.01", 100_000, "maxSingleTransferCents", "5000 cents"),
    ("6", 1500, "minimumReserveCents", "1000 cents"),
], ids=["single-cap", "reserve"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_limit_refuses_and_nothing_is_sent(cli, funded, api, usd, balance, limit, value, as_json):
    api.balance_cents = balance
    result = cli("fund", usd, "--to", TO, "--yes", *(["--json"] if as_json else []))
    if as_json:
        assert result.code == EXIT_FAILURE
        error = json.loads(result.stdout)
        assert limit in error["error"] and value in error["error"]
        assert f"config set treasuryPolicy.{limit}" in error["fix"]
    else:
        line = error_line(result, EXIT_FAILURE)
        assert f"transfer refused: {limit}" in line and value in line and "nothing was sent" in line
    assert sent(api) == [] and api.balance_cents == balance
    assert rows(funded, "SELECT COUNT(*) FROM spend_tracking") == [(0,)]
    (decision,), = rows(funded, "SELECT decision FROM policy_decisions WHERE tool_name = 'transfer_credits'")
    assert decision == "deny"


def test_limits_set_with_config_set_and_shared_windows_apply(cli, funded, api):
    assert cli("config", "set", "treasuryPolicy.maxHourlyTransferCents", "1500").code == EXIT_OK
    assert cli("fund", "10", "--to", TO, "--yes").code == EXIT_OK
    line = error_line(cli("fund", "10", "--to", TO, "--yes"), EXIT_FAILURE)
    assert "maxHourlyTransferCents" in line and "1000 + 1000 cents would pass the limit of 1500 cents" in line
    assert cli("config", "set", "treasuryPolicy.maxTransfersPerTurn", "0").code == EXIT_OK
    assert "maxTransfersPerTurn" in error_line(cli("fund", "1", "--to", TO, "--yes"), EXIT_FAILURE)
    assert [t["amount_cents"] for t in sent(api)] == [1000]


def test_an_unknown_payee_is_refused_with_the_tools_sentence_and_the_config_set_that_makes_it_known(cli, funded, api):
    import shlex

    from automaton_min.treasury.money_out import PAYEE_NOT_KNOWN, Refusal

    stranger = "0x" + "5e" * 20
    line = error_line(cli("fund", "1", "--to", stranger, "--yes"), EXIT_FAILURE)
    assert Refusal(PAYEE_NOT_KNOWN, to=stranger).sentence() in line  # the tool's and the approval request's sentence
    assert sent(api) == [] and rows(funded, "SELECT COUNT(*) FROM spend_tracking") == [(0,)]
    (decision, reason), = rows(funded, "SELECT decision, reason FROM policy_decisions WHERE tool_name = 'transfer_credits'")
    assert decision == "quarantine" and reason.startswith(f"UNKNOWN_PAYEE: {stranger} is not a known payee")
    hint = line.split("run: ", 1)[1]
    assert hint.startswith("automaton-min ") and TO in hint  # the payees already known stay
    assert cli(*shlex.split(hint)[1:]).code == EXIT_OK
    assert cli("fund", "1", "--to", stranger, "--yes").code == EXIT_OK
    assert [t["to_address"] for t in sent(api)] == [stranger]


def test_never_more_than_half_the_balance(cli, funded, api):
    api.balance_cents = 8000
    line = error_line(cli("fund", "40.01", "--to", TO, "--yes"), EXIT_FAILURE)
    assert "more than half of the balance of $80.00" in line
    assert sent(api) == []


def test_no_conway_key_says_to_provision(cli, set_up, api):
    keep_offline(set_up, conwayApiUrl=api.url)
    line = error_line(cli("fund", "5", "--to", TO, "--yes"), EXIT_USAGE)
    assert "no Conway API key" in line and "automaton-min provision" in line
    assert api.requests == []


def test_a_refused_key_says_to_provision(cli, set_up, api):
    keep_offline(set_up, conwayApiUrl=api.url, conwayApiKey="cwk-wrong-000000000000000000")
    line = error_line(cli("fund", "5", "--to", TO, "--yes"), EXIT_FAILURE)
    assert "refused the API key" in line and "automaton-min provision" in line and "cwk-wrong" not in line
    assert sent(api) == []


def test_yes_is_required_off_a_terminal(cli, funded, api):
    line = error_line(cli("fund", "5", "--to", TO), EXIT_USAGE)
    assert "--yes" in line and "not a terminal" in line
    assert api.requests == []


@pytest.mark.parametrize(("args", "needle"), [
    (("5", "--to", "0x1234"), "--to: expected a 0x-prefixed 40-hex-digit address"),
    (("5", "--to", "0x" + "aB" * 20), "EIP-55 checksum"),
    (("5.001", "--to", TO), "at most 2 decimals"),
    (("five", "--to", TO), "at most 2 decimals"),
    (("0", "--to", TO), "more than $0"),
    (("0.00", "--to", TO), "more than $0"),
], ids=["short-address", "bad-checksum", "three-decimals", "words", "zero", "zero-cents"])
def test_bad_address_or_amount(cli, funded, api, args, needle):
    line = error_line(cli("fund", *args, "--yes"), EXIT_USAGE)
    assert needle in line
    assert api.requests == []


def test_own_address_is_refused(cli, funded, api):
    own = json.loads(funded.config_path.read_text())["walletAddress"]
    assert "own address" in error_line(cli("fund", "5", "--to", own.lower(), "--yes"), EXIT_USAGE)
    assert api.requests == []


@pytest.mark.parametrize(("status", "needle", "spent"), [
    (402, "Conway refused the transfer", 0),
    (502, "outcome is unknown", 700),
], ids=["refused", "unknown"])
def test_a_failed_transfer_is_one_line_and_counted_only_when_it_may_have_happened(cli, funded, api, status, needle, spent):
    api.fail(TRANSFER, status)
    line = error_line(cli("fund", "7", "--to", TO, "--yes"), EXIT_FAILURE)
    assert needle in line
    assert rows(funded, "SELECT COALESCE(SUM(amount_cents), 0) FROM spend_tracking") == [(spent,)]
