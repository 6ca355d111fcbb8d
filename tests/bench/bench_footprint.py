"""What the one-file binary costs a small device: its size, `status` time, bytes written to persistent storage by one
`status` and by one service start, and the memory the service holds asleep, unpacked files on tmpfs included.

``BENCH_BINARY`` names the binary (default ``dist/automaton-min``); ``BENCH_BEFORE`` another (an earlier build) to
measure beside it, run for run, on the same machine. Bytes written are the kernel's count of what the processes
dirtied for block storage (``getrusage`` ``ru_oublock`` of the waited-for process tree: ``/proc/PID/io``
``write_bytes``); writes to tmpfs are not in it. The service start runs `run` as the unit does it: ``TMPDIR`` on
tmpfs, ``CACHE_DIRECTORY`` on disk, with the social relay on (a loopback stand-in) until the agent is asleep after
its first signed relay poll; memory is the PSS of every process of the agent plus the files under its tmpfs
``TMPDIR``, with the relay on and with it off. A version's first start (nothing unpacked yet) and a later start are
counted apart. Prints medians; asserts nothing about time.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))  # tests/: the stand-ins

import orjson  # noqa: E402

from bench_start import CREATOR, Model, Run, machine, pss_kb, tree  # noqa: E402
from standins.model_servers import OpenAIServer  # noqa: E402
from standins.social_relay import SocialRelay  # noqa: E402

STATUS_RUNS = 15
TMPFS = Path("/dev/shm")


def written_bytes(command: list[str], env: dict[str, str]) -> int:
    """Bytes the command's processes wrote toward block storage (it is waited for; its children were by it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    subprocess.run(command, env=env, check=True, capture_output=True)
    return (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512


def folder_bytes(folder: Path) -> int:
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


class Variant:
    """One binary, with a scratch place of its own for homes and unpacked copies."""

    def __init__(self, name: str, binary: Path, scratch: Path) -> None:
        self.name, self.binary = name, binary.resolve()
        self.scratch = scratch / name
        self.cache = self.scratch / "cache"  # XDG_CACHE_HOME, on disk as a user's ~/.cache is
        self.scratch.mkdir(parents=True)

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        return {**os.environ, "AUTOMATON_HOME": str(home), "XDG_CACHE_HOME": str(self.cache), **extra}

    def forget_unpacked(self) -> None:
        shutil.rmtree(self.cache, ignore_errors=True)


def setup_home(variant: Variant, home: Path, model_url: str, relay_url: str) -> None:
    subprocess.run([str(variant.binary), "setup", "--name", "bench", "--genesis-prompt", "Rest.",
                    "--creator-address", CREATOR, "--openai-base-url", model_url, "--inference-model", "bench-model",
                    "--yes"], env=variant.env(home), check=True, capture_output=True)
    config = orjson.loads((home / "automaton.json").read_bytes())
    config.update(rpcUrl="http://127.0.0.1:9", socialRelayUrl=relay_url, trustSystemClock=True)
    (home / "automaton.json").write_bytes(orjson.dumps(config))


def status_figures(variants: list[Variant], model_url: str) -> dict[str, dict[str, float]]:
    """`status --json` times (interleaved) and bytes written, first start of the version and later."""
    figures: dict[str, dict[str, float]] = {}
    for variant in variants:
        home = variant.scratch / "status-home"
        variant.forget_unpacked()
        setup_home(variant, home, model_url, "")
        variant.forget_unpacked()
        first = written_bytes([str(variant.binary), "status", "--json"], variant.env(home))
        later = [written_bytes([str(variant.binary), "status", "--json"], variant.env(home)) for _ in range(5)]
        figures[variant.name] = {"first_written": first, "written": statistics.median(later), "times": []}
    for _ in range(STATUS_RUNS + 1):
        for variant in variants:
            started = time.perf_counter()
            subprocess.run([str(variant.binary), "status", "--json"], env=variant.env(variant.scratch / "status-home"),
                           check=True, capture_output=True)
            figures[variant.name]["times"].append(time.perf_counter() - started)
    for values in figures.values():
        values["time_ms"] = statistics.median(values.pop("times")[1:]) * 1000
    return figures


def service_start(variant: Variant, model: Model, model_url: str, relay: SocialRelay, *, relay_on: bool,
                  first_of_version: bool) -> dict[str, float]:
    """One start as the unit runs it, until asleep (and, relay on, past its first signed poll); then stopped."""
    home = variant.scratch / f"service-home-{time.monotonic_ns()}"
    runtime = Path(tempfile.mkdtemp(dir=TMPFS, prefix="bench-run-"))
    unit_cache = variant.scratch / "unit-cache"  # the unit's CacheDirectory=
    try:
        setup_home(variant, home, model_url, relay.url if relay_on else "")
        if first_of_version:
            shutil.rmtree(unit_cache, ignore_errors=True)
        env = variant.env(home, TMPDIR=str(runtime), CACHE_DIRECTORY=str(unit_cache))
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
        asleep_count = len(model.arrivals)
        run = Run([str(variant.binary)], env)
        try:
            model.wait_for(asleep_count + 1, timeout_s=600)
            run.asleep(1)
            if relay_on:
                deadline = time.monotonic() + 120
                while not relay.read_upto and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert relay.read_upto, "the relay was never polled"
                relay.read_upto.clear()
            time.sleep(2)  # settled asleep: the poll's reply handled, freed memory given back
            pss = sum(pss_kb(pid) for pid in tree(run.proc.pid)) * 1024
            unpacked_ram = folder_bytes(runtime)
        finally:
            run.stop()
        written = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512
        return {"pss": pss, "tmpfs": unpacked_ram, "written": written}
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def main() -> int:
    variants_given = [("now", os.environ.get("BENCH_BINARY", str(ROOT / "dist" / "automaton-min")))]
    if os.environ.get("BENCH_BEFORE"):
        variants_given.insert(0, ("before", os.environ["BENCH_BEFORE"]))
    missing = [path for _, path in variants_given if not Path(path).is_file()]
    if missing:
        print(f"skipped: no binary at {', '.join(missing)} (bash build/build.sh makes dist/automaton-min)")
        return 0
    mb = 1e6
    with tempfile.TemporaryDirectory() as scratch, OpenAIServer(mode="llamacpp") as server, \
            SocialRelay(now=lambda: int(time.time() * 1000)) as relay:
        variants = [Variant(name, Path(path), Path(scratch)) for name, path in variants_given]
        model = Model()
        server.script(*[model] * 1000)
        statuses = status_figures(variants, server.url)
        print(f"machine: {machine()}")
        for variant in variants:
            status = statuses[variant.name]
            starts = {(on, first): service_start(variant, model, server.url, relay, relay_on=on, first_of_version=first)
                      for on, first in ((True, True), (True, False), (False, False))}
            on, off = starts[(True, False)], starts[(False, False)]
            print(f"== {variant.name}: {variant.binary}")
            print(f"  binary: {variant.binary.stat().st_size / mb:.2f} MB")
            print(f"  `status --json`: median {status['time_ms']:.0f} ms of {STATUS_RUNS}")
            print(f"  written by one `status`: {status['written'] / mb:.2f} MB "
                  f"(the version's first start: {status['first_written'] / mb:.2f} MB)")
            print(f"  written by one service start: {on['written'] / mb:.2f} MB "
                  f"(the version's first start: {starts[(True, True)]['written'] / mb:.2f} MB)")
            for label, figures in (("relay on, after its first signed poll", on), ("relay off", off)):
                print(f"  held asleep, {label}: {(figures['pss'] + figures['tmpfs']) / mb:.1f} MB "
                      f"(PSS {figures['pss'] / mb:.1f} MB + unpacked on tmpfs {figures['tmpfs'] / mb:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
