"""A release server on 127.0.0.1 (a stand-in for wherever a maintainer publishes): release.json and the binaries,
signed with a throwaway Ed25519 key; and small shell scripts that act as the binaries being updated."""

from __future__ import annotations

import hashlib
from pathlib import Path

from automaton_min.clock import to_iso
from automaton_min.update.manifest import PRODUCT, public_key_of, sign_release
from standins.loopback_http import LoopbackServer, Reply

TEST_SEED = bytes(range(32))  # a throwaway key, for tests only
OTHER_SEED = bytes(range(1, 33))
TEST_PUBLIC_KEY = public_key_of(TEST_SEED)
DAY_MS = 86_400_000


def script_binary(version: str, *, on_run: str = "exit 3", ran: Path | None = None) -> bytes:
    """A stand-in binary: prints ``automaton-min VERSION`` for --version (touching ``ran`` first, if given)."""
    touch = f'touch "{ran}"; ' if ran else ""
    return (f'#!/bin/sh\n{touch}if [ "$1" = --version ]; then echo "automaton-min {version}"; exit 0; fi\n'
            f"{on_run}\n").encode()


def manifest(version: str, files: dict[str, bytes], now_ms: int, *, days: float = 30, product: str = PRODUCT,
             issued_ms: int | None = None) -> dict:
    """The manifest for ``files`` (architecture -> bytes), each published as ``bin-<arch>`` beside it."""
    issued = now_ms if issued_ms is None else issued_ms
    return {"product": product, "version": version, "issued_at": to_iso(issued),
            "expires_at": to_iso(issued + int(days * DAY_MS)),
            "artifacts": {arch: {"url": f"bin-{arch}", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                          for arch, data in files.items()}}


class ReleaseServer(LoopbackServer):
    """``release.json`` and ``bin-<arch>`` as set by ``publish``; ``served`` overrides a binary's bytes on the wire."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.missing = b"no such file"  # the body of a 404
        super().__init__({("GET", r"/releases/(.+)"): self._file})

    def _file(self, request) -> Reply:
        name = request.match.group(1)
        return Reply(200, self.files[name]) if name in self.files else Reply(404, self.missing)

    @property
    def manifest_url(self) -> str:
        return f"{self.url}/releases/release.json"

    def publish(self, fields: dict, binaries: dict[str, bytes], *, seed: bytes = TEST_SEED) -> bytes:
        envelope = sign_release(seed, fields)
        self.files = {"release.json": envelope, **{f"bin-{arch}": data for arch, data in binaries.items()}}
        return envelope


def child_program(offline_chain: str = "http://127.0.0.1:9") -> tuple[bytes, str]:
    """What a release serves children on this machine, and the version it says: the one-file binary under test
    (``AUTOMATON_BINARY``), else this source tree behind a small script. Either way the sandbox's environment points
    the chain at nothing, as a test's parent is."""
    import os
    import subprocess
    import sys

    from automaton_min import __version__

    binary = os.environ.get("AUTOMATON_BINARY")
    root = Path(__file__).resolve().parents[2]
    target = f'"{Path(binary).resolve()}"' if binary else f'"{sys.executable}" -m automaton_min'
    script = (f"#!/bin/sh\nexport AUTOMATON_RPC_URL={offline_chain} PYTHONPATH=\"{root}\"\n"
              f'exec {target} "$@"\n').encode()
    if not binary:
        return script, __version__
    said = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    return script, said.split()[-1]
