"""Logging (and later metrics and alerts)."""
