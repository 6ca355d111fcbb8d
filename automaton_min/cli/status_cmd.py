"""``automaton-min status``: name, address, state and turns."""

from __future__ import annotations

from typing import Callable

import click

from automaton_min.cli.common import emit_json, emit_rows, home_of, load_config_for, with_home
from automaton_min.cli.logs_cmd import ending_text
from automaton_min.heartbeat.parts import turn_off_hint
from automaton_min.runtime.status import gather_status
from automaton_min.store.goals import progress_line


def format_usdc(atomic: int) -> str:
    from automaton_min.chain.usdc import format_usdc as render

    return render(atomic)


def _refused(refused: list[dict]) -> str | None:
    """The latest refusal of a genuine signer's message for its signed time, and how many are kept."""
    if not refused:
        return None
    last = refused[-1]
    more = f" ({len(refused)} kept)" if len(refused) > 1 else ""
    return f"{last.get('reason')}: {last.get('id')} from {last.get('from')} signed {last.get('signedAt')}{more}"


def _run_text(info: dict) -> str:
    if not info["running"]:
        return "stopped"
    return f"running (pid {info['pid']})" if info["pid"] else "running"


def _known(value: int | None, at: str | None, render: Callable[[int], str]) -> str | None:
    """A balance as last read, with when; ``None`` (shown as ``-``) when never read."""
    return None if value is None else f"{render(value)} (as of {at})"


def _approvals(waiting: list[dict]) -> str | None:
    """Pending creator approvals: ``apr_... 2000 cents to 0x... (UNKNOWN_PAYEE; expires ...)``, or None."""
    return "; ".join(f"{a['id']} {a['amountCents']} cents to {a['to']} ("
                     + (f"{a['reason'].split(':')[0]}; " if a.get("reason") else "") + f"expires {a['expiresAt']})"
                     for a in waiting) or None


def _approval_hint(info: dict) -> str:
    """How the creator releases a held transfer."""
    first = info["pendingApprovals"][0]["id"]
    return (f"the creator ({info['creator'] or 'creatorAddress'}) releases one by sending this agent, signed: "
            f"approve {first} (or reject {first}); e.g. from their own agent: "
            f"automaton-min send {info['address']} \"approve {first}\"")


def _payees(known: dict) -> str:
    """Who credits may go to without approval: ``the creator, 2 in knownPayees, 1 added by the creator``."""
    parts = ["the creator" if known["creator"] else "no creator set"]
    parts += [f"{len(known[key])} {label}" for key, label in (("configured", "in treasuryPolicy.knownPayees"),
                                                              ("addedByCreator", "added by the creator")) if known[key]]
    return ", ".join(parts)


def _heartbeat(beat: dict) -> str | None:
    """``7 tasks; next check_credits at ...; last retention success at ...``, or None with no task enabled."""
    if not beat["enabledTasks"]:
        return None
    parts = [f"{beat['enabledTasks']} tasks"]
    if beat["next"]:
        parts.append(f"next {beat['next']['task']} "
                     + (f"at {beat['next']['at']}" if beat["next"]["at"] else "due now"))
    if beat["last"]:
        parts.append(f"last {beat['last']['task']} {beat['last']['result'] or ''} at {beat['last']['at']}"
                     .replace("  ", " "))
    return "; ".join(parts)


def _turn_line(turn: dict) -> str:
    """``2026-11-23T01:02:03.000Z inbox: exec, remember_fact | "I will..." [1234/2662 tokens]; ended: slept 600 s:
    ...``, the ending in ``logs``' words."""
    tools = ", ".join(turn["tools"]) or "no tools"
    context = turn["context"]
    size = f" [{context['used']}/{context['capacity']} tokens]" if context else ""
    said = f' | "{turn["said"]}"' if turn["said"] else ""
    ended = f"; ended: {ending_text(turn['ending'])}" if turn.get("ending") else ""
    return f"{turn['at']} {turn['input'] or 'continued'}: {tools}{said}{size}{ended}"


def _parts(parts: dict) -> str:
    """``the Conway API off (no conwayApiKey); the RPC node unreachable since ... (http://..., rpcUrl; next try at
    ...)``, or "all on"."""
    from automaton_min.heartbeat.parts import LABELS, URL_SETTINGS

    said = []
    for name, part in parts.items():
        label = LABELS.get(name, name)
        if part["state"] == "off":
            said.append(f"{label} off ({part.get('why')})")
        elif part["state"] == "unreachable":
            said.append(f"{label} unreachable since {part.get('since')} ({part.get('url')}, {URL_SETTINGS.get(name)};"
                        f" next try at {part.get('nextTryAt')})")
    return "; ".join(said) or "all on"


def _conway_off(info: dict) -> bool:
    return info["parts"].get("conway", {}).get("state") == "off"


def _tier(info: dict) -> str:
    if info["tier"]:
        return info["tier"]
    if _conway_off(info):
        return "normal (credits do not apply: the Conway API is off)"
    return "unknown (no credit balance read yet)"


def _distress(last: dict | None) -> str | None:
    """``dead at ...; sent to the creator 0x... at ...`` or ``...; not sent: <why>``; None without a distress."""
    if last is None:
        return None
    from automaton_min.social.distress import delivery_text

    raised = " (raised by the agent)" if last["source"] == "agent" else ""
    return f"{last['level']} at {last['at']}{raised}; {delivery_text(last)}"


def _alerts(info: dict) -> str | None:
    """The last metric snapshot's active alerts, with when; None when no snapshot was taken yet."""
    if info["alertsAt"] is None:
        return None
    listed = "; ".join(f"{a['severity']} {a['rule']}: {a['message']}" for a in info["alerts"]) or "none"
    return f"{listed} (as of {info['alertsAt']})"


def _soul(soul: dict | None) -> str | None:
    """SOUL.md's version and who changed it last; its agreement with the purpose at the last reflection."""
    if not soul:
        return None
    parts = [f"version {soul['version']} ({soul['source']}, {soul['at']})"] if soul["version"] is not None else []
    if soul["alignment"] is not None:
        parts.append(f"agrees with the purpose at {soul['alignment']:.2f} of 1 (reflected {soul['reflectedAt']})")
    return "; ".join(parts) or None


def _update(info: dict) -> str | None:
    """The last update check and the last change it made (applied, refused, rolled back)."""
    check, change = info["update"], info["lastUpdateChange"]
    parts = [f"{check['state']}: {check['detail']} (checked {check['checked_at']})"] if check else []
    if change:
        parts.append(f"last {change['type'].removeprefix('update_').replace('_', ' ')} at {change['at']}")
    return "; ".join(parts) or None


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    """Show who the automaton is and what it is doing."""
    info = gather_status(home_of(ctx), load_config_for(ctx))
    if as_json:
        emit_json(info)
        return
    click.echo(f"{info['name']}  (automaton-min {info['version']})")
    emit_rows([
        ("address", info["address"]),
        ("creator", info["creator"]),
        ("sandbox", info["sandbox"] or "local"),
        ("confinement", info["confinement"] or "not known yet (the agent has not run)"),
        ("run", _run_text(info)),
        ("background",
         "; ".join(f"{j['id']} pid {j['pid']}: {j['command'][:60]}" for j in info["backgroundJobs"]) or None),
        ("state", info["state"]),
        ("tier", _tier(info)),
        ("credits", _known(info["creditsCents"], info["creditsAt"], lambda cents: f"${cents / 100:.2f}")
         or ("off (no conwayApiKey)" if _conway_off(info) else None)),
        ("USDC", "off (local only)" if info["localOnly"] else _known(info["usdcAtomic"], info["usdcAt"], format_usdc)),
        ("last error",
         f"{info['lastError']['message']} (at {info['lastError'].get('at')})" if info["lastError"] else None),
        ("distress", _distress(info["lastDistress"])),
        ("alerts", _alerts(info)),
        ("approvals", _approvals(info["pendingApprovals"])),
        *((("", _approval_hint(info)),) if info["pendingApprovals"] else ()),
        ("payees", _payees(info["knownPayees"])),
        ("relay dropped", ", ".join(f"{k} {v}" for k, v in sorted(info["relayDropped"].items())) or None),
        ("relay refused", _refused(info["relayRefused"])),
        ("clock", "trusted: " + info["clock"]["why"] if info["clock"]["trusted"]
         else "not needed while local only: " + info["clock"]["why"] if info["localOnly"]
         else "NOT trusted: " + info["clock"]["why"]),
        ("heartbeat", _heartbeat(info["heartbeat"])),
        ("remote parts", _parts(info["parts"])),
        *((("", with_home(hint, ctx)),) if (hint := turn_off_hint(info["parts"])) else ()),
        ("turns", info["turns"]),
        ("last turn", info["lastTurnAt"]),
        *((("recent" if n == 0 else ""), _turn_line(turn)) for n, turn in enumerate(info["recentTurns"])),
        ("model", info["model"]),
        ("action mode", f"{info['actionMode']['mode']} ({info['actionMode']['why']})" if info["actionMode"] else None),
        ("children", f"{info['children']['alive']} alive / {info['children']['total']} total"
         if info["children"]["total"] else f"none; cannot spawn: {info['children']['cannotSpawn']}"
         if info["children"]["cannotSpawn"] else None),
        ("goal", progress_line(info["goal"]) if info["goal"] else None),
        ("soul", _soul(info["soul"])),
        ("updates", _update(info)),
        ("home", info["home"]),
    ])
