"""The open turn (``agent.open_turn``): a turn cut off before its commit is replayed under the same id, by the turn
that claims its inbox messages again, or by the first turn after the restart when it had none. The crash harness
(tests/crash) checks the same through the real process killed at ``message_sent``."""

from __future__ import annotations

from automaton_min.agent.open_turn import OPEN_TURN_KEY, OpenTurns
from automaton_min.store.kv import get_value


def test_the_turn_that_claims_the_cut_off_turns_messages_replays_it(db, clock) -> None:
    cut_off = OpenTurns(db).start(["m1", "m2"], clock())  # the process dies before the commit
    after_restart = OpenTurns(db)
    wakeup = after_restart.start([], clock())  # the wake-up turn comes first and is a new turn
    assert wakeup != cut_off
    assert after_restart.start(["m1", "m2", "m3"], clock()) == cut_off  # the same messages (and a new one)
    assert after_restart.start(["m1", "m2"], clock()) != cut_off  # only once


def test_a_cut_off_turn_without_messages_is_replayed_by_the_first_turn(db, clock) -> None:
    cut_off = OpenTurns(db).start([], clock())
    after_restart = OpenTurns(db)
    assert after_restart.start([], clock()) == cut_off
    assert after_restart.start([], clock()) != cut_off


def test_another_batch_ends_the_wait_for_the_replay(db, clock) -> None:
    OpenTurns(db).start(["gone"], clock())  # its message later failed or was processed elsewhere
    after_restart = OpenTurns(db)
    first = after_restart.start(["other"], clock())
    assert after_restart.start(["gone"], clock()) != first  # no stale replay later on


def test_a_committed_turn_is_never_replayed(db, clock) -> None:
    turns = OpenTurns(db)
    committed = turns.start(["m1"], clock())
    with db.transaction():
        turns.close()
    assert get_value(db, OPEN_TURN_KEY) is None
    assert OpenTurns(db).start(["m1"], clock()) != committed


def test_a_failed_turn_is_replayed_by_its_retry_in_the_same_process(db, clock) -> None:
    turns = OpenTurns(db)
    failed = turns.start(["m1"], clock())
    turns.failed(failed, ["m1"])
    assert turns.start(["m1"], clock()) == failed


def test_a_damaged_record_is_ignored(db, clock) -> None:
    from automaton_min.store.kv import set_value

    set_value(db, OPEN_TURN_KEY, "{not json", clock())
    assert len(OpenTurns(db).start([], clock())) == 26  # a fresh ULID
