"""The remote parts of a run (heartbeat/parts.py): off by the config, found unreachable by the start-up probe against
real loopback sockets, the back-off, and what ``status`` reads back from a real state.db."""

from __future__ import annotations

import logging
import socket

from automaton_min.config import config_from
from automaton_min.heartbeat.parts import BACKOFF_MAX_MS, PartStates, backoff_ms, probe, stored_states, turn_off_hint
from standins.loopback_http import LoopbackServer


LOCAL_ONLY_HINT = ("to run local only (no social relay, no RPC node, nothing paid): automaton-min config set localOnly"
                   " true")


def closed_port_url() -> str:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{spare.getsockname()[1]}"


def test_the_parts_follow_the_config() -> None:
    local = PartStates.of(config_from({"socialRelayUrl": "", "rpcUrl": "http://127.0.0.1:9"}))
    assert local.parts == {"conway": None, "relay": None, "rpc": "http://127.0.0.1:9"}
    assert local.off_tasks() == {"check_credits": "the Conway API is off (no conwayApiKey)",
                                 "check_social_inbox": "the social relay is off (socialRelayUrl is empty)"}
    defaults = PartStates.of(config_from({"conwayApiKey": "cnwy_k_x"}))
    assert defaults.parts == {"conway": "https://api.conway.tech", "relay": "https://social.conway.tech",
                              "rpc": "https://mainnet.base.org"}
    assert defaults.off_tasks() == {} and defaults.banner() == "all on"


def test_the_probe_marks_what_does_not_answer_without_a_log_line_and_the_banner_names_it(db, clock, caplog) -> None:
    closed = closed_port_url()
    with LoopbackServer({}) as relay:  # every path answers 404: an answer all the same
        states = PartStates({"conway": None, "relay": relay.url, "rpc": closed})
        with caplog.at_level("DEBUG", logger="automaton_min"):
            probe(states, db, clock())
        assert len(relay.requests) == 1
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    assert states.banner() == (f"the Conway API off (no conwayApiKey); the RPC node unreachable at {closed} (rpcUrl);"
                               f" {LOCAL_ONLY_HINT}")
    stored = stored_states(db, config_from({"socialRelayUrl": relay.url, "rpcUrl": closed}))
    assert {name: s["state"] for name, s in stored.items()} == {"conway": "off", "relay": "on", "rpc": "unreachable"}
    assert stored["rpc"]["failures"] == 1 and stored["rpc"]["nextTryAt"]


def test_a_part_is_said_when_it_goes_down_and_when_it_answers_and_its_back_off_grows_then_starts_over(
        db, clock, caplog) -> None:
    states = PartStates({"rpc": "http://127.0.0.1:9"})
    with caplog.at_level("INFO", logger="automaton_min"):
        waits = [states.unreachable(db, "rpc", "refused", clock()) for _ in range(8)]
        states.answered(db, "rpc", clock())
        states.answered(db, "rpc", clock())
        again = states.unreachable(db, "rpc", "refused", clock())
    assert waits == [60_000, 120_000, 240_000, 480_000, 960_000, BACKOFF_MAX_MS, BACKOFF_MAX_MS, BACKOFF_MAX_MS]
    assert again == backoff_ms(1) == 60_000
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "the RPC node (rpcUrl) does not answer", "the RPC node (rpcUrl) answers again",
        "the RPC node (rpcUrl) does not answer"]


def test_status_forgets_an_unreachable_part_whose_url_changed_since(db, clock) -> None:
    states = PartStates({"conway": None, "relay": "http://127.0.0.1:9", "rpc": "http://127.0.0.1:9"})
    states.unreachable(db, "relay", "refused", clock(), say=False)
    moved = stored_states(db, config_from({"socialRelayUrl": "http://127.0.0.1:8", "rpcUrl": "http://127.0.0.1:9"}))
    assert moved["relay"] == {"state": "on", "url": "http://127.0.0.1:8"}
    off = stored_states(db, config_from({"socialRelayUrl": "", "rpcUrl": "http://127.0.0.1:9"}))
    assert off["relay"]["state"] == "off"


def test_an_unreachable_relay_is_said_with_how_to_turn_it_off_and_the_rpc_node_with_local_only(db, clock) -> None:
    states = PartStates({"conway": None, "relay": "http://127.0.0.1:9", "rpc": "http://127.0.0.1:8"})
    states.unreachable(db, "relay", "refused", clock(), say=False)
    assert states.banner() == ("the Conway API off (no conwayApiKey); the social relay unreachable at"
                               " http://127.0.0.1:9 (socialRelayUrl); to turn the social relay off: automaton-min"
                               ' config set socialRelayUrl ""')
    states.unreachable(db, "rpc", "refused", clock(), say=False)  # local only turns both off: one hint
    assert states.banner() == ("the Conway API off (no conwayApiKey); the social relay unreachable at"
                               " http://127.0.0.1:9 (socialRelayUrl); the RPC node unreachable at http://127.0.0.1:8"
                               f" (rpcUrl); {LOCAL_ONLY_HINT}")
    stored = stored_states(db, config_from({"socialRelayUrl": "http://127.0.0.1:9", "rpcUrl": "http://127.0.0.1:8"}))
    assert turn_off_hint(stored) == LOCAL_ONLY_HINT
    states.answered(db, "relay", clock())
    states.answered(db, "rpc", clock())
    assert "to " not in states.banner()
