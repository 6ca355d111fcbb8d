"""``doctor`` checks the model through the real CLI against model servers on 127.0.0.1: the endpoint answers, it has
the model, the window and where it came from, one tiny completion on a local endpoint (on one that may charge only
with ``--try-model``); parts that are not configured are "off", and only failures set the exit code."""

from __future__ import annotations

import json

import orjson
import pytest

from automaton_min.errors import EXIT_FAILURE
from automaton_min.inference.model_check import is_local_url
from automaton_min.store.db import open_database
from automaton_min.store.kv import set_json
from conftest import CREATOR, keep_offline
from standins.loopback_http import Reply
from standins.model_servers import OpenAIServer, openai_answer


def set_up_model(cli, home, base_url: str, model: str, *extra: str, key: str | None = None) -> None:
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                 "--openai-base-url", base_url, "--inference-model", model, *extra, "--yes",
                 *(("--openai-api-key", "-") if key else ()), input=key)
    assert result.code == 0, result.stderr
    keep_offline(home)  # no relay: that part is off


def doctor(cli, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, dict]]:
    result = cli("doctor", "--json", *args, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, {check["name"]: check for check in json.loads(result.stdout)["checks"]}


def test_a_local_server_is_asked_everything_and_answers_one_tiny_request(cli, home) -> None:
    with OpenAIServer(mode="llamacpp", props={"default_generation_settings": {"n_ctx": 4096}},
                      models=[{"id": "gemma-3-270m", "object": "model"}]) as server:
        server.script(openai_answer("OK", usage=(9, 1)))
        set_up_model(cli, home, server.url + "/v1", "gemma-3-270m")
        code, checks = doctor(cli)
        [tiny] = server.requests
    assert code == 0, checks
    assert checks["model"]["detail"] == f"gemma-3-270m at {server.url}/v1 (local)"
    assert checks["model server"]["state"] == checks["model listed"]["state"] == checks["model answers"]["state"] == "ok"
    assert checks["model window"]["detail"] == "4,096 tokens, from the server (llama.cpp's /props)"
    assert tiny.body["max_tokens"] == 1 and len(tiny.body["messages"]) == 1
    assert (checks["conway"]["state"], checks["relay"]["state"], checks["rpc"]["state"]) == ("off", "off", "ok")
    assert checks["conway"]["ok"] and "automaton-min provision" in checks["conway"]["fix"]


def test_text_output_says_off_and_passes(cli, home) -> None:
    with OpenAIServer(mode="llamacpp", models=[{"id": "/tmp/gemma.gguf"}]) as server:  # llama-cpp-python lists its path
        server.script(openai_answer("OK"))
        set_up_model(cli, home, server.url + "/v1", "gemma-3-270m")
        text = cli("doctor")
    assert text.code == 0 and text.stdout.rstrip().endswith("all checks passed"), text.stdout
    assert "off   conway" in text.stdout and "to turn it on: automaton-min provision" in text.stdout
    assert "not among the server's models (/tmp/gemma.gguf), but it answers to this name" in text.stdout
    assert "from a default (the server does not say it" in text.stdout


def test_a_window_learnt_from_a_refusal_is_named_as_such(cli, home, clock) -> None:
    with OpenAIServer(mode="llamacpp") as server:
        server.script(openai_answer("OK"))
        set_up_model(cli, home, server.url + "/v1", "gemma-3-270m")
        with open_database(home.default_db_path) as db:
            set_json(db, "model_windows", {"gemma-3-270m": {"tokens": 4096, "at": "2026-11-22T10:15:30.250Z"}}, clock())
        code, checks = doctor(cli)
    assert code == 0
    assert checks["model window"]["detail"] == ("4,096 tokens, from the server's refusal of a longer prompt "
                                                "(at 2026-11-22T10:15:30.250Z)")
    assert checks["model listed"]["detail"] == "the server lists no models (GET /v1/models)"


def test_a_server_that_does_not_answer_is_one_failure_with_the_fix(cli, home) -> None:
    with OpenAIServer(mode="llamacpp") as server:
        url = server.url  # closed when the block ends
    set_up_model(cli, home, url + "/v1", "gemma-3-270m")
    text = cli("doctor")
    assert text.code == EXIT_FAILURE and "Traceback" not in text.stderr
    assert "FAIL  model server" in text.stdout and "fix: start the model server, or correct openaiBaseUrl" in text.stdout
    assert text.stdout.count("FAIL") == 1 and "model answers" not in text.stdout


def test_a_model_the_server_lacks_fails_with_the_setting_to_change(cli, home) -> None:
    missing = Reply(404, {"object": "error", "type": "NotFoundError", "code": 404,
                          "message": "The model `qwen` does not exist."})
    with OpenAIServer(models=[{"id": "Qwen/Qwen3-0.6B", "max_model_len": 4096}]) as server:  # vLLM
        server.script(missing)
        set_up_model(cli, home, server.url + "/v1", "qwen")
        code, checks = doctor(cli)
    assert code == EXIT_FAILURE
    assert checks["model listed"]["state"] == checks["model answers"]["state"] == "fail"
    assert checks["model listed"]["detail"] == "the server lists Qwen/Qwen3-0.6B, not qwen"
    assert "set inferenceModel to a model your server has" in checks["model listed"]["fix"]


def test_an_endpoint_that_may_charge_gets_the_tiny_request_only_when_asked(cli, home) -> None:
    # A remote endpoint (http://models.example) reached through a proxy on 127.0.0.1 that is the stand-in itself.
    with OpenAIServer(prefix="http://models.example", api_key="sk-paid-0001", models=[{"id": "big-model"}]) as server:
        server.script(openai_answer("OK"))
        set_up_model(cli, home, "http://models.example/v1", "big-model", key="sk-paid-0001")
        proxy = {"HTTP_PROXY": server.url, "http_proxy": server.url, "NO_PROXY": "", "no_proxy": ""}
        code, unasked = doctor(cli, env=proxy)
        sent_unasked = len(server.requests)
        asked_code, asked = doctor(cli, "--try-model", env=proxy)
        [tiny] = server.requests
    assert code == 0 and sent_unasked == 0 and unasked["model listed"]["state"] == "ok"
    assert "may charge" in unasked["model"]["detail"] and unasked["model answers"]["state"] == "skip"
    assert "automaton-min doctor --try-model" in unasked["model answers"]["fix"]
    assert asked_code == 0 and asked["model answers"]["state"] == "ok" and tiny.body["max_tokens"] == 16
    assert tiny.header("Authorization") == "Bearer sk-paid-0001"


def test_a_home_without_a_model_provider_has_the_model_off_not_failed(cli, set_up) -> None:
    code, checks = doctor(cli)
    assert code == 0 and checks["model"]["state"] == "off" and checks["model"]["ok"]
    assert "automaton-min provision" in checks["model"]["fix"] and "openaiBaseUrl" in checks["model"]["fix"]
    assert orjson.loads(set_up.config_path.read_bytes()).get("conwayApiKey") in (None, "")


def test_a_part_the_agent_found_unreachable_is_said_so_not_contacted_and_not_a_failure(cli, set_up, clock) -> None:
    from automaton_min.heartbeat.parts import PartStates
    from standins.loopback_http import LoopbackServer

    with LoopbackServer({}) as relay, LoopbackServer({}) as rpc:  # they would answer; doctor must not ask them
        keep_offline(set_up, socialRelayUrl=relay.url, rpcUrl=rpc.url)
        with open_database(set_up.default_db_path, now=clock) as db:  # what the running agent recorded
            states = PartStates({"conway": None, "relay": relay.url, "rpc": rpc.url})
            states.unreachable(db, "relay", "timed out", clock(), say=False)
            states.unreachable(db, "rpc", "refused", clock(), say=False)
        code, checks = doctor(cli)
        text = cli("doctor")
        assert relay.requests == [] and rpc.requests == []
    assert code == 0 and text.code == 0, text.stdout
    assert checks["relay"]["state"] == checks["rpc"]["state"] == "unreachable" and checks["relay"]["ok"]
    since = checks["relay"]["detail"].split("unreachable since ")[1].split(",")[0]
    assert checks["relay"]["detail"] == (f"the social relay (socialRelayUrl): {relay.url} unreachable since {since},"
                                         " as the agent last found it (not contacted)") and since.startswith("20")
    assert checks["relay"]["fix"] == 'to turn the social relay off: automaton-min config set socialRelayUrl ""'
    assert checks["rpc"]["fix"] == ("check the network, or correct rpcUrl; to run local only (no social relay, no RPC "
                                    "node, nothing paid): automaton-min config set localOnly true")
    lines = text.stdout.splitlines()
    relay_line = next(n for n, line in enumerate(lines) if line.startswith("down  relay "))
    assert lines[relay_line + 1].strip() == checks["relay"]["fix"]
    assert not any(line.startswith("ok    relay") or line.startswith("ok    rpc") for line in lines)
    assert lines[-1] == "all checks passed; not answering when the agent last tried: relay, rpc (it runs without them)"


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:8080/v1", True), ("http://localhost:11434", True), ("http://[::1]:8000/v1", True),
    ("http://192.168.1.20:8000/v1", True), ("http://10.0.0.5/v1", True), ("http://gpu-box.local:8080", True),
    ("https://api.openai.com", False), ("https://api.conway.tech", False), ("http://8.8.8.8/v1", False),
    ("http://gpu-box:8080", False),  # a bare name is not resolved: treated as one that may charge
])
def test_which_endpoints_are_local(url: str, local: bool) -> None:
    assert is_local_url(url) is local
