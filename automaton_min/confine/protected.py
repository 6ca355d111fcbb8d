"""The agent's own files that no command or file tool may touch: the one list the kernel plan and the path rules
share (README: Security). Nothing in this program writes the skills directory.
"""

from __future__ import annotations

from pathlib import Path

HOME_SECRETS = ("wallet.json", "config.json", "automaton.json")  # hold keys: never read, never written
HOME_STATE = ("state.db", "state.db-wal", "state.db-shm", "constitution.md", "run.lock")  # never written
# Never written by a command or a file tool; bin: the service's own binary, its previous copy, the update marker.
HOME_SELF = ("SOUL.md", "heartbeat.yml", "skills", "bin")
HOME_PROTECTED = (*HOME_SECRETS, *HOME_STATE, *HOME_SELF)

# Names that hold keys wherever they are: never read, never written.
SECRET_NAMES = ("wallet.json", "automaton.json")
ENV_SAMPLE_SUFFIXES = (".example", ".sample", ".template", ".dist")
# Private keys and certificates: never read.
KEY_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".keystore")
KEY_PREFIXES = ("private-key", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")


def is_secret_name(name: str) -> bool:
    """A file name that holds a key wherever it is: the wallet, the configuration, a ``.env`` file."""
    if name in SECRET_NAMES or name == ".env":
        return True
    return name.startswith(".env.") and not name.endswith(ENV_SAMPLE_SUFFIXES)


def is_key_name(name: str) -> bool:
    """A private key or certificate, by its name."""
    lowered = name.lower()
    return lowered.endswith(KEY_SUFFIXES) or lowered.startswith(KEY_PREFIXES)


def protected_paths(home: Path) -> list[Path]:
    """The protected entries of one home, as paths."""
    return [Path(home) / name for name in HOME_PROTECTED]
