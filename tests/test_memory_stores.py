"""The memory stores on real SQLite files: CRUD and each store's rules, ranked full-text search among
thousands of distractors, the FTS indexes kept in sync, hostile query text, retention, creator protection, and a
reference database's memory rows after the upgrade."""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.clock import from_iso, is_stored_format
from automaton_min.memory.common import (MemoryStoreError, ProtectedMemoryError, drop_common_words, match_expression,
                                         query_words)
from automaton_min.memory.stores import (STORES, EpisodicMemory, ProceduralMemory, RelationshipMemory, SemanticMemory,
                                         SessionSummaries, WorkingMemory)
from automaton_min.store.db import open_database
from automaton_min.store.schema_memory import FTS_COLUMNS, fts_name
from tests.fixtures.reference_v11 import build_reference_v11

DAY = 86_400_000
CREATOR = "0x1234567890AbcdEF1234567890aBcdef12345678"

HOSTILE = [
    '"', "'", '""', '"unclosed', "NEAR(a b)", "NEAR", "a NEAR/2 b", "*", "port*", "a AND", "OR", "NOT x", "AND OR NOT",
    "(", ")", "((a)", "key:value", "value:port", "^start", "-minus", "+plus", "a:b:c", "{a b}:x", "\x00",
    "\\",
    "'; DROP TABLE semantic_memory; --", "日本語のテキスト", "émigré café", "🙂🙂", "a" * 5000, " ".join(["word"] * 500),
    "", "   ", "?!.,;", "_", "__init__", "0x1234567890AbcdEF1234567890aBcdef12345678",
]


@pytest.fixture
def stores(db, clock):
    return {
        "working": WorkingMemory(db, clock),
        "episodic": EpisodicMemory(db, clock),
        "summaries": SessionSummaries(db, clock),
        "semantic": SemanticMemory(db, clock),
        "procedural": ProceduralMemory(db, clock),
        "relationships": RelationshipMemory(db, clock),
    }


def check_memory_fts(db: "Database") -> None:
    """Raise ``apsw.CorruptError`` when an index disagrees with its base table."""
    for table in FTS_COLUMNS:
        fts = fts_name(table)
        db.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")


def test_every_memory_table_has_one_store() -> None:
    assert sorted(store.TABLE.name for store in STORES) == sorted(FTS_COLUMNS)
    for store in STORES:
        assert len(store.TABLE.weights) == len(FTS_COLUMNS[store.TABLE.name]), store.TABLE.name


def test_apsw_sqlite_has_fts5() -> None:
    apsw.Connection(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")


# --- working memory -----------------------------------------------------------------------------------------


def test_working_memory_crud_and_rules(db, clock) -> None:
    wm = WorkingMemory(db, clock)
    entry = wm.add("s1", "Ship the billing API before Friday", content_type="goal", priority=0.9)
    assert wm.get(entry.id) == entry and entry.token_count > 0 and is_stored_format(entry.created_at)
    assert (entry.content, entry.priority, entry.content_type) == ("Ship the billing API before Friday", 0.9, "goal")
    assert [r.item.id for r in wm.search("billing")] == [entry.id]
    assert wm.search("invoice") == []
    for bad in ({"content_type": "wish"}, {"priority": 1.5}, {"priority": -0.1}, {"priority": float("nan")},
                {"ttl_ms": 0}):
        with pytest.raises(MemoryStoreError):
            wm.add("s1", "x", **bad)
    with pytest.raises(MemoryStoreError, match="content: expected text"):
        wm.add("s1", 5)
    with pytest.raises(MemoryStoreError, match="content"):
        wm.add("s1", "   ")
    assert wm.delete(entry.id) and wm.get(entry.id) is None and not wm.delete(entry.id)


def test_working_memory_expires(db, clock) -> None:
    wm = WorkingMemory(db, clock)
    short = wm.add("s1", "temporary lease token", ttl_ms=60_000)
    keep = wm.add("s1", "permanent lease note")
    other = wm.add("s2", "another session's lease", ttl_ms=3_600_000)
    assert {e.id for e in wm.session("s1")} == {short.id, keep.id}
    assert [r.item.id for r in wm.search("lease", session_id="s2")] == [other.id]
    clock.advance(60_000)
    assert [e.id for e in wm.session("s1")] == [keep.id]
    assert [r.item.id for r in wm.search("lease", session_id="s1")] == [keep.id]
    assert wm.clear_expired() == 1 and wm.get(short.id) is None


def test_working_memory_prune_keeps_the_highest_priority_of_a_session(db, clock) -> None:
    wm = WorkingMemory(db, clock, per_session=5, max_rows=8)
    with db.transaction():
        for i in range(12):
            clock.advance(1)
            wm.add("s1", f"note {i}", priority=(i % 4) / 4)
        for i in range(6):
            wm.add("s2", f"other {i}", priority=0.5)
    wm.max_rows = 100
    assert wm.prune("s1") == 7
    kept = wm.session("s1")  # the three 0.75s and the two newest 0.5s
    assert [(e.content, e.priority) for e in kept] == [
        ("note 11", 0.75), ("note 7", 0.75), ("note 3", 0.75), ("note 10", 0.5), ("note 6", 0.5)]
    wm.max_rows = 8  # the bound over all sessions drops the lowest priority, oldest first
    assert wm.prune() == 3
    assert db.scalar("SELECT COUNT(*) FROM working_memory") == 8
    assert [e.content for e in wm.session("s1")] == ["note 11", "note 7", "note 3"]


# --- episodic memory ----------------------------------------------------------------------------------------


def test_episodic_crud_rules_and_summaries(db, clock) -> None:
    em = EpisodicMemory(db, clock)
    ep = em.record("s1", "tool:exec", "Deployed the API service v2.1", detail="Latency improved by 40ms",
                   outcome="success", importance=0.7, classification="productive")
    assert em.get(ep.id) == ep and ep.importance == 0.7 and ep.outcome == "success"
    for bad in ({"importance": 2}, {"outcome": "meh"}, {"classification": "boring"}):
        with pytest.raises(MemoryStoreError):
            em.record("s1", "x", "y", **bad)
    clock.advance(1000)
    later = em.record("s1", "thinking", "Reviewed the budget")
    assert [e.id for e in em.recent(session_id="s1")] == [later.id, ep.id]
    em.mark_accessed([ep.id])
    assert em.get(ep.id).accessed_count == 1 and em.get(ep.id).last_accessed_at is not None

    summaries = SessionSummaries(db, clock)
    first = summaries.save("s1", "Deployed v2.1 and reviewed the budget", key_decisions=["ship v2.1"], turn_count=3)
    second = summaries.save("s1", "Deployed v2.1; budget is fine", tools_used=["exec"], turn_count=4)
    assert second.id == first.id and second.turn_count == 4 and second.tools_used == ["exec"]
    assert second.key_decisions == [] and summaries.get("s1") == second
    assert [r.item.session_id for r in summaries.search("budget")] == ["s1"]
    with pytest.raises(MemoryStoreError, match="turn_count"):
        summaries.save("s1", "x", turn_count=-1)
    assert em.delete(ep.id) and em.get(ep.id) is None and not em.delete(ep.id)
    assert summaries.delete(first.id) and summaries.get("s1") is None


def test_episodic_retention_keeps_the_important_and_the_recent(db, clock) -> None:
    em = EpisodicMemory(db, clock, max_rows=30)
    with db.transaction():
        for i in range(100):  # one a day, importance cycling 0.1 .. 1.0
            em.record("s", "event", f"day {i} event", importance=(i % 10 + 1) / 10)
            clock.advance(DAY)
    assert em.prune() == 70
    kept = {int(s.split()[1]) for (s,) in db.query("SELECT summary FROM episodic_memory")}
    # What survives is a top 30 by importance - age_days / 90 (day 99 is the newest).
    score = {day: (day % 10 + 1) / 10 - (99 - day) / 90 for day in range(100)}
    dropped = set(range(100)) - kept
    assert len(kept) == 30 and min(score[d] for d in kept) >= max(score[d] for d in dropped) - 1e-9
    assert 99 in kept and 0 in dropped
    assert sum(kept) / 30 > sum(dropped) / 70  # younger on average
    assert sum(score[d] + (99 - d) / 90 for d in kept) / 30 > 0.7  # and important on average
    assert em.prune() == 0


# --- semantic memory ----------------------------------------------------------------------------------------


def test_semantic_upsert_rules_and_creator_protection(db, clock) -> None:
    sm = SemanticMemory(db, clock)
    fact = sm.remember("environment", "postgres_port", "5432", source="documentation", confidence=0.8)
    clock.advance(1000)
    again = sm.remember("environment", "postgres_port", "5433", source="observation", confidence=0.9)
    assert again.id == fact.id and (again.value, again.confidence) == ("5433", 0.9)
    assert again.updated_at > fact.updated_at and again.created_at == fact.created_at
    for bad in ({"category": "gossip"}, {"confidence": 1.01}, {"confidence": -1}, {"confidence": "high"}):
        args = {"category": "self", "confidence": 0.5, **bad}
        with pytest.raises(MemoryStoreError):
            sm.remember(args["category"], "k", "v", source="me", confidence=args["confidence"])

    told = sm.remember("agent", "deploy_window", "never deploy on Sundays", source="creator")
    about = sm.remember("creator", "name", "Grace", source="turn_1")
    for protected in (told, about):
        with pytest.raises(ProtectedMemoryError):
            sm.delete(protected.id)
        with pytest.raises(ProtectedMemoryError):
            sm.remember(protected.category, protected.key, "whatever", source="agent")
    changed = sm.remember("agent", "deploy_window", "never deploy on weekends", source="creator")
    assert (changed.id, changed.value) == (told.id, "never deploy on weekends")
    assert sm.delete(fact.id) and sm.get(fact.id) is None and not sm.delete(fact.id)
    assert [f.key for f in sm.by_category("creator")] == ["name"]


def test_semantic_prune_keeps_protected_and_confident_facts(db, clock) -> None:
    sm = SemanticMemory(db, clock, max_rows=10)
    with db.transaction():
        for i in range(5):
            sm.remember("creator", f"c{i}", "from the creator", source="creator", confidence=0.1)
        for i in range(20):
            sm.remember("domain", f"d{i}", "learned", source="agent", confidence=i / 20)
    assert sm.prune() == 15
    kept = db.query("SELECT key FROM semantic_memory ORDER BY key")
    assert {k for (k,) in kept} == {f"c{i}" for i in range(5)} | {f"d{i}" for i in range(15, 20)}


# --- procedural memory --------------------------------------------------------------------------------------


def test_procedural_crud_success_rate_and_prune(db, clock) -> None:
    pm = ProceduralMemory(db, clock, max_rows=2)
    steps = [{"order": 1, "description": "Run tests", "tool": "exec"}, {"action": "Build image"}]
    proc = pm.save("deploy_api_service", "Deploy a new API service", steps)
    assert proc.steps == steps and proc.times_executed == 0 and proc.smoothed_success_rate == 0.5
    db.execute("UPDATE procedural_memory SET success_count = 3, failure_count = 1 WHERE name = 'deploy_api_service'")
    proc = pm.get("deploy_api_service")
    assert (proc.success_count, proc.failure_count, proc.times_executed, proc.smoothed_success_rate) == (3, 1, 4, 4 / 6)
    resaved = pm.save("deploy_api_service", "Deploy an API service to production", steps[:1])
    assert resaved.id == proc.id and resaved.success_count == 3 and len(resaved.steps) == 1
    for bad in ([], "run it", [{"tool": "exec"}], ["step"]):
        with pytest.raises(MemoryStoreError):
            pm.save("p", "d", bad)

    pm.save("flaky_backup", "Back up the database", [{"description": "copy"}])
    db.execute("UPDATE procedural_memory SET failure_count = 4 WHERE name = 'flaky_backup'")
    untried = pm.save("untried_backup", "Back up the database with sqlite3 .backup", [{"description": "backup"}])
    assert [r.item.name for r in pm.search("backup database", min_success_rate=0.5)] == ["untried_backup"]
    assert pm.prune() == 1 and pm.get("flaky_backup") is None
    assert pm.delete(untried.id) and pm.get("untried_backup") is None


# --- relationship memory ------------------------------------------------------------------------------------


def test_relationships_trust_interactions_and_protection(db, clock) -> None:
    rm = RelationshipMemory(db, clock, max_rows=2)
    creator = rm.record(CREATOR, relationship_type="creator", name="Grace", trust=1.0)
    assert creator.entity_address == CREATOR.lower()
    assert rm.get(CREATOR.upper().replace("0X", "0x")).id == creator.id
    peer = rm.record_interaction("0x" + "ab" * 20, default_type="messaged_us")
    assert (peer.relationship_type, peer.trust_score, peer.interaction_count) == ("messaged_us", 0.5, 1)
    assert rm.record_interaction("0x" + "AB" * 20).interaction_count == 2
    with pytest.raises(MemoryStoreError):
        rm.record("0x" + "cd" * 20, trust=1.2)
    with pytest.raises(MemoryStoreError):
        rm.record("0x" + "cd" * 20, relationship_type="nemesis")
    rm.add_note("0x" + "ab" * 20, "sells GPU time cheaply")
    assert rm.record("0x" + "ab" * 20, name="gpu-broker").notes == "sells GPU time cheaply"
    assert [r.item.entity_name for r in rm.search("gpu")] == ["gpu-broker"]
    assert [e.entity_name for e in rm.trusted(min_trust=0.6)] == ["Grace"]
    with pytest.raises(ProtectedMemoryError):
        rm.delete(creator.id)
    rm.record("0x" + "cd" * 20, trust=0.9)
    assert rm.prune() == 1 and rm.get(CREATOR) is not None and rm.get("0x" + "cd" * 20) is None
    assert rm.delete(peer.id) and not rm.delete(peer.id)


# --- ranked search ------------------------------------------------------------------------------------------

_WORDS = ("server", "deploy", "balance", "credits", "message", "agent", "market", "price", "report", "schedule",
          "backup", "database", "wallet", "invoice", "customer", "domain", "network", "latency", "memory", "token",
          "the", "creator", "port", "service", "born", "birthday", "color", "city", "favorite", "project")
# (category, key, value, a question whose answer is that fact)
_ANSWERS = (
    ("creator", "daughter_birthday", "The creator's daughter Mirela was born on 14 March",
     "When is Mirela's birthday?"),
    ("environment", "postgres_port", "PostgreSQL listens on port 5432 in the staging sandbox",
     "which port does postgresql use in staging"),
    ("financial", "cheapest_gpu_provider", "Vastforge rents H100 GPUs at the lowest hourly price",
     "who has the cheapest GPU prices?"),
    ("domain", "favorite_city", "The creator's favorite city is Valparaíso",
     "what is the creator's favourite city? valparaiso"),
    ("agent", "translator_agent", "Agent lingua-7 translates Japanese documents for 2 cents a page",
     "find an agent that translates japanese"),
)


def _distractor(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 14)))


def test_ranked_search_finds_each_fact_among_thousands_of_distractors(db, clock) -> None:
    rng = random.Random(20261122)
    sm, em = SemanticMemory(db, clock), EpisodicMemory(db, clock)
    with db.transaction():
        for i in range(3000):
            sm.remember(rng.choice(("self", "environment", "financial", "agent", "domain")), f"fact_{i}",
                        _distractor(rng), source="agent", confidence=rng.random())
            em.record("s", "tool:exec", _distractor(rng), detail=_distractor(rng), importance=rng.random())
        for category, key, value, _ in _ANSWERS:
            sm.remember(category, key, value, source="agent", confidence=0.6)
        em.record("s", "message", "The creator said the launch password hint is 'blue heron'",
                  detail="Told in a message from the creator", importance=0.5)
    assert db.scalar("SELECT COUNT(*) FROM semantic_memory") == 3005
    for _, key, _, question in _ANSWERS:
        hits = sm.search(question, limit=5)
        assert hits and hits[0].item.key == key, (question, [h.item.key for h in hits])
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    top = em.search("what was the launch password hint the creator gave me?", limit=3)
    assert "blue heron" in top[0].item.summary
    assert len(sm.search("server deploy balance", limit=7)) == 7


def test_quality_and_recency_order_equally_relevant_matches(db, clock) -> None:
    sm, em = SemanticMemory(db, clock), EpisodicMemory(db, clock)
    sm.remember("domain", "rumour", "the relay fee is 3 cents", source="gossip", confidence=0.2)
    sm.remember("domain", "checked", "the relay fee is 3 cents", source="docs", confidence=0.95)
    assert [r.item.key for r in sm.search("relay fee")] == ["checked", "rumour"]
    old = em.record("s", "note", "renewed the domain lease", importance=0.5)
    clock.advance(90 * DAY)
    new = em.record("s", "note", "renewed the domain lease", importance=0.5)
    ranked = em.search("domain lease")
    assert [r.item.id for r in ranked] == [new.id, old.id] and ranked[0].score > ranked[1].score
    important = em.record("s", "note", "renewed the domain lease", importance=1.0)
    assert em.search("domain lease")[0].item.id == important.id


def test_fts_stays_in_sync_after_updates_and_deletes(stores, db, clock) -> None:
    sm, em, wm = stores["semantic"], stores["episodic"], stores["working"]
    pm, rm = stores["procedural"], stores["relationships"]
    fact = sm.remember("self", "hosting", "runs on a raspberry pi", source="agent")
    sm.remember("self", "hosting", "runs on a conway sandbox", source="agent")
    assert sm.search("raspberry") == [] and [r.item.id for r in sm.search("sandbox")] == [fact.id]
    ep = em.record("s", "note", "paid the zebra invoice")
    db.execute("UPDATE episodic_memory SET summary = 'paid the yak invoice' WHERE id = ?", (ep.id,))
    assert em.search("zebra") == [] and len(em.search("yak")) == 1
    em.mark_accessed([ep.id])  # an update of unindexed columns leaves the index alone
    entry = wm.add("s", "watch the quokka metric")
    procedure = pm.save("feed_quokka", "Feed the quokka", [{"description": "open the tin"}])
    pm.save("feed_quokka", "Feed the quokka twice", [{"description": "open the tin"}])
    keeper = rm.record("0x" + "ef" * 20, name="quokka keeper")
    rm.record_interaction("0x" + "ef" * 20)
    summary = stores["summaries"].save("s", "a day of quokka care")
    check_memory_fts(db)
    wm.delete(entry.id)
    em.delete(ep.id)
    sm.delete(fact.id)
    pm.delete(procedure.id)
    rm.delete(keeper.id)
    stores["summaries"].delete(summary.id)
    for store in stores.values():
        assert store.search("quokka") == [] and store.search("sandbox") == [] and store.search("yak") == []
    check_memory_fts(db)
    assert all(db.scalar(f"SELECT COUNT(*) FROM {t}_fts") == 0 for t in FTS_COLUMNS)


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_text_is_never_an_fts_error(stores, query: str) -> None:
    stores["semantic"].remember("environment", "port", "port 5432 near the value", source="agent")
    for store in stores.values():
        assert isinstance(store.search(query), list)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_any_text_makes_a_valid_match_expression(db, text: str) -> None:
    match = match_expression(query_words(text))
    if match is not None:
        db.query("SELECT rowid FROM semantic_memory_fts WHERE semantic_memory_fts MATCH ? LIMIT 1", (match,))


def test_common_words_are_left_out_of_big_tables(db, clock) -> None:
    em = EpisodicMemory(db, clock)
    with db.transaction():
        for i in range(2100):
            em.record("s", "note", f"agent report number {i}" + (" about penguins" if i % 500 == 0 else ""))
            clock.advance(3_600_000)
    assert drop_common_words(db, "episodic_memory", ["agents", "reporting", "penguins"]) == ["penguins"]
    assert drop_common_words(db, "episodic_memory", ["agents", "reporting", "number"]) == ["agents", "reporting"]
    assert [r.item.summary for r in em.search("agent reports about penguins", limit=2)] == [
        "agent report number 2000 about penguins", "agent report number 1500 about penguins"]


def test_query_sanitizer_quotes_words_and_drops_stop_words() -> None:
    def fts_query(text: str) -> str | None:
        return match_expression(query_words(text))
    assert fts_query('what is NEAR(the "port")*') == '"near" OR "port"'
    assert fts_query("the") == '"the"'
    assert fts_query("?!") is None
    assert fts_query(" ".join(f"w{i:02d}" for i in range(40))).count(" OR ") == 15


# --- a reference database -----------------------------------------------------------------------------------


def test_reference_v11_keeps_its_memory_rows_and_indexes_them(tmp_path: Path, clock) -> None:
    path = tmp_path / "state.db"
    build_reference_v11(path)
    with open_database(path, now=clock) as db:
        rows = db.query("SELECT id, category, key, value, confidence, source, created_at, updated_at"
                        " FROM semantic_memory ORDER BY id")
        assert [r[:6] for r in rows] == [("sm_1", "creator", "name", "Grace", 0.9, "01JTURN0000000000000000001"),
                                         ("sm_2", "financial", "burn_rate", "3 cents per turn", 0.5, "reflection")]
        assert all(is_stored_format(s) for r in rows for s in r[6:])
        assert from_iso(rows[0][6]) == from_iso("2026-02-19T14:00:10.000Z")
        sm = SemanticMemory(db, clock)
        assert [r.item.id for r in sm.search("what is Grace's name")] == ["sm_1"]
        assert [r.item.id for r in sm.search("burn rate per turn")] == ["sm_2"]
        with pytest.raises(ProtectedMemoryError):
            sm.delete("sm_1")
        check_memory_fts(db)
        for table in ("working_memory", "episodic_memory", "session_summaries", "procedural_memory",
                      "relationship_memory", "event_stream", "knowledge_store"):
            assert db.scalar(f"SELECT COUNT(*) FROM {table}") == 0
