"""ConwayClient against a loopback Conway API that checks paths, the raw-key header and Idempotency-Keys."""

from __future__ import annotations

import os
import socket
from typing import Any

import orjson
import pytest

from automaton_min.conway.client import (
    BALANCE_KEY,
    ConwayClient,
    ConwayError,
    CreditsReading,
    ExecRefused,
    cached_credits,
    conway_send,
)
from automaton_min.conway.local import LocalSandbox
from automaton_min.conway.local import ExecResult, PortInfo
from automaton_min.conway.sandbox import Sandbox, is_local_sandbox_id
from automaton_min.runtime.sandboxes import RemoteSandbox, sandbox_for
from automaton_min.clock import to_iso
from automaton_min.errors import ConfigError, RuntimeFailure
from automaton_min.net.http import request
from automaton_min.net.resilient import CircuitBreaker, ResilientHttp
from automaton_min.store.db import open_database
from automaton_min.store.kv import get_value
from standins.conway_api import ConwayApi

SANDBOX = "sb-1"
ULID_CHARS = set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


@pytest.fixture
def api():
    with ConwayApi() as server:
        yield server


@pytest.fixture
def client(api: ConwayApi, clock) -> ConwayClient:
    return ConwayClient(api.url, api.api_key, send=request, now=clock, sandbox_id=SANDBOX)


@pytest.fixture
def db(tmp_path, clock):
    database = open_database(tmp_path / "state.db", now=clock)
    yield database
    database.close()


def _is_ulid(value: str | None) -> bool:
    return isinstance(value, str) and len(value) == 26 and set(value) <= ULID_CHARS


def _free_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class RecordingSend:
    """A ``send`` with ResilientHttp's call shape: takes ``idempotency_key`` and ``retry``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, method, url, *, json=None, headers=None, timeout=None, idempotency_key=None, retry=True):
        self.calls.append({"method": method, "url": url, "key": idempotency_key, "retry": retry, "headers": dict(headers or {})})
        headers = dict(headers or {})
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return request(method, url, json=json, headers=headers, timeout=timeout)


# --------------------------------------------------------------------------- auth and errors


def test_requests_carry_the_raw_key_and_a_bearer_key_is_refused(api: ConwayApi, client: ConwayClient) -> None:
    assert client.credits_balance() == 1234
    sent = api.requests_to("/v1/credits/balance")[0]
    assert sent.headers["Authorization"] == api.api_key
    bearer = request("GET", f"{api.url}/v1/credits/balance", headers={"Authorization": f"Bearer {api.api_key}"})
    assert bearer.status == 401


def test_a_wrong_key_is_a_401_error_that_never_shows_a_key(api: ConwayApi) -> None:
    wrong = "cnwy_k_" + "f" * 32
    with pytest.raises(ConwayError) as caught:
        ConwayClient(api.url, wrong, send=request).credits_balance()
    assert caught.value.status == 401
    assert str(caught.value) == "Conway API GET /v1/credits/balance -> 401: invalid API key"
    assert wrong not in str(caught.value) and wrong not in repr(ConwayClient(api.url, wrong, send=request))
    assert not caught.value.outage


def test_a_server_echoing_the_key_does_not_put_it_in_the_message(api: ConwayApi, client: ConwayClient) -> None:
    api.fail("/v1/credits/balance", 400, {"error": f"key {api.api_key} is suspended\nsecond line"})
    with pytest.raises(ConwayError) as caught:
        client.credits_balance()
    message = str(caught.value)
    assert api.api_key not in message and "[redacted]" in message
    assert "\n" not in message


def test_an_html_502_is_one_line_naming_the_page(api: ConwayApi, client: ConwayClient) -> None:
    api.fail("/v1/sandboxes", 502, "html")
    with pytest.raises(ConwayError) as caught:
        client.list_sandboxes()
    assert str(caught.value) == "Conway API GET /v1/sandboxes -> 502: an HTML page (502 Bad Gateway)"
    assert caught.value.status == 502 and caught.value.path == "/v1/sandboxes" and caught.value.outage
    assert isinstance(caught.value, RuntimeFailure)


def test_an_unreachable_api_is_a_conway_error_without_status() -> None:
    client = ConwayClient(_free_port_url(), "cnwy_k_secretsecret", send=request, timeout_s=2)
    with pytest.raises(ConwayError) as caught:
        client.list_sandboxes()
    assert caught.value.status is None and caught.value.outage
    assert "Conway API GET /v1/sandboxes failed" in str(caught.value)
    assert "cnwy_k_secretsecret" not in str(caught.value)


def test_a_404_is_not_retried(api: ConwayApi, client: ConwayClient) -> None:
    with pytest.raises(ConwayError) as caught:
        client.read_file("/root/missing.txt")
    assert caught.value.status == 404
    assert len(api.requests_to(f"/v1/sandboxes/{SANDBOX}/files/read")) == 1


def test_a_404_is_not_retried_by_a_send_that_can_retry(api: ConwayApi, clock) -> None:
    send = RecordingSend()
    client = ConwayClient(api.url, api.api_key, send=send, now=clock, sandbox_id=SANDBOX)
    with pytest.raises(ConwayError):
        client.remove_port(9999)
    assert len(send.calls) == 1 and len(api.requests) == 1


def test_sandbox_calls_without_a_sandbox_id_are_refused_before_any_request(api: ConwayApi) -> None:
    client = ConwayClient(api.url, api.api_key, send=request, sandbox_id="undefined")
    with pytest.raises(ConwayError, match="local mode"):
        client.exec("ls")
    assert api.requests == []


# --------------------------------------------------------------------------- credits


@pytest.mark.parametrize("field", ["balance_cents", "credits_cents"])
def test_balance_reads_either_field(api: ConwayApi, client: ConwayClient, field: str) -> None:
    api.balance_field = field
    api.balance_cents = 777
    assert client.credits_balance() == 777


def test_balance_prefers_balance_cents_over_credits_cents(api: ConwayApi, client: ConwayClient) -> None:
    api.balance_cents = 5
    api.balance_extra = {"credits_cents": 99}
    assert client.credits_balance() == 5
    api.balance_cents = None
    api.balance_extra = {"balance_cents": None, "credits_cents": 99}  # null falls through, as with ??
    assert client.credits_balance() == 99


def test_a_balance_answer_without_a_balance_is_an_error_not_zero(api: ConwayApi, client: ConwayClient) -> None:
    api.balance_cents = None
    with pytest.raises(ConwayError, match="no balance_cents or credits_cents"):
        client.credits_balance()


def test_a_negative_balance_is_kept(api: ConwayApi, client: ConwayClient) -> None:
    api.balance_cents = -40
    assert client.credits_balance() == -40


# --------------------------------------------------------------------------- last known balance


def _stored(db) -> dict:
    return orjson.loads(get_value(db, BALANCE_KEY))


def _updated_at(db) -> str:
    return db.scalar("SELECT updated_at FROM kv WHERE key = ?", (BALANCE_KEY,))


def test_a_good_balance_is_remembered(api: ConwayApi, db, clock) -> None:
    client = ConwayClient(api.url, api.api_key, send=request, now=clock, db=db)
    reading = client.credits()
    assert reading == CreditsReading(1234, clock.ms, True)
    assert _stored(db) == {"cents": 1234, "at": to_iso(clock.ms)}
    assert cached_credits(db) == CreditsReading(1234, clock.ms, False)


def test_an_unchanged_recent_balance_is_not_rewritten(api: ConwayApi, db, clock) -> None:
    client = ConwayClient(api.url, api.api_key, send=request, now=clock, db=db)
    client.credits_balance()
    first = _updated_at(db)
    clock.advance(9 * 60 * 1000)
    client.credits_balance()
    assert _updated_at(db) == first  # same value, 9 minutes later: no write
    clock.advance(2 * 60 * 1000)
    client.credits_balance()
    assert _updated_at(db) == to_iso(clock.ms)  # 11 minutes old: refreshed
    clock.advance(1000)
    api.balance_cents = 1200
    client.credits_balance()
    assert _stored(db) == {"cents": 1200, "at": to_iso(clock.ms)}  # changed: written at once


def test_an_outage_reads_the_cached_balance_marked_not_fresh(api: ConwayApi, db, clock) -> None:
    ConwayClient(api.url, api.api_key, send=request, now=clock, db=db).credits_balance()
    stored_at = clock.ms
    clock.advance(60_000)
    api.fail("/v1/credits/balance", 502, "html")
    restarted = ConwayClient(api.url, api.api_key, send=request, now=clock, db=db)  # a new process: only KV remembers
    reading = restarted.credits()
    assert (reading.cents, reading.at, reading.fresh) == (1234, stored_at, False)
    assert "502" in reading.error


def test_an_unreachable_api_reads_the_cached_balance(api: ConwayApi, db, clock) -> None:
    ConwayClient(api.url, api.api_key, send=request, now=clock, db=db).credits_balance()
    reading = ConwayClient(_free_port_url(), api.api_key, send=request, now=clock, db=db, timeout_s=2).credits()
    assert (reading.cents, reading.fresh) == (1234, False)


def test_the_in_memory_reading_is_newer_than_the_throttled_kv_one(api: ConwayApi, db, clock) -> None:
    client = ConwayClient(api.url, api.api_key, send=request, now=clock, db=db)
    client.credits_balance()
    clock.advance(5 * 60 * 1000)
    client.credits_balance()  # not written (unchanged, recent), but known in memory
    api.fail("/v1/credits/balance", 503)
    reading = client.credits()
    assert (reading.cents, reading.at, reading.fresh) == (1234, clock.ms, False)


def test_an_outage_without_a_cached_balance_is_an_error_never_zero(api: ConwayApi, db, clock) -> None:
    api.fail("/v1/credits/balance", 502, "html")
    client = ConwayClient(api.url, api.api_key, send=request, now=clock, db=db)
    with pytest.raises(ConwayError) as caught:
        client.credits()
    assert caught.value.status == 502
    assert get_value(db, BALANCE_KEY) is None


def test_a_refusal_is_not_papered_over_by_the_cache(api: ConwayApi, db, clock) -> None:
    ConwayClient(api.url, api.api_key, send=request, now=clock, db=db).credits_balance()
    with pytest.raises(ConwayError) as caught:
        ConwayClient(api.url, "cnwy_k_revoked_key_000", send=request, now=clock, db=db).credits()
    assert caught.value.status == 401


def test_a_malformed_balance_answer_falls_back_to_the_cache(api: ConwayApi, db, clock) -> None:
    client = ConwayClient(api.url, api.api_key, send=request, now=clock, db=db)
    client.credits_balance()
    api.balance_cents = None
    reading = client.credits()
    assert (reading.cents, reading.fresh) == (1234, False)


def test_an_unreadable_cached_value_is_ignored(db, clock) -> None:
    from automaton_min.store.kv import set_value

    set_value(db, BALANCE_KEY, "{not json", clock.ms)
    assert cached_credits(db) is None


# --------------------------------------------------------------------------- transfers


def test_transfer_sends_the_body_with_one_idempotency_key(api: ConwayApi, client: ConwayClient) -> None:
    result = client.transfer_credits("0xabc", 200, "for the child")
    assert result.status == "completed" and result.amount_cents == 200 and result.to_address == "0xabc"
    assert result.transfer_id.startswith("tr_") and result.balance_after_cents == 1034
    [sent] = api.requests_to("/v1/credits/transfer")
    assert sent.json() == {"to_address": "0xabc", "amount_cents": 200, "note": "for the child"}
    assert _is_ulid(sent.headers["Idempotency-Key"])
    assert api.requests_to("/v1/credits/transfers") == []


def test_transfer_falls_back_on_404_with_the_same_key(api: ConwayApi, client: ConwayClient) -> None:
    api.fail("/v1/credits/transfer", 404)
    api.transfer_fields = ("id", "new_balance_cents")
    result = client.transfer_credits("0xabc", 100)
    first, second = api.requests_to("/v1/credits/transfer")[0], api.requests_to("/v1/credits/transfers")[0]
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert _is_ulid(first.headers["Idempotency-Key"])
    assert second.json() == {"to_address": "0xabc", "amount_cents": 100}  # no note: none sent
    assert result.transfer_id.startswith("tr_") and result.balance_after_cents == 1134 and api.balance_cents == 1134


def test_transfer_passes_the_key_to_a_send_that_takes_it_and_turns_retries_off(api: ConwayApi, clock) -> None:
    api.fail("/v1/credits/transfer", 404)
    send = RecordingSend()
    ConwayClient(api.url, api.api_key, send=send, now=clock).transfer_credits("0xabc", 100)
    assert [c["url"].removeprefix(api.url) for c in send.calls] == ["/v1/credits/transfer", "/v1/credits/transfers"]
    assert send.calls[0]["key"] == send.calls[1]["key"] and _is_ulid(send.calls[0]["key"])
    assert all(c["retry"] is False and "Idempotency-Key" not in c["headers"] for c in send.calls)


def test_each_transfer_gets_its_own_key(api: ConwayApi, client: ConwayClient) -> None:
    client.transfer_credits("0xabc", 1)
    client.transfer_credits("0xabc", 1)
    keys = {r.headers["Idempotency-Key"] for r in api.requests_to("/v1/credits/transfer")}
    assert len(keys) == 2 and api.balance_cents == 1232


def test_transfer_errors_other_than_404_do_not_fall_back(api: ConwayApi, client: ConwayClient) -> None:
    with pytest.raises(ConwayError) as caught:
        client.transfer_credits("0xabc", 999_999)
    assert caught.value.status == 402 and "insufficient credits" in str(caught.value)
    assert api.requests_to("/v1/credits/transfers") == []


def test_transfer_404_on_both_paths_is_an_error(api: ConwayApi, client: ConwayClient) -> None:
    api.fail("/v1/credits/transfer", 404)
    api.fail("/v1/credits/transfers", 404)
    with pytest.raises(ConwayError, match="transfers -> 404.*transfer answered 404 too"):
        client.transfer_credits("0xabc", 5)


@pytest.mark.parametrize("amount", [0, -5, 1.5, True])
def test_transfer_refuses_bad_amounts_before_sending(api: ConwayApi, client: ConwayClient, amount) -> None:
    with pytest.raises(ValueError):
        client.transfer_credits("0xabc", amount)
    assert api.requests == []


# --------------------------------------------------------------------------- exec and files


def test_exec_posts_the_command_with_a_fresh_key_each_call(api: ConwayApi, client: ConwayClient) -> None:
    api.exec_reply = {"stdout": "hi\n", "stderr": "warn", "exit_code": 3}
    assert client.exec("echo hi", 5) == ExecResult("hi\n", "warn", 3)
    client.exec("true")
    first, second = api.requests_to(f"/v1/sandboxes/{SANDBOX}/exec")
    assert first.json() == {"command": "cd /root && echo hi", "timeout": 5000}
    assert second.json()["timeout"] == 30_000
    assert _is_ulid(first.headers["Idempotency-Key"]) and first.headers["Idempotency-Key"] != second.headers["Idempotency-Key"]


def test_exec_reads_exit_code_in_camel_case_and_defaults_to_minus_one(api: ConwayApi, client: ConwayClient) -> None:
    api.exit_code_field = "exitCode"
    api.exec_reply = {"stdout": "", "stderr": "", "exit_code": 7}
    assert client.exec("x").exit_code == 7
    api.exec_reply = {"stdout": "only output"}
    assert client.exec("x") == ExecResult("only output", "", -1)


def test_exec_turns_retries_off_and_passes_its_key(api: ConwayApi, clock) -> None:
    send = RecordingSend()
    ConwayClient(api.url, api.api_key, send=send, now=clock, sandbox_id=SANDBOX).exec("ls", 2)
    [call] = send.calls
    assert call["retry"] is False and _is_ulid(call["key"])


def test_exec_403_is_a_refusal_and_nothing_runs_locally(api: ConwayApi, client: ConwayClient, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    api.fail(f"/v1/sandboxes/{SANDBOX}/exec", 403, {"error": "exec is not allowed for this key"})
    with pytest.raises(ExecRefused) as caught:
        RemoteSandbox(client, SANDBOX).exec("touch ran-locally")
    assert caught.value.status == 403
    assert "exec is not allowed for this key" in str(caught.value) and "not run" in str(caught.value)
    assert not (tmp_path / "ran-locally").exists()
    assert len(api.requests_to(f"/v1/sandboxes/{SANDBOX}/exec")) == 1


@pytest.mark.parametrize("read_as", ["text", "json"])
def test_files_round_trip_with_an_encoded_path(api: ConwayApi, client: ConwayClient, read_as: str) -> None:
    api.read_as = read_as
    path = "/root/my dir/a&b?.txt"
    client.write_file(path, "héllo\nworld")
    assert api.files[(SANDBOX, path)] == "héllo\nworld"
    assert client.read_file(path) == "héllo\nworld"
    read = api.requests_to(f"/v1/sandboxes/{SANDBOX}/files/read")[0]
    assert read.query == "path=%2Froot%2Fmy%20dir%2Fa%26b%3F.txt"
    upload = api.requests_to(f"/v1/sandboxes/{SANDBOX}/files/upload/json")[0]
    assert upload.json() == {"path": path, "content": "héllo\nworld"}


@pytest.mark.parametrize("field", ["public_url", "publicUrl", "url"])
def test_ports_expose_and_remove(api: ConwayApi, client: ConwayClient, field: str) -> None:
    api.port_url_field = field
    assert client.expose_port(8080) == PortInfo(8080, f"https://8080-{SANDBOX}.life.conway.tech")
    assert api.requests_to(f"/v1/sandboxes/{SANDBOX}/ports/expose")[0].json() == {"port": 8080}
    client.remove_port(8080)
    assert api.requests_to(f"/v1/sandboxes/{SANDBOX}/ports/8080")[0].method == "DELETE"
    assert api.ports == {}


def test_a_per_call_sandbox_id_overrides_the_clients(api: ConwayApi, client: ConwayClient) -> None:
    api.sandboxes["sb-2"] = {"id": "sb-2"}
    client.write_file("/tmp/x", "y", sandbox_id="sb-2")
    assert api.files == {("sb-2", "/tmp/x"): "y"}


# --------------------------------------------------------------------------- sandboxes and models


def test_create_sandbox_sends_defaults_and_maps_the_answer(api: ConwayApi, client: ConwayClient) -> None:
    info = client.create_sandbox("child-1")
    assert api.requests_to("/v1/sandboxes")[0].json() == {"name": "child-1", "vcpu": 1, "memory_mb": 512, "disk_gb": 5}
    assert info.id in api.sandboxes and info.status == "provisioning" and (info.vcpu, info.memory_mb, info.disk_gb) == (1, 512, 5)
    client.create_sandbox("child-2", vcpu=2, memory_mb=1024, disk_gb=10, region="eu")
    assert api.requests_to("/v1/sandboxes")[1].json() == {"name": "child-2", "vcpu": 2, "memory_mb": 1024, "disk_gb": 10, "region": "eu"}


@pytest.mark.parametrize("shape", ["array", "object"])
def test_list_sandboxes_reads_both_shapes(api: ConwayApi, client: ConwayClient, shape: str) -> None:
    api.sandboxes_as = shape
    [info] = client.list_sandboxes()
    assert (info.id, info.status, info.region, info.memory_mb, info.terminal_url) == ("sb-1", "running", "eu", 512, "https://term.example/sb-1")


@pytest.mark.parametrize("key", ["data", "models"])
def test_list_models_drops_unavailable_and_reads_both_pricing_names(api: ConwayApi, client: ConwayClient, key: str) -> None:
    api.models_key = key
    models = {m.id: m for m in client.list_models()}
    assert set(models) == {"gpt-5.2", "claude-x", "bare"}
    assert (models["gpt-5.2"].provider, models["gpt-5.2"].input_per_million, models["gpt-5.2"].output_per_million) == ("openai", 1.75, 14.0)
    assert (models["claude-x"].provider, models["claude-x"].input_per_million, models["claude-x"].output_per_million) == ("anthropic", 3.0, 15.0)
    assert (models["bare"].provider, models["bare"].input_per_million) == ("unknown", 0.0)
    assert api.requests_to("/v1/models")[0].headers["Authorization"] == api.api_key


def test_list_models_failure_is_an_error_not_an_empty_list(api: ConwayApi, client: ConwayClient) -> None:
    api.fail("/v1/models", 500)
    with pytest.raises(ConwayError):
        client.list_models()


# --------------------------------------------------------------------------- choosing a sandbox


@pytest.mark.parametrize("value", [None, "", "  ", "undefined", "null"])
def test_empty_sandbox_ids_mean_local_mode(value, tmp_path) -> None:
    assert is_local_sandbox_id(value)
    sandbox = sandbox_for({"sandboxId": value}, workspace=tmp_path / "ws")
    assert isinstance(sandbox, LocalSandbox) and isinstance(sandbox, Sandbox)
    assert sandbox.workspace == tmp_path / "ws"


def test_a_sandbox_id_means_remote_mode(api: ConwayApi) -> None:
    sandbox = sandbox_for({"sandboxId": SANDBOX, "conwayApiUrl": api.url, "conwayApiKey": api.api_key})
    assert isinstance(sandbox, RemoteSandbox) and isinstance(sandbox, Sandbox)
    assert sandbox.exec("pwd").stdout == "ran: cd /root && pwd\n"


def test_remote_mode_without_a_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no Conway API key"):
        sandbox_for({"sandboxId": SANDBOX})


# --------------------------------------------------------------------------- over the resilient layer


def resilient(waits: list[float], breaker: CircuitBreaker | None = None, **options: Any):
    """``conway_send`` with its backoff recorded instead of slept, and a breaker of the test's own."""
    return conway_send(sleep=waits.append, breaker=breaker or CircuitBreaker(service="conway"), **options)


def test_the_default_send_is_the_resilient_layer_with_the_conway_breaker(api: ConwayApi) -> None:
    layer = ConwayClient(api.url, api.api_key).send.__self__
    assert isinstance(layer, ResilientHttp) and layer.service == "conway" and layer.max_retries == 3


def test_reads_are_retried_through_passing_failures(api: ConwayApi, clock) -> None:
    waits: list[float] = []
    api.fail("/v1/credits/balance", 503, times=2)
    client = ConwayClient(api.url, api.api_key, send=resilient(waits), now=clock)
    assert client.credits_balance() == 1234
    assert len(waits) == 2 and len(api.requests_to("/v1/credits/balance")) == 3


def test_transfers_exec_and_unkeyed_writes_are_sent_once(api: ConwayApi, clock) -> None:
    waits: list[float] = []
    for path in ("/v1/credits/transfer", f"/v1/sandboxes/{SANDBOX}/exec", f"/v1/sandboxes/{SANDBOX}/files/upload/json"):
        api.fail(path, 503)
    client = ConwayClient(api.url, api.api_key, send=resilient(waits), now=clock, sandbox_id=SANDBOX)
    for attempt in (lambda: client.transfer_credits("0xabc", 100), lambda: client.exec("ls"),
                    lambda: client.write_file("a.txt", "x")):
        with pytest.raises(ConwayError) as caught:
            attempt()
        assert caught.value.status == 503
    assert waits == [] and len(api.requests) == 3


def test_repeated_failures_open_the_breaker_and_later_calls_send_nothing(api: ConwayApi, clock) -> None:
    breaker = CircuitBreaker(threshold=5, open_for_s=60, service="conway")
    api.fail("/v1/sandboxes", 502)
    client = ConwayClient(api.url, api.api_key, send=resilient([], breaker, max_retries=0), now=clock)
    for _ in range(5):
        with pytest.raises(ConwayError):
            client.list_sandboxes()
    sent = len(api.requests)
    with pytest.raises(ConwayError) as caught:
        client.credits_balance()
    assert len(api.requests) == sent and breaker.state == "open"
    assert caught.value.status is None and caught.value.outage and "circuit breaker open" in str(caught.value)


def test_the_stand_ins_directory_sandboxes_run_commands_for_real(tmp_path) -> None:
    """The children's tests rest on this: a sandbox the API creates is a directory, its commands really run there."""
    with ConwayApi(root=tmp_path / "sandboxes") as real:
        client = ConwayClient(real.url, real.api_key)
        sandbox = client.create_sandbox("automaton-child-c1")
        home = real.directory(sandbox.id)
        assert home == tmp_path / "sandboxes" / sandbox.id and sandbox.status == "running"
        client.write_file("/root/.automaton/genesis.json", '{"name": "kid"}', sandbox_id=sandbox.id)
        assert (home / "root/.automaton/genesis.json").read_text() == '{"name": "kid"}'
        ran = client.exec("cat .automaton/genesis.json; echo; echo $HOME; pwd; uname -m; echo made > out; exit 3", 10,
                          sandbox_id=sandbox.id)
        assert ran.exit_code == 3 and ran.stdout.splitlines() == [
            '{"name": "kid"}', str(home / "root"), str(home / "root"), os.uname().machine]
        assert client.read_file("/root/out", sandbox_id=sandbox.id) == "made\n"
        slow = client.exec("sleep 5", 0.2, sandbox_id=sandbox.id)
        assert slow.exit_code == 124
        assert client.exec("echo x", 5, sandbox_id="sb-1").stdout == "ran: cd /root && echo x\n"  # scripted one
