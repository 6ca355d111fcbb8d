"""The one-file binary (``dist/automaton-min``, made by build/build.sh) against the source install.

Prints the binary's size and sha256, and medians of whole-process runs of ``--version`` and ``status --json`` (an
empty database) from source (the virtualenv's ``automaton-min``) and from the binary, with the ratio; the binary
also with ``TMPDIR`` on a tmpfs (``/dev/shm``), as the systemd unit has it (it unpacks itself once per version into
its cache, not ``TMPDIR``, so the two should agree). Runs alternate between the variants, so a busy machine slows
them alike. Skipped, with a
message, when the binary has not been built (``AUTOMATON_BINARY`` names another one).
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from automaton_min.home import Home
from automaton_min.runtime.genesis import SetupAnswers, setup_agent

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("AUTOMATON_BINARY") or ROOT / "dist" / "automaton-min")
RUNS = 15
TMPFS = "/dev/shm"


def source_command() -> list[str]:
    """The virtualenv's console script beside this interpreter, else ``python -m automaton_min``."""
    script = Path(sys.executable).with_name("automaton-min")
    return [str(script)] if script.exists() else [sys.executable, "-m", "automaton_min"]


def medians(variants: dict[str, tuple[list[str], dict[str, str]]], *args: str) -> dict[str, float]:
    """Median wall time in ms of each variant running ``args``, RUNS runs each, interleaved (one warm-up each)."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(RUNS + 1):
        for name, (command, env) in variants.items():
            start = time.perf_counter()
            subprocess.run([*command, *args], env=env, check=True, capture_output=True)
            if round_:
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def main() -> None:
    if not BINARY.is_file():
        print(f"skipped: {BINARY} does not exist; build it with: bash build/build.sh")
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpu, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    data = BINARY.read_bytes()
    print(f"binary {BINARY}: {len(data):,} bytes ({len(data) / 1e6:.1f} MB, {len(data) / 2**20:.1f} MiB), "
          f"sha256 {hashlib.sha256(data).hexdigest()}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home")
        setup_agent(home, SetupAnswers("bench", "Benchmark the binary's start-up.", "0x" + "12" * 20))
        env = {**os.environ, "AUTOMATON_HOME": str(home.root)}
        variants = {"source": (source_command(), env), "binary": ([str(BINARY)], env)}
        if os.path.isdir(TMPFS) and os.access(TMPFS, os.W_OK):
            variants["binary, TMPDIR=/dev/shm"] = ([str(BINARY)], {**env, "TMPDIR": TMPFS})
        print(f"source: {' '.join(source_command())}; TMPDIR for the binary: {env.get('TMPDIR', '/tmp')}"
              f" ({_fs_type(env.get('TMPDIR', '/tmp'))})")
        for args in (("--version",), ("status", "--json")):
            result = medians(variants, *args)
            base = result["source"]
            for name, ms in result.items():
                ratio = "" if name == "source" else f"  {ms / base:.2f}x source"
                print(f"{' '.join(args):<14} {name:<24} median {ms:7.1f} ms  ({RUNS} runs){ratio}")


def _fs_type(path: str) -> str:
    """The file system type of the mount holding ``path`` (from /proc/mounts), or "?"."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "?"
    real = os.path.realpath(path)
    best = max((m for m in mounts if real == m[1] or real.startswith(m[1].rstrip("/") + "/")),
               key=lambda m: len(m[1]), default=None)
    return best[2] if best else "?"


if __name__ == "__main__":
    main()
