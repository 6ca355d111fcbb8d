"""SIWE provisioning against a loopback Conway that verifies the message and signature like a relying party."""

from __future__ import annotations

import orjson
import pytest

from automaton_min.chain.siwe import SiweMessage
from automaton_min.chain.wallet import create_wallet
from automaton_min.conway.provision import ProvisionError, provision
from automaton_min.home import Home
from standins.conway_auth import SIWE_LINES, ConwayAuth

ADDRESS = "0x1a642f0E3c3aF545E7AcBD38b07251B3990914F1"


@pytest.fixture
def conway():
    auth = ConwayAuth()
    with auth.start():
        yield auth


def test_siwe_message_follows_the_eip4361_layout() -> None:
    message = SiweMessage(
        domain="conway.tech", address=ADDRESS.lower(), statement="Sign in.", uri="https://api.conway.tech/v1/auth/verify",
        chain_id=8453, nonce="abcd1234", issued_at="2026-11-22T10:15:30.250Z",
    ).render()
    assert message == (
        "conway.tech wants you to sign in with your Ethereum account:\n"
        f"{ADDRESS}\n\nSign in.\n\nURI: https://api.conway.tech/v1/auth/verify\nVersion: 1\n"
        "Chain ID: 8453\nNonce: abcd1234\nIssued At: 2026-11-22T10:15:30.250Z"
    )
    assert SIWE_LINES.fullmatch(message)


def test_siwe_optional_fields_and_no_statement() -> None:
    message = SiweMessage(
        domain="example.com", address=ADDRESS, uri="https://example.com", chain_id=1, nonce="12345678",
        issued_at="2026-01-01T00:00:00Z", expiration_time="2026-01-02T00:00:00Z", request_id="r1",
        resources=("https://example.com/a", "ipfs://b"),
    ).render()
    assert f"{ADDRESS}\n\n\nURI:" in message
    assert message.endswith("Expiration Time: 2026-01-02T00:00:00Z\nRequest ID: r1\nResources:\n- https://example.com/a\n- ipfs://b")


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("nonce", "short", "nonce"), ("nonce", "has space1", "nonce"), ("statement", "two\nlines", "one line"),
    ("address", "0x123", "address"), ("domain", "", "domain"),
])
def test_siwe_rejects_malformed_fields(field: str, value: str, problem: str) -> None:
    fields = dict(domain="conway.tech", address=ADDRESS, uri="https://x", chain_id=1, nonce="abcdefgh", issued_at="2026-01-01T00:00:00Z")
    with pytest.raises(ValueError, match=problem):
        SiweMessage(**{**fields, field: value})


def test_provision_through_the_cli_saves_the_key_privately(cli, home: Home, conway: ConwayAuth) -> None:
    assert cli("init").code == 0
    result = cli("provision", "--api-url", conway.server.url)
    assert result.code == 0, result.stderr
    shown = orjson.loads(result.stdout)
    saved = orjson.loads(home.api_key_path.read_bytes())
    assert home.api_key_path.stat().st_mode & 0o777 == 0o600
    assert saved["apiKey"] == conway.keys[0]
    assert saved["walletAddress"] == shown["walletAddress"] == conway.signers[0]
    assert shown["keyPrefix"] == conway.keys[0][:11]
    assert conway.keys[0] not in result.stdout + result.stderr
    assert all(token not in result.stdout + result.stderr for token in conway.tokens)
    assert [r.path for r in conway.server.requests] == ["/v1/auth/nonce", "/v1/auth/verify", "/v1/auth/api-keys"]


def test_the_provisioned_key_becomes_conway_api_key(cli, set_up: Home, conway: ConwayAuth) -> None:
    assert cli("provision", env={"CONWAY_API_URL": conway.server.url}).code == 0
    shown = orjson.loads(cli("config", "show").stdout)
    assert shown["conwayApiKey"] == "****" + conway.keys[0][-4:]


def test_provision_creates_the_wallet_when_missing(cli, home: Home, conway: ConwayAuth) -> None:
    result = cli("provision", "--api-url", conway.server.url)
    assert result.code == 0, result.stderr
    assert home.wallet_path.exists()


FAILURES = [
    ({"fail": {"nonce": 503}}, "step 1 of 3 (get a sign-in nonce)", "503"),
    ({"drop_fields": {"nonce"}}, "step 1 of 3 (get a sign-in nonce)", "no 'nonce'"),
    ({"nonce_override": "bad nonce!"}, "step 1 of 3 (get a sign-in nonce)", "SIWE nonce"),
    ({"fail": {"verify": 401}}, "step 2 of 3 (verify the signed message)", "401"),
    ({"drop_fields": {"access_token"}}, "step 2 of 3 (verify the signed message)", "no 'access_token'"),
    ({"fail": {"api-keys": 403}}, "step 3 of 3 (create an API key)", "403"),
]


@pytest.mark.parametrize(("setup", "step", "detail"), FAILURES)
def test_each_failing_step_is_named(home: Home, clock, setup: dict, step: str, detail: str) -> None:
    home.ensure()
    wallet = create_wallet(home.wallet_path, clock)
    auth = ConwayAuth(**setup)
    with auth.start():
        with pytest.raises(ProvisionError) as caught:
            provision(home, wallet, auth.server.url, clock)
    assert step in str(caught.value) and detail in str(caught.value)
    assert not home.api_key_path.exists()


def test_an_unreachable_api_is_step_one_and_one_line(cli, home: Home) -> None:
    result = cli("provision", "--api-url", "http://127.0.0.1:9")
    assert result.code == 1
    assert result.stderr_lines[-1].startswith("Error: provisioning step 1 of 3")
    assert "Traceback" not in result.stderr


def test_the_signed_message_is_bound_to_the_issued_nonce_and_wallet(home: Home, clock, conway: ConwayAuth) -> None:
    home.ensure()
    wallet = create_wallet(home.wallet_path, clock)
    provision(home, wallet, conway.server.url, clock)
    verify = next(r for r in conway.server.requests if r.path == "/v1/auth/verify").json()
    fields = SIWE_LINES.fullmatch(verify["message"])
    assert fields["address"] == wallet.address
    assert fields["nonce"] in conway.used
    assert fields["issued_at"] == "2026-11-22T10:15:30.250Z"


def test_provision_reports_each_step_to_the_progress_line_and_only_on_a_terminal(home: Home, clock, conway: ConwayAuth,
                                                                                 monkeypatch, capsys) -> None:
    from automaton_min.cli.common import terminal_progress

    home.ensure()
    wallet = create_wallet(home.wallet_path, clock)
    said: list[str] = []
    provision(home, wallet, conway.server.url, clock, progress=said.append)
    assert said == ["step 1 of 3: get a sign-in nonce ...", "step 2 of 3: verify the signed message ...",
                    "step 3 of 3: create an API key ..."]
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    terminal_progress(False)("hidden off a terminal")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    terminal_progress(True)("hidden with --json")
    terminal_progress(False)("shown")
    assert capsys.readouterr().err == "shown\n"


def test_a_topup_reports_its_slow_steps_and_stops_before_paying_without_the_usdc(home: Home, db, clock) -> None:
    import pytest

    from automaton_min.treasury.topup import topup
    from automaton_min.treasury.guard import PaymentRefused
    from automaton_min.treasury.payer import Payer

    home.ensure()
    payer = Payer(db, create_wallet(home.wallet_path, clock), balance_of=lambda address: 1_000_000, now=clock)
    said: list[str] = []
    with pytest.raises(PaymentRefused, match="less than the \\$5 top-up"):
        topup(payer, "http://127.0.0.1:9", 5, progress=said.append)
    assert said == ["reading the wallet's USDC balance ..."]  # nothing was paid: no paying line
