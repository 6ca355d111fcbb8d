"""``setup`` checks every answer before it writes anything, and a re-run renames the soul."""

from __future__ import annotations

import json

import pytest

from automaton_min.errors import EXIT_USAGE

from conftest import CREATOR
from standins.model_servers import OpenAIServer, openai_answer

# CREATOR with the case of one letter flipped: still 40 hex digits, but the EIP-55 checksum no longer holds.
BAD_CHECKSUM = CREATOR.replace("AbcdEF", "abcdEF")
assert BAD_CHECKSUM != CREATOR


def one_error_line(result) -> str:
    assert "Traceback" not in result.stdout + result.stderr
    assert result.code == EXIT_USAGE, (result.code, result.stderr)
    assert len(result.stderr_lines) == 1, result.stderr
    return result.stderr_lines[0]


@pytest.mark.parametrize(("flags", "needles"), [
    (("--name", "   ", "--genesis-prompt", "Earn.", "--creator-address", CREATOR), ("name", "--name")),
    (("--name", "ada", "--genesis-prompt", " \n\t ", "--creator-address", CREATOR), ("genesis prompt", "--genesis-prompt")),
    (("--name", "ada", "--genesis-prompt", "Earn.", "--creator-address", BAD_CHECKSUM), ("checksum", BAD_CHECKSUM)),
], ids=["blank-name", "blank-genesis", "bad-checksum"])
def test_bad_answer_is_one_line_and_writes_nothing(cli, home, flags, needles):
    line = one_error_line(cli("setup", *flags, "--yes"))
    for needle in needles:
        assert needle in line, line
    assert not home.root.exists(), sorted(p.name for p in home.root.iterdir())


def test_bad_answer_leaves_a_set_up_home_unchanged_and_doctor_agrees(cli, set_up):
    before = {p.name: p.read_bytes() for p in (set_up.config_path, set_up.soul_path)}
    one_error_line(cli("setup", "--name", "   ", "--yes"))
    assert {p.name: p.read_bytes() for p in (set_up.config_path, set_up.soul_path)} == before
    assert cli("doctor").code == 0


def test_checksum_check_accepts_lower_and_upper_case(cli, home):
    lower = CREATOR.lower()
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Earn.", "--creator-address", lower, "--yes")
    assert result.code == 0, result.stderr
    upper = "0x" + CREATOR[2:].upper()
    assert cli("setup", "--creator-address", upper, "--yes").code == 0


def test_interactive_blank_name_asks_again(home):
    from test_cli import interview, run_detached

    answers = "   \n" + interview()
    result = run_detached("setup", input=answers)
    assert result.code == 0, result.stderr
    assert result.stdout.count("Name") == 2
    assert json.loads(home.config_path.read_text())["name"] == "ada"


def test_rerun_with_a_new_name_renames_the_soul_and_keeps_the_rest(cli, set_up):
    soul = set_up.soul_path.read_text()
    assert soul.startswith("# ada\n") and "- Name: ada\n" in soul
    set_up.soul_path.write_text(soul + "\n## Learned\nCustomers like short answers.\n")

    result = cli("setup", "--name", "bob", "--yes", "--json")
    assert result.code == 0, result.stderr
    assert "SOUL.md" in json.loads(result.stdout)["written"]
    renamed = set_up.soul_path.read_text()
    assert renamed.startswith("# bob\n") and "- Name: bob\n" in renamed
    assert "ada" not in renamed
    assert "Customers like short answers." in renamed
    assert oct(set_up.soul_path.stat().st_mode & 0o777) == oct(0o600)


def test_rerun_with_the_same_name_leaves_the_soul_alone(cli, set_up):
    set_up.soul_path.write_text("# ada\n\nI rewrote my own soul.\n")
    result = cli("setup", "--genesis-prompt", "Something new.", "--yes", "--json")
    assert result.code == 0, result.stderr
    assert "SOUL.md" not in json.loads(result.stdout)["written"]
    assert set_up.soul_path.read_text() == "# ada\n\nI rewrote my own soul.\n"


def test_the_model_step_lists_the_servers_models_tries_one_and_says_its_window(home):
    from test_cli import interview, run_detached

    with OpenAIServer(mode="llamacpp", props={"default_generation_settings": {"n_ctx": 4096}},
                      models=[{"id": "gemma-3-270m"}, {"id": "qwen3-0.6b"}]) as server:
        server.script(openai_answer("OK"))
        result = run_detached("setup", input=interview(base_url=server.url + "/v1"))  # the offered model: blank answer
        [tiny] = server.requests
    assert result.code == 0, result.stderr
    assert f"{server.url}/v1 has: gemma-3-270m, qwen3-0.6b" in result.stdout
    assert "gemma-3-270m answered in" in result.stdout
    assert "its window: 4,096 tokens, from the server (llama.cpp's /props)" in result.stdout
    assert tiny.body["model"] == "gemma-3-270m" and tiny.body["max_tokens"] == 1
    assert json.loads(home.config_path.read_text())["inferenceModel"] == "gemma-3-270m"


def test_the_model_step_says_a_silent_server_and_a_closed_one(home):
    from test_cli import interview, run_detached

    with OpenAIServer(mode="llamacpp") as server:  # llama-cpp-python's answers: no list, no window
        server.script(openai_answer("OK"))
        silent = run_detached("setup", input=interview(base_url=server.url + "/v1", model="gemma"))
    closed = run_detached("setup", input=interview(base_url=server.url + "/v1\nkeep", model="gemma"))  # kept
    assert silent.code == closed.code == 0, silent.stderr + closed.stderr
    assert "lists no models" in silent.stdout and "gemma answered in" in silent.stdout
    assert "the agent learns it from the server's first refusal of a longer prompt" in silent.stdout
    assert "does not answer" in closed.stdout and "automaton-min doctor" in closed.stdout
    assert "Inference model, as that server will serve it" in closed.stdout  # asked, not offered
    assert "answered" not in closed.stdout and "Traceback" not in closed.stderr
