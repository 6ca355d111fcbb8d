"""The home directory (``~/.automaton`` by default) and the files it holds."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from automaton_min.errors import UserError
from automaton_min.fileio import file_mode

HOME_ENV = "AUTOMATON_HOME"
REFERENCE_HOME_PREFIX = "~/.automaton/"


def default_home() -> Path:
    """``$AUTOMATON_HOME`` when set, else ``~/.automaton``."""
    override = os.environ.get(HOME_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".automaton"


@dataclass(frozen=True)
class Home:
    """Paths inside one automaton home directory."""

    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / "automaton.json"

    @property
    def wallet_path(self) -> Path:
        return self.root / "wallet.json"

    @property
    def api_key_path(self) -> Path:
        """Where provisioning keeps the Conway API key (the reference calls it ``config.json``)."""
        return self.root / "config.json"

    @property
    def soul_path(self) -> Path:
        return self.root / "SOUL.md"

    @property
    def constitution_path(self) -> Path:
        return self.root / "constitution.md"

    @property
    def default_db_path(self) -> Path:
        return self.root / "state.db"

    def resolve(self, configured: str) -> Path:
        """Resolve a path from the config: ``~/.automaton/...`` (the reference's literal home) means this home, so a
        relocated home keeps working; other ``~`` paths expand as usual; relative paths are relative to this home.
        """
        if configured.startswith(REFERENCE_HOME_PREFIX):
            return self.root / configured[len(REFERENCE_HOME_PREFIX):]
        path = Path(configured).expanduser()
        return path if path.is_absolute() else self.root / path

    def exists(self) -> bool:
        return self.root.is_dir()

    def check_not_a_file(self) -> None:
        """Refuse a home path that exists as something other than a directory."""
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"home {self.root} exists but is not a directory; pass --home with a directory path")

    def ensure(self) -> None:
        """Create the home directory with mode 0700 (parents as needed)."""
        self.check_not_a_file()
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except PermissionError:
            raise UserError(f"cannot create home {self.root}: permission denied; "
                            "pass --home with a writable path") from None
        if file_mode(self.root) & 0o077:
            os.chmod(self.root, 0o700)

    def require(self) -> None:
        """Fail with a one-line hint when the home has not been set up."""
        self.check_not_a_file()
        if not self.config_path.exists():
            raise UserError(f"no automaton is set up in {self.root}; run: automaton-min setup")
