"""The signed release manifest: the one file a device trusts before it downloads anything.

On the wire (``release.json``): ``{"signed": "<manifest as JSON text>", "signature": "<base64>"}``. The Ed25519
signature covers the UTF-8 bytes of ``signed`` exactly; nothing in it is read before the signature holds.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

import orjson

from automaton_min.clock import from_iso, to_iso
from automaton_min.errors import RuntimeFailure

PRODUCT = "automaton-min"
MAX_ENVELOPE_BYTES = 64 * 1024
MAX_BINARY_BYTES = 256 * 1024 * 1024
_VERSION = re.compile(r"\d{1,6}(\.\d{1,6}){0,3}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Refused(RuntimeFailure):
    """A release this device will not install, and why (one line)."""


class NothingNew(RuntimeFailure):
    """The manifest names the running version: nothing to do."""


@dataclass(frozen=True)
class Artifact:
    url: str  # as published: absolute, or relative to the manifest's own URL
    size: int
    sha256: str


@dataclass(frozen=True)
class Release:
    """A manifest whose signature held."""

    product: str
    version: str
    issued_at: int  # epoch ms
    expires_at: int
    artifacts: dict[str, Artifact]  # by architecture, e.g. "linux-x86_64"


def version_key(version: str) -> tuple[int, ...]:
    """``"0.2.10"`` -> ``(0, 2, 10, 0)``: versions compare as numbers, padded to four parts."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise Refused(f"the release names an unreadable version ({str(version)[:20]!r})")
    parts = tuple(int(part) for part in version.split("."))
    return parts + (0,) * (4 - len(parts))


def sign_release(seed: bytes, manifest: dict) -> bytes:
    """``release.json`` for ``manifest``, signed with the Ed25519 private key ``seed`` (32 bytes). For the
    maintainer's release tool (build/release.py) and the tests: a device never signs."""
    from Crypto.Signature import eddsa

    signed = orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS).decode()
    signature = eddsa.new(eddsa.import_private_key(seed), "rfc8032").sign(signed.encode())
    return orjson.dumps({"signed": signed, "signature": base64.b64encode(signature).decode()})


def public_key_of(seed: bytes) -> bytes:
    from Crypto.Signature import eddsa

    return eddsa.import_private_key(seed).public_key().export_key(format="raw")


def verify_release(envelope: bytes, public_key: bytes) -> Release:
    """The release in ``envelope`` if its signature holds under ``public_key``, else ``Refused``."""
    from Crypto.Signature import eddsa

    if len(envelope) > MAX_ENVELOPE_BYTES:
        raise Refused(f"the release manifest is larger than {MAX_ENVELOPE_BYTES} bytes")
    try:
        outer = orjson.loads(envelope)
        signed, signature = outer["signed"], base64.b64decode(outer["signature"], validate=True)
    except (orjson.JSONDecodeError, KeyError, TypeError, binascii.Error):
        raise Refused("the release manifest is not a signed manifest (signed, signature)") from None
    if not isinstance(signed, str):
        raise Refused("the release manifest's signed part is not text")
    try:
        eddsa.new(eddsa.import_public_key(public_key), "rfc8032").verify(signed.encode(), signature)
    except ValueError:
        raise Refused("the release manifest's signature does not match this build's release key") from None
    return _read_signed(signed)


def _read_signed(signed: str) -> Release:
    try:
        fields = orjson.loads(signed)
        artifacts = {str(arch): Artifact(str(entry["url"]), int(entry["size"]), str(entry["sha256"]))
                     for arch, entry in fields["artifacts"].items()}
        release = Release(str(fields["product"]), str(fields["version"]), from_iso(fields["issued_at"]),
                          from_iso(fields["expires_at"]), artifacts)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise Refused("the signed manifest lacks a field (product, version, issued_at, expires_at, artifacts)") \
            from None
    version_key(release.version)
    for arch, artifact in artifacts.items():
        if not 0 < artifact.size <= MAX_BINARY_BYTES or not _SHA256.fullmatch(artifact.sha256):
            raise Refused(f"the manifest's {arch} entry has a bad size or sha256")
    return release


def check_release(release: Release, *, arch: str, running: str, now_ms: int, last_issued_ms: int | None,
                  rejected: tuple[str, ...] = ()) -> Artifact:
    """The artifact to install from a verified ``release``, or ``Refused``: another product, expired, older than a
    manifest already seen (a replay), older than ``running`` (``NothingNew`` when equal), a version rolled back
    here, no build for ``arch``."""
    _current(release, now_ms, last_issued_ms)
    if version_key(release.version) == version_key(running):
        raise NothingNew(f"{running} is the latest release")
    if version_key(release.version) < version_key(running):
        raise Refused(f"version {release.version} is older than the running {running}")
    if release.version in rejected:
        raise Refused(f"version {release.version} failed here before and was rolled back")
    return _for_arch(release, arch)


def artifact_for(release: Release, *, arch: str, now_ms: int, running: str | None = None,
                 last_issued_ms: int | None = None) -> Artifact:
    """The build a new machine of ``arch`` installs from a verified ``release`` (a child's sandbox), or ``Refused``:
    another product, expired, older than a manifest already seen, older than ``running`` (the parent's own
    version: a child is never born on a release its parent would refuse), no build for ``arch``."""
    _current(release, now_ms, last_issued_ms)
    if running is not None and version_key(release.version) < version_key(running):
        raise Refused(f"version {release.version} is older than this parent's {running}")
    return _for_arch(release, arch)


def _current(release: Release, now_ms: int, last_issued_ms: int | None) -> None:
    if release.product != PRODUCT:
        raise Refused(f"the release is for {release.product[:40]!r}, not {PRODUCT}")
    if release.expires_at <= now_ms:
        raise Refused(f"the release manifest expired at {to_iso(release.expires_at)}")
    if last_issued_ms is not None and release.issued_at < last_issued_ms:
        raise Refused(f"the manifest was issued at {to_iso(release.issued_at)}, before one already seen "
                      f"({to_iso(last_issued_ms)}): an old manifest replayed (a publisher re-signs to publish it "
                      "again)")


def _for_arch(release: Release, arch: str) -> Artifact:
    if arch not in release.artifacts:
        offered = ", ".join(sorted(release.artifacts)) or "none"
        raise Refused(f"the release has no build for {arch} (it has {offered})")
    return release.artifacts[arch]
