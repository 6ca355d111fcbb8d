"""Make the one-file executable from PyInstaller's one-folder bundle: build/launcher.sh as its head, then the folder as
a gzip'd tar. The same folder gives the same bytes (sorted names, owner 0, every time SOURCE_DATE_EPOCH).

    python build/pack.py <bundle folder> <output file>
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import tarfile
from pathlib import Path

LAUNCHER = Path(__file__).resolve().with_name("launcher.sh")
BLOCK = 512  # the head is padded to a multiple of this


def archive(folder: Path, mtime: int) -> bytes:
    """The folder's files as a tar (its contents at the top), gzip'd at level 9, deterministic."""
    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = mtime
        info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
        return info

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False, filter=normalize)
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, compresslevel=9, mtime=0) as out:
        out.write(raw.getvalue())
    return packed.getvalue()


def head(sha256: str) -> bytes:
    """The launcher with the archive's sha256 and its own length filled in, padded with a comment line."""
    text = LAUNCHER.read_text(encoding="ascii").replace("@ID@", sha256)
    for size in range(BLOCK, 16 * BLOCK, BLOCK):
        filled = text.replace("@HEAD@", str(size))
        room = size - len(filled.encode("ascii")) - 1
        if room >= 2:
            return (filled + "#" * (room - 1) + "\n\n").encode("ascii")[:size]
    raise SystemExit("pack.py: the launcher is too long")


def main(folder: Path, output: Path) -> None:
    if not (folder / "automaton-min").is_file():
        raise SystemExit(f"pack.py: {folder} is not PyInstaller's one-folder bundle (no automaton-min in it)")
    payload = archive(folder, int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))
    start = head(hashlib.sha256(payload).hexdigest())
    partial = output.with_name(output.name + ".partial")
    partial.write_bytes(start + payload)
    partial.chmod(0o755)
    partial.replace(output)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
