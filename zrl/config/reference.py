"""The reference platform's replay JSON (its ``--replay_parameters``), translated into zrl's ``[[replay]]``
tables: standard means uniform, custom means elite or attentive by its sample_strategy. ``zrl-launch --replay``
and ``--set replay=...`` take it."""

from __future__ import annotations

import difflib
import json
import math
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
# What the reference's custom-replay schema fills in for a key its JSON leaves out. lambda 1 samples uniformly.
CUSTOM_DEFAULTS = {"lambda_batch_multiplier": 1.0, "alfa_annealing_factor": 1.0, "strategy": 3, "p": 2.0}
# Keys the reference schema reads with int(): in a custom entry 6.7 means 6 (zrl's own elite/attentive keys,
# in a [[replay]] table or a JSON entry of type elite or attentive, take fractions).
TRUNCATED = ("lambda_batch_multiplier", "p")


def _truncated(value: Any, where: str) -> Any:
    """int(value), as a float, for a JSON number or numeric string, as the reference's Use(int) reads it; other
    values pass through for the [[replay]] checks to report."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} = {value!r} is not a finite number")
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(int(value))
        except (ValueError, OverflowError):
            raise ConfigError(
                f"{where} = {value!r} is not a whole number (the reference reads it with int())"
            ) from None
    return value


def replays_from_json(text: str, source: str) -> list[dict[str, Any]]:
    """[[replay]] tables from a JSON list in the reference platform's --replay_parameters form (zrl's own
    key names are accepted as well): standard means uniform, and custom maps to elite or attentive by its
    sample_strategy (elite with lambda 1, i.e. uniform sampling, when it only names elite_insertion)."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{source}: not valid JSON: {err}") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid JSON: nested too deeply") from None
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
        custom = kind is None
        if custom:
            if sampler is None and insert is None:
                raise ConfigError(
                    f"{source}: {key}: a custom replay needs sample_strategy (elite_sampling or "
                    "attentive_sampling) or insert_strategy (elite_insertion)"
                )
            kind = REFERENCE_SAMPLERS[sampler.lower()] if sampler else "elite"
            table.update(CUSTOM_DEFAULTS)  # the reference schema's defaults, not zrl's [[replay]] ones
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
            if custom and name in TRUNCATED:
                value = _truncated(value, f"{source}: {key}.{name}")
            elif name == "alfa_annealing_factor" and isinstance(value, int) and not isinstance(value, bool):
                if abs(value) > 2**1023:
                    raise ConfigError(f"{source}: {key}.{name} = {value} is beyond a float")
                value = float(value)
            table[name] = value
        if custom and sampler is None:  # insertion only: the reference samples uniformly, whatever lambda says
            table["lambda_batch_multiplier"] = 1.0
        table["type"] = kind
        tables.append(table)
    return tables
