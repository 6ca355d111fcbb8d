"""Error types that carry the process exit code: a ``UserError`` (a mistake the user can fix) exits 2, a
``RuntimeFailure`` (the work went wrong) exits 1; both render as one line.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class AutomatonError(Exception):
    """Base class: an error whose message is fit to show to the user as one line."""

    exit_code = EXIT_FAILURE


class UserError(AutomatonError):
    """A mistake in configuration, flags or files that the user can fix."""

    exit_code = EXIT_USAGE


class ConfigError(UserError):
    """``automaton.json`` (or a value meant for it) breaks a rule."""


class WalletError(UserError):
    """``wallet.json`` is missing, unreadable, unsafe or of an unsupported kind."""


class RuntimeFailure(AutomatonError):
    """Work failed for a reason other than the user's input."""


class DatabaseError(RuntimeFailure):
    """``state.db`` could not be opened, checked or migrated."""
