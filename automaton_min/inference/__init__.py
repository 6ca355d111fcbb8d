"""Inference: provider wire formats, the model registry, the router, costs."""
