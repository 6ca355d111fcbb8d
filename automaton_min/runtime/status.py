"""What ``automaton-min status`` reports, gathered without loading the wallet key."""

from __future__ import annotations

from typing import Any

from automaton_min import __version__
from automaton_min.agent.states import read_agent_state
from automaton_min.config import Config, db_path, load_config
from automaton_min.home import Home
from automaton_min.store.db import open_database
from automaton_min.store.identity import read_identity
from automaton_min.store.turns import count_turns, last_turn_timestamp


def gather_status(home: Home, config: Config | None = None) -> dict[str, Any]:
    """Name, address, state, turn count and the settings that matter, as one dict."""
    home.require()
    config = config or load_config(home)
    with open_database(db_path(home, config), quick_check=False) as db:
        identity = read_identity(db)
        state = read_agent_state(db)
        turns = count_turns(db)
        last_turn = last_turn_timestamp(db)
    return {
        "name": config["name"] or identity.get("name"),
        "address": identity.get("address") or config["walletAddress"],
        "creator": config["creatorAddress"] or identity.get("creator"),
        "sandbox": config["sandboxId"] or None,
        "state": state,
        "turns": turns,
        "lastTurnAt": last_turn,
        "model": config["inferenceModel"],
        "version": __version__,
        "home": str(home.root),
    }
