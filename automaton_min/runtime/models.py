"""Keeping the model registry current from the services the automaton can reach."""

from __future__ import annotations

from automaton_min.conway.client import ConwayClient
from automaton_min.inference.registry import ModelRegistry


def refresh_from_conway(registry: ModelRegistry, client: ConwayClient) -> int:
    """Upsert every model Conway's ``/v1/models`` lists, with its prices; returns how many."""
    listing = [
        {"id": m.id, "provider": m.provider,
         "pricing": {"input_per_million": m.input_per_million, "output_per_million": m.output_per_million}}
        for m in client.list_models()
    ]
    return registry.refresh_from_api(listing)
