"""Background jobs: the few commands the agent keeps running after their call (a server for ``expose_port``), kept by
the confined spawner (README: Security). Each runs in a session of its own; everything below its shell is spared
when a call ends.
"""

from __future__ import annotations

import errno
import itertools
import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from automaton_min.confine import reaper

MAX_JOBS = 4
LOG_DIR = ".jobs"


class Job:
    __slots__ = ("id", "pid", "command", "log", "started_at", "running")

    def __init__(self, id: str, pid: int, command: str, log: str, started_at: float, running: bool = True) -> None:
        self.id, self.pid, self.command, self.log, self.started_at, self.running = (id, pid, command, log,
                                                                                    started_at, running)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


class Jobs:
    """The spawner's background jobs."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._running: dict[str, tuple[Job, subprocess.Popen, int | None]] = {}
        self._numbers = itertools.count(1)

    def pids(self) -> list[int]:
        """The running jobs' pids (what a call's end spares); ended jobs are forgotten here."""
        return [job.pid for job in self.listing() if job.running]

    def listing(self) -> list[Job]:
        """Every job, the ended ones for the last time (they are forgotten once listed)."""
        jobs = []
        for key, (job, proc, pidfd) in list(self._running.items()):
            job.running = not _ended(pidfd, proc) and reaper.alive(job.pid)
            if not job.running:
                del self._running[key]
                _close(pidfd)
                proc.poll()
            jobs.append(job)
        return jobs

    def start(self, command: str, env: dict[str, str], child_setup: Callable[[], None] | None) -> Job:
        """Start ``command`` as a job (``child_setup`` confines it as any command)."""
        if len([job for job in self.listing() if job.running]) >= MAX_JOBS:
            raise OSError(errno.EBUSY, f"{MAX_JOBS} background jobs already run; stop one first")
        job_id = f"job{next(self._numbers)}"
        logs = self.workspace / LOG_DIR
        logs.mkdir(mode=0o700, exist_ok=True)
        log_path = logs / f"{job_id}.log"
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=self.workspace, env=env,
                                    stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
                                    close_fds=True, preexec_fn=child_setup)
        finally:
            os.close(fd)
        job = Job(job_id, proc.pid, command, f"{LOG_DIR}/{job_id}.log", time.time())
        # A pidfd, opened before anything can reap the shell: a pid can be reused once the job has ended, a
        # pidfd always names this process, so no process can pass for the job later.
        self._running[job_id] = (job, proc, _pidfd(proc.pid))
        return job

    def stop(self, job_id: str) -> Job:
        entry = self._running.pop(job_id, None)
        if entry is None:
            raise OSError(errno.ENOENT, f"no background job {job_id!r} (running: {', '.join(self._running) or 'none'})")
        job, proc, pidfd = entry
        if not _ended(pidfd, proc):
            reaper.end_tree(job.pid, include_root=True)
        _close(pidfd)
        proc.poll()
        job.running = False
        return job


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:  # before Linux 5.3: the job's status alone (a reused pid can then pass for it)
        return None


def _ended(pidfd: int | None, proc: subprocess.Popen) -> bool:
    """Whether the job's shell has ended: a pidfd turns readable then, reaped or not."""
    if pidfd is None:
        return proc.poll() is not None
    return bool(select.select([pidfd], [], [], 0)[0])


def _close(pidfd: int | None) -> None:
    if pidfd is not None:
        os.close(pidfd)
