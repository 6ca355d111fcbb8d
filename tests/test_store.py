"""The storage layer on real SQLite files: open, PRAGMAs, migrations, upgrades of
reference-runtime databases, transactions, WAL concurrency, damaged files and the
small table modules."""

from __future__ import annotations

import os
import random
import sqlite3
import stat
import threading
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.clock import from_iso, is_stored_format, to_iso
from automaton_min.errors import DatabaseError
from automaton_min.store.db import BUSY_TIMEOUT_MS, Database, open_database
from automaton_min.store.identity import read_identity, write_identity
from automaton_min.store.kv import delete_value, get_value, set_value
from automaton_min.store.migrations import (
    MIGRATIONS,
    Migration,
    applied_names,
    current_version,
    latest_version,
    migrate,
)
from automaton_min.store.sqlite import normalize_timestamps
from automaton_min.store.turns import count_turns, last_turn_timestamp
from tests.fixtures.reference_v11 import (
    FOREIGN_TABLES,
    REFERENCE_IDENTITY,
    REFERENCE_KV,
    REFERENCE_TABLES,
    REFERENCE_TURNS,
    build_reference_v3,
    build_reference_v11,
)

# The reference runtime's column names, in the reference's order.
CORE_COLUMNS = {
    "schema_version": ["version", "applied_at", "name"],
    "identity": ["key", "value"],
    "kv": ["key", "value", "updated_at"],
    "turns": [
        "id", "timestamp", "state", "input", "input_source", "thinking",
        "tool_calls", "token_usage", "cost_cents", "created_at",
        "ending",  # automaton-min's (migration 111): how the turn ended, for logs
    ],
    "tool_calls": ["id", "turn_id", "name", "arguments", "result", "duration_ms", "error", "created_at"],
    "transactions": ["id", "type", "amount_cents", "balance_after_cents", "description", "created_at"],
    "inbox_messages": [
        "id", "from_address", "content", "received_at", "processed_at", "reply_to",
        "to_address", "raw_content", "status", "retry_count", "max_retries",
        "signed_by",  # automaton-min's (migration 106): the verified relay signer
        "crash_count",  # automaton-min's (migration 109): crashes with the message in flight (not tries)
    ],
}

CORE_INDEXES = {
    "idx_turns_timestamp", "idx_turns_state", "idx_tool_calls_turn",
    "idx_transactions_type", "idx_inbox_unprocessed",
}

# Timestamp columns of the core tables (and the key that identifies a row).
CORE_TIMESTAMP_COLUMNS = {
    "schema_version": ("version", ("applied_at",)),
    "kv": ("key", ("updated_at",)),
    "turns": ("id", ("timestamp", "created_at")),
    "tool_calls": ("id", ("created_at",)),
    "transactions": ("id", ("created_at",)),
    "inbox_messages": ("id", ("received_at", "processed_at")),
}

# Tables (and their indexes) that automaton-min adds beside the reference schema.
OWN_TABLES = ("payment_intents", "social_outbound", "pending_approvals", "sent_messages", "known_payees", "failed_turns",
              "creator_commands", "goal_origins")
OWN_INDEXES = ("idx_payment_intents_resource", "idx_payment_intents_created",
               "sqlite_autoindex_payment_intents_1", "sqlite_autoindex_payment_intents_2", "idx_spend_created",
               "idx_social_outbound_at", "idx_pending_approvals_status", "sqlite_autoindex_pending_approvals_1",
               "idx_turns_order", "idx_sent_messages_created", "sqlite_autoindex_sent_messages_1",
               "sqlite_autoindex_known_payees_1", "idx_failed_turns_order", "sqlite_autoindex_failed_turns_1",
               "sqlite_autoindex_goal_origins_1",
               "sqlite_autoindex_creator_commands_1")
# Reference tables from its v4/v6 that automaton-min implements: an older reference database gains them.
LATER_REFERENCE_TABLES = ("model_registry", "inference_costs", "spend_tracking", "policy_decisions",
                          "heartbeat_schedule", "heartbeat_history", "wake_events", "heartbeat_dedup", "metric_snapshots",
                          "soul_history", "child_lifecycle_events", "goals", "task_graph")
# Reference tables the runtime uses: rows kept, timestamps rewritten into the one format at the same instants.
RUNTIME_TABLES = ("heartbeat_schedule", "heartbeat_history", "wake_events")
# The reference's memory tables (migration 107): rows kept, timestamps in the one format; an older database gains
# them. Six of them get an FTS5 index (external content: the virtual table, four shadow tables, three triggers).
MEMORY_TABLES = ("working_memory", "episodic_memory", "session_summaries", "semantic_memory", "procedural_memory",
                 "relationship_memory", "event_stream", "knowledge_store")
MEMORY_FTS_TABLES = tuple(f"{t}_fts{s}" for t in MEMORY_TABLES[:6]
                          for s in ("", "_data", "_idx", "_docsize", "_config"))
MEMORY_FTS_OBJECTS = (*MEMORY_FTS_TABLES, *(f"{t}_fts_{s}" for t in MEMORY_TABLES[:6] for s in ("ai", "ad", "au")))


def same_instants(before: list[tuple], after: list[tuple]) -> bool:
    """Rows equal but for date-time text, which must name the same instants (and be in the one format after)."""
    def read(value):
        text = value.strip("'") if isinstance(value, str) else value
        if isinstance(text, str) and len(text) >= 19 and text[4] == "-" and text[10] in " T":
            return from_iso(text if "T" in text else text.replace(" ", "T") + ("Z" if len(text) == 19 else ""))
        return value
    return [tuple(map(read, r)) for r in before] == [tuple(map(read, r)) for r in after]


# --- helpers (plain sqlite3, independent of the code under test) --------------


def _sqlite(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def tables_of(path: Path) -> list[str]:
    with _sqlite(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def master_of(path: Path) -> list[tuple]:
    conn = _sqlite(path)
    try:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    finally:
        conn.close()


def quoted_rows(path: Path, table: str) -> list[tuple]:
    """Every row with each value as SQLite's ``quote()`` (type and bytes preserved), in rowid order."""
    conn = _sqlite(path)
    try:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        select = ", ".join(f"quote({c})" for c in cols)
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0] or ""
        order = "" if table == "sqlite_sequence" else " ORDER BY 1" if "WITHOUT ROWID" in sql else " ORDER BY rowid"
        return conn.execute(f"SELECT {select} FROM {table}{order}").fetchall()
    finally:
        conn.close()


def row_counts(path: Path) -> dict[str, int]:
    conn = _sqlite(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0] for name in names}
    finally:
        conn.close()


def rows_by_key(path: Path, table: str, key: str, columns: tuple[str, ...]) -> dict:
    conn = _sqlite(path)
    try:
        select = ", ".join((key, *columns))
        return {row[0]: row[1:] for row in conn.execute(f"SELECT {select} FROM {table}")}
    finally:
        conn.close()


def columns_in(db: Database, table: str) -> list[str]:
    return [row[1] for row in db.query(f"PRAGMA table_info({table})")]


def schema_rows(db: Database) -> list[tuple]:
    return db.query("SELECT version, name, applied_at FROM schema_version ORDER BY version")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db(db_path: Path, clock) -> Database:
    database = open_database(db_path, now=clock)
    yield database
    database.close()


# --- a fresh database -------------------------------------------------------------


def test_fresh_database_reaches_the_latest_version_with_every_step_recorded(db: Database, clock) -> None:
    assert current_version(db) == latest_version() == max(m.version for m in MIGRATIONS)
    assert applied_names(db) == {m.name for m in MIGRATIONS}
    assert {"core_tables", "one_timestamp_format"} <= applied_names(db)
    rows = schema_rows(db)
    assert [(v, n) for v, n, _ in rows] == sorted((m.version, m.name) for m in MIGRATIONS)
    # Our steps live at 100 and above; each is stamped by the injected clock.
    assert all(v >= 100 for v, _, _ in rows)
    assert all(applied_at == to_iso(clock()) for _, _, applied_at in rows)


@pytest.mark.parametrize("table", sorted(CORE_COLUMNS))
def test_fresh_database_has_the_reference_core_columns(db: Database, table: str) -> None:
    assert columns_in(db, table) == CORE_COLUMNS[table]


def test_fresh_database_has_the_core_indexes_and_working_defaults(db: Database) -> None:
    indexes = {r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert CORE_INDEXES <= indexes
    partial = db.scalar("SELECT sql FROM sqlite_master WHERE name = 'idx_inbox_unprocessed'")
    assert "WHERE processed_at IS NULL" in partial

    db.execute("INSERT INTO kv (key, value) VALUES ('k', 'v')")
    assert is_stored_format(db.scalar("SELECT updated_at FROM kv WHERE key = 'k'"))
    db.execute("INSERT INTO inbox_messages (id, from_address, content) VALUES ('m', '0xabc', 'hi')")
    row = db.query_one("SELECT received_at, processed_at, status, retry_count, max_retries FROM inbox_messages")
    assert is_stored_format(row[0])
    assert row[1:] == (None, "received", 0, 3)
    db.execute("INSERT INTO turns (id, timestamp, state, thinking) VALUES ('t', '2026-01-01T00:00:00.000Z', 'running', '')")
    assert db.query_one("SELECT tool_calls, token_usage, cost_cents FROM turns") == ("[]", "{}", 0)


def test_foreign_keys_are_enforced(db: Database) -> None:
    with pytest.raises(apsw.ConstraintError):
        db.execute("INSERT INTO tool_calls (id, turn_id, name) VALUES ('c', 'no-such-turn', 'exec')")
    assert db.scalar("SELECT COUNT(*) FROM tool_calls") == 0


def test_pragmas_after_open(db: Database) -> None:
    assert db.pragma("journal_mode") == "wal"
    assert db.pragma("synchronous") == 1  # NORMAL
    assert db.pragma("foreign_keys") == 1
    assert db.pragma("busy_timeout") == BUSY_TIMEOUT_MS == 5000
    assert db.pragma("temp_store") == 2  # MEMORY
    cache = db.pragma("cache_size")
    assert -64 * 1024 <= cache < 0  # negative = KiB, so bounded memory whatever the page size
    assert db.pragma("journal_size_limit") > 0
    assert db.pragma("mmap_size") == 0
    assert db.pragma("wal_autocheckpoint") == 1000


def test_new_file_is_created_private(tmp_path: Path, clock) -> None:
    path = tmp_path / "state.db"
    old = os.umask(0)  # so the mode comes from the code, not from a strict umask
    try:
        with open_database(path, now=clock) as db:
            db.execute("INSERT INTO kv (key, value) VALUES ('k', 'v')")
            wal = Path(f"{path}-wal")
            assert wal.exists()
            assert stat.S_IMODE(wal.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_reopening_and_remigrating_is_a_no_op(db_path: Path, clock) -> None:
    with open_database(db_path, now=clock) as db:
        versions = schema_rows(db)
    master = master_of(db_path)

    clock.advance(3_600_000)
    with open_database(db_path, now=clock) as db:
        assert schema_rows(db) == versions
        assert migrate(db, MIGRATIONS, clock) == []
        assert schema_rows(db) == versions
    assert master_of(db_path) == master


# --- a failing step ---------------------------------------------------------------


def _step_that_fails(db: Database) -> None:
    db.execute("CREATE TABLE widgets (id INTEGER PRIMARY KEY, label TEXT NOT NULL)")
    db.execute("INSERT INTO widgets (label) VALUES ('first')")
    db.execute("INSERT INTO no_such_table VALUES (1)")


def _step_fixed(db: Database) -> None:
    db.execute("CREATE TABLE widgets (id INTEGER PRIMARY KEY, label TEXT NOT NULL)")
    db.execute("INSERT INTO widgets (label) VALUES ('first')")


def test_a_failing_step_rolls_back_whole_and_a_fixed_step_applies_later(db_path: Path, clock) -> None:
    broken = [*MIGRATIONS, Migration(500, "add_widgets", _step_that_fails)]
    with pytest.raises(DatabaseError) as failure:
        open_database(db_path, migrations=broken, now=clock)
    message = str(failure.value)
    assert "add_widgets" in message and "500" in message
    assert str(db_path) in message

    # The earlier steps stay; the failing one left nothing behind.
    assert "widgets" not in tables_of(db_path)
    with open_database(db_path, now=clock) as db:
        assert current_version(db) == latest_version()
        assert db.scalar("SELECT COUNT(*) FROM schema_version WHERE version = 500 OR name = 'add_widgets'") == 0
        assert db.connection.in_transaction is False

    fixed = [*MIGRATIONS, Migration(500, "add_widgets", _step_fixed)]
    with open_database(db_path, migrations=fixed, now=clock) as db:
        assert current_version(db) == 500 == latest_version(fixed)
        assert "add_widgets" in applied_names(db)
        assert db.query("SELECT id, label FROM widgets") == [(1, "first")]
    # And once applied, it is not applied again.
    with open_database(db_path, migrations=fixed, now=clock) as db:
        assert db.query("SELECT label FROM widgets") == [("first",)]


def test_a_failing_step_after_good_steps_in_the_same_run_keeps_the_good_ones(db_path: Path, clock) -> None:
    steps = [
        *MIGRATIONS,
        Migration(500, "good_one", lambda db: db.execute("CREATE TABLE good_one (x)")),
        Migration(501, "bad_one", _step_that_fails),
    ]
    with pytest.raises(DatabaseError, match="bad_one"):
        open_database(db_path, migrations=steps, now=clock)
    assert "good_one" in tables_of(db_path)
    assert "widgets" not in tables_of(db_path)
    with open_database(db_path, now=clock) as db:
        assert current_version(db) == 500


# --- upgrading the reference runtime's databases ---------------------------------


@pytest.fixture
def reference_v11(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    build_reference_v11(path)
    return path


def test_reference_fixture_is_shaped_like_the_reference(reference_v11: Path) -> None:
    # A check on the fixture itself, so the upgrade tests start from what they claim.
    assert set(tables_of(reference_v11)) == {*REFERENCE_TABLES, "sqlite_sequence"}
    assert len(REFERENCE_TABLES) == 37
    conn = _sqlite(reference_v11)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert [r[1] for r in conn.execute("PRAGMA table_info(schema_version)")] == ["version", "applied_at"]
        assert [r[0] for r in conn.execute("SELECT version FROM schema_version")] == list(range(2, 12))
        stamps = [r[0] for r in conn.execute("SELECT timestamp FROM turns")]
    finally:
        conn.close()
    assert any(is_stored_format(s) for s in stamps) and not all(is_stored_format(s) for s in stamps)


def test_reference_v11_upgrades_without_losing_or_changing_rows(reference_v11: Path, clock) -> None:
    counts = row_counts(reference_v11)
    master = master_of(reference_v11)
    foreign = {t: quoted_rows(reference_v11, t) for t in (*FOREIGN_TABLES, "sqlite_sequence")
               if t not in (*RUNTIME_TABLES, *MEMORY_TABLES)}
    runtime = {t: quoted_rows(reference_v11, t) for t in (*RUNTIME_TABLES, *MEMORY_TABLES)}
    inbox = quoted_rows(reference_v11, "inbox_messages")
    spend_before = quoted_rows(reference_v11, "spend_tracking")

    with open_database(reference_v11, now=clock) as db:
        assert current_version(db) == latest_version()
        assert db.integrity_check() == ["ok"]
        assert db.pragma("journal_mode") == "wal"

        assert read_identity(db) == REFERENCE_IDENTITY
        assert {k: get_value(db, k) for k in REFERENCE_KV} == {k: v for k, (v, _) in REFERENCE_KV.items()}
        assert get_value(db, "agent_state") == "sleeping"
        turns = db.query(
            "SELECT id, state, input, input_source, thinking, tool_calls, token_usage, cost_cents FROM turns ORDER BY id"
        )
        assert turns == [(t[0], *t[2:9]) for t in REFERENCE_TURNS]
        assert count_turns(db) == 3
        # Text order was wrong across the two formats ('2026-02-19 14:02:45' < '...T14:01:30.500Z');
        # after the upgrade the newest turn really is the newest.
        assert last_turn_timestamp(db) == "2026-02-19T14:02:45.000Z"
        assert db.scalar("SELECT COUNT(*) FROM tool_calls t JOIN turns u ON u.id = t.turn_id") == 3

        rows = schema_rows(db)
        assert [v for v, _, _ in rows if v < 100] == list(range(2, 12))
        assert all(n is None for v, n, _ in rows if v < 100)
        assert {(v, n) for v, n, _ in rows if v >= 100} == {(m.version, m.name) for m in MIGRATIONS}

    after = row_counts(reference_v11)
    assert after.pop("schema_version") == counts.pop("schema_version") + len(MIGRATIONS)
    assert {t: after.pop(t) for t in OWN_TABLES} == {t: 0 for t in OWN_TABLES}
    fts = {t: after.pop(t) for t in MEMORY_FTS_TABLES}
    assert all(fts[f"{t}_fts"] == counts[t] for t in MEMORY_TABLES[:6])  # the index reads its base table
    assert after == counts
    assert all(quoted_rows(reference_v11, t) == rows for t, rows in foreign.items())
    assert all(same_instants(rows, quoted_rows(reference_v11, t)) for t, rows in runtime.items())
    # The reference's schema is untouched but for schema_version's new name column, inbox_messages' signed_by
    # (migration 106) and turns' ending (111); our own tables and the memory indexes (migration 107) are added.
    changed = {m[1] for m in set(master) ^ set(master_of(reference_v11))}
    assert changed == {"schema_version", "inbox_messages", "turns", *OWN_TABLES, *OWN_INDEXES, *MEMORY_FTS_OBJECTS}
    # Inbox rows keep every non-timestamp value.
    keep = lambda rows: [r[:3] + r[5:] for r in rows]  # noqa: E731 - drop received_at, processed_at
    upgraded = quoted_rows(reference_v11, "inbox_messages")
    assert all(r[-2:] == ("NULL", "0") for r in upgraded)  # signed_by: none counts as verified; crash_count 0
    assert keep([r[:-2] for r in upgraded]) == keep(inbox)
    # spend_tracking is ours now too: amounts kept, timestamps in the one format at the same instants.
    spend_after = quoted_rows(reference_v11, "spend_tracking")
    assert [r[:-1] for r in spend_after] == [r[:-1] for r in spend_before]
    assert [from_iso(r[-1].strip("'")) for r in spend_after] == [from_iso(r[-1].strip("'")) for r in spend_before]
    assert all(is_stored_format(r[-1].strip("'")) for r in spend_after)


def test_reference_v11_timestamps_end_up_in_one_format_at_the_same_instants(reference_v11: Path, clock) -> None:
    before = {t: rows_by_key(reference_v11, t, key, cols) for t, (key, cols) in CORE_TIMESTAMP_COLUMNS.items()}
    open_database(reference_v11, now=clock).close()
    after = {t: rows_by_key(reference_v11, t, key, cols) for t, (key, cols) in CORE_TIMESTAMP_COLUMNS.items()}

    checked = 0
    for table, rows in before.items():
        for key, values in rows.items():
            for old, new in zip(values, after[table][key], strict=True):
                if old is None:
                    assert new is None, (table, key)
                    continue
                assert is_stored_format(new), (table, key, new)
                assert from_iso(new) == from_iso(old), (table, key, old, new)
                checked += 1
    # Both source formats were present, so the upgrade really rewrote something.
    assert checked >= 20
    assert any(not is_stored_format(v) for rows in before.values() for vals in rows.values() for v in vals if v)
    # Our own steps' rows are there too, in the stored format.
    assert all(is_stored_format(v[0]) for v in after["schema_version"].values())
    assert set(after["schema_version"]) == set(range(2, 12)) | {m.version for m in MIGRATIONS}


def test_reference_v11_opened_twice_is_a_no_op(reference_v11: Path, clock) -> None:
    open_database(reference_v11, now=clock).close()
    master = master_of(reference_v11)
    snapshot = {t: quoted_rows(reference_v11, t) for t in tables_of(reference_v11)}
    clock.advance(86_400_000)
    with open_database(reference_v11, now=clock) as db:
        assert migrate(db, MIGRATIONS, clock) == []
    assert master_of(reference_v11) == master
    assert {t: quoted_rows(reference_v11, t) for t in tables_of(reference_v11)} == snapshot


def test_reference_v3_gains_the_inbox_columns_with_their_defaults(tmp_path: Path, clock) -> None:
    path = tmp_path / "state.db"
    build_reference_v3(path)
    assert "status" not in [r[1] for r in _sqlite(path).execute("PRAGMA table_info(inbox_messages)")]
    counts = row_counts(path)
    old_inbox = rows_by_key(path, "inbox_messages", "id", ("from_address", "content", "reply_to"))

    with open_database(path, now=clock) as db:
        assert columns_in(db, "inbox_messages") == CORE_COLUMNS["inbox_messages"]
        assert db.query(
            "SELECT id, to_address, raw_content, status, retry_count, max_retries FROM inbox_messages ORDER BY id"
        ) == [("msg_1", None, None, "received", 0, 3), ("msg_2", None, None, "received", 0, 3)]
        assert [v for v, _, _ in schema_rows(db)] == [2, 3, *sorted(m.version for m in MIGRATIONS)]
        assert all(is_stored_format(r[0]) for r in db.query("SELECT received_at FROM inbox_messages"))
        assert db.integrity_check() == ["ok"]

    after = row_counts(path)
    assert after.pop("schema_version") == counts.pop("schema_version") + len(MIGRATIONS)
    added = (*OWN_TABLES, *LATER_REFERENCE_TABLES, *MEMORY_TABLES, "sqlite_sequence")  # wake_events: AUTOINCREMENT
    assert {t: after.pop(t) for t in added} == {t: 0 for t in added}
    assert {t: after.pop(t) for t in MEMORY_FTS_TABLES if t.endswith("_fts")} == {t: 0 for t in MEMORY_FTS_TABLES
                                                                                  if t.endswith("_fts")}
    for t in MEMORY_FTS_TABLES:  # the shadow tables' bookkeeping rows
        after.pop(t, None)
    assert after == counts
    assert rows_by_key(path, "inbox_messages", "id", ("from_address", "content", "reply_to")) == old_inbox
    # Only what we implement is added: none of the reference's other later tables appear.
    assert "discovered_agents_cache" not in tables_of(path) and "children" in counts


# --- transactions ------------------------------------------------------------------


def kv_keys(db: Database) -> list[str]:
    return [r[0] for r in db.query("SELECT key FROM kv ORDER BY key")]


def test_transaction_commits_on_success(db: Database, db_path: Path, clock) -> None:
    with db.transaction() as same:
        assert same is db
        set_value(db, "a", "1", clock())
        set_value(db, "b", "2", clock())
        assert db.connection.in_transaction
    assert not db.connection.in_transaction
    # Visible to an independent connection, so it really was committed.
    other = _sqlite(db_path)
    try:
        assert other.execute("SELECT key, value FROM kv ORDER BY key").fetchall() == [("a", "1"), ("b", "2")]
    finally:
        other.close()


def test_transaction_rolls_back_everything_on_an_exception(db: Database, clock) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with db.transaction():
            set_value(db, "a", "1", clock())
            set_value(db, "b", "2", clock())
            raise Boom
    assert kv_keys(db) == []
    assert not db.connection.in_transaction
    # The Database is usable afterwards (depth reset, no dangling transaction).
    with db.transaction():
        set_value(db, "c", "3", clock())
    assert kv_keys(db) == ["c"]


def test_nested_transaction_is_a_savepoint(db: Database, clock) -> None:
    with db.transaction():
        set_value(db, "outer-before", "1", clock())
        with pytest.raises(ValueError):
            with db.transaction():
                set_value(db, "inner", "2", clock())
                raise ValueError("inner only")
        assert kv_keys(db) == ["outer-before"]
        with db.transaction():
            set_value(db, "inner-ok", "3", clock())
        set_value(db, "outer-after", "4", clock())
    assert kv_keys(db) == ["inner-ok", "outer-after", "outer-before"]


def test_outer_failure_discards_a_released_savepoint(db: Database, clock) -> None:
    with pytest.raises(KeyError):
        with db.transaction():
            with db.transaction():
                set_value(db, "inner", "1", clock())
            raise KeyError("outer")
    assert kv_keys(db) == []
    assert not db.connection.in_transaction


def test_durable_transaction_syncs_fully_then_restores_normal(db: Database, db_path: Path, clock) -> None:
    with db.transaction(durable=True):
        assert db.pragma("synchronous") == 2  # FULL for this commit
        set_value(db, "payment_intent", "pi_1", clock())
    assert db.pragma("synchronous") == 1
    with _sqlite(db_path) as other:
        assert other.execute("SELECT value FROM kv WHERE key = 'payment_intent'").fetchone() == ("pi_1",)

    with pytest.raises(RuntimeError):
        with db.transaction(durable=True):
            set_value(db, "payment_intent_2", "pi_2", clock())
            raise RuntimeError("declined")
    assert db.pragma("synchronous") == 1
    assert get_value(db, "payment_intent_2") is None


def test_durable_transaction_restores_normal_when_it_cannot_start(db_path: Path, clock) -> None:
    with open_database(db_path, now=clock) as writer, open_database(db_path, now=clock) as other:
        other.connection.set_busy_timeout(0)
        with writer.transaction():
            set_value(writer, "held", "1", clock())
            with pytest.raises(apsw.BusyError):
                with other.transaction(durable=True):
                    pytest.fail("must not get the write lock")
        assert other.pragma("synchronous") == 1
        assert not other.connection.in_transaction
        with other.transaction():  # and it works once the lock is free
            set_value(other, "later", "2", clock())
        assert kv_keys(writer) == ["held", "later"]


def test_a_database_refuses_transactions_from_another_thread(db: Database, clock) -> None:
    errors: list[BaseException] = []

    def use_from_other_thread() -> None:
        try:
            with db.transaction():
                set_value(db, "from-thread", "x", clock())
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    worker = threading.Thread(target=use_from_other_thread)
    worker.start()
    worker.join()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "thread" in str(errors[0])
    assert get_value(db, "from-thread") is None


def test_readers_are_not_blocked_by_an_open_write_transaction(db_path: Path, clock) -> None:
    with open_database(db_path, now=clock) as writer, open_database(db_path, now=clock) as reader:
        set_value(writer, "counter", "1", clock())
        # No waiting anywhere: whatever would block fails at once instead.
        reader.connection.set_busy_timeout(0)
        writer.connection.set_busy_timeout(0)
        with writer.transaction():
            set_value(writer, "counter", "2", clock())
            set_value(writer, "new", "x", clock())
            assert get_value(reader, "counter") == "1"
            assert get_value(reader, "new") is None
            # ...while a second writer cannot start: BEGIN IMMEDIATE takes the lock up front.
            with pytest.raises(apsw.BusyError):
                with reader.transaction():
                    pass
            # A reader holding a snapshot across the commit (a rollback journal would make COMMIT fail).
            reader.execute("BEGIN")
            assert get_value(reader, "counter") == "1"
        assert get_value(writer, "counter") == "2"
        assert get_value(reader, "counter") == "1"  # still its snapshot
        reader.execute("COMMIT")
        assert get_value(reader, "counter") == "2"
        assert get_value(reader, "new") == "x"


# --- damaged files -----------------------------------------------------------------


def _assert_reported(exc: pytest.ExceptionInfo, path: Path) -> None:
    assert type(exc.value) is DatabaseError
    message = str(exc.value)
    assert str(path) in message
    assert "automaton-min doctor" in message
    assert "\n" not in message


def test_a_file_of_garbage_is_reported_not_raised_raw(db_path: Path, clock) -> None:
    db_path.write_bytes(random.Random(7).randbytes(16384))
    with pytest.raises(DatabaseError) as exc:
        open_database(db_path, now=clock)
    _assert_reported(exc, db_path)
    assert len(db_path.read_bytes()) == 16384  # left for the doctor, not replaced


def test_a_garbage_file_with_a_sqlite_header_is_reported(db_path: Path, clock) -> None:
    db_path.write_bytes(b"SQLite format 3\x00" + random.Random(8).randbytes(8192 - 16))
    with pytest.raises(DatabaseError) as exc:
        open_database(db_path, now=clock)
    _assert_reported(exc, db_path)


def _populated_database(path: Path) -> int:
    """A real database (via sqlite3) big enough to span many pages; returns its page size."""
    conn = _sqlite(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at TEXT)")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO notes (body) VALUES (?)", [(f"note {i} " * 20,) for i in range(400)])
    conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", [(f"k{i}", "v" * 50) for i in range(400)])
    conn.execute("COMMIT")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    return page_size


@pytest.mark.parametrize("first_page", [1, 3], ids=["schema-page", "data-pages"])
def test_a_database_with_overwritten_pages_is_reported(db_path: Path, clock, first_page: int) -> None:
    page_size = _populated_database(db_path)
    data = bytearray(db_path.read_bytes())
    assert len(data) >= 10 * page_size
    noise = random.Random(first_page)
    # Keep the 100-byte file header; smash the body of a few pages.
    for page in range(first_page, first_page + 4):
        start = (page - 1) * page_size + (100 if page == 1 else 0)
        end = page * page_size
        data[start:end] = noise.randbytes(end - start)
    db_path.write_bytes(bytes(data))

    with pytest.raises(DatabaseError) as exc:
        open_database(db_path, now=clock)
    _assert_reported(exc, db_path)


@pytest.mark.parametrize("quick_check", [True, False])
def test_a_damaged_schema_version_page_is_reported(db_path: Path, clock, quick_check: bool) -> None:
    # Even when the quick check is skipped, the damage met while migrating is a DatabaseError.
    with open_database(db_path, now=clock) as db:
        with db.transaction():
            for i in range(300):
                set_value(db, f"k{i}", "v" * 80, clock())
    conn = _sqlite(db_path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'schema_version'").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    assert root > 1
    data = bytearray(db_path.read_bytes())
    data[(root - 1) * page_size : root * page_size] = random.Random(root).randbytes(page_size)
    db_path.write_bytes(bytes(data))

    with pytest.raises(DatabaseError) as exc:
        open_database(db_path, now=clock, quick_check=quick_check)
    _assert_reported(exc, db_path)


# --- kv, identity, turns ------------------------------------------------------------


def test_kv_set_get_delete_stamps_with_the_injected_clock(db: Database, clock) -> None:
    assert get_value(db, "agent_state") is None
    set_value(db, "agent_state", "waking", clock())
    assert get_value(db, "agent_state") == "waking"
    assert db.scalar("SELECT updated_at FROM kv WHERE key = 'agent_state'") == "2026-11-22T10:15:30.250Z"

    clock.advance(90_500)
    set_value(db, "agent_state", "running", clock())
    assert get_value(db, "agent_state") == "running"
    assert db.query("SELECT key, updated_at FROM kv") == [("agent_state", "2026-11-22T10:17:00.750Z")]

    delete_value(db, "agent_state")
    assert get_value(db, "agent_state") is None
    delete_value(db, "agent_state")  # deleting a missing key is fine
    assert db.scalar("SELECT COUNT(*) FROM kv") == 0


def test_write_identity_upserts_but_keeps_existing_keys_when_asked(db: Database) -> None:
    write_identity(db, {"name": "ada", "address": "0xAAA"})
    assert read_identity(db) == {"name": "ada", "address": "0xAAA"}

    write_identity(
        db,
        {"name": "bob", "address": "0xBBB", "createdAt": "2026-11-22T10:15:30.250Z"},
        keep_existing=("address", "createdAt"),
    )
    assert read_identity(db) == {
        "name": "bob",  # not kept: overwritten
        "address": "0xAAA",  # kept: already present
        "createdAt": "2026-11-22T10:15:30.250Z",  # kept-if-present, but absent: written
    }


def test_count_turns_and_last_turn_timestamp(db: Database, clock) -> None:
    assert count_turns(db) == 0
    assert last_turn_timestamp(db) is None
    stamps = [clock() + offset for offset in (5_000, 0, 60_000, 1_000)]
    for i, ms in enumerate(stamps):
        db.execute(
            "INSERT INTO turns (id, timestamp, state, thinking) VALUES (?, ?, 'running', '')",
            (f"turn-{i}", to_iso(ms)),
        )
    assert count_turns(db) == 4
    assert last_turn_timestamp(db) == to_iso(max(stamps)) == "2026-11-22T10:16:30.250Z"


# --- timestamps -------------------------------------------------------------------


def test_normalize_timestamps_leaves_non_dates_and_normalized_values_alone(db: Database) -> None:
    values = [
        ("space", "2026-02-19 14:00:00", "2026-02-19T14:00:00.000Z"),
        ("iso-no-ms", "2026-02-19T14:00:00Z", "2026-02-19T14:00:00.000Z"),
        ("offset", "2026-02-19T16:00:00.500+02:00", "2026-02-19T14:00:00.500Z"),
        ("stored", "2026-02-19T14:00:00.250Z", "2026-02-19T14:00:00.250Z"),
        ("word", "soon", "soon"),
        ("empty", "", ""),
        ("date-then-words", "2026-02-19 was a busy day", "2026-02-19 was a busy day"),
        ("bad-month", "2026-13-01 10:00:00", "2026-13-01 10:00:00"),
        ("json", '{"at":"2026-02-19 14:00:00"}', '{"at":"2026-02-19 14:00:00"}'),
        ("null", None, None),
        ("epoch", 1771509600, 1771509600),
    ]
    db.execute("CREATE TABLE scratch (id TEXT PRIMARY KEY, at)")
    for key, value, _ in values:
        db.execute("INSERT INTO scratch VALUES (?, ?)", (key, value))

    normalize_timestamps(db, "scratch", ["at"])
    result = dict(db.query("SELECT id, at FROM scratch"))
    assert result == {key: expected for key, _, expected in values}
    assert type(result["epoch"]) is int

    normalize_timestamps(db, "scratch", ["at"])  # idempotent
    assert dict(db.query("SELECT id, at FROM scratch")) == result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ms=st.integers(min_value=0, max_value=253_402_300_799_999))  # up to 9999-12-31T23:59:59.999Z
def test_stored_format_round_trips_and_matches_sqlite(ms: int) -> None:
    text = to_iso(ms)
    assert is_stored_format(text)
    assert from_iso(text) == ms
    # The reference's SQLite-style rendering of the same instant normalizes to the same text.
    sqlite_style = text[:10] + " " + text[11:-1]
    assert from_iso(sqlite_style) == ms
    conn = apsw.Connection(":memory:")
    try:
        (normalized,) = next(conn.execute("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', ?)", (sqlite_style,)))
    finally:
        conn.close()
    assert normalized == text


def test_stored_format_sorts_in_time_order() -> None:
    instants = [0, 999, 1_000, 59_999, 1_795_342_530_250, 1_795_342_530_251, 253_402_300_799_999]
    assert sorted(to_iso(ms) for ms in instants) == [to_iso(ms) for ms in instants]


def test_durable_is_refused_inside_an_outer_transaction(db: Database) -> None:
    with db.transaction():
        with pytest.raises(ValueError, match="outermost"):
            with db.transaction(durable=True):
                pass


def test_a_file_that_cannot_be_opened_is_one_database_error(tmp_path: Path) -> None:
    directory = tmp_path / "state.db"
    directory.mkdir()
    with pytest.raises(DatabaseError, match="automaton-min doctor"):
        open_database(directory)


def test_the_previous_soul_kept_in_kv_becomes_the_first_version_of_its_history(tmp_path: Path, clock) -> None:
    before = tuple(step for step in MIGRATIONS if step.version < 113)
    db = open_database(tmp_path / "state.db", migrations=before, now=clock)
    kept = '{"content": "# Ada\\nI build tools.", "replacedAt": "2026-11-20T10:00:00.000Z", "reason": "learned"}'
    set_value(db, "soul_previous", kept, clock())
    assert migrate(db, MIGRATIONS, clock)[0] == "soul_history"
    assert db.query("SELECT version, content, change_source, change_reason, created_at FROM soul_history") == [
        (1, "# Ada\nI build tools.", "agent", "learned", "2026-11-20T10:00:00.000Z")]
    db.close()
