"""The model registry (``model_registry``): which models exist, what they cost, which tier may use them (README:
Clients). Seeding the baseline keeps each row's ``enabled`` flag (the reference disabled every model it had
refreshed from an API).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable

from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.net.http import HttpError, NetworkError, Response, expect_ok, request
from automaton_min.tiers import TIER_RANK

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient
    from automaton_min.store.db import Database


@dataclass(frozen=True)
class ModelInfo:
    model_id: str
    provider: str
    display_name: str
    tier_minimum: str = "normal"
    cost_per_1k_input: int = 0
    cost_per_1k_output: int = 0
    max_tokens: int = 4096
    context_window: int = 128_000
    supports_tools: bool = True
    supports_vision: bool = False
    parameter_style: str = "max_tokens"
    enabled: bool = True

    @property
    def free(self) -> bool:
        return self.cost_per_1k_input == 0 and self.cost_per_1k_output == 0


def _openai(model_id: str, name: str, tier: str, cost_in: int, cost_out: int, max_tokens: int,
            vision: bool) -> ModelInfo:
    return ModelInfo(model_id, "openai", name, tier, cost_in, cost_out, max_tokens, 1_047_576, True, vision,
                     "max_completion_tokens")


BASELINE: tuple[ModelInfo, ...] = (
    _openai("gpt-5.2", "GPT-5.2", "normal", 18, 140, 32768, True),
    _openai("gpt-4.1", "GPT-4.1", "normal", 20, 80, 32768, True),
    _openai("gpt-4.1-mini", "GPT-4.1 mini", "low_compute", 4, 16, 16384, True),
    _openai("gpt-4.1-nano", "GPT-4.1 nano", "critical", 1, 4, 16384, False),
    _openai("gpt-5-mini", "GPT-5 mini", "low_compute", 8, 32, 16384, True),
    _openai("gpt-5.3", "GPT-5.3", "normal", 20, 80, 32768, True),
)

_COLUMNS = ("model_id, provider, display_name, tier_minimum, cost_per_1k_input, cost_per_1k_output, max_tokens,"
            " context_window, supports_tools, supports_vision, parameter_style, enabled")


def _from_row(row: tuple) -> ModelInfo:
    values = list(row)
    values[8], values[9], values[11] = bool(values[8]), bool(values[9]), bool(values[11])
    return ModelInfo(*values)


class ModelRegistry:
    """Reads and writes ``model_registry``."""

    def __init__(self, db: "Database", now: Clock = system_now) -> None:
        self.db = db
        self.now = now

    def seed_baseline(self) -> None:
        """Insert or refresh the baseline models, keeping each row's ``enabled`` flag."""
        with self.db.transaction():
            for model in BASELINE:
                self.upsert(model, keep_enabled=True, keep_tier=False)

    def upsert(self, model: ModelInfo, *, keep_enabled: bool = True, keep_tier: bool = True) -> None:
        """Insert ``model`` or update it in place (``created_at`` is kept)."""
        stamp = to_iso(self.now())
        self.db.execute(
            f"INSERT INTO model_registry ({_COLUMNS}, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(model_id) DO UPDATE SET provider = excluded.provider, display_name = excluded.display_name,"
            f" tier_minimum = {'model_registry.tier_minimum' if keep_tier else 'excluded.tier_minimum'},"
            " cost_per_1k_input = excluded.cost_per_1k_input, cost_per_1k_output = excluded.cost_per_1k_output,"
            " max_tokens = excluded.max_tokens, context_window = excluded.context_window,"
            " supports_tools = excluded.supports_tools, supports_vision = excluded.supports_vision,"
            " parameter_style = excluded.parameter_style,"
            f" enabled = {'model_registry.enabled' if keep_enabled else 'excluded.enabled'},"
            " updated_at = excluded.updated_at",
            (model.model_id, model.provider, model.display_name, model.tier_minimum, model.cost_per_1k_input,
             model.cost_per_1k_output, model.max_tokens, model.context_window, int(model.supports_tools),
             int(model.supports_vision), model.parameter_style, int(model.enabled), stamp, stamp),
        )

    def get(self, model_id: str) -> ModelInfo | None:
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM model_registry WHERE model_id = ?", (model_id,))
        return _from_row(row) if row else None

    def all(self) -> list[ModelInfo]:
        return [_from_row(row) for row in self.db.query(f"SELECT {_COLUMNS} FROM model_registry ORDER BY model_id")]

    def available(self, tier: str) -> list[ModelInfo]:
        """Enabled models a ``tier`` may use, cheapest first."""
        usable = [m for m in self.all() if m.enabled and TIER_RANK[m.tier_minimum] <= TIER_RANK[tier]]
        return sorted(usable, key=lambda m: (m.cost_per_1k_input + m.cost_per_1k_output, m.model_id))

    def set_enabled(self, model_id: str, enabled: bool) -> None:
        self.db.execute("UPDATE model_registry SET enabled = ?, updated_at = ? WHERE model_id = ?",
                        (int(enabled), to_iso(self.now()), model_id))

    def refresh_from_api(self, models: Iterable[dict[str, Any]], default_provider: str = "conway") -> int:
        """Upsert models as listed by a ``/v1/models`` endpoint; prices per million become per 1k units."""
        count = 0
        with self.db.transaction():
            for entry in models:
                model_id = entry.get("id")
                if not isinstance(model_id, str) or not model_id or entry.get("available") is False:
                    continue
                known = self.get(model_id)
                pricing = entry.get("pricing") if isinstance(entry.get("pricing"), dict) else {}
                self.upsert(ModelInfo(
                    model_id=model_id,
                    provider=str(entry.get("provider") or entry.get("owned_by") or default_provider),
                    display_name=str(entry.get("display_name") or entry.get("name") or model_id),
                    tier_minimum=known.tier_minimum if known else "normal",
                    cost_per_1k_input=(_per_1k_units(pricing, "input") if pricing
                                       else (known.cost_per_1k_input if known else 0)),
                    cost_per_1k_output=(_per_1k_units(pricing, "output") if pricing
                                        else (known.cost_per_1k_output if known else 0)),
                    max_tokens=_int(entry.get("max_tokens"), known.max_tokens if known else 4096),
                    context_window=_int(entry.get("context_window"), known.context_window if known else 128_000),
                    supports_tools=bool(entry.get("supports_tools", True)),
                    supports_vision=bool(entry.get("supports_vision", False)),
                    parameter_style=(entry.get("parameter_style")
                                     if entry.get("parameter_style") in ("max_tokens", "max_completion_tokens")
                                     else "max_tokens"),
                ))
                count += 1
        return count

    def discover_ollama(self, base_url: str, send: Callable[..., Response] = request) -> int:
        """Register every model an Ollama server has (``GET /api/tags``) as free, usable from ``critical`` up."""
        try:
            tags = expect_ok(send("GET", f"{base_url.rstrip('/')}/api/tags", timeout=5), "Ollama model list").json()
        except (HttpError, NetworkError):
            return 0
        count = 0
        with self.db.transaction():
            for entry in tags.get("models", []) if isinstance(tags, dict) else []:
                name = entry.get("name") or entry.get("model") if isinstance(entry, dict) else None
                if not isinstance(name, str) or not name:
                    continue
                known = self.get(name)
                base, _, tag = name.partition(":")
                display = base.capitalize() + (f" ({tag})" if tag and tag != "latest" else "")
                model = ModelInfo(name, "ollama", display, known.tier_minimum if known else "critical", 0, 0, 4096,
                                  8192)
                self.upsert(replace(model, enabled=known.enabled if known else True))
                count += 1
        return count


def _per_1k_units(pricing: dict[str, Any], side: str) -> int:
    """Hundredths of a cent per 1k tokens from a price in dollars per million tokens (rounded up)."""
    for key in (f"{side}_per_million", f"{side}_per_1m_tokens_usd"):
        value = pricing.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            # $X per 1M tokens = X * 100 cents per 1M = X * 100 * 100 hundredths per 1000 * 1000 tokens
            return int(-(-round(value * 10_000) // 1000))
    value = pricing.get(f"{side}_per_1k")
    return int(value) if isinstance(value, int) and value >= 0 else 0


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def refresh_from_conway(registry: ModelRegistry, client: "ConwayClient") -> int:
    """Upsert every model Conway's ``/v1/models`` lists, with its prices; returns how many."""
    listing = [
        {"id": m.id, "provider": m.provider,
         "pricing": {"input_per_million": m.input_per_million, "output_per_million": m.output_per_million}}
        for m in client.list_models()
    ]
    return registry.refresh_from_api(listing)
