"""The heartbeat: a durable scheduler that runs small tasks while the agent sleeps, and wakes it only when there is work."""
