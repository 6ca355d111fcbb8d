"""Loop controls: each rule decides exactly when the reference's constants say."""

from __future__ import annotations

from automaton_min.agent.controls import (
    CYCLE_LIMIT_SLEEP_S,
    ERROR_SLEEP_S,
    IDLE_SLEEP_S,
    LOOP_ENFORCEMENT_SLEEP_S,
    LoopControls,
    TEXT_ONLY_SLEEP_S,
    TurnSummary,
)

WRITE = TurnSummary(("write_file",), mutated=True, status_only=False)


def read(*names: str) -> TurnSummary:
    return TurnSummary(names or ("read_file",), mutated=False, status_only=False)


def status(*names: str) -> TurnSummary:
    return TurnSummary(names or ("check_credits",), mutated=False, status_only=True)


def test_sleep_tool_and_text_only_answers_sleep() -> None:
    controls = LoopControls()
    verdict = controls.after_turn(TurnSummary(("sleep",), mutated=True, status_only=False, sleep_requested_s=900, sleep_reason="done"))
    assert (verdict.action, verdict.seconds, verdict.reason) == ("sleep", 900, "done")
    verdict = controls.after_turn(TurnSummary((), mutated=False, status_only=False))
    assert (verdict.action, verdict.seconds) == ("sleep", TEXT_ONLY_SLEEP_S)


def test_cycle_limit() -> None:
    controls = LoopControls(max_turns_per_cycle=4)
    tools = ["write_file", "exec", "write_file"]
    verdicts = [controls.after_turn(TurnSummary((tools[i % 3],), mutated=True, status_only=False)).action for i in range(4)]
    assert verdicts == ["go", "go", "go", "sleep"]
    assert controls.after_turn(WRITE).seconds == CYCLE_LIMIT_SLEEP_S


def test_idle_turns_without_mutation() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    names = ["read_file", "exec_readonly", "list", "view_soul", "recall"]
    verdicts = [controls.after_turn(read(names[i % 5])) for i in range(10)]
    assert [v.action for v in verdicts[:9]] == ["go"] * 9
    assert (verdicts[9].action, verdicts[9].seconds) == ("sleep", IDLE_SLEEP_S)


def test_a_mutation_or_input_resets_idleness() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    names = ["a", "b", "c"]
    for i in range(9):
        controls.after_turn(read(names[i % 3]))
    controls.after_turn(TurnSummary(("read_file",), mutated=False, status_only=False, had_input=True))
    assert controls.idle_turns == 0


def test_repeating_warns_then_enforces_a_sleep() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    pattern = TurnSummary(("exec", "read_file"), mutated=True, status_only=False)
    same_sorted = TurnSummary(("read_file", "exec"), mutated=True, status_only=False)
    assert [controls.after_turn(pattern).action for _ in range(2)] == ["go", "go"]
    warning = controls.after_turn(same_sorted)
    assert warning.action == "warn" and "exec,read_file" in warning.message
    assert [controls.after_turn(pattern).action for _ in range(2)] == ["go", "go"]
    enforced = controls.after_turn(pattern)
    assert (enforced.action, enforced.seconds) == ("sleep", LOOP_ENFORCEMENT_SLEEP_S)


def test_changing_course_after_a_warning_clears_it() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    for _ in range(3):
        controls.after_turn(WRITE)
    assert controls.warned_pattern == "write_file"
    controls.after_turn(TurnSummary(("exec",), mutated=True, status_only=False))
    assert controls.warned_pattern is None


def test_maintenance_loop() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    verdicts = [controls.after_turn(status(name)) for name in ("check_credits", "system_synopsis", "check_usdc_balance")]
    assert [v.action for v in verdicts] == ["go", "go", "warn"] and "only checked status" in verdicts[2].message


def test_five_errors_in_a_row_sleep_five_minutes_and_a_good_turn_resets() -> None:
    controls = LoopControls()
    assert [controls.after_error().action for _ in range(4)] == ["go"] * 4
    controls.after_turn(WRITE)
    assert [controls.after_error().action for _ in range(4)] == ["go"] * 4
    final = controls.after_error()
    assert (final.action, final.seconds) == ("sleep", ERROR_SLEEP_S)
