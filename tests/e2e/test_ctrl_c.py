"""One Ctrl-C on a terminal stops ``automaton-min run`` gracefully: the turn under way finishes, exit 0.

The run is the session leader of a pseudo-terminal, as in a shell; Ctrl-C is the byte the terminal turns into
SIGINT for the whole foreground process group (the daemon: its confined spawner has a session of its own).
``conftest.program()`` is the source tree, or the binary in CI's binary pass.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import termios
import threading

import orjson

from automaton_min.store.db import open_database
from conftest import CREATOR, keep_offline, program
from standins.model_servers import OpenAIServer, openai_answer


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # after setsid: stdin's terminal becomes the controlling one


def test_one_ctrl_c_lets_the_turn_finish_and_exits_0(cli, home) -> None:
    asked, pressed = threading.Event(), threading.Event()

    def answer_after_ctrl_c(body):
        asked.set()
        pressed.wait(60)  # the turn is under way while the key is pressed
        return openai_answer("Done for now.", [("call_0", "sleep", '{"duration_seconds": 3600}')])

    with OpenAIServer(mode="llamacpp") as model:
        model.script(answer_after_ctrl_c)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Rest.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        stored = orjson.loads(home.config_path.read_bytes())
        keep_offline(home, modelStrategy={**stored.get("modelStrategy", {}), "inferenceModel": "scripted-model",
                                          "lowComputeModel": "scripted-model", "criticalModel": "scripted-model"})
        leader, follower = os.openpty()
        proc = subprocess.Popen([*program(), "run"], stdin=follower, stdout=follower, stderr=follower,
                                env={**os.environ, "AUTOMATON_HOME": str(home.root)}, start_new_session=True,
                                preexec_fn=_take_terminal, close_fds=True)
        os.close(follower)
        terminal = Terminal(leader)
        try:
            assert asked.wait(90), terminal.text
            os.write(leader, b"\x03")  # Ctrl-C
            terminal.wait_for(b"stop requested")
            pressed.set()
            code = proc.wait(timeout=60)
        finally:
            pressed.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            terminal.thread.join(timeout=10)
            os.close(leader)
    text = terminal.text
    assert code == 0, text
    assert "second stop signal" not in text, text
    with open_database(home.default_db_path, read_only=True) as db:
        assert db.scalar("SELECT COUNT(*) FROM turns") == 1  # the turn under way was finished and kept
        assert db.scalar("SELECT value FROM kv WHERE key = 'agent_state'") == "sleeping"


class Terminal:
    """What the program writes to its terminal, read as it comes; ``wait_for`` waits on it, not on a clock."""

    def __init__(self, fd: int) -> None:
        self.fd, self.data, self._cond = fd, bytearray(), threading.Condition()
        self._ended = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # the terminal closed
                chunk = b""
            with self._cond:
                self.data.extend(chunk)
                self._ended = not chunk
                self._cond.notify_all()
            if not chunk:
                return

    def wait_for(self, needle: bytes, timeout_s: float = 30) -> None:
        with self._cond:
            self._cond.wait_for(lambda: needle in self.data or self._ended, timeout_s)
            assert needle in self.data, f"never saw {needle!r}:\n{self.text}"

    @property
    def text(self) -> str:
        return bytes(self.data).decode(errors="replace")
