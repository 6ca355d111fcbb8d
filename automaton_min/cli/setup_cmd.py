"""``automaton-min setup``: an interactive wizard, or fully non-interactive with flags and ``--yes``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, quiet_logs, secret_input, with_home
from automaton_min.config import DEFAULTS, Config, check_value, load_config, local_only
from automaton_min.errors import UserError
from automaton_min.home import Home
from automaton_min.net.http import NetworkError
from automaton_min.runtime.genesis import (SetupAnswers, answer_problem, detect_sandbox_id, existing_config_values,
                                           setup_agent)

REQUIRED = (("name", "--name"), ("genesis_prompt", "--genesis-prompt"), ("creator_address", "--creator-address"))


def _checked(key: str) -> Callable[[str], str]:
    """A prompt value processor that re-asks while the answer breaks the config rule for ``key``."""
    def process(value: str) -> str:
        problem = check_value(key, value.strip()) if value.strip() else None
        if problem:
            raise click.UsageError(problem)
        return value.strip()
    return process


def _required(field: str) -> Callable[[str], str]:
    """A prompt value processor that re-asks, saying why, while a required answer is blank or invalid."""
    def process(value: str) -> str:
        problem = answer_problem(field, value, asking=True)
        if problem:
            raise click.UsageError(problem)
        return value if field == "genesis_prompt" else value.strip()
    return process


def _ask(text: str, default: Any, key: str, *, secret: bool = False, optional: bool = False) -> str:
    secret = secret and sys.stdin.isatty()  # hiding needs a terminal; piped answers have no echo to hide
    if optional:
        return click.prompt(text, default=default or "", show_default=bool(default) and not secret,
                            hide_input=secret, value_proc=_checked(key))
    return click.prompt(text, default=default, hide_input=secret, value_proc=_checked(key))


@click.command("setup")
@click.option("--name", help="The automaton's name.")
@click.option("--genesis-prompt", help="Its purpose, in a sentence or a page.")
@click.option("--genesis-prompt-file", type=click.File("r"), help="Read the genesis prompt from a file.")
@click.option("--creator-address", help="Your 0x address: the creator.")
@click.option("--creator-message", help="A message the automaton reads on its first run.")
@click.option("--sandbox-id", help="Conway sandbox id; empty: commands run on this machine (default: detected).")
@click.option("--conway-api-url", help=f"Conway API base URL (default {DEFAULTS['conwayApiUrl']}).")
@click.option("--openai-base-url", help="Base URL of any OpenAI-compatible server (llama.cpp, vLLM, Ollama).")
@click.option("--inference-model", help=f"Model for normal turns (default {DEFAULTS['inferenceModel']}).")
@click.option("--conway-api-key", help="Conway API key: - reads it from standard input.")
@click.option("--openai-api-key", help="OpenAI (or compatible server) API key: - reads it from standard input.")
@click.option("--anthropic-api-key", help="Anthropic API key: - reads it from standard input.")
@click.option("--local-only/--no-local-only", "local_only", default=None,
              help="Local only: no social relay and no RPC node; it reads no balance and pays nothing.")
@click.option("--yes", "-y", is_flag=True, help="Ask nothing: use the flags, the current config and the defaults.")
@click.option("--genesis", "genesis_file", type=click.Path(dir_okay=False),
              help="A parent's genesis.json: its name, purpose and message, with the parent as the creator.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def command(ctx: click.Context, genesis_prompt_file, genesis_file: str | None, yes: bool, as_json: bool,
            **flags: Any) -> None:
    """Write automaton.json, SOUL.md and constitution.md, creating the wallet if needed."""
    home = home_of(ctx)
    if genesis_file is not None:
        _from_genesis(genesis_file, flags)
    for flag in ("conway_api_key", "openai_api_key", "anthropic_api_key"):
        flags[flag] = secret_input(flags[flag], "--" + flag.replace("_", "-"))
    if genesis_prompt_file is not None:
        flags["genesis_prompt"] = genesis_prompt_file.read()
    current = existing_config_values(home)
    answers = {
        "name": flags["name"] or current.get("name"),
        "genesis_prompt": flags["genesis_prompt"] or current.get("genesisPrompt"),
        "creator_address": flags["creator_address"] or current.get("creatorAddress"),
    }
    optional = {k: v for k, v in flags.items() if k not in answers}
    quiet_logs(ctx)  # its own lines say what happened (the wallet, the files); --log-level shows the log too
    if yes:
        missing = [flag for key, flag in REQUIRED if not answers[key]]
        if missing:
            raise UserError(f"setup --yes needs {', '.join(missing)}")
        if optional["sandbox_id"] is None and "sandboxId" not in current:
            optional["sandbox_id"] = detect_sandbox_id()
        if optional["openai_base_url"] and optional["inference_model"] is None and "inferenceModel" not in current:
            optional["inference_model"] = _served_model(optional["openai_base_url"], optional["openai_api_key"])
    else:
        click.echo(_opening(home, current))
        try:
            answers.update(_interview(answers, flags, optional, current))
        except click.Abort:
            raise UserError("setup stopped before every answer was given; "
                            "run it again, or pass the values as flags with --yes") from None

    result = setup_agent(home, SetupAnswers(**answers, **optional))
    if as_json:
        emit_json({"name": result.name, "address": result.address, "home": str(result.home),
                   "walletCreated": result.wallet_created, "written": result.written})
        return
    click.echo(f"{result.name} is set up in {result.home}")
    config = load_config(home)
    emit_rows([("address", result.address), ("wallet", "created" if result.wallet_created else "kept"),
               ("wrote", ", ".join(result.written)),
               *((("local only", "yes: no social relay, no RPC node; it reads no balance and pays nothing"),)
                 if local_only(config) else ())])
    if ctx.parent is ctx.find_root():  # not the wizard that `run` starts before it goes on
        click.echo(with_home(next_step(config, result.address), ctx))


GENESIS_KEYS = ("name", "genesisPrompt", "creatorMessage", "parentAddress", "constitutionHash", "chainType",
                "conwayApiUrl")


def _from_genesis(path: str, flags: dict[str, Any]) -> None:
    """The answers a parent wrote into ``genesis.json`` (README: Children), where no flag gave them; checked as the
    parent checked them (``children.genesis.check_genesis``), each problem named by its key."""
    import orjson

    from automaton_min.chain.address import is_address
    from automaton_min.children.genesis import check_genesis

    where = f"--genesis {path}"
    try:
        genesis = orjson.loads(open(path, "rb").read())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UserError(f"{where}: not a readable JSON file ({exc}); give the genesis.json a parent wrote") from None
    if not isinstance(genesis, dict):
        raise UserError(f"{where}: expected a JSON object with the keys {', '.join(GENESIS_KEYS)}")
    unknown = sorted(set(genesis) - set(GENESIS_KEYS))
    missing = [key for key in ("name", "genesisPrompt", "parentAddress") if not isinstance(genesis.get(key), str)]
    if unknown or missing:
        raise UserError(f"{where}: " + "; ".join(filter(None, (
            f"unknown keys {', '.join(unknown)}" if unknown else "",
            f"{', '.join(missing)} missing or not text" if missing else ""))) + f" (keys: {', '.join(GENESIS_KEYS)})")
    if not is_address(genesis["parentAddress"]):
        raise UserError(f"{where}: parentAddress must be a 0x address of 40 hex digits")
    message = genesis.get("creatorMessage") if isinstance(genesis.get("creatorMessage"), str) else None
    try:
        checked = check_genesis(genesis["name"], genesis["genesisPrompt"], message)
    except UserError as exc:
        field = str(exc).split(":", 1)[0]
        key = {"genesis_prompt": "genesisPrompt", "creator_message": "creatorMessage"}.get(field, field)
        raise UserError(f"{where}: {key}{str(exc)[len(field):]}") from None
    for flag, value in (("name", checked.name), ("genesis_prompt", checked.prompt),
                        ("creator_message", checked.creator_message), ("creator_address", genesis["parentAddress"]),
                        ("conway_api_url", genesis.get("conwayApiUrl"))):
        if flags.get(flag) is None and isinstance(value, str):
            flags[flag] = value


def _opening(home: Home, current: dict[str, Any]) -> str:
    """The wizard's first line: what it writes, and where."""
    wallet = "keeps its wallet" if home.wallet_path.exists() else "creates its wallet (wallet.json)"
    if current:
        return (f"This changes the automaton in {home.root}: automaton.json, SOUL.md and state.db; it {wallet}. "
                "Enter keeps the value in brackets.")
    return (f"This creates an automaton in {home.root}: automaton.json, SOUL.md, constitution.md and state.db; "
            f"it {wallet}.")


def next_step(config: Config, address: str) -> str:
    """What to run now, for the model setup chose: one's own server or key runs at once; Conway's needs its key and
    USDC on Base first."""
    from automaton_min.inference.providers import Providers
    from automaton_min.inference.registry import BASELINE, ModelInfo
    from automaton_min.inference.router import provider_guess
    from automaton_min.inference.types import ModelUnusable

    model_id = config.get("inferenceModel") or (config.get("modelStrategy") or {}).get("inferenceModel")
    model = next((known for known in BASELINE if known.model_id == model_id), None)
    model = model or ModelInfo(model_id, provider_guess(config), model_id)
    try:
        kind = Providers(config).kind_for(model)
    except ModelUnusable:
        kind = None
    start = "automaton-min run (Ctrl-C stops it), and in another terminal automaton-min logs -f"
    if kind in ("compatible", "ollama"):
        return f"Next, with {model_id} on your own server: {start}"
    if kind in ("openai", "anthropic"):
        return f"Next, with {model_id} on your {kind} key: {start}"
    fund = (f"fund {address} with USDC on Base (it pays for its model)" if not local_only(config) else
            "buy its credits yourself (a local-only agent pays nothing)")
    provision = "" if kind == "conway" else "automaton-min provision (a Conway API key), "
    return f"Next, with {model_id} through Conway: {provision}{fund}, then {start}"


def _interview(answers: dict[str, Any], flags: dict[str, Any], optional: dict[str, Any],
               current: dict[str, Any]) -> dict[str, Any]:
    """Ask for every value not given as a flag, offering the current one as the default."""
    required = (("name", "Name", "name"), ("genesis_prompt", "Genesis prompt (its purpose)", "genesisPrompt"),
                ("creator_address", "Creator address (0x...)", "creatorAddress"))
    # A blank answer without a current value reaches the check, which says why it asks again.
    asked = {}
    for field, text, _ in required:
        if flags[field] is not None:
            continue
        if field == "creator_address" and not answers[field]:  # blank: no wallet of one's own yet, perhaps
            typed = click.prompt(text, default="", show_default=False, value_proc=_blank_or(_required(field)))
            asked[field] = typed or _offer_creator_wallet() or click.prompt(text, default="", show_default=False,
                                                                            value_proc=_required(field))
            continue
        asked[field] = click.prompt(text, default=answers[field] or "", show_default=bool(answers[field]),
                                    value_proc=_required(field))
    prompts = (
        ("creator_message", "Message for its first run (optional)", "creatorMessage", False),
        ("sandbox_id", "Conway sandbox id (empty: commands run on this machine)", "sandboxId", False),
        ("openai_base_url", "OpenAI-compatible base URL (optional)", "openaiBaseUrl", False),
        ("openai_api_key", "OpenAI API key (optional)", "openaiApiKey", True),
        ("inference_model", "Inference model", "inferenceModel", False),
        ("anthropic_api_key", "Anthropic API key (optional)", "anthropicApiKey", True),
        ("conway_api_key", "Conway API key (optional)", "conwayApiKey", True),
    )
    defaults = {"sandbox_id": current.get("sandboxId", detect_sandbox_id()),
                "inference_model": current.get("inferenceModel", DEFAULTS["inferenceModel"])}
    answering = True  # the model server, if one is named, answers (the model step asks it)
    for field, text, key, secret in prompts:
        server = optional["openai_base_url"] if field == "inference_model" else None
        if server:
            defaults[field], answering = _show_models(server, optional["openai_api_key"] or current.get("openaiApiKey"),
                                                      defaults[field])
        if server and not answering and optional[field] is None:  # no model is guessed for a silent server
            optional[field] = click.prompt(f"{text}, as that server will serve it", value_proc=_checked(key))
        if optional[field] is None:
            default = defaults.get(field, "" if secret else current.get(key, ""))
            optional[field] = _ask(text, default, key, secret=secret, optional=True) or (None if secret else "")
            if field == "openai_base_url" and optional[field]:  # a server that does not answer is asked again
                optional[field] = _answering_url(optional[field], optional["openai_api_key"] or
                                                 current.get("openaiApiKey"))
        if server and answering:
            _try_model(server, optional["openai_api_key"] or current.get("openaiApiKey"),
                       optional[field] or defaults[field])
    if optional["local_only"] is None:
        optional["local_only"] = _ask_local_only(optional, current)
    return asked


def _ask_local_only(optional: dict[str, Any], current: dict[str, Any]) -> bool:
    """The one local-only question. Enter keeps the current choice; on a new home it takes yes for a model server of
    one's own without a Conway key (nothing to pay, no one to talk to), else no."""
    if isinstance(current.get("localOnly"), bool):
        default = current["localOnly"]
    else:
        own_server = optional["openai_base_url"] or current.get("openaiBaseUrl") or current.get("ollamaBaseUrl")
        default = bool(own_server) and not (optional["conway_api_key"] or current.get("conwayApiKey"))
    click.echo("Local only means no social relay and no RPC node: the agent then reads no balance, pays nothing and "
               "gets no messages.")
    return click.confirm("Local only?", default=default)


CREATOR_HOME = "creator"  # under the user's home, as README's recipe makes it with init


def _offer_creator_wallet() -> str | None:
    """A creator without a wallet: make one (the owner's, in ~/creator), or None to type an address."""
    from automaton_min.runtime.genesis import init_home

    home = Home(Path.home() / CREATOR_HOME)
    have = home.wallet_path.is_file()
    click.echo("The creator is you, the agent's owner: its signed messages are your orders, and only you can approve "
               "what it asks.")
    question = (f"Use your creator wallet in {home.root} ?" if have else
                f"Make a creator wallet for you now? Its key goes to {home.wallet_path} (0600): it is yours, not "
                "the agent's; keep it there or somewhere safer")
    if not click.confirm(question, default=True):
        return None
    wallet, created = init_home(home)
    click.echo(f"  {'made' if created else 'found'} {wallet.address}; send the agent orders with: automaton-min "
               f"--home {home.root} send <agent address> <message> (over the social relay: a local-only agent "
               "hears you through automaton-min wake <message> instead)")
    return wallet.address


def _answering_url(url: str, api_key: str | None) -> str:
    """The model server URL once it answers, asked again while it does not: Enter tries again, "keep" keeps it
    (the model is then asked, not guessed), "-" is none."""
    from automaton_min.inference.model_check import server_models

    while url and url != "-":
        try:
            server_models(url, api_key)
            return url
        except NetworkError as exc:
            click.echo(f"  {url} does not answer ({exc})")
        answer = click.prompt("Start the server, then press Enter to try again; or type another URL, keep (to keep "
                              "this one), or - for none", default=url, show_default=False, value_proc=_url_or_word)
        if answer == "keep":
            return url
        url = answer
    return ""


def _blank_or(check: Callable[[str], str]) -> Callable[[str], str]:
    return lambda value: "" if not value.strip() else check(value)


def _url_or_word(value: str) -> str:
    return value.strip() if value.strip() in ("-", "keep") else _checked("openaiBaseUrl")(value)


def _served_model(url: str, api_key: str | None) -> str | None:
    """Without --inference-model: the model the server serves, as the wizard offers it (None: it lists none, and
    the default stays). A server that does not answer is a ``UserError``: no model is guessed for it."""
    from automaton_min.inference.model_check import server_models

    if check_value("openaiBaseUrl", url):  # not a URL at all: the answers' check says so, with its fix
        return None
    try:
        ids = server_models(url, api_key)
    except NetworkError as exc:
        raise UserError(f"{url} does not answer ({exc}); start the model server and run setup again, or name its "
                        "model with --inference-model") from None
    return None if not ids or DEFAULTS["inferenceModel"] in ids else ids[0]


def _show_models(url: str, api_key: str | None, default: str) -> tuple[str, bool]:
    """Say which models the server has; the model to offer, and whether the server answered."""
    from automaton_min.inference.model_check import server_models

    try:
        ids = server_models(url, api_key)
    except NetworkError as exc:
        click.echo(f"  {url} does not answer ({exc}); "
                   "start the server, then check the model with: automaton-min doctor")
        return default, False
    if not ids:
        click.echo(f"  {url} lists no models")
        return default, True
    click.echo(f"  {url} has: {', '.join(ids[:10])}{', ...' if len(ids) > 10 else ''}")
    return (default if default in ids else ids[0]), True


def _try_model(url: str, api_key: str | None, model: str) -> None:
    """One tiny request to the model (on a local server) and the window the server says."""
    from automaton_min.inference.model_check import try_model

    trial = try_model(url, api_key, model)
    if not trial.local:
        click.echo(f"  {model}: not tried, as that server may charge for a request")
    elif trial.error:
        click.echo(f"  {model} did not answer: {trial.error}")
    else:
        click.echo(f"  {model} answered in {trial.answered_ms:,} ms")
    if trial.window:
        click.echo(f"  its window: {trial.window.tokens:,} tokens, from {trial.window.source}")
    else:
        click.echo("  the server does not say its window; the agent learns it from the server's first refusal of a "
                   "longer prompt")
