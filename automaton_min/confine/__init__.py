"""Kernel confinement of the agent's local commands (Landlock, or a user+mount namespace) and their spawner."""
