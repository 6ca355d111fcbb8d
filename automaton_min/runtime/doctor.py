"""``automaton-min doctor``: check the home, its files, the database and the model, and say how to fix each problem."""

from __future__ import annotations

from pathlib import Path

from automaton_min.chain.wallet import load_wallet
from automaton_min.clock import system_now
from automaton_min.config import Config, db_path, load_config, local_only
from automaton_min.conway.sandbox import is_local_sandbox_id
from automaton_min.errors import AutomatonError
from automaton_min.runtime.check import Check
from automaton_min.fileio import file_mode
from automaton_min.home import Home
from automaton_min.observe.clock_trust import CLOCK_FIX, ClockTrust
from automaton_min.store.db import open_database
from automaton_min.store.identity import read_identity
from automaton_min.store.migrations import current_version, latest_version


def _mode_check(name: str, path: Path, wanted: int, *, exact: bool = False, directory: bool = False) -> Check:
    if not path.exists():
        return Check(name, False, f"{path} is missing", "run: automaton-min setup")
    if path.is_dir() != directory:
        kind = "a file" if directory else "a directory"
        return Check(name, False, f"{path} is {kind}", f"move {path} aside and run: automaton-min setup")
    mode = file_mode(path)
    good = mode == wanted if exact else not mode & 0o077
    detail = f"{path} (mode {mode:04o})"
    return Check(name, good, detail, "" if good else f"chmod {wanted:o} {path}")


def run_doctor(home: Home, *, try_model: bool = False) -> list[Check]:
    """Every check, in order; a check that cannot run reports why instead of raising. ``try_model``: send the
    tiny completion to a model endpoint that may charge for it too."""
    checks: list[Check] = []
    if home.root.exists() and not home.root.is_dir():
        return [Check("home", False, f"{home.root} is not a directory", "pass --home with a directory path")]
    if not home.root.exists():
        return [Check("home", False, f"{home.root} does not exist", "run: automaton-min setup")]
    checks.append(_mode_check("home", home.root, 0o700, directory=True))

    config: Config | None = None
    config_check = _mode_check("config", home.config_path, 0o600)
    if home.config_path.exists():
        try:
            config = load_config(home)
        except AutomatonError as exc:
            config_check = Check("config", False, str(exc),
                                 f"edit {home.config_path}, or move it aside and run: automaton-min setup")
    checks.append(config_check)

    wallet_address = None
    wallet_check = _mode_check("wallet", home.wallet_path, 0o600)
    if wallet_check.ok:
        try:
            wallet_address = load_wallet(home.wallet_path).address
            wallet_check.detail += f", address {wallet_address}"
        except AutomatonError as exc:
            wallet_check = Check("wallet", False, str(exc), "restore wallet.json from a backup")
    checks.append(wallet_check)
    if config is not None and wallet_address and config["walletAddress"] not in (None, wallet_address):
        checks.append(Check("wallet address", False,
                            f"automaton.json says {config['walletAddress']}, wallet.json holds {wallet_address}",
                            "run: automaton-min setup"))

    if home.api_key_path.exists():
        checks.append(_mode_check("api key", home.api_key_path, 0o600))
    checks.append(_mode_check("constitution", home.constitution_path, 0o444, exact=True))
    checks.append(_present("soul", home.soul_path))
    checks.extend(_database_checks(home, config, wallet_address))
    if config is not None and is_local_sandbox_id(config.get("sandboxId")):
        checks.extend(_confinement_checks(home, config))
    if config is not None:
        from automaton_min.runtime.doctor_model import model_checks, part_checks

        checks.extend(model_checks(home, config, try_model=try_model))
        checks.extend(part_checks(home, config))
    return checks


def _confinement_checks(home: Home, config: Config) -> list[Check]:
    """Local mode: start the agent's confinement for real and try, from a command, what it must refuse."""
    from automaton_min.confine.self_test import self_test

    return [Check(p.name, p.ok, p.detail, p.fix) for p in self_test(home.root, home.root / "workspace", config)]


def _present(name: str, path: Path) -> Check:
    if path.is_file():
        return Check(name, True, str(path))
    return Check(name, False, f"{path} is missing", "run: automaton-min setup")


def _database_checks(home: Home, config: Config | None, wallet_address: str | None) -> list[Check]:
    path = db_path(home, config)
    if not path.exists():
        return [Check("database", False, f"{path} is missing", "run: automaton-min setup")]
    checks = [_mode_check("database file", path, 0o600)]
    try:
        db = open_database(path)
    except AutomatonError as exc:
        return checks + [Check("database", False, str(exc), f"move {path} aside and restore a backup")]
    with db:
        problems = db.integrity_check()
        ok = problems == ["ok"]
        checks.append(Check("database integrity", ok, "integrity_check ok" if ok else "; ".join(problems[:3]),
                            "" if ok else f"restore {path} from a backup"))
        version, latest = current_version(db), latest_version()
        checks.append(Check("database schema", version >= latest, f"version {version} (latest {latest})"))
        recorded = read_identity(db).get("address")
        if wallet_address and recorded and recorded != wallet_address:
            checks.append(Check("identity", False,
                                f"state.db belongs to {recorded}, wallet.json holds {wallet_address}",
                                "use the wallet.json this state.db was created with"))
        clock = ClockTrust.of(config).reading(db, system_now())  # signed times are judged against it
        if clock.trusted or not local_only(config):
            checks.append(Check("clock", clock.trusted, clock.why, "" if clock.trusted else CLOCK_FIX))
        else:  # only the relay's signed messages are judged by it, and a local-only agent has none
            checks.append(Check("clock", True, f"not needed while local only ({clock.why})", state="off"))
    return checks


def all_passed(checks: list[Check]) -> bool:
    return all(check.ok for check in checks)

