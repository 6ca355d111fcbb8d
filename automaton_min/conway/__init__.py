"""The Conway control plane: provisioning, credits, sandboxes, top-ups."""
