"""Ethereum primitives, the wallet and (later) payments."""
