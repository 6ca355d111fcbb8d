"""``automaton-min send``: one signed message from this agent's wallet through its relay."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from automaton_min.chain.wallet import load_wallet
from automaton_min.clock import Clock, system_now
from automaton_min.config import LOCAL_ONLY_OFF, db_path, local_only
from automaton_min.errors import UserError
from automaton_min.net.http import NetworkError
from automaton_min.social.relay import RelayClient

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.home import Home


def send_from_home(home: "Home", config: "Config", to: str, content: str, reply_to: str | None = None, *,
                   now: Clock = system_now) -> dict[str, Any]:
    """Sign with the home's wallet and send; ``{id, from, to, relay}``. The attempt counts toward the rolling-hour
    limit in ``state.db``, shared with the running agent, when the database exists."""
    wallet = load_wallet(home.wallet_path, config.get("walletAddress"))
    relay = RelayClient.from_config(config, wallet, now=now)
    if relay is None and local_only(config):
        raise UserError(f"no relay: this agent is local only (localOnly is true); to send messages: {LOCAL_ONLY_OFF}")
    if relay is None:
        raise UserError("no relay: socialRelayUrl is \"\"; "
                        "set it (automaton.json or SOCIAL_RELAY_URL) to send messages")
    path = db_path(home, config)
    try:
        if path.exists() and path.stat().st_size > 0:
            from automaton_min.store.db import open_database

            with open_database(path, now=now, quick_check=False) as db:
                answer = relay.send(to, content, reply_to, db=db)
        else:
            answer = relay.send(to, content, reply_to)
    except NetworkError as exc:
        raise NetworkError(f"{exc}; nothing was sent. The relay is socialRelayUrl ({relay.url}): check that it "
                           "answers, or change it: automaton-min config set socialRelayUrl URL") from None
    return {"id": answer["id"], "from": relay.address, "to": to.lower(), "relay": relay.url,
            **({"replyTo": reply_to} if reply_to else {})}
