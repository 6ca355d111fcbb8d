"""Signed releases and the self-updater (README: Updates)."""
