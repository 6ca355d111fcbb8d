"""``doctor``'s checks of the model and of the parts that need the network (README: Commands). A part the user did not
configure is "off" and one the agent found unreachable "unreachable"; neither is a failure.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from automaton_min.config import DEFAULTS, LOCAL_ONLY_OFF, Config, db_path
from automaton_min.errors import AutomatonError
from automaton_min.inference.model_check import (PAID_TOKENS, Endpoint, Listing, endpoint_for, list_models,
                                                 listing_problem, tiny_completion)
from automaton_min.inference.providers import Providers
from automaton_min.inference.refusals import config_fix
from automaton_min.inference.registry import ModelInfo, ModelRegistry
from automaton_min.inference.router import BudgetDenied, Router
from automaton_min.inference.types import InferenceError, ModelUnusable
from automaton_min.agent.action_mode import expected_mode
from automaton_min.inference.windows import Window
from automaton_min.inference.wire_common import ProviderUnreachable, one_line
from automaton_min.net.http import NetworkError, Response, request as plain_request
from automaton_min.runtime.check import Check
from automaton_min.heartbeat.parts import (LOCAL_ONLY, URL_SETTINGS, describe, off_reasons, parts_of, stored_states,
                                          turn_off_hint)
from automaton_min.store.db import open_database

Send = Callable[..., Response]
PROVIDER_KEYS = ("openaiBaseUrl", "ollamaBaseUrl", "openaiApiKey", "anthropicApiKey", "conwayApiKey")
SET_UP_A_MODEL = ("set your model server: automaton-min config set openaiBaseUrl http://127.0.0.1:8080/v1 "
                  "(and inferenceModel), or get a Conway key: automaton-min provision")
TURN_ON = {"conway": "automaton-min provision",
           "relay": f"automaton-min config set socialRelayUrl {DEFAULTS['socialRelayUrl']}"}
_REACH_FIX = {"compatible": "start the model server, or correct openaiBaseUrl",
              "ollama": "start Ollama (ollama serve), or correct ollamaBaseUrl",
              "conway": "check the network, or correct conwayApiUrl"}


def part_checks(home: Any, config: Config) -> list[Check]:
    """The remote parts a run may use (``heartbeat/parts.py``), none contacted here: off by the configuration,
    unreachable as the agent last found it (KV ``parts``, as ``status`` reads it), or on. Unreachable is said but is
    not a failure: the agent runs without the part, and nothing on this machine is wrong."""
    checks = []
    for name, part in _recorded_parts(home, config).items():
        url = part["url"]
        if part["state"] == "off":
            why = part.get("why") or ""
            fix = LOCAL_ONLY_OFF if why == LOCAL_ONLY else TURN_ON.get(name, "")
            checks.append(Check(name, True, f"off: {why}", fix, state="off"))
        elif part["state"] == "unreachable":
            reach = f"check the network, or correct {URL_SETTINGS[name]}"
            fix = f"{reach}; {turn_off_hint({name: part})}" if name == "rpc" else turn_off_hint({name: part}) or reach
            checks.append(Check(name, True, f"{describe(name)}: {url} unreachable since {part.get('since')}, as the"
                                            " agent last found it (not contacted)", fix, state="unreachable"))
        else:
            checks.append(Check(name, True, f"{describe(name)}: {url} (not contacted)"))
    return checks


def _recorded_parts(home: Any, config: Config) -> dict[str, dict[str, Any]]:
    """Each part's state as ``status`` shows it; from the configuration alone without a readable database."""
    path = db_path(home, config)
    if path.exists():
        try:
            with open_database(path, read_only=True) as db:
                return stored_states(db, config)
        except AutomatonError:
            pass  # the database checks say what is wrong with it
    why = off_reasons(config)
    return {name: {"state": "off", "url": None, "why": why[name]} if url is None else {"state": "on", "url": url}
            for name, url in parts_of(config).items()}


def model_checks(home: Any, config: Config, *, try_model: bool, send: Send = plain_request) -> list[Check]:
    """The model's checks, in order; none when the database cannot be opened (its own check says why)."""
    path = db_path(home, config)
    if not path.exists():
        return []
    try:
        db = open_database(path)
    except AutomatonError:
        return []
    with db:
        providers = Providers(config.values, lambda service: send, probe=send)
        router = Router(db, ModelRegistry(db), config.values, providers, session_id="doctor",
                        describe=_asked_once(providers))
        route = router.plan("normal")
        if isinstance(route, BudgetDenied):
            return [Check("model", False, route.message, "set inferenceModel to an enabled model")]
        try:
            endpoint = endpoint_for(config.values, providers, route.model)
        except ModelUnusable as exc:
            if not any(config.get(key) for key in PROVIDER_KEYS):
                return [Check("model", True, f"off: nothing serves {route.model.model_id} yet", SET_UP_A_MODEL,
                              state="off")]
            return [Check("model", False, str(exc), SET_UP_A_MODEL)]
        window = router.window(route.model)
        where = "local" if endpoint.local else "may charge for its use"
        checks = [Check("model", True, f"{route.model.model_id} at {endpoint.url} ({where})")]
        checks += _endpoint_checks(endpoint, route.model, config.values, providers, try_model, send)
        checks.append(Check("model window", True, f"{window.tokens:,} tokens, from {window.source}"))
        mode = expected_mode(db, config.values, route.model.model_id, window.tokens)
        checks.append(Check("action mode", True, f"{mode.name}: {mode.why}"))
        return checks


def _asked_once(providers: Providers) -> Callable[[ModelInfo], Window | None]:
    """The server's window, asked once per model even when it did not answer (a run asks again later)."""
    asked: dict[str, Window | None] = {}

    def describe(model: ModelInfo) -> Window | None:
        if model.model_id not in asked:
            asked[model.model_id] = providers.context_window(model)
        return asked[model.model_id]

    return describe


def _endpoint_checks(endpoint: Endpoint, model: ModelInfo, config: Mapping[str, Any], providers: Providers,
                     try_model: bool, send: Send) -> list[Check]:
    try:
        listing = list_models(endpoint, config, send)
    except NetworkError as exc:
        return [Check("model server", False, f"{endpoint.url} does not answer: {one_line(str(exc))}",
                      _reach_fix(endpoint))]
    problem = listing_problem(endpoint, listing)
    if problem:
        return [Check("model server", False, f"{endpoint.url} refused the key ({listing.status})", problem)]
    answer = _answer_check(endpoint, model, providers) if endpoint.local or try_model else None
    checks = [Check("model server", True, f"{endpoint.url} answers"), _listed_check(endpoint, model, listing, answer)]
    if answer is None:
        answer = Check("model answers", True, f"not tried: {endpoint.url} may charge for a request",
                       f"automaton-min doctor --try-model (one request for {PAID_TOKENS} output tokens)", state="skip")
    return checks + [answer]


def _listed_check(endpoint: Endpoint, model: ModelInfo, listing: Listing, answer: Check | None) -> Check:
    if listing.ids is None:
        return Check("model listed", True, "the server lists no models (GET /v1/models)")
    if model.model_id in listing.ids:
        return Check("model listed", True, f"{model.model_id} is among the server's {len(listing.ids)} model(s)")
    shown = ", ".join(listing.ids[:5]) + (", ..." if len(listing.ids) > 5 else "") or "none"
    if answer is not None and answer.ok:  # llama.cpp and llama-cpp-python answer to any name
        return Check("model listed", True, f"not among the server's models ({shown}), but it answers to this name")
    return Check("model listed", False, f"the server lists {shown}, not {model.model_id}",
                 config_fix(endpoint.provider, 404) or "")


def _answer_check(endpoint: Endpoint, model: ModelInfo, providers: Providers) -> Check:
    try:
        elapsed_ms = tiny_completion(providers, model, endpoint)
    except ProviderUnreachable as exc:
        return Check("model answers", False, str(exc), _reach_fix(endpoint))
    except InferenceError as exc:
        status = getattr(exc, "status", None)
        return Check("model answers", False, str(exc),
                     (config_fix(endpoint.provider, status) if status else None) or "")
    return Check("model answers", True, f"a tiny request was answered in {elapsed_ms:,} ms")


def _reach_fix(endpoint: Endpoint) -> str:
    return _REACH_FIX.get(endpoint.kind, "check the network (and any proxy)")
