"""At a run's start: what became of the last update (README: Updates). The new binary is on trial until it has
run (the first watchdog ping under the unit, the end of start-up elsewhere); the unit's ExecStopPost rolls back one
that fails before that, and the binary that runs next records it here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from automaton_min.log import get_logger
from automaton_min.store import modifications
from automaton_min.store.kv import get_value, json_list, set_json
from automaton_min.update import swap

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database
    from automaton_min.update.baked import Build

log = get_logger(__name__)

REJECTED_KEY = "update_rejected"  # versions rolled back here, never applied again (the updater reads it)


def on_trial(build: "Build") -> bool:
    """This binary was just swapped in and has not yet proved itself (a file read: no database)."""
    marker = swap.read_marker(build.binary) if build.binary is not None else None
    return marker is not None and marker.state != "rolled-back" and marker.new == build.version


def settle(db: "Database", build: "Build", now_ms: int) -> bool:
    """Record a rollback or an update that never took place; True when this run is a trial to confirm."""
    if build.binary is None or (marker := swap.read_marker(build.binary)) is None:
        return False
    if marker.state == "rolled-back":
        record_rollback(db, build, marker.new, f"version {marker.new} failed before it had run and was rolled back "
                        f"to {marker.old}; it will not be applied again", now_ms)
        log.error("update rolled back", extra={"failed": marker.new, "running": build.version})
    elif marker.new == build.version:
        log.info("this version is on trial: kept once it has run", extra={"from": marker.old, "to": marker.new})
        return True
    else:
        with db.transaction():
            modifications.record(db, "update_abandoned", f"the update {marker.old} -> {marker.new} did not take "
                                 f"place; {build.version} runs", now_ms, file_path=str(build.binary))
        log.warning("an update did not take place", extra={"to": marker.new, "running": build.version})
    swap.clear_marker(build.binary)
    return False


def record_rollback(db: "Database", build: "Build", version: str, description: str, now_ms: int) -> None:
    """A rollback's row in ``modifications``, and ``version`` never applied again."""
    with db.transaction():
        modifications.record(db, "update_rolled_back", description, now_ms, file_path=str(build.binary))
        set_json(db, REJECTED_KEY, sorted({*json_list(get_value(db, REJECTED_KEY)), version}), now_ms)


def confirm(db: "Database", build: "Build", now_ms: int) -> None:
    """The trial passed: the update is kept."""
    if build.binary is None or not on_trial(build):
        return
    with db.transaction():
        modifications.record(db, "update_confirmed", f"version {build.version} started and ran: the update is kept",
                             now_ms, file_path=str(build.binary))
    swap.clear_marker(build.binary)
    log.info("update confirmed", extra={"version": build.version})
