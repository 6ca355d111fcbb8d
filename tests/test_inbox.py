"""The inbox state machine on a real state.db: dedup, claims, retries, crashes, exactly-once, retention.

Every assertion is about what is stored in ``inbox_messages`` (and ``turns``) afterwards.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from automaton_min.clock import is_stored_format, to_iso
from automaton_min.store.db import Database, open_database
from automaton_min.store.inbox import (
    DEFAULT_MAX_RETRIES,
    POISON_CRASHES,
    CLAIMABLE_SQL,
    InboxMessage,
    claim,
    get_message,
    insert_message,
    mark_processed,
    prune_processed,
    reclaim_stale,
    return_in_flight,
    release_after_failed_turn,
)
from automaton_min.store.turns import StoredTurn, count_turns, insert_turn
from tests.fixtures.reference_v11 import build_reference_v3

SENDER = "0xAbC0000000000000000000000000000000000001"
MINUTE = 60_000


def unprocessed_count(db: "Database") -> int:
    """Messages still to handle: ``received`` or ``in_progress`` (``failed`` ones are not counted)."""
    return int(db.scalar(
        "SELECT COUNT(*) FROM inbox_messages WHERE processed_at IS NULL AND status IN ('received', 'in_progress')",
        default=0,
    ))


def rows(db: Database) -> dict[str, tuple]:
    """id -> (status, retry_count, processed_at) for every stored message."""
    return {r[0]: r[1:] for r in db.query("SELECT id, status, retry_count, processed_at FROM inbox_messages")}


def statuses(db: Database) -> dict[str, str]:
    return {k: v[0] for k, v in rows(db).items()}


def add(db: Database, clock, *ids: str, step_ms: int = 1000) -> None:
    for id_ in ids:
        assert insert_message(db, id_, SENDER, f"text of {id_}", received_at_ms=clock())
        clock.advance(step_ms)


# --------------------------------------------------------------------------- insert


def test_insert_stores_every_field_and_dedups_by_id(db: Database, clock) -> None:
    assert insert_message(db, "m1", SENDER, "hello", raw_content='{"text":"hello"}', to_address="0xme",
                          reply_to="m0", received_at_ms=clock()) is True
    # The relay delivers the same message again, even with other content: nothing changes.
    clock.advance(MINUTE)
    assert insert_message(db, "m1", "0xother", "changed", received_at_ms=clock()) is False
    assert db.scalar("SELECT COUNT(*) FROM inbox_messages") == 1
    assert get_message(db, "m1") == InboxMessage(
        "m1", SENDER, "hello", '{"text":"hello"}', "0xme", "m0", to_iso(clock() - MINUTE), None, "received", 0, 3)
    assert get_message(db, "nope") is None
    assert unprocessed_count(db) == 1


def test_a_processed_message_delivered_again_is_not_handled_again(db: Database, clock) -> None:
    add(db, clock, "m1")
    mark_processed(db, [m.id for m in claim(db, now_ms=clock())], clock())
    assert insert_message(db, "m1", SENDER, "again", received_at_ms=clock()) is False
    assert claim(db, now_ms=clock()) == []
    assert statuses(db) == {"m1": "processed"}


# --------------------------------------------------------------------------- claim


def test_claim_takes_the_oldest_first_up_to_the_limit(db: Database, clock) -> None:
    # Inserted out of time order: the claim follows received_at, not insertion order.
    base = clock()
    for id_, offset in (("c", 3), ("a", 1), ("d", 4), ("b", 2), ("e", 5)):
        insert_message(db, id_, SENDER, id_, received_at_ms=base + offset * MINUTE)

    first = claim(db, 2, now_ms=clock())
    assert [m.id for m in first] == ["a", "b"]
    assert all(m.status == "in_progress" and m.retry_count == 1 for m in first)
    assert statuses(db) == {"a": "in_progress", "b": "in_progress", "c": "received", "d": "received", "e": "received"}

    # In-progress rows are skipped by the next claim.
    assert [m.id for m in claim(db, 10, now_ms=clock())] == ["c", "d", "e"]
    assert claim(db, 10, now_ms=clock()) == []
    assert claim(db, 0, now_ms=clock()) == []
    assert unprocessed_count(db) == 5


def test_claim_on_an_empty_inbox(db: Database, clock) -> None:
    assert claim(db, now_ms=clock()) == []
    assert unprocessed_count(db) == 0


# --------------------------------------------------------------------------- the state machine


def test_success_marks_processed_with_the_time_in_the_stored_format(db: Database, clock) -> None:
    add(db, clock, "m1", "m2")
    claimed = claim(db, now_ms=clock())
    clock.advance(1234)
    assert mark_processed(db, [m.id for m in claimed], clock()) == 2
    assert rows(db) == {"m1": ("processed", 1, to_iso(clock())), "m2": ("processed", 1, to_iso(clock()))}
    assert all(is_stored_format(v) for (v,) in db.query("SELECT received_at FROM inbox_messages"))
    assert unprocessed_count(db) == 0
    # Marking again, or an empty list, changes nothing.
    assert mark_processed(db, ["m1"], clock() + 1) == 0
    assert mark_processed(db, [], clock()) == 0
    assert rows(db)["m1"] == ("processed", 1, to_iso(clock()))


def test_only_claimed_messages_can_be_marked_processed(db: Database, clock) -> None:
    add(db, clock, "m1")
    assert mark_processed(db, ["m1"], clock()) == 0
    assert rows(db) == {"m1": ("received", 0, None)}


def test_a_message_is_tried_three_times_then_failed(db: Database, clock) -> None:
    add(db, clock, "poison", "fine")
    for attempt in (1, 2, 3):
        claimed = claim(db, now_ms=clock())
        assert [(m.id, m.retry_count) for m in claimed] == [("poison", attempt), ("fine", attempt)]
        released, failed = release_after_failed_turn(db, [m.id for m in claimed])
        expected = "received" if attempt < 3 else "failed"
        assert (released, failed) == ((2, 0) if attempt < 3 else (0, 2))
        assert rows(db) == {"poison": (expected, attempt, None), "fine": (expected, attempt, None)}
    # Out of retries: never claimed again, no longer counted as unprocessed.
    assert claim(db, now_ms=clock()) == []
    assert unprocessed_count(db) == 0


def test_a_retry_that_succeeds_is_processed(db: Database, clock) -> None:
    add(db, clock, "m1")
    release_after_failed_turn(db, [m.id for m in claim(db, now_ms=clock())])
    release_after_failed_turn(db, [m.id for m in claim(db, now_ms=clock())])
    third = claim(db, now_ms=clock())
    assert [m.retry_count for m in third] == [3]
    mark_processed(db, ["m1"], clock())
    assert rows(db) == {"m1": ("processed", 3, to_iso(clock()))}


def test_release_touches_only_in_progress_rows_it_names(db: Database, clock) -> None:
    add(db, clock, "a", "b", "c")
    claim(db, 2, now_ms=clock())               # a, b in progress
    mark_processed(db, ["a"], clock())
    assert release_after_failed_turn(db, ["a", "b", "c", "ghost"]) == (1, 0)
    assert statuses(db) == {"a": "processed", "b": "received", "c": "received"}
    assert release_after_failed_turn(db, []) == (0, 0)


def test_a_lower_max_retries_on_a_row_is_honoured(db: Database, clock) -> None:
    add(db, clock, "once")
    db.execute("UPDATE inbox_messages SET max_retries = 1 WHERE id = 'once'")
    assert [m.max_retries for m in claim(db, now_ms=clock())] == [1]
    assert release_after_failed_turn(db, ["once"]) == (0, 1)
    assert statuses(db) == {"once": "failed"}


# --------------------------------------------------------------------------- crash recovery


def test_rows_left_in_progress_by_a_crash_are_reclaimed_at_start(home, clock) -> None:
    home.ensure()
    path = home.default_db_path
    crashed = open_database(path, now=clock)
    add(crashed, clock, "fresh", "tired", "waiting")
    crashed.execute("UPDATE inbox_messages SET retry_count = 2 WHERE id = 'tired'")
    assert [m.id for m in claim(crashed, 2, now_ms=clock())] == ["fresh", "tired"]
    crashed.close()  # the process dies here: no release, no ack

    with open_database(path, now=clock) as db:
        assert statuses(db) == {"fresh": "in_progress", "tired": "in_progress", "waiting": "received"}
        assert reclaim_stale(db) == 2
        # A crash is not a try: "tired" gets its third try back, and the crash is counted apart.
        assert rows(db) == {"fresh": ("received", 0, None), "tired": ("received", 2, None), "waiting": ("received", 0, None)}
        assert crash_counts(db) == {"fresh": 1, "tired": 1, "waiting": 0}
        assert reclaim_stale(db) == 0
        assert [m.id for m in claim(db, now_ms=clock())] == ["fresh", "tired", "waiting"]


def crash_counts(db: Database) -> dict[str, int]:
    return dict(db.query("SELECT id, crash_count FROM inbox_messages"))


def test_a_message_in_flight_at_every_crash_ends_failed_after_the_poison_limit(db: Database, clock) -> None:
    add(db, clock, "poison", "other")
    for crash in range(1, POISON_CRASHES + 1):
        assert [m.id for m in claim(db, 1, now_ms=clock())] == ["poison"]
        assert reclaim_stale(db) == 1  # the process died with it in flight, every time
        expected = "failed" if crash == POISON_CRASHES else "received"
        assert rows(db)["poison"] == (expected, 0, None), crash
    assert crash_counts(db) == {"poison": POISON_CRASHES, "other": 0}
    assert [m.id for m in claim(db, now_ms=clock())] == ["other"]  # the poison no longer blocks the inbox


def test_messages_of_a_turn_the_disk_refused_go_back_uncounted(db: Database, clock) -> None:
    add(db, clock, "m")
    for _ in range(DEFAULT_MAX_RETRIES + 2):  # more than its tries: none of them is counted
        claim(db, now_ms=clock())
        assert return_in_flight(db) == 1
    assert rows(db)["m"] == ("received", 0, None) and crash_counts(db) == {"m": 0}


def test_failed_means_tries_that_failed_not_crashes(db: Database, clock) -> None:
    add(db, clock, "m")
    for _ in range(POISON_CRASHES - 1):  # crashes below the poison limit never make it failed
        claim(db, now_ms=clock())
        reclaim_stale(db)
    for attempt in range(1, DEFAULT_MAX_RETRIES + 1):  # then three turns that fail
        assert [m.retry_count for m in claim(db, now_ms=clock())] == [attempt]
        release_after_failed_turn(db, ["m"])
    assert rows(db)["m"] == ("failed", DEFAULT_MAX_RETRIES, None)


# --------------------------------------------------------------------------- exactly once


class ToolCrash(RuntimeError):
    pass


def run_turn(db: Database, clock, claimed: list[InboxMessage], *, crash: bool) -> str:
    """A turn as the loop persists it: the turn row and the inbox ack in ONE transaction."""
    turn_id = f"turn-{clock()}"
    with db.transaction():
        insert_turn(db, StoredTurn(turn_id, to_iso(clock()), "running", claimed[0].content, "inbox", "thinking"))
        assert mark_processed(db, [m.id for m in claimed], clock()) == len(claimed)
        # ... tool execution happened; the failure strikes before the commit:
        if crash:
            raise ToolCrash("the process fails between tool execution and commit")
    return turn_id


def test_a_failure_before_commit_leaves_no_half_turn_and_the_message_back_in_received(db: Database, clock) -> None:
    add(db, clock, "m1")
    claimed = claim(db, now_ms=clock())
    with pytest.raises(ToolCrash):
        run_turn(db, clock, claimed, crash=True)
    # No turn row, and the ack was rolled back with it: the message is still ours, in progress.
    assert count_turns(db) == 0
    assert rows(db) == {"m1": ("in_progress", 1, None)}
    # The loop's failure path puts it back.
    assert release_after_failed_turn(db, [m.id for m in claimed]) == (1, 0)
    assert rows(db) == {"m1": ("received", 1, None)}

    # The retry succeeds: exactly one turn, the message processed once.
    clock.advance(MINUTE)
    retried = claim(db, now_ms=clock())
    turn_id = run_turn(db, clock, retried, crash=False)
    assert db.query("SELECT id, input FROM turns") == [(turn_id, "text of m1")]
    assert rows(db) == {"m1": ("processed", 2, to_iso(clock()))}
    assert claim(db, now_ms=clock()) == []


def test_mark_processed_inside_a_savepoint_rolls_back_with_it(db: Database, clock) -> None:
    add(db, clock, "m1")
    claim(db, now_ms=clock())
    with db.transaction():
        with pytest.raises(ToolCrash):
            with db.transaction():
                mark_processed(db, ["m1"], clock())
                raise ToolCrash()
        assert statuses(db) == {"m1": "in_progress"}
    assert statuses(db) == {"m1": "in_progress"}


# --------------------------------------------------------------------------- two connections


def test_two_connections_claiming_at_once_never_claim_the_same_row(home, clock) -> None:
    home.ensure()
    path = home.default_db_path
    with open_database(path, now=clock) as db:
        for i in range(300):
            insert_message(db, f"m{i:03d}", SENDER, "x", received_at_ms=clock() + i)

    start = threading.Barrier(2)
    claimed: dict[str, list[str]] = {"left": [], "right": []}
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            conn = open_database(path, now=clock, quick_check=False)
            try:
                start.wait()
                while batch := claim(conn, 3, now_ms=clock()):
                    claimed[name].extend(m.id for m in batch)
            finally:
                conn.close()
        except BaseException as exc:  # surface in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in claimed]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    left, right = claimed["left"], claimed["right"]
    assert not set(left) & set(right)
    assert len(left) + len(right) == len(set(left) | set(right)) == 300
    with open_database(path, now=clock) as db:
        assert db.query("SELECT status, retry_count, COUNT(*) FROM inbox_messages GROUP BY 1, 2") == [("in_progress", 1, 300)]


# --------------------------------------------------------------------------- reference databases, retention, index


def test_rows_an_old_reference_runtime_processed_are_not_handled_again(tmp_path: Path, clock) -> None:
    # A v3 database has no status column; after the upgrade its processed row reads "received".
    path = tmp_path / "state.db"
    build_reference_v3(path)
    with open_database(path, now=clock) as db:
        assert statuses(db) == {"msg_1": "received", "msg_2": "received"}
        assert db.scalar("SELECT processed_at FROM inbox_messages WHERE id = 'msg_1'") is not None
        assert unprocessed_count(db) == 1
        assert [m.id for m in claim(db, now_ms=clock())] == ["msg_2"]


def test_prune_deletes_only_old_finished_rows(db: Database, clock) -> None:
    add(db, clock, "old_done", "old_failed", "old_waiting", "old_busy", step_ms=1)
    db.execute("UPDATE inbox_messages SET max_retries = 1 WHERE id = 'old_failed'")
    claim(db, 4, now_ms=clock())
    mark_processed(db, ["old_done"], clock())
    release_after_failed_turn(db, ["old_failed", "old_waiting"])
    assert statuses(db) == {"old_done": "processed", "old_failed": "failed", "old_waiting": "received",
                            "old_busy": "in_progress"}
    clock.advance(40 * 86_400_000)
    add(db, clock, "new_waiting")
    mark_processed(db, [m.id for m in claim(db, 10, now_ms=clock()) if m.id == "new_waiting"], clock())
    # Only "new_waiting" (processed just now) and the unfinished rows are left after a 30-day cutoff.
    cutoff = clock() - 30 * 86_400_000
    assert prune_processed(db, cutoff) == 2
    assert statuses(db) == {"old_waiting": "in_progress", "old_busy": "in_progress", "new_waiting": "processed"}
    assert prune_processed(db, cutoff) == 0
    assert prune_processed(db, clock() + 1) == 1
    assert set(statuses(db)) == {"old_waiting", "old_busy"}


def test_the_claim_uses_the_unprocessed_partial_index(db: Database) -> None:
    plan = " ".join(str(r) for r in db.query("EXPLAIN QUERY PLAN " + CLAIMABLE_SQL, (10,)))
    assert "idx_inbox_unprocessed" in plan


def test_messages_a_turn_never_read_go_back_without_counting_a_try(db: Database, clock) -> None:
    from automaton_min.store.inbox import return_unread

    add(db, clock, "m1", "m2")
    for _ in range(5):  # refused again and again (a budget): never failed, never processed
        claimed = claim(db, now_ms=clock())
        assert [m.retry_count for m in claimed] == [1, 1]
        assert return_unread(db, [m.id for m in claimed] + ["ghost"]) == 2
        assert rows(db) == {"m1": ("received", 0, None), "m2": ("received", 0, None)}
    mark_processed(db, ["m1"], clock())  # only claimed rows change
    assert return_unread(db, ["m1"]) == 0 and return_unread(db, []) == 0
