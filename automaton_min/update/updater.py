"""Checking for, applying and settling updates (README: Updates). One reading of the manifest URL; the signature
checked before any field is used; the download checked against the signed size and sha256 and run once
(``--version``) before the swap. Every update, refusal and rollback: a ``modifications`` row and a log line."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from automaton_min.clock import Clock, to_iso
from automaton_min.log import get_logger
from automaton_min.store import modifications
from automaton_min.store.kv import get_value, json_list, set_json
from automaton_min.update import swap
from automaton_min.update.settle import REJECTED_KEY, record_rollback
from automaton_min.update.manifest import (MAX_BINARY_BYTES, Artifact, NothingNew, Refused, Release,
                                           check_release, verify_release)

if TYPE_CHECKING:
    from automaton_min.store.sqlite import Database
    from automaton_min.update.baked import Build

log = get_logger(__name__)

STATUS_KEY = "update_status"  # the last check: {checked_at, running, latest?, state, detail}
SEEN_KEY = "update_manifest_seen"  # issued_at (ms) of the newest verified manifest: older ones are replays
PROBE_TIMEOUT_S = 60.0
# Where a one-file binary unpacks itself (build/launcher.sh), in its order of preference
UNPACK_PLACES = ("AUTOMATON_UNPACK_DIR", "CACHE_DIRECTORY", "XDG_CACHE_HOME", "HOME", "XDG_RUNTIME_DIR")
DOWNLOAD_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Outcome:
    state: str  # latest | available | applied | refused | unreachable | failed | pending
    detail: str
    version: str | None = None


class Updater:
    """Updates for ``build`` (its baked key and binary), recorded in ``db``."""

    def __init__(self, db: "Database", build: "Build", manifest_url: str, *, now: Clock) -> None:
        self.db, self.build, self.url, self.now = db, build, manifest_url, now

    def check(self) -> tuple[Release, Artifact]:
        """The newer release for this build, or ``Refused`` / ``NothingNew`` / a network error."""
        if self.build.public_key is None:
            raise Refused("this build has no release key baked in: it cannot verify releases")
        release = verify_release(fetch_manifest(self.url), self.build.public_key)
        seen = get_value(self.db, SEEN_KEY)
        artifact = check_release(release, arch=self.build.arch, running=self.build.version, now_ms=self.now(),
                                 last_issued_ms=int(seen) if seen else None,
                                 rejected=tuple(json_list(get_value(self.db, REJECTED_KEY))))
        self._seen(release)
        return release, artifact

    def run(self, *, apply: bool) -> Outcome:
        """Check, and with ``apply`` download, verify and swap; never raises for a refusal or the network."""
        if not apply or self.build.binary is None:
            return self._run(apply)
        with swap.exclusive(self.build.binary) as mine:
            pending = swap.read_marker(self.build.binary)
            if not mine or (pending is not None and pending.state != "rolled-back"):
                waits = f"the update to {pending.new} waits for a restart and its first run" if pending else ""
                return Outcome("pending", waits or "another update is under way beside this binary")
            return self._run(apply)

    def _run(self, apply: bool) -> Outcome:
        from automaton_min.net.http import HttpError, NetworkError

        try:
            release, artifact = self.check()
            if not apply:
                return self._status(Outcome("available", f"version {release.version} is available", release.version))
            self._apply(release, artifact)
        except NothingNew as exc:
            return self._status(Outcome("latest", str(exc), self.build.version))
        except Refused as exc:
            return self._refused(str(exc))
        except (NetworkError, HttpError) as exc:
            log.warning("update check failed", extra={"error": str(exc)})
            return self._status(Outcome("unreachable", str(exc)))
        except OSError as exc:  # a full disk, a directory this user cannot write: the binary is untouched
            reason = f"cannot write beside {self.build.binary} ({exc.strerror or exc}); the binary is unchanged"
            self._record("update_failed", reason, str(self.build.binary))
            log.error("update failed", extra={"error": reason})
            return self._status(Outcome("failed", reason))
        return self._status(Outcome("applied", f"{self.build.version} -> {release.version}", release.version))

    def _apply(self, release: Release, artifact: Artifact) -> None:
        from automaton_min.net.http import download

        binary = self.build.binary
        if binary is None:
            raise Refused("this is not the one-file binary; update a source or pip install with pip or git")
        swap.remove_stale(binary)
        url = one_reading(urljoin(self.url, artifact.url), "the binary's URL")
        staged = swap.stage(binary, artifact, lambda sink: download(
            url, sink, max_bytes=min(artifact.size, MAX_BINARY_BYTES), timeout=DOWNLOAD_TIMEOUT_S))
        try:
            _probe(staged, release.version)
            swap.swap(binary, staged, swap.Marker("swapped", self.build.version, release.version))
        finally:
            staged.unlink(missing_ok=True)
        self._record("update_applied", f"binary {self.build.version} -> {release.version} ({self.build.arch}, "
                     f"sha256 {artifact.sha256[:16]}...); the previous kept as {swap.previous_of(binary).name}",
                     str(binary))
        log.info("update applied: restart to run it",
                 extra={"from": self.build.version, "to": release.version, "binary": str(binary)})

    def _refused(self, reason: str) -> Outcome:
        last = modifications.recent(self.db, 1, ("update_refused",))
        if not last or last[0]["description"] != reason:  # the same refusal every 4 hours is one row
            self._record("update_refused", reason, None)
        log.warning("update refused", extra={"reason": reason})
        return self._status(Outcome("refused", reason))

    def _record(self, kind: str, description: str, path: str | None) -> None:
        with self.db.transaction():
            modifications.record(self.db, kind, description, self.now(), file_path=path)

    def _seen(self, release: Release) -> None:
        seen = get_value(self.db, SEEN_KEY)
        if not seen or release.issued_at > int(seen):
            set_json(self.db, SEEN_KEY, release.issued_at, self.now())

    def _status(self, outcome: Outcome) -> Outcome:
        save_status(self.db, self.build.version, outcome, self.now())
        return outcome


def save_status(db: "Database", running: str, outcome: Outcome, now_ms: int) -> None:
    """KV ``update_status``: what ``status`` shows of the last check or change."""
    set_json(db, STATUS_KEY, {"checked_at": to_iso(now_ms), "running": running, "state": outcome.state,
                              "latest": outcome.version, "detail": outcome.detail}, now_ms)


def roll_back_by_hand(db: "Database", build: "Build", now_ms: int) -> None:
    """The previous binary back, under the updates' lock; the version it leaves is never applied again.
    ``Refused`` when an update is under way or there is no previous binary."""
    with swap.exclusive(build.binary) as mine:
        if not mine:
            raise Refused("an update is under way beside this binary; run update --rollback again when it ends")
        swap.put_back(build.binary)
        swap.clear_marker(build.binary)
    with db.transaction():
        record_rollback(db, build, build.version, f"the previous binary put back by hand (was {build.version}); "
                        f"{build.version} will not be applied again", now_ms)
        save_status(db, build.version, Outcome("rolled back", f"{build.version} put back by hand"), now_ms)


def fetch_manifest(url: str) -> bytes:
    """The signed manifest's bytes from ``url`` (read once), unverified; a network error, or ``HttpError`` naming
    the setting for an answer that is not 2xx."""
    from automaton_min.net.http import HttpError, request
    from automaton_min.update.manifest import MAX_ENVELOPE_BYTES

    url = one_reading(url, "the manifest URL")
    answer = request("GET", url, timeout=30.0)
    if not answer.ok:  # the body (an HTML error page, say) is left out: the status says enough
        raise HttpError(f"GET {url} answered {answer.status}; check updateManifestUrl (automaton-min config set "
                        "updateManifestUrl URL)", answer.status)
    return answer.body[:MAX_ENVELOPE_BYTES + 1]


def one_reading(url: str, what: str) -> str:
    """``url`` as the HTTP client will read it (net/url.py), or ``Refused`` when it can be read more than one way."""
    from automaton_min.net.url import UnreadableUrl, read_url

    try:
        return read_url(url).text
    except UnreadableUrl as exc:
        raise Refused(f"{what} cannot be used: {exc}") from None


def _probe(staged: Path, version: str) -> None:
    """Run the new binary once (``--version``, a bare environment but for where it unpacks itself, which the
    restart then reuses): it starts on this machine and is that version."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "LANG": "C.UTF-8",
           **{name: os.environ[name] for name in UNPACK_PLACES if os.environ.get(name)}}
    try:
        done = subprocess.run([str(staged), "--version"], env=env, capture_output=True, timeout=PROBE_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"the new binary does not start here ({type(exc).__name__})") from None
    said = done.stdout.decode("utf-8", "replace").split()
    if done.returncode != 0 or version not in said:
        reported = said[-1][:40] if said else "nothing"
        raise Refused(f"the new binary does not report version {version} (it said {reported!r}, exit "
                      f"{done.returncode}): the release is broken; its publisher must sign a good one")
