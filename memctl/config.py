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
