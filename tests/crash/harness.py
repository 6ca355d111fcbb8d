"""The crash harness: run the real ``automaton-min run`` against a loopback model, SIGKILL it (at a named
``AUTOMATON_CRASH_AT`` point or after a random delay), restart it, and check ``state.db`` after every kill.

Used by ``tests/crash/test_crash_consistency.py`` (bounded, in CI), the same tests against the one-file binary (CI sets
``AUTOMATON_BINARY``: ``conftest.program()``) and ``tests/bench/bench_crash.py`` (long run).
Each run is a new session (process group) and a random kill hits the whole group, as a power cut or systemd's
final SIGKILL does.
The model is scripted to keep the agent busy: every answer uses tools (exec, write_file, remember_fact), never
sleep; the harness puts inbox messages in ``state.db`` between runs so turns have messages to process.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import program
from standins.model_servers import openai_answer

TOKEN_PREFIX = "crashmsg"


def _iso(epoch_s: float) -> str:
    from automaton_min.clock import to_iso

    return to_iso(int(epoch_s * 1000))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run's whole process group and reap the leader."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def busy_answer(counter=itertools.count()):
    """A model answer (callable for ``script``): one of three tool mixes, in turn; never sleep."""

    def answer(body):
        n = next(counter)
        kind = n % 3
        if kind == 0:
            calls = [("call_0", "exec", json.dumps({"command": f"echo turn-{n} >> log.txt"})),
                     ("call_1", "write_file", json.dumps({"path": f"notes/n{n % 7}.md", "content": f"note {n}\n"}))]
        elif kind == 1:
            calls = [("call_0", "remember_fact", json.dumps({"category": "crash", "key": f"k{n % 5}", "value": f"v{n}"}))]
        else:
            calls = [("call_0", "write_file", json.dumps({"path": "plan.md", "content": f"step {n}\n"})),
                     ("call_1", "remember_fact", json.dumps({"category": "crash", "key": "last", "value": str(n)}))]
        return openai_answer(f"working {n}", calls)

    return answer


@dataclass
class Harness:
    home_root: Path
    command: tuple[str, ...] = field(default_factory=lambda: tuple(program()))  # the source tree, or the binary
    base_env: dict[str, str] | None = None  # the environment to start from (default: this process's)
    kills: int = 0
    failures: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # every inbox message id the harness put in
    _seq: int = 0
    pending_leases: dict[str, int] = field(default_factory=dict)
    points: list[str] = field(default_factory=list)  # the crash points reached
    leases_recovered: int = 0
    extra_checks: list = field(default_factory=list)  # more invariants: f(connection) -> failures

    @property
    def db_path(self) -> Path:
        return self.home_root / "state.db"

    def env(self, crash_at: str | None) -> dict[str, str]:
        env = {k: v for k, v in (os.environ if self.base_env is None else self.base_env).items()
               if k != "AUTOMATON_CRASH_AT"}
        env["AUTOMATON_HOME"] = str(self.home_root)
        # The commands' temp dirs (and, where the cache cannot be written, the one-file binary's unpacked copy) go to
        # TMPDIR, and a killed run cannot clean up: keep that next to the home, where the test's clean-up removes it.
        scratch = self.home_root.parent / "tmp"
        scratch.mkdir(exist_ok=True)
        env["TMPDIR"] = str(scratch)
        if crash_at:
            env["AUTOMATON_CRASH_AT"] = crash_at
        return env

    def start(self, crash_at: str | None = None) -> subprocess.Popen:
        proc = subprocess.Popen([*self.command, "run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, env=self.env(crash_at), start_new_session=True)
        proc.lines = []  # type: ignore[attr-defined]
        proc.err = []  # type: ignore[attr-defined]

        def drain(stream, into) -> None:
            for line in stream:
                into.append(line)

        proc.readers = [threading.Thread(target=drain, args=(stream, into), daemon=True)  # type: ignore[attr-defined]
                        for stream, into in ((proc.stdout, proc.lines), (proc.stderr, proc.err))]  # type: ignore[attr-defined]
        for reader in proc.readers:  # type: ignore[attr-defined]
            reader.start()
        return proc

    # ------------------------------------------------------------------ inbox

    def add_messages(self, n: int, *, signed_by: str | None = None) -> None:
        """``n`` new inbox messages, each with a unique token the turn that reads it carries in its input; from a
        stranger, or signed by ``signed_by`` (the creator's address: creator authority)."""
        con = sqlite3.connect(self.db_path, timeout=30)
        try:
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            for _ in range(n):
                self._seq += 1
                mid = f"{TOKEN_PREFIX}{self._seq:05d}"
                con.execute("INSERT INTO inbox_messages (id, from_address, content, received_at, status, retry_count,"
                            " max_retries, signed_by) VALUES (?, ?, ?, ?, 'received', 0, 3, ?)",
                            (mid, signed_by or "0x" + "ab" * 20, f"Please note token {mid} in your log.", now, signed_by))
                self.messages.append(mid)
            con.commit()
        finally:
            con.close()

    # ------------------------------------------------------------------ kills

    def crash_at(self, point: str, timeout_s: float = 20) -> bool:
        """Run with ``AUTOMATON_CRASH_AT=point``; True when the process died of SIGKILL (and was checked)."""
        proc = self.start(point)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            self.failures.append(f"{point}: the crash point was not reached within {timeout_s} s (kill {self.kills + 1})")
            return False
        kill_group(proc)  # nothing of the run may outlive it (the binary's bootloader has already ended)
        if code != -signal.SIGKILL:
            self.failures.append(f"{point}: exit {code}, not SIGKILL: {''.join(proc.err)[-800:]}")
            return False
        for reader in proc.readers:  # type: ignore[attr-defined]
            reader.join(5)
        name = point.partition(":")[0]
        if f"crash point {name} reached" not in "".join(proc.err):
            self.failures.append(f"{point}: SIGKILL, but not from the crash point: {''.join(proc.err)[-800:]}")
            return False
        self.kills += 1
        self.points.append(point)
        self.check(after_kill=True, label=point)
        return True

    def crash_in_heartbeat(self, task: str = "heartbeat_ping") -> None:
        """Make ``task`` due, crash inside the heartbeat task run, then check its lease recovers: it is held by the
        dead process until its expiry; the harness moves that expiry to the past (the TTL elapsing, without
        waiting 60 s) and the next start must run the task again."""
        self.execute("UPDATE heartbeat_schedule SET next_run_at = ? WHERE task_name = ?", (_iso(time.time() - 1), task))
        if not self.crash_at("heartbeat_task"):
            return
        leased = {name: runs for name, runs in self.rows(
            "SELECT task_name, run_count FROM heartbeat_schedule WHERE lease_owner IS NOT NULL")}
        if not leased:
            self.failures.append("heartbeat_task: no lease held by the killed process")
            return
        self.execute("UPDATE heartbeat_schedule SET lease_expires_at = ? WHERE lease_owner IS NOT NULL",
                     (_iso(time.time() - 1),))
        self.pending_leases.update(leased)

    def verify_leases_recovered(self) -> None:
        """After a clean run: every task leased by a killed process ran again."""
        for name, runs_before in self.pending_leases.items():
            rows = self.rows("SELECT run_count, lease_owner FROM heartbeat_schedule WHERE task_name = ?", (name,))
            if not rows or rows[0][0] <= runs_before:
                self.failures.append(f"heartbeat task {name} leased by a killed process did not run again: {rows}")
            else:
                self.leases_recovered += 1
        self.pending_leases.clear()

    def kill_after(self, delay_s: float, label: str = "random") -> None:
        """Run, SIGKILL after ``delay_s`` (a random moment), check."""
        proc = self.start()
        time.sleep(delay_s)
        if proc.poll() is not None:
            self.failures.append(f"{label}: the process ended by itself ({proc.returncode}): {''.join(proc.err)[-800:]}")
            return
        kill_group(proc)
        self.kills += 1
        self.check(after_kill=True, label=f"{label} after {delay_s:.2f} s")

    def clean_run(self, turns: int = 2, timeout_s: float = 30) -> None:
        """Restart without a crash point, let ``turns`` more turns commit, stop with SIGTERM (exit 0), check."""
        before = self.count("SELECT COUNT(*) FROM turns")
        proc = self.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            if self.count("SELECT COUNT(*) FROM turns") >= before + turns:
                break
            time.sleep(0.1)
        if proc.poll() is not None:
            self.failures.append(f"clean run: ended by itself ({proc.returncode}): {''.join(proc.err)[-800:]}")
            return
        if self.count("SELECT COUNT(*) FROM turns") < before + turns:
            self.failures.append(f"clean run: fewer than {turns} turns in {timeout_s} s after restart")
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            code = proc.returncode
        if code != 0:
            self.failures.append(f"clean run: SIGTERM gave exit {code}: {''.join(proc.err)[-800:]}")
        self.check(after_kill=False, label="clean stop")
        self.verify_leases_recovered()

    # ------------------------------------------------------------------ invariants

    def execute(self, sql: str, args: tuple = ()) -> None:
        con = sqlite3.connect(self.db_path, timeout=30)
        try:
            con.execute(sql, args)
            con.commit()
        finally:
            con.close()

    def rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        con = sqlite3.connect(self.db_path, timeout=30)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def count(self, sql: str, args: tuple = ()) -> int:
        con = sqlite3.connect(self.db_path, timeout=30)
        try:
            return int(con.execute(sql, args).fetchone()[0])
        except sqlite3.OperationalError:
            return 0
        finally:
            con.close()

    def check(self, *, after_kill: bool, label: str) -> list[str]:
        """Every invariant on ``state.db``; failures are appended (with ``label``) and returned."""
        found: list[str] = []
        con = sqlite3.connect(self.db_path, timeout=30)
        try:
            integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
            if integrity != "ok":
                found.append(f"integrity_check: {integrity}")
            found += self._check_turns(con) + self._check_inbox(con, after_kill) + self._check_payments(con)
            found += self._check_leases(con, after_kill)
            for extra in self.extra_checks:
                found += extra(con)
        except sqlite3.DatabaseError as exc:  # too damaged to check: that is the finding
            found.append(f"state.db unreadable: {exc}")
        finally:
            con.close()
        self.failures += [f"{label}: {f}" for f in found]
        return found

    def _check_turns(self, con: sqlite3.Connection) -> list[str]:
        """No turn without its tool calls: the rows in ``tool_calls`` are exactly the turn's JSON, and no orphan."""
        found = []
        rows: dict[str, list[tuple[str, str]]] = {}
        for call_id, turn_id, name in con.execute("SELECT id, turn_id, name FROM tool_calls"):
            rows.setdefault(turn_id, []).append((call_id, name))
        turns = {tid: calls for tid, calls in con.execute("SELECT id, tool_calls FROM turns")}
        for tid, text in turns.items():
            wanted = sorted((c["id"], c["name"]) for c in json.loads(text or "[]"))
            if wanted != sorted(rows.get(tid, [])):
                found.append(f"turn {tid}: tool_calls rows {sorted(rows.get(tid, []))} != its JSON {wanted}")
        for tid in set(rows) - set(turns):
            found.append(f"tool_calls rows for a turn that does not exist: {tid}")
        return found

    def _check_inbox(self, con: sqlite3.Connection, after_kill: bool) -> list[str]:
        """Every message: processed by exactly one turn, or back in received (in_progress only right after a
        kill, before the restart reclaims it), never lost; failed only once out of tries that were not crashes
        (a crash gives its try back and counts in ``crash_count``)."""
        found = []
        inputs = [text or "" for (text,) in con.execute("SELECT input FROM turns WHERE input LIKE ?",
                                                         (f"%{TOKEN_PREFIX}%",))]
        status = {mid: (st, processed, retries, maximum) for mid, st, processed, retries, maximum in con.execute(
            "SELECT id, status, processed_at, retry_count, max_retries FROM inbox_messages WHERE id LIKE ?",
            (f"{TOKEN_PREFIX}%",))}
        for mid in self.messages:
            if mid not in status:
                found.append(f"inbox message {mid} lost")
                continue
            st, processed, retries, maximum = status[mid]
            seen = sum(1 for text in inputs if mid in text)
            if st == "processed":
                if processed is None or seen != 1:
                    found.append(f"inbox message {mid} processed, read by {seen} committed turns (must be 1)")
            elif st in ("received", "in_progress"):
                if st == "in_progress" and not after_kill:
                    found.append(f"inbox message {mid} still in_progress after a clean stop")
                if seen:
                    found.append(f"inbox message {mid} is {st} but {seen} committed turns read it")
            elif st == "failed":
                if retries < maximum:
                    found.append(f"inbox message {mid} failed with {retries}/{maximum} tries")
            else:
                found.append(f"inbox message {mid} in unknown status {st}")
        return found

    def _check_payments(self, con: sqlite3.Connection) -> list[str]:
        """Never two intents (signatures) for one authorization nonce; a settled intent has its row."""
        found = []
        try:
            columns = {r[1] for r in con.execute("PRAGMA table_info(payment_intents)")}
        except sqlite3.DatabaseError:
            return found
        if "nonce" in columns:
            for nonce, n in con.execute("SELECT nonce, COUNT(*) FROM payment_intents GROUP BY nonce HAVING COUNT(*) > 1"):
                found.append(f"payment nonce {nonce} has {n} intents")
        return found

    def _check_leases(self, con: sqlite3.Connection, after_kill: bool) -> list[str]:
        """A lease a stopped or killed process held ends by itself: it expires within the TTL, never held for good
        (a clean stop may leave the lease of a task still running; the scheduler lets it expire by design)."""
        from automaton_min.heartbeat.schedule import LEASE_TTL_MS

        found = []
        now_ms = int(time.time() * 1000)
        for name, owner, expires in con.execute(
                "SELECT task_name, lease_owner, lease_expires_at FROM heartbeat_schedule WHERE lease_owner IS NOT NULL"):
            if not expires:
                found.append(f"heartbeat task {name}: lease held by {owner} without an expiry")
                continue
            from automaton_min.clock import from_iso

            if from_iso(expires) > now_ms + LEASE_TTL_MS + 5_000:
                found.append(f"heartbeat task {name}: lease of {owner} expires beyond the TTL ({expires})")
        return found
