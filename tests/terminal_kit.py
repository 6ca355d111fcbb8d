"""A command on a pseudo-terminal, as a person at the keyboard runs it: typed answers once their prompts appear,
Ctrl-C once a text appears, and what the terminal showed (its echo of what was typed included)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Sequence


def on_terminal(argv: Sequence[str], *, answers: Sequence[tuple[str, str]] = (), stop_after: str | None = None,
                timeout_s: float = 90) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as stdin, stdout and stderr. Each ``(prompt, answer)`` is typed once its
    prompt has appeared (after the previous one's); with ``stop_after``, SIGINT once that text has appeared. Returns
    the exit code and what the terminal showed; every answer must have been asked for."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=dict(os.environ),
                            start_new_session=True)
    os.close(slave)
    shown, searched_from, pending = b"", 0, list(answers)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no end in {timeout_s} s; waiting for {pending[:1]}; the terminal showed: {shown!r}"
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the program exited and closed the terminal
                break
            if not chunk:
                break
            shown += chunk
            while pending and (at := shown.find(pending[0][0].encode(), searched_from)) >= 0:
                searched_from = at + len(pending[0][0])
                os.write(master, pending.pop(0)[1].encode() + b"\n")
            if stop_after is not None and stop_after.encode() in shown:
                proc.send_signal(signal.SIGINT)
                stop_after = None
    finally:
        os.close(master)
        if proc.poll() is None and stop_after is not None:
            proc.kill()
        code = proc.wait(timeout=60)
    assert not pending, f"never asked {pending}; the terminal showed: {shown!r}"
    return code, shown.decode(errors="replace").replace("\r\n", "\n")
