"""The heartbeat: a durable scheduler that runs small tasks while the agent sleeps, waking it only for work."""
