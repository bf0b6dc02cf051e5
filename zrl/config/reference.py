"""The reference platform's replay JSON (its ``--replay_parameters``), translated into zrl's ``[[replay]]``
tables: standard means uniform, custom means elite or attentive by its sample_strategy. ``zrl-launch --replay``
and ``--set replay=...`` take it."""

from __future__ import annotations

import difflib
import json
from typing import Any

from zrl.errors import ConfigError

REFERENCE_TYPES = {
    "queue": "queue",
    "standard": "uniform",
    "uniform": "uniform",
    "elite": "elite",
    "attentive": "attentive",
    "prioritized": "prioritized",
    "custom": None,
}
REFERENCE_SAMPLERS = {"elite_sampling": "elite", "attentive_sampling": "attentive"}


def replays_from_json(text: str, source: str) -> list[dict[str, Any]]:
    """[[replay]] tables from a JSON list in the reference platform's --replay_parameters form (zrl's own
    key names are accepted as well): standard means uniform, and custom maps to elite or attentive by its
    sample_strategy (elite with lambda 1, i.e. uniform sampling, when it only names elite_insertion)."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{source}: not valid JSON: {err}") from None
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise ConfigError(
            f'{source}: expected a JSON list of objects, e.g. [{{"type": "queue", "capacity": 1, "sample_ratio": 1}}]'
        )
    tables = []
    for i, item in enumerate(items):
        item = dict(item)
        key = f"replay[{i}]"
        kind = item.pop("type", None)
        if not isinstance(kind, str) or kind.lower() not in REFERENCE_TYPES:
            hint = difflib.get_close_matches(str(kind).lower(), list(REFERENCE_TYPES), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"{source}: {key}.type = {kind!r} is not one of {', '.join(REFERENCE_TYPES)}{extra}")
        kind = REFERENCE_TYPES[kind.lower()]
        table: dict[str, Any] = {}
        sampler = item.pop("sample_strategy", None)
        insert = item.pop("insert_strategy", None)
        if kind in ("queue", "uniform") and sampler is not None:
            raise ConfigError(
                f"{source}: {key}.sample_strategy applies only to custom replays; this one is {items[i]['type']}"
            )
        if sampler is not None and (not isinstance(sampler, str) or sampler.lower() not in REFERENCE_SAMPLERS):
            raise ConfigError(
                f"{source}: {key}.sample_strategy = {sampler!r} is not one of elite_sampling, attentive_sampling"
            )
        if insert is not None and (not isinstance(insert, str) or insert.lower() != "elite_insertion"):
            raise ConfigError(
                f"{source}: {key}.insert_strategy = {insert!r}: the only insertion strategy is elite_insertion"
            )
        if kind is None:  # custom
            if sampler is None and insert is None:
                raise ConfigError(
                    f"{source}: {key}: a custom replay needs sample_strategy (elite_sampling or "
                    "attentive_sampling) or insert_strategy (elite_insertion)"
                )
            kind = REFERENCE_SAMPLERS[sampler.lower()] if sampler else "elite"
            if sampler is None:
                table["lambda_batch_multiplier"] = 1.0
        if insert is not None:
            table["elite_insertion"] = True
        strategy = item.pop("elite_sampling_strategy", None)
        if strategy is not None:
            text_value = str(strategy).lower().removeprefix("strategy")
            if text_value not in ("1", "2", "3", "4"):
                raise ConfigError(
                    f"{source}: {key}.elite_sampling_strategy = {strategy!r} is not one of strategy1, "
                    "strategy2, strategy3, strategy4"
                )
            table["strategy"] = int(text_value)
        for name, value in item.items():
            if isinstance(value, str) and name == "dist_function":
                value = value.lower()
            if name in ("lambda_batch_multiplier", "alfa_annealing_factor", "p") and isinstance(value, int):
                value = float(value)
            table[name] = value
        table["type"] = kind
        tables.append(table)
    return tables
