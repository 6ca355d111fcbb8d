"""Freshness from what is signed (issue 32, item 1): the signed time against the agent's clock, replay keys that
outlive the window, the clock the agent will not trust, and a genuine signer told why its message was refused."""

from __future__ import annotations

import orjson
import pytest

from automaton_min.clock import to_iso
from automaton_min.config import config_from
from automaton_min.heartbeat.social_inbox import CLOCK_KEY, check_social_inbox
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.observe.clock_trust import EARLIEST_MS, HIGH_WATER_KEY, ClockTrust
from automaton_min.social.intake import REPLAY_KEY_TTL_MS, refusals
from automaton_min.social.protocol import ACCEPT_WINDOW_MS
from automaton_min.store import inbox
from automaton_min.store.kv import get_value, set_value
from test_social_relay import AGENT, AGENT_KEY, CREATOR, CREATOR_KEY, agent, config, from_creator, poll_into, relay  # noqa: F401

DAY_MS = 86_400_000


def trust(service: str | None = None, synced: bool = False) -> ClockTrust:
    return ClockTrust(daemon=lambda: service, synced=lambda: synced)


def heartbeat(db, agent, clock, clock_trust: ClockTrust) -> str:
    ctx = TaskContext(db, config(), None, clock, "normal", AGENT, relay=agent, clock_trust=clock_trust)
    return check_social_inbox(ctx).summary


def test_a_clock_is_believed_only_when_nothing_says_it_is_wrong(db, clock) -> None:
    assert trust(synced=True).reading(db, clock()).why == "synchronized"
    assert trust().reading(db, clock()).trusted  # a VM with no time service takes its host's clock
    waiting = trust("systemd-timesyncd").reading(db, clock())
    assert not waiting.trusted and "systemd-timesyncd has not synchronized the clock since boot" in waiting.why
    assert trust("systemd-timesyncd", synced=True).reading(db, clock()).trusted
    early = trust(synced=True).reading(db, EARLIEST_MS - 1)
    assert not early.trusted and "before this release was made" in early.why
    set_value(db, HIGH_WATER_KEY, to_iso(clock() + DAY_MS), clock())  # it saw tomorrow: this clock went back
    assert not trust().reading(db, clock()).trusted
    assert trust(synced=True).reading(db, clock()).trusted  # unless NTP says this is the time


def test_the_time_seen_is_written_at_most_once_an_hour(db, clock) -> None:
    ClockTrust.note(db, clock())
    first = get_value(db, HIGH_WATER_KEY)
    ClockTrust.note(db, clock() + 3_599_999)
    assert get_value(db, HIGH_WATER_KEY) == first
    ClockTrust.note(db, clock() + 3_600_000)
    assert get_value(db, HIGH_WATER_KEY) == to_iso(clock() + 3_600_000)


def test_a_pi_booted_a_day_behind_waits_for_ntp_then_takes_the_order_sent_while_it_was_off(
        db, agent, relay, clock) -> None:
    order = from_creator(relay, "water the plants", signed_at_ms=clock())
    behind = clock() - DAY_MS  # the time saved at shutdown, as a Pi without a battery clock boots with
    summary = heartbeat(db, agent, lambda: behind, trust("systemd-timesyncd"))
    assert summary.startswith("relay poll waits: systemd-timesyncd has not synchronized")
    assert relay.read_upto == {} and get_value(db, CLOCK_KEY)  # not even polled: nothing was judged
    assert "future" not in orjson.loads(get_value(db, "social_dropped") or "{}")
    summary = heartbeat(db, agent, clock, trust("systemd-timesyncd", synced=True))
    assert summary.startswith("1 stored") and inbox.get_message(db, order["id"]) is not None
    assert get_value(db, CLOCK_KEY) is None


def test_no_expiry_of_a_replay_key_reopens_a_message(db, agent, relay, clock) -> None:
    first = from_creator(relay, "pay the invoice")
    assert [m.id for m in poll_into(db, agent, clock).stored] == [first["id"]]
    assert REPLAY_KEY_TTL_MS > ACCEPT_WINDOW_MS
    # while fresh its key holds; the key outlives the window, and once gone the message's age refuses it
    for later, reason in ((ACCEPT_WINDOW_MS - 1, "replay"), (REPLAY_KEY_TTL_MS + 1, "replay"),
                          (REPLAY_KEY_TTL_MS + 2, "stale")):
        clock.advance(later - (clock() - orjson_ms(first["signedAt"])))
        relay.inject({k: v for k, v in first.items() if k not in ("id", "createdAt")})
        report = poll_into(db, agent, clock)
        assert not report.stored and report.dropped == {reason: 1}, later


def orjson_ms(iso: str) -> int:
    from automaton_min.clock import from_iso

    return from_iso(iso)


def test_a_refused_signer_is_told_three_times_an_hour_and_the_refusals_are_kept(db, agent, relay, clock) -> None:
    for n in range(5):
        from_creator(relay, f"old order {n}", signed_at_ms=clock() - 40 * DAY_MS)
    heartbeat(db, agent, clock, trust(synced=True))
    told = [m for m in relay.log if m["from"] == AGENT.lower()]
    assert [m["to"] for m in told] == [CREATOR.lower()] * 3
    assert all("more than 7 days before my clock" in m["content"] for m in told)
    assert [r["reason"] for r in refusals(db)] == ["stale"] * 5
    from_creator(relay, "from tomorrow", signed_at_ms=clock() + DAY_MS)
    clock.advance(3_600_000)
    heartbeat(db, agent, clock, trust(synced=True))
    told = [m for m in relay.log if m["from"] == AGENT.lower()]
    assert len(told) == 4 and "ahead of my clock" in told[3]["content"] and len(refusals(db)) == 6


@pytest.mark.parametrize("field", ["createdAt", "created_at"])
def test_the_relays_created_at_is_nobodys_signature(db, agent, relay, clock, field) -> None:
    message = relay.signed_message(CREATOR_KEY, CREATOR, AGENT, "buy", signed_at_ms=clock() - 31 * DAY_MS)
    relay.inject({**message, field: message["signedAt"]})
    assert poll_into(db, agent, clock).dropped == {"stale": 1}
    fresh = relay.signed_message(CREATOR_KEY, CREATOR, AGENT, "sell", signed_at_ms=clock() - 2 * DAY_MS)
    relay.inject({**fresh, field: to_iso(clock() - 40 * DAY_MS)})  # an odd createdAt does not refuse a fresh one
    assert len(poll_into(db, agent, clock).stored) == 1


def test_strangers_refused_for_their_time_are_recorded_but_never_answered(db, agent, relay, clock) -> None:
    """Keys cost nothing: were every refused signer answered, 120 fresh keys would spend the agent's 100 outbound
    messages an hour (its calls for help among them) in one poll."""
    from eth_account import Account

    for n in range(30):
        key = bytes([n + 0x40]) * 32  # none of the test keys (0x11, 0x22, 0x33)
        relay.inject(relay.signed_message(key, Account.from_key(key).address, AGENT, f"old {n}",
                                          signed_at_ms=clock() - 30 * DAY_MS))
    from_creator(relay, "an old order", signed_at_ms=clock() - 30 * DAY_MS)
    heartbeat(db, agent, clock, trust(synced=True))
    told = [m for m in relay.log if m["from"] == AGENT.lower()]
    assert [m["to"] for m in told] == [CREATOR.lower()] and len(refusals(db)) == 20  # the last 20 kept
    assert db.scalar("SELECT COUNT(*) FROM social_outbound") == 1


def test_a_time_service_counts_when_it_runs_or_when_processes_are_hidden_and_its_state_is_there(
        tmp_path, monkeypatch) -> None:
    """Under the unit (ProtectProc=invisible) chronyd's process cannot be seen: its directory stands for it. Where
    processes can be seen, a service installed but not running (its directory left behind) is none."""
    from automaton_min.observe import clock_trust

    state = tmp_path / "chrony"
    state.mkdir()
    monkeypatch.setattr(clock_trust, "SYNC_DAEMONS", {"chronyd": (str(state),)})
    monkeypatch.setattr(clock_trust, "_running_names", lambda: frozenset({"bash", "python3"}))
    assert clock_trust.sync_daemon() is None  # installed, not running
    monkeypatch.setattr(clock_trust, "_running_names", lambda: frozenset({"chronyd"}))
    assert clock_trust.sync_daemon() == "chronyd"
    monkeypatch.setattr(clock_trust, "_running_names", lambda: frozenset())  # none seen: the directory is no proof
    assert clock_trust.sync_daemon() is None
    monkeypatch.setattr(clock_trust, "_running_names", lambda: None)  # others' processes hidden
    assert clock_trust.sync_daemon() == "chronyd"
    state.rmdir()
    assert clock_trust.sync_daemon() is None


def test_a_clock_set_by_hand_is_believed_when_the_config_says_so(db, clock) -> None:
    from automaton_min.config import config_from

    waiting = ClockTrust(daemon=lambda: "systemd-timesyncd", synced=lambda: False)
    assert not waiting.reading(db, clock()).trusted
    told = ClockTrust.of(config_from({"name": "ada", "trustSystemClock": True}))
    assert told.reading(db, clock()).trusted and not told.reading(db, EARLIEST_MS - 1).trusted


def test_a_clock_that_ran_ahead_cannot_reopen_what_its_expired_keys_guarded(db, agent, relay, clock) -> None:
    """A clock believed 9 days ahead (trustSystemClock, or a stepped NTP) expires every replay key; put right, the
    relay serves yesterday's order again under a new id. Staleness counts from the latest time ever seen."""
    order = from_creator(relay, "pay the supplier", signed_at_ms=clock() - DAY_MS)
    assert len(poll_into(db, agent, clock).stored) == 1
    ahead = clock() + 9 * DAY_MS
    set_value(db, HIGH_WATER_KEY, to_iso(ahead), ahead)
    poll_into(db, agent, lambda: ahead)  # the keys expire by the clock that ran ahead
    relay.inject({k: v for k, v in order.items() if k not in ("id", "createdAt")})
    report = poll_into(db, agent, clock)  # the clock put right
    assert not report.stored and report.dropped == {"stale": 1}
