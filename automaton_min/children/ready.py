"""Whether this agent can spawn a child at all, and if not, the one thing missing (README: Children, Before you
spawn): said by ``status`` and by ``spawn_child`` before anything is asked of Conway."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from automaton_min.update.baked import Build


def manifest_url(config: Any, build: "Build") -> str:
    """Where a child's release is read: ``updateManifestUrl``, else the URL built into the binary ('' if none)."""
    return config.get("updateManifestUrl") or build.manifest_url or ""


def spawn_blocker(config: Any, build: "Build") -> str | None:
    """``None`` when spawning can be tried; else what is missing and how to get it, in one sentence."""
    if not config.get("conwayApiKey"):
        return ("no Conway API key: children live in Conway sandboxes paid from your credits; run automaton-min "
                "provision (and fund the wallet with USDC on Base for credits)")
    if build.public_key is None:
        return ("this program has no release key: a child runs the signed release, so spawn from the one-file "
                "binary built with AUTOMATON_RELEASE_KEY (README: Build the one-file binary)")
    if not manifest_url(config, build):
        return ("no release manifest URL to take the child's binary from: set updateManifestUrl to a published "
                "release.json (or build with AUTOMATON_RELEASE_URL)")
    return None
