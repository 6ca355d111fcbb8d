"""The daemon side of tests/attacks/test_host_files.py, run as a script in a real process (``host_files_kit.py
<filter> <json>``), possibly as another uid: it installs a seccomp filter standing in for a unit's namespace rule,
starts the confined spawner, runs the attack from a command, then ordinary commands, and prints what happened as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shlex
import struct
import sys
from pathlib import Path

# The attack, from a command: each call on each file outside the workspace (``targets``); ``chmod 000`` of the
# interpreter's stand-ins; the real shell and interpreter given their own mode again (harmless had it gone through:
# only the refusal is looked at). One line per attempt: what, the path, refused (errno) or DONE.
ATTACK = r"""
import json, os, sys
paths = json.loads(sys.argv[1])
def attempt(what, call, path, *args):
    try:
        call(path, *args)
    except OSError as exc:
        print(what, path, "refused", exc.errno)
    else:
        print(what, path, "DONE")
def append(path):
    with open(path, "ab") as handle:
        handle.write(b"planted")
for path in paths["targets"]:
    attempt("chmod", os.chmod, path, 0o606)
    attempt("chown", os.chown, path, 65534, 65534)
    attempt("utime", os.utime, path, (1, 1))
    attempt("touch", os.utime, path, None)
    attempt("setxattr", os.setxattr, path, "user.planted", b"1")
    attempt("removexattr", os.removexattr, path, "user.kept")
    attempt("write", append, path)
for path in paths["stand_ins"]:
    attempt("chmod 000", os.chmod, path, 0)
for path in paths["real"]:
    attempt("chmod same", os.chmod, path, os.stat(path).st_mode & 0o7777)
"""
CALLS_PER_TARGET = 7

# seccomp filters the daemon side installs (inherited by the spawner and its commands)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
OTHER_NAMESPACES = 0x6E000080  # cgroup, uts, ipc, pid, net, time
FILTERS = {  # name -> (bits of unshare's flags refused, mount refused)
    "none": None,
    "no user namespace": (CLONE_NEWUSER, False),
    "unit": (OTHER_NAMESPACES, False),  # RestrictNamespaces=user mnt, @mount allowed
    "previous unit": (0xFFFFFFFF, True),  # RestrictNamespaces=yes, no @mount
}
SECCOMP_ARCH = {"x86_64": (0xC000003E, 272, 165), "aarch64": (0xC00000B7, 97, 40)}  # audit arch, unshare, mount


def install_filter(name: str) -> None:
    """Refuse (EPERM) unshare with any of the filter's flags, and mount where it says so."""
    if FILTERS[name] is None:
        return
    refused_flags, refuse_mount = FILTERS[name]
    arch, unshare, mount = SECCOMP_ARCH[platform.machine()]
    allow, eperm = 0x7FFF0000, 0x00050000 | 1

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    program = b"".join([
        op(0x20, 0, 0, 4), op(0x15, 0, 7, arch),  # another arch: allow
        op(0x20, 0, 0, 0), op(0x15, 0, 1, mount), op(0x06, 0, 0, eperm if refuse_mount else allow),
        op(0x15, 0, 3, unshare), op(0x20, 0, 0, 16), op(0x45, 0, 1, refused_flags), op(0x06, 0, 0, eperm),
        op(0x06, 0, 0, allow)])
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer(struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer)), 16)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0) == 0, os.strerror(ctypes.get_errno())


def daemon_side(args: dict) -> dict:
    """Start the spawner for ``args["home"]`` by ``args["method"]``, run the attack from a command, then ordinary
    commands; with ``args["doctor"]``, doctor's probes too."""
    from automaton_min.confine.client import ConfinedSandbox, ConfinementUnavailable
    from automaton_min.confine.self_test import self_test

    home = Path(args["home"])
    try:
        sandbox = ConfinedSandbox(home, home / "workspace", args["method"]).start()
    except ConfinementUnavailable as exc:
        return {"unavailable": str(exc)}
    try:
        sandbox.write_file("attack.py", ATTACK)
        paths = {key: args[key] for key in ("targets", "stand_ins", "real")}
        attack = sandbox.exec(f"python3 attack.py {shlex.quote(json.dumps(paths))}", 60)
        after = sandbox.exec("echo still && /bin/sh -c 'echo sh runs' && python3 -c 'print(6 * 7)'", 30)
        result = {"uid": os.geteuid(), "report": sandbox.report, "describe": sandbox.describe(),
                  "host_files": sandbox.host_files(), "attack": attack.stdout, "attack_errors": attack.stderr,
                  "after": after.stdout + after.stderr}
    finally:
        sandbox.close()
    if args.get("doctor"):
        result["doctor"] = {p.name: [p.ok, p.detail, p.fix] for p in self_test(home, home / "workspace",
                                                                            {"execConfinement": args["method"]})}
    return result


if __name__ == "__main__":
    install_filter(sys.argv[1])
    print(json.dumps(daemon_side(json.loads(sys.argv[2]))))
