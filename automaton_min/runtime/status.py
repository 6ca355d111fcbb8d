"""What ``automaton-min status`` reports, gathered without loading the wallet key or writing anything."""

from __future__ import annotations

from typing import Any

from automaton_min import __version__
from automaton_min.agent.action_mode import last_mode
from automaton_min.agent.states import read_agent_state
from automaton_min.agent.tools.jobs import JOBS_KEY
from automaton_min.clock import system_now
from automaton_min.config import Config, db_path, load_config, local_only
from automaton_min.home import Home
from automaton_min.observe.clock_trust import ClockTrust
from automaton_min.heartbeat.report_task import latest_alerts
from automaton_min.runtime.activity import endings_of
from automaton_min.heartbeat.parts import stored_states
from automaton_min.runtime.run_lock import run_holder
from automaton_min.social.approvals import pending as pending_approvals
from automaton_min.social.distress import DISTRESS_KEY
from automaton_min.social.intake import refusals
from automaton_min.store.db import open_database
from automaton_min.store.identity import read_identity
from automaton_min.children.ready import spawn_blocker
from automaton_min.store.children import counts as children_counts
from automaton_min.store.goals import active_progress
from automaton_min.update.baked import this_build
from automaton_min.store.modifications import latest_change
from automaton_min.store.sqlite import table_exists
from automaton_min.store.kv import USDC_KEY, get_value, json_list, json_object
from automaton_min.store.turns import count_turns, last_turn_timestamp, recent_turns
from automaton_min.tiers import tier_for_credits
from automaton_min.treasury.payees import known_payees

# KV rows the runtime writes: {"cents", "at"} (Conway client), {"atomic", "at"} and {"message", "at"} (the runtime).
CREDITS_KEY = "last_known_balance"
LAST_ERROR_KEY = "last_error"
LAST_RUN_KEY = "last_run"  # {"startedAt", "stoppedAt", "pid"}: written when a run stops
CONFINEMENT_KEY = "confinement"  # what held the last run's local commands (confine/client.py describes it)
RECENT_TURNS = 3
SAID_CHARS = 100


def heartbeat_summary(db: Any) -> dict[str, Any]:
    """The enabled tasks, the next one due (``at`` None: due at the scheduler's next pass) and the last one run."""
    enabled = int(db.scalar("SELECT COUNT(*) FROM heartbeat_schedule WHERE enabled = 1", default=0))
    due = db.query_one("SELECT task_name, next_run_at FROM heartbeat_schedule WHERE enabled = 1"
                       " ORDER BY next_run_at IS NOT NULL, next_run_at LIMIT 1")  # no time yet: due at the next pass
    ran = db.query_one("SELECT task_name, last_run_at, last_result FROM heartbeat_schedule"
                       " WHERE last_run_at IS NOT NULL ORDER BY last_run_at DESC LIMIT 1")
    return {"enabledTasks": enabled, "next": {"task": due[0], "at": due[1]} if due else None,
            "last": {"task": ran[0], "at": ran[1], "result": ran[2]} if ran else None}


def turn_summaries(db: Any, limit: int = RECENT_TURNS) -> list[dict[str, Any]]:
    """The newest turns, newest first: when, what came in, which tools, the start of what the agent said, the
    context it was given, and how it ended (``turns.ending``, as ``logs`` reads it)."""
    summaries = []
    turns = recent_turns(db, limit)
    ended = endings_of(db, [turn.id for turn in turns])
    for turn in reversed(turns):
        said = " ".join(turn.thinking.split())
        context = turn.token_usage.get("context")
        summaries.append({"at": turn.timestamp, "input": turn.input_source, "tools": [c.name for c in turn.tool_calls],
                          "said": said if len(said) <= SAID_CHARS else said[: SAID_CHARS - 1] + "…",
                          "context": context if isinstance(context, dict) else None, "ending": ended.get(turn.id)})
    return summaries


def _distress(record: dict[str, Any]) -> dict[str, Any] | None:
    """The last distress: when, level, and whether its message reached the creator (``why`` not, when not)."""
    if not record.get("level"):
        return None
    return {"at": record.get("timestamp"), "level": record["level"], "source": record.get("source", "heartbeat"),
            "sent": bool(record.get("sent")), "sentAt": record.get("sentAt"), "creator": record.get("creator"),
            "relayId": record.get("relayId"), "why": record.get("why")}


def _running(pid: Any) -> bool:
    from automaton_min.confine.reaper import alive

    return isinstance(pid, int) and pid > 1 and alive(pid)


def _soul(db: Any) -> dict[str, Any] | None:
    """The soul's newest version (from ``soul_history``) and the last reflection's alignment with the purpose."""
    if not table_exists(db, "soul_history"):
        return None
    newest = db.query_one("SELECT version, change_source, created_at FROM soul_history ORDER BY version DESC LIMIT 1")
    reflected = json_object(get_value(db, "last_soul_reflection"))  # heartbeat's soul_reflection
    if newest is None and not reflected:
        return None
    version, source, at = newest if newest is not None else (None, None, None)
    return {"version": version, "source": source, "at": at, "alignment": reflected.get("alignment"),
            "reflectedAt": reflected.get("at")}


def gather_status(home: Home, config: Config | None = None) -> dict[str, Any]:
    """Name, address, whether a run holds the home, state, money and the last error, as one dict; ``state.db`` is
    opened read-only (missing or empty: an error, never replaced)."""
    home.require()
    config = config or load_config(home)
    running, pid = run_holder(home)
    with open_database(db_path(home, config), read_only=True) as db:
        identity = read_identity(db)
        state = read_agent_state(db)
        turns = count_turns(db)
        last_turn = last_turn_timestamp(db)
        credits = json_object(get_value(db, CREDITS_KEY))
        usdc = json_object(get_value(db, USDC_KEY))
        last_error = json_object(get_value(db, LAST_ERROR_KEY))
        distress = json_object(get_value(db, DISTRESS_KEY))  # social/distress.py: when, level, told or why not
        confinement = get_value(db, CONFINEMENT_KEY)
        jobs = json_list(get_value(db, JOBS_KEY)) if running else []  # only a running agent has jobs
        alerts = latest_alerts(db)  # (when, active alerts) of the last metric snapshot
        approvals = pending_approvals(db, system_now())  # transfers waiting for the creator's signed approval
        payees = known_payees(db, config)
        relay_dropped = json_object(get_value(db, "social_dropped"))  # social.intake.DROPPED_KEY
        relay_refused = refusals(db)  # genuine signers' messages refused for their signed time
        clock = ClockTrust.of(config).reading(db, system_now())
        heartbeat = heartbeat_summary(db)
        parts = stored_states(db, config)  # off by the config; unreachable as the agent last found them
        recent = turn_summaries(db)
        update = json_object(get_value(db, "update_status"))  # update.updater.STATUS_KEY: the last check
        changed = latest_change(db, "update")
        soul = _soul(db)
        alive, total = children_counts(db)
        goal = active_progress(db)
        mode = last_mode(db)
    jobs = [job for job in jobs if isinstance(job, dict) and _running(job.get("pid"))]  # ended since: not listed
    cents = credits.get("cents") if isinstance(credits.get("cents"), int) else None
    atomic = usdc.get("atomic") if isinstance(usdc.get("atomic"), int) else None
    return {
        "name": config["name"] or identity.get("name"),
        "address": config["walletAddress"] or identity.get("address"),
        "creator": config["creatorAddress"] or identity.get("creator"),
        "sandbox": config["sandboxId"] or None,
        "running": running,
        "pid": pid,
        "state": state,
        "tier": tier_for_credits(cents) if cents is not None else None,
        "creditsCents": cents,
        "creditsAt": credits.get("at") if cents is not None else None,
        "usdcAtomic": atomic,
        "usdcAt": usdc.get("at") if atomic is not None else None,
        "lastError": last_error if last_error.get("message") else None,
        "lastDistress": _distress(distress),
        "confinement": confinement,
        "backgroundJobs": jobs,
        "alerts": alerts[1] if alerts else [],
        "alertsAt": alerts[0] if alerts else None,
        "pendingApprovals": approvals,
        "knownPayees": {"creator": payees.creator, "configured": sorted(payees.configured),
                        "addedByCreator": sorted(payees.added)},
        "relayDropped": {k: v for k, v in relay_dropped.items() if isinstance(v, int)},
        "relayRefused": relay_refused,
        "clock": {"trusted": clock.trusted, "why": clock.why},
        "turns": turns,
        "lastTurnAt": last_turn,
        "recentTurns": recent,
        "heartbeat": heartbeat,
        "parts": parts,
        "localOnly": local_only(config),  # no relay, no RPC node: USDC is never read, nothing is paid
        "model": config["inferenceModel"],
        "actionMode": mode,  # how the last turn asked the model to act, and why (agent/action_mode.py)
        "version": __version__,
        # what keeps a Conway agent from spawning (a local-only agent has no children to expect)
        "children": {"alive": alive, "total": total,
                     "cannotSpawn": spawn_blocker(config, this_build()) if config.get("conwayApiKey") else None},
        "goal": goal,
        "soul": soul,
        "update": update or None,
        "lastUpdateChange": changed,
        "home": str(home.root),
    }


