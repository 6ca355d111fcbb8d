"""The social relay: signed messages between agents, verified intake, creator approvals."""
