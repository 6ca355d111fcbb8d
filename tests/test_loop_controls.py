"""Loop controls: each rule decides exactly when the reference's constants say."""

from __future__ import annotations

from automaton_min.agent.controls import (
    CYCLE_LIMIT_SLEEP_S,
    ERROR_SLEEP_S,
    IDLE_SLEEP_S,
    LOOP_ENFORCEMENT_SLEEP_S,
    CallSeen,
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


def made(name: str, result: str, *, reads_only: bool = False, **arguments) -> TurnSummary:
    """A one-call turn: the call and what came back."""
    call = CallSeen.of(name, arguments, result, reads_only=reads_only)
    return TurnSummary((name,), mutated=not reads_only, status_only=False, calls=(call,))


def test_the_same_call_with_the_same_result_warns_on_the_third_turn_then_sleeps() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    same = made("exec", "exit_code: 0\nstdout: 3 files", command="ls | wc -l")
    assert [controls.after_turn(same).action for _ in range(2)] == ["go", "go"]
    warning = controls.after_turn(same)
    assert warning.action == "warn" and "exec" in warning.message and "nothing new" in warning.message
    enforced = controls.after_turn(same)
    assert (enforced.action, enforced.seconds) == ("sleep", LOOP_ENFORCEMENT_SLEEP_S)
    assert "kept repeating exec" in enforced.reason


def test_different_commands_are_work_even_when_their_results_match() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    verdicts = [controls.after_turn(made("exec", "exit_code: 0", command=f"mkdir part{n}")).action for n in range(10)]
    assert verdicts == ["go"] * 10


def test_the_same_command_with_a_new_result_is_work() -> None:
    """Run the tests, read the failure, run them again: a large model's exec-only turns."""
    controls = LoopControls(max_turns_per_cycle=100)
    turns = [made("exec", "exit_code: 1\n2 failed", command="pytest -q"),
             made("exec", "exit_code: 0\nE assert 2 == 3", command="sed -n 10,20p test_x.py"),
             made("exec", "exit_code: 0", command="sed -i s/3/2/ test_x.py"),
             made("exec", "exit_code: 1\n1 failed", command="pytest -q"),
             made("exec", "exit_code: 0", command="sed -i s/4/5/ test_y.py"),
             made("exec", "exit_code: 0\n12 passed", command="pytest -q")]
    assert [controls.after_turn(turn).action for turn in turns] == ["go"] * 6


def test_two_calls_alternating_with_nothing_new_warn_then_sleep() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    first = made("read_file", "Error: no such file: a.txt", reads_only=True, path="a.txt")
    second = made("exec", "exit_code: 0\nstdout: b", command="echo b")
    verdicts = [controls.after_turn(turn).action for turn in (first, second, first, second, first)]
    assert verdicts == ["go", "go", "go", "warn", "sleep"]


def test_a_read_that_returns_what_another_read_returned_is_nothing_new() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    listing = "notes.txt plan.md"
    verdicts = [controls.after_turn(made("exec_readonly", listing, reads_only=True, command=spelling)).action
                for spelling in ("ls", "ls .", "ls ./")]
    assert verdicts == ["go", "go", "warn"]


def test_changing_course_after_a_warning_clears_it() -> None:
    controls = LoopControls(max_turns_per_cycle=100)
    same = made("write_file", "File written: a.txt (5 bytes)", path="a.txt", content="hello")
    for _ in range(3):
        controls.after_turn(same)
    assert controls.warned
    assert controls.after_turn(made("exec", "exit_code: 0", command="date")).action == "go"
    assert not controls.warned
    assert controls.after_turn(same).action == "go"  # seen before, but a repeat only counts the second in a row


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
