"""The maintainer's release tool (README: Updates): a signing key pair, and the signed manifest for built binaries.

  python build/release.py keygen DIR
      DIR/release.key (the private seed, hex, mode 0600: keep it offline, never in the repository) and
      DIR/release.pub (the public key, hex: what build.sh bakes in through AUTOMATON_RELEASE_KEY).
  python build/release.py sign --key DIR/release.key --version 0.2.0 [--days 30] [--url-base URL] \\
          linux-x86_64=dist/automaton-min linux-aarch64=dist/automaton-min-linux-aarch64 > release.json
      release.json naming each binary by its file name (published beside release.json) or under --url-base.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from automaton_min.clock import to_iso  # noqa: E402
from automaton_min.update.manifest import PRODUCT, public_key_of, sign_release  # noqa: E402

DAY_MS = 86_400_000
PRIVATE_TAG = "ed25519-private-seed "  # the private key file's first words: a public key given by mistake is refused
ARCHITECTURES = ("linux-x86_64", "linux-aarch64")  # `linux-` and what `uname -m` prints on the device


def keygen(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "release.key").exists():
        raise SystemExit(f"{directory / 'release.key'} exists already: keep it, or choose another directory")
    seed = os.urandom(32)
    fd = os.open(directory / "release.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(PRIVATE_TAG + seed.hex() + "\n")
    (directory / "release.pub").write_text(public_key_of(seed).hex() + "\n")
    print(f"wrote {directory / 'release.key'} (private: keep it offline) and {directory / 'release.pub'}")


def manifest(version: str, binaries: list[str], days: float, url_base: str, now_ms: int) -> dict:
    artifacts = {}
    for pair in binaries:
        arch, _, path = pair.partition("=")
        if not path or arch not in ARCHITECTURES:
            raise SystemExit(f"name each binary as ARCH=PATH with ARCH one of {', '.join(ARCHITECTURES)}, "
                             f"not {pair!r}")
        if not Path(path).is_file():
            raise SystemExit(f"{path} is not a file: build it first (bash build/build.sh)")
        data = Path(path).read_bytes()
        if arch == f"linux-{os.uname().machine}":  # one this machine can run: it must say the version signed for it
            said = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.split()
            if version not in said:
                raise SystemExit(f"{path} says {' '.join(said) or 'nothing'}, not version {version}")
        name = Path(path).name
        artifacts[arch] = {"url": f"{url_base.rstrip('/')}/{name}" if url_base else name, "size": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()}
    return {"product": PRODUCT, "version": version, "issued_at": to_iso(now_ms),
            "expires_at": to_iso(now_ms + int(days * DAY_MS)), "artifacts": artifacts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("keygen").add_argument("directory", type=Path)
    sign = commands.add_parser("sign")
    sign.add_argument("--key", type=Path, required=True)
    sign.add_argument("--version", required=True)
    sign.add_argument("--days", type=float, default=30.0, help="the manifest expires after this many days")
    sign.add_argument("--url-base", default="")
    sign.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    if args.command == "keygen":
        keygen(args.directory)
        return
    text = args.key.read_text().strip() if args.key.is_file() else ""
    if not text.startswith(PRIVATE_TAG):
        raise SystemExit(f"{args.key} is not a private key from `release.py keygen` (release.key, not release.pub)")
    seed = bytes.fromhex(text.removeprefix(PRIVATE_TAG))
    sys.stdout.buffer.write(sign_release(seed, manifest(args.version, args.binaries, args.days, args.url_base,
                                                        int(time.time() * 1000))) + b"\n")


if __name__ == "__main__":
    main()
