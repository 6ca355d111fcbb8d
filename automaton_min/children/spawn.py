"""Spawning a child, one lifecycle step at a time (README: Children). Each step first looks at what an earlier,
killed run may have done (a sandbox named after the child), so a restarted parent never creates a second sandbox."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from automaton_min.children.lifecycle import transition
from automaton_min.crashpoint import crash_point
from automaton_min.store.children import Child, get_child
from automaton_min.update.manifest import Refused

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient
    from automaton_min.store.sqlite import Database
    from automaton_min.update.baked import Build

SANDBOX_PREFIX = "automaton-child-"
CHILD_BINARY = "automaton-min"  # in the sandbox's /root, where its commands start
INSTALL_TIMEOUT_S = 600
GENESIS_NAME = "genesis.json"
GENESIS_PATH = f"/root/.automaton/{GENESIS_NAME}"  # the child's home: the default ~/.automaton of the sandbox's root
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def sandbox_name(child_id: str) -> str:
    """The sandbox's name: it carries the child's id, so the parent finds it again after a restart."""
    return SANDBOX_PREFIX + child_id.lower()


def ensure_sandbox(db: "Database", client: "ConwayClient", child: Child, *, memory_mb: int, now_ms: int) -> Child:
    """Step ``sandbox_created``: the child's sandbox, found by its name or created, recorded with the child."""
    if child.sandbox_id:
        return child
    name = sandbox_name(child.id)
    found = next((sandbox for sandbox in client.list_sandboxes() if sandbox.name == name), None)
    if found is None:
        found = client.create_sandbox(name, memory_mb=memory_mb, idempotency_key=f"child-{child.id}-sandbox")
        crash_point("child.sandbox_created")  # created, not yet recorded: the restart finds it by name
    transition(db, child.id, "sandbox_created", f"sandbox {found.id} ({name})", now_ms, sandbox_id=found.id)
    return get_child(db, child.id)


def ensure_runtime(db: "Database", client: "ConwayClient", child: Child, build: "Build", manifest_url: str, *,
                   now_ms: int) -> Child:
    """Step ``runtime_ready``: the signed release's binary for the sandbox's architecture, downloaded inside the
    sandbox and checked there (size, sha256) before it runs once (``--version``); the parent's own file is never
    sent (a Pi parent is aarch64, a Conway sandbox x86_64)."""
    from automaton_min.update.manifest import artifact_for, verify_release
    from automaton_min.store.kv import get_value
    from automaton_min.update.updater import SEEN_KEY, fetch_manifest, one_reading

    if child.status != "sandbox_created":
        return child
    if build.public_key is None:
        raise Refused("this build has no release key baked in: it cannot verify the child's binary")
    release = verify_release(fetch_manifest(manifest_url), build.public_key)
    machine = client.exec("uname -m", 30, sandbox_id=child.sandbox_id).stdout.strip()
    seen = get_value(db, SEEN_KEY)
    artifact = artifact_for(release, arch=f"linux-{machine}", now_ms=now_ms, running=build.version,
                            last_issued_ms=int(seen) if seen and seen.isdigit() else None)
    url = one_reading(urljoin(manifest_url, artifact.url), "the child's binary URL")
    staged = f".{CHILD_BINARY}.new"
    script = (f"set -e; rm -f {staged}; curl -fsS --max-filesize {artifact.size} -o {staged} {shlex.quote(url)}; "
              f"test \"$(stat -c %s {staged})\" = {artifact.size}; "
              f"echo '{artifact.sha256}  {staged}' | sha256sum -c --quiet -; chmod 755 {staged}; "
              f"./{staged} --version; mv -f {staged} {CHILD_BINARY}")
    ran = client.exec(script, INSTALL_TIMEOUT_S, sandbox_id=child.sandbox_id,
                      idempotency_key=f"child-{child.id}-runtime")
    if ran.exit_code != 0 or release.version not in ran.stdout.split():
        client.exec(f"rm -f {staged}", 30, sandbox_id=child.sandbox_id)
        why = " ".join((ran.stderr or ran.stdout).split())[-200:] or f"exit {ran.exit_code}"
        raise Refused(f"the child's sandbox could not install automaton-min {release.version}: {why}")
    crash_point("child.runtime_installed")
    transition(db, child.id, "runtime_ready", f"automaton-min {release.version} (linux-{machine}) installed and "
               "checked in the sandbox", now_ms)
    return get_child(db, child.id)


def ensure_wallet(db: "Database", client: "ConwayClient", child: Child, genesis_text: str, *, now_ms: int,
                  taken: frozenset[str] = frozenset()) -> Child:
    """Step ``wallet_verified``: ``genesis.json`` written into the child's home, the child makes its own wallet
    (``init``: its key never leaves its sandbox) and the parent reads the address back; one of ``taken`` (lowercase:
    the parent's, its creator's, a sibling's) is refused."""
    import orjson

    if child.status != "runtime_ready":
        return child
    client.write_file(GENESIS_PATH, genesis_text, sandbox_id=child.sandbox_id)
    ran = client.exec(f"./{CHILD_BINARY} init", 60, sandbox_id=child.sandbox_id,
                      idempotency_key=f"child-{child.id}-wallet")
    try:
        address = orjson.loads(ran.stdout)["address"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise Refused(f"the child's init gave no address (exit {ran.exit_code})") from None
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address) or int(address, 16) == 0:
        raise Refused(f"the child's init gave no valid address ({str(address)[:50]!r})")
    if address.lower() in taken:  # a sandbox naming the parent, its creator or a sibling: not a new wallet
        raise Refused(f"the child's init gave {address}, an address already known here")
    crash_point("child.wallet_made")
    transition(db, child.id, "wallet_verified", f"its wallet {address}, made in its sandbox", now_ms, address=address)
    return get_child(db, child.id)
