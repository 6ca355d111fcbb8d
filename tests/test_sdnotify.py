"""sd_notify over real AF_UNIX datagram sockets (path and abstract), and the watchdog's progress rule."""

from __future__ import annotations

import os
import socket

import pytest

from automaton_min.runtime.sdnotify import Notifier, Progress, Watchdog, watchdog_interval


@pytest.fixture
def receiver(tmp_path):
    """A datagram socket at a path in tmp_path, as systemd's NOTIFY_SOCKET is; yields (address, socket)."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    yield str(path), sock
    sock.close()


@pytest.fixture
def abstract_receiver():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"automaton-min-test-{os.getpid()}-{id(sock)}"
    sock.bind("\0" + name)
    sock.settimeout(10)
    yield "@" + name, sock
    sock.close()


def test_ready_status_stopping_reach_a_path_socket(receiver):
    address, sock = receiver
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": address})
    assert notifier.enabled
    assert notifier.ready() and notifier.status("running: turn 3\nsecond line") and notifier.stopping()
    assert [sock.recv(4096) for _ in range(3)] == [b"READY=1", b"STATUS=running: turn 3 second line", b"STOPPING=1"]
    assert notifier.notify("READY=1", "STATUS=up")
    assert sock.recv(4096) == b"READY=1\nSTATUS=up"
    notifier.close()


def test_abstract_socket(abstract_receiver):
    address, sock = abstract_receiver
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": address})
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    notifier.close()


def test_without_notify_socket_nothing_is_sent():
    for environ in ({}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}):
        notifier = Notifier.from_environment(environ)
        assert not notifier.enabled and notifier.ready() is False


def test_a_missing_socket_is_logged_not_raised(tmp_path):
    assert Notifier(str(tmp_path / "gone")).ready() is False


def test_watchdog_interval_from_environment():
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, pid=42) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "41"}, pid=42) is None  # another process's
    assert watchdog_interval({}) is None and watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    notifier = Notifier(None)
    assert Watchdog.from_environment(notifier, [], {"WATCHDOG_USEC": "1000000"}) is None  # nothing to ping
    watchdog = Watchdog.from_environment(Notifier("/run/notify"), [Progress("loop")], {"WATCHDOG_USEC": "1000000"})
    assert watchdog is not None and watchdog.interval_s == 1.0 and watchdog.tick_every == 0.5
    assert Watchdog.from_environment(Notifier("/run/notify"), [], {}) is None  # no WatchdogSec


class Monotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_pings_only_while_every_thread_shows_progress(receiver):
    address, sock = receiver
    sock.settimeout(0)  # nothing may be waiting beyond what each check sent
    clock = Monotonic()
    loop, scheduler = Progress("loop", monotonic=clock), Progress("scheduler", monotonic=clock)
    watchdog = Watchdog(Notifier(address), [loop, scheduler], interval_s=10)
    assert watchdog.tick_every == 5

    def pings() -> list[bytes]:
        out = []
        while True:
            try:
                out.append(sock.recv(4096))
            except BlockingIOError:
                return out

    assert watchdog.check() and pings() == [b"WATCHDOG=1"]
    clock.t += 8
    loop.tick()  # the scheduler last ticked 8 s ago, the loop now: both within 10 s
    assert watchdog.check() and pings() == [b"WATCHDOG=1"]
    clock.t += 3  # the scheduler is now 11 s stale
    assert watchdog.check() is False and pings() == []
    loop.tick()
    assert watchdog.check() is False and pings() == []  # the loop alone is not enough
    scheduler.tick()
    assert watchdog.check() and pings() == [b"WATCHDOG=1"]


def test_watchdog_thread_pings_and_stops(receiver):
    address, sock = receiver
    progress = Progress("loop", monotonic=Monotonic())  # a clock that stands still: always fresh
    watchdog = Watchdog(Notifier(address), [progress], interval_s=0.02)
    watchdog.start()
    try:
        assert sock.recv(4096) == b"WATCHDOG=1"  # blocks until the thread's first ping (timeout 10 s)
        assert sock.recv(4096) == b"WATCHDOG=1"  # and it keeps pinging
    finally:
        watchdog.stop()
    assert watchdog._thread is None
