"""HTTP plumbing shared by every remote client."""
