"""Every inference call has one deadline for all its attempts, and a stop does not wait for a hung server.
The server really hangs (tests/standins/model_servers.py ``Hang``); the tests wait on events, never sleep."""

from __future__ import annotations

import threading

import pytest

from automaton_min.config import DEFAULTS, deep_merge
from automaton_min.inference.deadline import InferenceCancelled, InferenceTimeout, call_with_deadline
from automaton_min.inference.providers import Providers
from automaton_min.inference.registry import ModelRegistry
from automaton_min.inference.router import Router
from automaton_min.inference.types import Message
from automaton_min.net.http import request
from automaton_min.net.resilient import CircuitBreaker, ResilientHttp
from standins.loopback_http import Reply
from standins.model_servers import Hang, OpenAIServer

MESSAGES = (Message("system", "You are ada."), Message("user", "Hello"))


def router_for(db, clock, server: OpenAIServer, send_for, deadline_s: float) -> Router:
    cfg = deep_merge(DEFAULTS, {"inferenceModel": "gemma", "openaiBaseUrl": server.url})
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    return Router(db, registry, cfg, Providers(cfg, send_for), session_id="s", now=clock,
                  timeouts={"agent_turn": deadline_s})


def retrying(service: str):
    """A resilient send with no backoff, so only the deadline bounds the retries."""
    client = ResilientHttp(service, breaker=CircuitBreaker(service=service), base_delay_s=0.0, max_retries=5)
    return lambda method, url, **kw: client.request(method, url, idempotency_key="k1", deadline_s=kw.get("timeout"), **kw)


def test_a_hung_server_ends_the_call_at_the_deadline_across_all_attempts(db, clock) -> None:
    hang = Hang()
    with OpenAIServer(mode="llamacpp") as server:
        server.script(Reply(503, {"error": "busy"}), Reply(502, {"error": "gateway"}), hang)
        try:
            with pytest.raises(InferenceTimeout, match="within 0.5 s"):
                router_for(db, clock, server, retrying, 0.5).route(MESSAGES, tier="normal", turn_id="t")
            assert hang.arrived.is_set() and not hang.released.is_set()  # ended while the server still hung
        finally:
            hang.release()
    assert len(server.requests) == 3
    assert db.scalar("SELECT COUNT(*) FROM inference_costs") == 0


def test_a_stop_ends_the_wait_for_a_hung_server(db, clock) -> None:
    hang, stop, outcome = Hang(), threading.Event(), {}
    with OpenAIServer(mode="llamacpp") as server:
        server.script(hang)
        router = router_for(db, clock, server, lambda service: request, 600)

        def turn() -> None:
            try:
                router.route(MESSAGES, tier="normal", turn_id="t", cancel=stop)
            except InferenceCancelled as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=turn)
        worker.start()
        try:
            assert hang.arrived.wait(30)
            stop.set()
            worker.join(30)
            assert not worker.is_alive() and not hang.released.is_set()
        finally:
            hang.release()
    assert "stopped while waiting for gemma" in str(outcome["error"])


def test_results_and_errors_pass_through_the_deadline() -> None:
    assert call_with_deadline(lambda: 42, 5) == 42
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["missing"], 5)


def test_an_error_raised_once_the_deadline_passed_is_the_deadline() -> None:
    """The HTTP layer's own deadline may fire before the waiting caller wakes: still a timeout, not an outage."""
    now = [0.0]

    def late_failure() -> None:
        now[0] = 5.0  # the deadline of 1 s has passed by the time the error comes back
        raise ConnectionError("timed out (the whole request)")

    with pytest.raises(InferenceTimeout, match="within 1 s") as caught:
        call_with_deadline(late_failure, 1, monotonic=lambda: now[0])
    assert isinstance(caught.value.__cause__, ConnectionError)
