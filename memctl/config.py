"""Settings: flag > environment > memctl.toml > default.

Every setting lives in a table of memctl.toml (in the store) and can be
overridden by an environment variable MEMCTL_<TABLE>_<KEY>, e.g.
MEMCTL_INGEST_PENDING_TTL_HOURS=48. Command-line flags win over both; the
CLI passes them in as explicit arguments.
"""

from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path
from typing import Any

from .errors import InputError

DEFAULTS: dict[str, dict[str, Any]] = {
    "ingest": {
        "pending_ttl_hours": 24.0,
        "default_section": "General",
        "default_scope": "global",
        "default_memory_class": "episodic",
        "filter_noise": True,
    },
    # MERA governance (G1, G4-G6; memctl/governance.py checks the ranges).
    "governance": {
        # retrieval_score = sum of these times relevance, recency, access, user_weight/10
        "retrieval_weight_relevance": 0.4,
        "retrieval_weight_recency": 0.25,
        "retrieval_weight_access": 0.2,
        "retrieval_weight_user": 0.15,
        # health_score = sum of these times recency, access, user_weight/10
        "health_weight_recency": 0.4,
        "health_weight_access": 0.35,
        "health_weight_user": 0.25,
        "recency_half_life_days": 14.0,     # recency_decay = exp(-ln2/half_life * age_days)
        "access_saturation": 20.0,          # access_frequency = min(access_count / this, 1)
        "default_user_weight": 5.0,         # for memories that give none (0..10)
        "low_priority_below": 0.3,          # health below this -> status low_priority
        "archive_below": 0.15,              # health below this -> status archived
        "delete_archived_after_days": 60.0,  # archived this long -> deleted (soft unless --hard)
        "core_user_weight": 9.0,            # user_weight >= this (or is_core) -> core: never demoted
        "layer_core_max": 10,               # G1 layer limits: L0 core,
        "layer_scope_max": 5,               # L1 scope,
        "layer_query_max": 5,               # L2 query
        "conflict_top_k": 5,                # similar memories reported on write
        "conflict_min_similarity": 0.2,     # ... when at least this similar (0..1)
    },
}


def load(config_file: Path) -> dict[str, dict[str, Any]]:
    """Defaults, overlaid by the file (if any), overlaid by the environment."""
    settings = copy.deepcopy(DEFAULTS)
    source = str(config_file)
    try:
        data = tomllib.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid TOML ({exc})", source=source) from None
    for table, values in data.items():
        if table not in settings or not isinstance(values, dict):
            raise InputError(f"unknown table [{table}]; known: {', '.join(settings)}", source=source)
        for key, value in values.items():
            settings[table][key] = _checked(table, key, value, source)
    for table, values in settings.items():
        for key in values:
            env = f"MEMCTL_{table}_{key}".upper()
            if env in os.environ:
                values[key] = _checked(table, key, _from_env(os.environ[env]), f"${env}")
    return settings


def _from_env(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string


def _checked(table: str, key: str, value: Any, source: str) -> Any:
    if key not in DEFAULTS[table]:
        raise InputError(f"unknown key '{key}' in [{table}]; known: {', '.join(DEFAULTS[table])}",
                         source=source)
    default = DEFAULTS[table][key]
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not type(default):
        raise InputError(f"{table}.{key} must be {type(default).__name__}, got {value!r}", source=source)
    return value
