"""Settings: flag > environment > memctl.toml > the user's config.toml > default.

Every setting lives in a table of memctl.toml (in the store) and can be
overridden by an environment variable MEMCTL_<TABLE>_<KEY>, e.g.
MEMCTL_INGEST_PENDING_TTL_HOURS=48. Command-line flags win over both; the
CLI passes them in as explicit arguments. Under the store's file lies the
user's own, $XDG_CONFIG_HOME/memctl/config.toml (~/.config/memctl/config.toml):
the same tables, for every store of that user.

Each table is a frozen dataclass below (`Embedding`, `Retrieval`, ...): a
field per setting, typed, with its default and, where its type is not limit
enough, its limit beside it (`limited(...)`). `load()` returns a `Settings`
holding one of each, so code reads `settings.topics.keep_recent`: a misspelt
name is an AttributeError (and a type checker's error), not a KeyError at
run time; a misspelt key in memctl.toml is an error naming its file and line.

A store is data, not code: a setting that names a program to run
(PROGRAM_SETTINGS, names_program) or a server to send data to ([cache]
backend) comes only from the user - a flag, the environment or their
config.toml. In a store's memctl.toml it is ignored, with one line on
stderr saying where it belongs (`memctl health` warns of it too).

A setting is a typed scalar, except where its default is a dict: that is a
mapping of names to lists of words, written as a sub-table, e.g.

    [state.keywords]
    "重要決定" = ["決定", "decision"]

A renamed setting (RENAMED) is still read under its old name, with one line
on stderr naming the new one.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import os
import sys
import threading
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from memctl.errors import InputError

Limit = tuple[Callable[[Any], bool], str]  # (test, what is allowed: the error message says "must be <this>")


def limited(default: Any, limit: Limit | None = None) -> Any:
    """A setting's field: its default, and the limit its value must keep beyond its type."""
    meta = {"limit": limit} if limit else {}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def _schema_problem(name: str, value: Any) -> str | None:
    # Imported here: the MEMORY.md module is not needed by a search that checks no ingest setting.
    from memctl.store.memoryfile import check_field

    return check_field(name, value)


WHOLE = (lambda v: v >= 1, "a whole number >= 1")
SHARE = (lambda v: 0 <= v <= 1, "from 0 to 1")
POSITIVE = (lambda v: v > 0, "above 0")
NOT_NEGATIVE = (lambda v: v >= 0, "0 or more")
FRACTION = (lambda v: 0 < v <= 1, "a number in (0, 1]")


class Table:
    """A table of settings. Every one is frozen: settings are read, never written, once loaded."""

    NAME = ""


@dataclass(frozen=True)
class Embedding(Table):
    NAME = "embedding"
    # "" (the default, usem3-minilm: USE multilingual for every text in one space across
    # languages, the bundled all-MiniLM-L6-v2 for text not in Chinese, Japanese or Korean too), a
    # name in memctl/index/embedders.py (minilm-usem3, minilm, usem3, e5-small), or a
    # sentence-transformers directory
    model: str = ""
    threads: int = limited(2, WHOLE)  # indexing: several texts at once (an update, an import)
    # A search embeds one short query (and one text alone runs so too): a second thread costs it
    # more than it gains (2.5 -> 5 ms a query) and, on a busy machine, waits for a core (warm
    # hybrid search, 2 cores under load 12: 87 -> 45 ms). A batch of 20 gains (embedding.py).
    query_threads: int = limited(1, WHOLE)
    batch_size: int = limited(16, WHOLE)  # short batches pad less: measured fastest for chat turns
    with_previous_turn: bool = True  # read a message with the turn before it (within the hour): the model, and BM25 (context field)
    # int8 (quantised weights: ~2x faster) | float32 (exactly sentence-transformers)
    precision: str = limited("int8", (lambda v: v in ("float32", "int8"), "float32 or int8"))


@dataclass(frozen=True)
class Retrieval(Table):
    """SPEC P3; defaults from design 003 section 5."""

    NAME = "retrieval"
    fusion: str = limited("weighted", (lambda v: v in ("weighted", "rrf"), "weighted or rrf"))  # weighted | rrf
    vector_weight: float = 0.7
    bm25_weight: float = 0.3
    rrf_k: int = 60
    unknown_share_low: float = 0.1   # the query's share of word pieces the model does not know:
    unknown_share_high: float = 0.5  # above low, vector weight moves to BM25; at high, all of it
    candidates: int = limited(200, WHOLE)
    # BM25 enters the fused score as score / max(best score, bm25_full_coverage · ideal): the best
    # keyword hit leads only when it holds this share of the query's word weight (lexical.Hits);
    # 0 is plain max-normalisation
    bm25_full_coverage: float = limited(0.5, SHARE)
    # BM25 of a message's turn before it counts this much (index with_previous_turn)
    context_weight: float = limited(0.5, SHARE)
    split_query_lines: bool = True  # a query of several lines: a cosine is the mean of its closest line's and the whole's
    # Recency boost: + recency_weight · exp(−age / recency_decay_days). Days for the boost to fall
    # to 1/e (0.37) of itself, not to half: once called recency_half_life_days (RENAMED).
    recency_decay_days: float = limited(14.0, POSITIVE)
    recency_weight: float = 0.10
    default_importance: float = 0.7
    importance_base: float = limited(0.7, SHARE)  # importance stage: × (base + (1 − base) · importance)
    length_norm_anchor: int = 500
    length_norm_strength: float = 0.5  # length stage: × 1 / (1 + strength · log2(chars / anchor))
    # Time decay: × (floor + (1 − floor) · exp(−age / time_decay_days)): days to fall to 1/e of the
    # way to the floor, not half of it: once called time_decay_half_life_days (RENAMED).
    time_decay_days: float = limited(60.0, POSITIVE)
    time_decay_floor: float = limited(0.5, SHARE)
    evergreen_memory_classes: list = limited(  # memories of these classes do not decay
        ["policy"], (lambda v: all(isinstance(c, str) for c in v), "a list of names"))
    cosine_floor: float = -1.0  # cosine calibration: below 0 means the model's own (embedders.py)
    cosine_ceiling: float = -1.0
    # BM25 coverage judges a longer query as this many words of its mean weight
    coverage_query_words: int = limited(8, WHOLE)
    # The minimum asks whether the store knows the query's subject at all (search.py): some
    # candidate matches its meaning (own calibrated cosine), its words (BM25 coverage) or both
    # together (relevance) this well. Chosen on the dev sets together (bench/README.md).
    subject_min_cosine: float = limited(0.5, SHARE)
    # ... in a store of this many units or more; a smaller one asks less, subject_size_slope for
    # each unit of √(2 ln units) it has fewer (subject.SubjectTest.min_cosine); 0: one threshold.
    # 0.13: the most at which no dev set's unrelated queries pass more often than 5 % (or than at
    # 0.11) on the fit part; 0.14 let a never-mentioned question more through in the store of one
    # person's facts, 0.15 5.7 % of a tiny store's (bench/gate_fit.py; bench/README.md, "Issue 33,
    # fourth pass")
    subject_reference_units: int = limited(600, WHOLE)
    subject_size_slope: float = limited(0.13, SHARE)
    subject_min_coverage: float = limited(0.4, SHARE)
    min_best_relevance: float = limited(0.38, SHARE)
    # ... or two units together hold this share of the query's word weight (idf, a word held or
    # not): a question joining two facts. 0.55: unrelated 3.3 % (0.5: 4.4 %, 0.6: LongMemEval's
    # two-event question lost again)
    subject_min_words: float = limited(0.55, SHARE)
    # Once the store knows the subject, no result is cut for being weaker than the best (a cut
    # at half the best and 0.2 cost LongMemEval .159 of all@10); a floor stays possible.
    hard_min_score: float = limited(0.0, SHARE)
    # The newer fact wins (search/stages.py NewerFirst): a later statement naming a rare word of a
    # top result ranks above it; rare: held by at most this share of the store's units.
    newer_first: bool = True
    newer_rare_share: float = limited(0.01, SHARE)
    # ... or restating it: at least this cosine between the two (and every query word it holds)
    newer_twin_cosine: float = 0.75
    newer_pull_share: float = limited(0.8, SHARE)  # from below the first page: this share of its relevance
    # A chat turn moves this share of the way up to the better fused score of the turns right
    # before and after it (search/stages.py Neighbours; ordering only, the minimum reads each turn's own)
    neighbour_weight: float = limited(0.4, SHARE)
    # A chat turn or log entry said in the period the query names ("on 9 November, 2022", "10 days
    # ago"; search/dates.py) gains this on its fused score: LoCoMo dev recall@10 +.018 at 0.2
    # (0.1: +.015, 0.3: +.016), ordering only (bench/README.md, "Dates, twins and two-turn subjects")
    date_weight: float = limited(0.2, SHARE)
    filter_noise: bool = True
    mmr_threshold: float = 0.85
    # ... and at least this share of its content words are the better one's: turns of two sessions
    # that open alike but hold different facts are no twins (LongMemEval dev +1 question at 0.5 and
    # at 0.7; LoCoMo dev recall@10 -.003 from ranks 10 -> 11)
    mmr_word_overlap: float = limited(0.5, SHARE)
    memory_snippet_tokens: int = 1500
    message_snippet_tokens: int = 1000


@dataclass(frozen=True)
class Ingest(Table):
    NAME = "ingest"
    # Ten years: further out, an expiry time overflows the calendar (1e308 hours did).
    pending_ttl_hours: float = limited(24.0, (lambda v: 0 < v <= 87_600, "hours above 0, at most 87600 (ten years)"))
    default_section: str = limited("General", (lambda v: bool(v.strip()) and "\n" not in v, "one line of text"))
    default_scope: str = limited("global", (lambda v: _schema_problem("scope", v) is None,
                                            "global, project:<name>, lang:<name> or user:<name>"))
    default_memory_class: str = limited("episodic", (lambda v: _schema_problem("memory_class", v) is None,
                                                     "policy, episodic or mixed"))
    filter_noise: bool = True
    # One message or note: a larger one is refused whole (a 50 MB message took the index past
    # 600 s and 700 MB). 1 MiB is ~250k tokens, past any model's context.
    max_text_bytes: int = limited(1 << 20, (lambda v: 1 <= v <= 64 << 20, "a whole number from 1 to 67108864 (64 MiB)"))


@dataclass(frozen=True)
class State(Table):
    """The section-hit window (W, memctl/window/state.py). window_size and dominant_threshold are
    the values a new index_state.json starts with; after that the file holds them (memctl state
    config changes them)."""

    NAME = "state"
    window_size: int = limited(5, (lambda v: v in (3, 5, 10), "3, 5 or 10"))  # 3, 5 or 10 turns
    dominant_threshold: float = limited(0.7, FRACTION)  # in (0, 1]
    miss_threshold: int = limited(3, WHOLE)     # suggest removing a section missed this many turns in a row
    topic_after_turns: int = limited(3, WHOLE)  # dominant this many turns in a row -> MEMORY_TOPIC.md
    keywords: dict = limited({})                # section -> extra keywords for `memctl state plan`


@dataclass(frozen=True)
class Governance(Table):
    """MERA governance (G1, G4-G6). One rule ties two values: archive_below <= low_priority_below
    (checked by load())."""

    NAME = "governance"
    # retrieval_score = sum of these times relevance, recency, access, user_weight/10
    retrieval_weight_relevance: float = limited(0.4, NOT_NEGATIVE)
    retrieval_weight_recency: float = limited(0.25, NOT_NEGATIVE)
    retrieval_weight_access: float = limited(0.2, NOT_NEGATIVE)
    retrieval_weight_user: float = limited(0.15, NOT_NEGATIVE)
    # health_score = sum of these times recency, access, user_weight/10
    health_weight_recency: float = limited(0.4, NOT_NEGATIVE)
    health_weight_access: float = limited(0.35, NOT_NEGATIVE)
    health_weight_user: float = limited(0.25, NOT_NEGATIVE)
    recency_half_life_days: float = limited(14.0, POSITIVE)  # recency_decay = exp(-ln2/half_life * age_days): a true half-life
    access_saturation: float = limited(20.0, POSITIVE)       # access_frequency = min(access_count / this, 1)
    default_user_weight: float = limited(5.0, (lambda v: 0 <= v <= 10, "from 0 to 10"))  # for memories that give none
    low_priority_below: float = limited(0.3, SHARE)   # health below this -> status low_priority
    archive_below: float = limited(0.15, SHARE)       # health below this -> status archived
    delete_archived_after_days: float = limited(60.0, NOT_NEGATIVE)  # archived this long -> deleted (soft unless --hard)
    core_user_weight: float = limited(9.0, (lambda v: 0 <= v <= 10, "from 0 to 10"))  # >= this (or is_core) -> core
    layer_core_max: int = limited(10, NOT_NEGATIVE)   # G1 layer limits: L0 core,
    layer_scope_max: int = limited(5, NOT_NEGATIVE)   # L1 scope,
    layer_query_max: int = limited(5, NOT_NEGATIVE)   # L2 query
    conflict_top_k: int = limited(5, NOT_NEGATIVE)    # similar memories reported on write
    conflict_min_similarity: float = limited(0.2, SHARE)  # ... when at least this similar (0..1)
    # A note at least this similar to a current memory of its scope (word Jaccard) nearly repeats it:
    # a conflict on write, as a shared canonical_topic is (--add or --supersedes decides). Words cannot
    # tell whose: "Alice's phone number is 555-1234" / "Bob's phone number is 555-9876" share half
    # (0.5), and two notes of four words one apart 0.6 ("note 4 from writer 0" / "note 5 ..."); a
    # statement of six words with one changed, "The staging database password rotates every 30
    # days" / "... 90 days", 0.71. Hence 0.7: a longer note with one thing changed.
    near_duplicate_similarity: float = limited(0.7, SHARE)


@dataclass(frozen=True)
class Topics(Table):
    """Topic partitioning (SPEC T, memctl/topics/)."""

    NAME = "topics"
    context_limit: int = limited(200000, WHOLE)  # tokens of the main context; split when over 70% of it (T2)
    split_at: float = limited(0.7, FRACTION)      # ... this share
    keep_recent: int = limited(20, NOT_NEGATIVE)  # the last messages a split always leaves in the main context
    topic_limit: int = limited(50000, WHOLE)     # tokens of one topic's messages before it splits into sub-topics (T8)
    summary_bytes: int = limited(1000, WHOLE)    # a topic summary's budget (UTF-8 bytes)
    llm_command: str = ""  # split with this command (prompt on stdin, answer on stdout); "" is built-in
    llm_timeout: float = limited(300.0, POSITIVE)  # seconds one LLM call may take
    llm_batch: int = limited(60, WHOLE)          # messages per LLM call
    # Evaluation and graded activation (T4, T6, T7; memctl/topics/activation.py).
    context_budget: int = limited(8000, WHOLE)   # tokens of `memctl context` output unless --budget (T5)
    active_min: int = limited(3, WHOLE)          # active topics never fewer than this (while there are topics)
    active_max: int = limited(20, WHOLE)         # ... nor more
    active_target: int = limited(10, WHOLE)      # above this many, only topics over the activation threshold stay
    score_window: int = limited(5, WHOLE)        # rounds in a topic's sliding average
    threshold_base: float = limited(0.2, SHARE)  # activation threshold = base + step * active count; dormancy = half
    threshold_step: float = limited(0.03, SHARE)
    amnesia_threshold: float = limited(0.15, SHARE)  # the relaxed threshold of an amnesia cue's deep search
    llm_parallel: int = limited(4, WHOLE)        # topic evaluations run at once with an LLM command
    archive_after_days: float = limited(7.0, POSITIVE)  # dormant this long -> archived by the daily review (T12)
    idle_hours: float = limited(1.0, POSITIVE)   # a session idle this long gets an auto-summary (P8)


@dataclass(frozen=True)
class Cache(Table):
    """Shared working memory for tool outputs (H1-H5, memctl/cache/)."""

    NAME = "cache"
    backend: str = limited("files", (lambda v: v == "files" or v.startswith(("redis://", "rediss://", "unix://")),
                                     "files or a redis:// URL"))  # files (in the store) | redis://host:port/db
    ttl: float = limited(3600.0, POSITIVE)         # seconds an output is served
    negative_ttl: float = limited(300.0, POSITIVE)  # ... an empty or failed one (H2)
    wait_timeout: float = limited(60.0, POSITIVE)  # seconds an agent waits for another's run of the same call
    lock_ttl: float = limited(30.0, POSITIVE)      # redis: a dead runner's lock expires after this (renewed while alive)
    socket_timeout: float = limited(2.0, POSITIVE)  # redis: seconds before a silent server is an error
    stderr_lines: int = limited(20, NOT_NEGATIVE)  # last lines of a command's stderr kept with its output
    consolidate_min_access: int = limited(2, WHOLE)  # H3: accessed this often -> long-term memory
    consolidate_on: list = limited(  # also consolidate automatically: clear (end of a run), hit
        ["clear"], (lambda v: all(e in ("clear", "hit") for e in v), "a list of clear, hit"))
    section: str = "Tool results"                  # MEMORY.md section of consolidated items
    summary_chars: int = limited(600, WHOLE)       # built-in extractive summary: the output's first lines up to this
    summary_command: str = ""                      # else a command (an LLM) that reads the item, prints a summary


@dataclass(frozen=True)
class Mcp(Table):
    """The MCP server (memctl mcp, memctl/mcp/)."""

    NAME = "mcp"
    # One JSON-RPC message (a line); a longer one gets an error reply. Lower, and a client's own
    # initialize request (its name, capabilities) could be refused.
    max_request_bytes: int = limited(1_048_576, (lambda v: v >= 4096, "a whole number of bytes >= 4096"))


@dataclass(frozen=True)
class Server(Table):
    """The resident memctl (memctl server, memctl/server/): one process per store keeps the model,
    the vectors and the Tantivy reader open for the command line's calls."""

    NAME = "server"
    enabled: bool = True  # a call that opened the index starts one; false (or MEMCTL_SERVER=off): all in-process
    # A server's memory (the model, the vectors: ~300 MB at 50k messages) is held this long after its last
    # call; an agent's turns come seconds to minutes apart.
    idle_minutes: float = limited(30.0, POSITIVE)
    # ... but only once its store is used again and again: a server waits, idle, as long as it has been
    # used (its first to its last call), at least this and at most idle_minutes. A one-off call (a cron
    # line, a test, a try) leaves its server for this long, not half an hour (bench/README.md).
    first_idle_minutes: float = limited(2.0, POSITIVE)
    # Servers running at once from one runtime directory (a user's: $XDG_RUNTIME_DIR/memctl); a store
    # whose call finds this many starts none (its calls run in their own processes) until one leaves.
    max_running: int = limited(4, WHOLE)


@dataclass(frozen=True)
class Hooks(Table):
    """Agent clients' hooks (memctl hooks run, memctl/hooks/): the context each prompt gets, unasked."""

    NAME = "hooks"
    # Tokens (cl100k) of what a prompt is given: the core rules, the memories and earlier messages
    # found for it. Smaller than [topics] context_budget: the client already holds the conversation,
    # and a hook's text goes in front of every prompt.
    context_budget: int = limited(2000, WHOLE)
    # A hook that has not answered in this long gives up (a store lock held by a long rebuild, a cold
    # model under load) and the prompt goes on without memory: the user is waiting.
    timeout_seconds: float = limited(10.0, POSITIVE)


@dataclass(frozen=True)
class Settings:
    """Every table: `settings.retrieval.candidates`. Made by load(); Settings() is the defaults."""

    embedding: Embedding = field(default_factory=Embedding)
    retrieval: Retrieval = field(default_factory=Retrieval)
    ingest: Ingest = field(default_factory=Ingest)
    state: State = field(default_factory=State)
    governance: Governance = field(default_factory=Governance)
    topics: Topics = field(default_factory=Topics)
    cache: Cache = field(default_factory=Cache)
    mcp: Mcp = field(default_factory=Mcp)
    server: Server = field(default_factory=Server)
    hooks: Hooks = field(default_factory=Hooks)


TABLES: dict[str, type] = {t.NAME: t for t in (Embedding, Retrieval, Ingest, State, Governance, Topics, Cache, Mcp,
                                               Server, Hooks)}


def _defaults_of(table: type) -> dict[str, Any]:
    return {f.name: (f.default_factory() if f.default is dataclasses.MISSING else f.default)
            for f in dataclasses.fields(table)}


# The defaults as plain values, table by table (for documentation and the loader's overlay).
DEFAULTS: dict[str, dict[str, Any]] = {name: _defaults_of(table) for name, table in TABLES.items()}
# Each setting's limit beyond its type: (test, what is allowed).
LIMITS: dict[tuple[str, str], Limit] = {(name, f.name): f.metadata["limit"] for name, table in TABLES.items()
                                        for f in dataclasses.fields(table) if "limit" in f.metadata}
# Old name -> new name, still read (memctl.toml, config.toml, the environment) with a note on stderr.
RENAMED: dict[tuple[str, str], str] = {
    ("retrieval", "recency_half_life_days"): "recency_decay_days",
    ("retrieval", "time_decay_half_life_days"): "time_decay_days",
}


# Settings that name a program for memctl to run. Only the user names one (a flag, the
# environment, their config.toml): a store's memctl.toml is data anyone may have written.
PROGRAM_SETTINGS = frozenset({("topics", "llm_command"), ("cache", "summary_command")})


def names_program(table: str, key: str, value: Any) -> bool:
    """Whether a setting's value names something memctl would run, or a server it would send the
    user's data to. Besides PROGRAM_SETTINGS, an [embedding] model given as a directory: it is
    loaded through torch, whose weight files can carry code (pickle), so a store naming one chooses
    code as surely as a command does; and a [cache] backend other than the store's own files: a
    Redis server, to which `cache run` would hand every output of the user's tools, so a store
    naming one could collect them anywhere. A registered model's name (usem3-minilm, minilm-usem3,
    minilm, usem3, e5-small) and `files` are data."""
    if (table, key) in PROGRAM_SETTINGS:
        return True
    if (table, key) == ("cache", "backend"):
        return value != "files"
    return ((table, key) == ("embedding", "model") and isinstance(value, str)
            and ("/" in value or "\\" in value or value.startswith((".", "~"))))

def load(config_file: Path, *, notes: bool = True) -> Settings:
    """Defaults, overlaid by the user's config.toml, by the store's memctl.toml `config_file` (all
    but the program settings, which it may not name), then by the environment. Read it once per
    run (a `Memory` does, see Runtime) and pass the tables down. `notes`: say on stderr, once a
    process, what the files name that is ignored or renamed.

    The settings are kept for the same contents of both files and the same MEMCTL_* variables
    (the tables are frozen): a resident server makes a Memory, and so loads, every call, and the
    walk through the layers cost ~0.4 ms of a ~16 ms warm search (bench/README.md "Cited measurements").
    Keyed on the
    files' bytes, not their stamps, so that an edit is seen even within one tick of the clock."""
    key = _load_key(config_file)
    loaded = _loaded.get(key)
    if loaded is None:
        loaded = _load(config_file, notes)
        if _load_key(config_file) == key:  # else a file changed while it was read: not kept
            if len(_loaded) >= 8:
                _loaded.clear()
            _loaded[key] = loaded
    settings, renamed, ignored = loaded
    if notes:
        _say_notes(config_file, renamed, ignored)
    return settings


_loaded: dict[tuple, tuple[Settings, list[tuple[str, str, str]], list[tuple[str, str]]]] = {}
_loading = threading.Lock()


def _load_key(config_file: Path) -> tuple:
    user_file = user_config_file()
    return (str(config_file), _bytes_of(config_file), str(user_file), _bytes_of(user_file),
            tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("MEMCTL_"))))


def _bytes_of(path: Path) -> bytes | None:
    from memctl.store.store import read_file

    try:
        return read_file(path)
    except OSError:
        return None


def _load(config_file: Path, notes: bool) -> tuple[Settings, list[tuple[str, str, str]], list[tuple[str, str]]]:
    """load()'s settings, with the renamed and ignored settings it must name (said by load(), or
    here, before the error, when the settings are refused)."""
    global _renamed_seen
    with _loading:  # one load at a time collects the renamed settings (memctl mcp loads on two threads)
        _renamed_seen = []
        try:
            values, _, ignored_values = _layered(config_file)
        except BaseException:
            renamed, _renamed_seen = _renamed_seen, None
            if notes:
                _say_notes(config_file, renamed, [])
            raise
        renamed, _renamed_seen = _renamed_seen, None
    ignored = [(table, key) for table, key, _ in ignored_values]
    settings = Settings(**{name: TABLES[name](**table_values) for name, table_values in values.items()})
    governance_settings = settings.governance
    # the one rule that ties two values together
    if governance_settings.archive_below > governance_settings.low_priority_below:
        if notes:
            _say_notes(config_file, renamed, ignored)
        raise InputError("governance.archive_below must not exceed governance.low_priority_below",
                         source=str(config_file))
    return settings, renamed, ignored


def _say_notes(config_file: Path, renamed: list[tuple[str, str, str]], ignored: list[tuple[str, str]]) -> None:
    for source, table, name in renamed:
        _say_renamed_once(source, table, name)
    for table, name in ignored:
        _say_ignored_once(config_file, table, name)


def _layered(config_file: Path) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], str],
                                          list[tuple[str, str, Any]]]:
    """(values by table, where each came from, the program settings memctl.toml named and may not):
    the one walk through the layers, which load() and origins() share."""
    values = copy.deepcopy(DEFAULTS)
    came_from = {(table, key): "default" for table, keys in DEFAULTS.items() for key in keys}
    for (table, key), value in _file_settings(user_config_file()).items():
        values[table][key] = copy.deepcopy(value)  # the parse is shared by every load
        came_from[table, key] = f"user config {_shown(user_config_file())}"
    ignored = []
    for (table, key), value in _file_settings(config_file).items():
        if names_program(table, key, value):
            ignored.append((table, key, value))
        else:
            values[table][key] = value
            came_from[table, key] = f"store {config_file}"
    for table, table_values in values.items():
        for key in table_values:
            for name in (*[old for (t, old), new in RENAMED.items() if (t, new) == (table, key)], key):
                env = f"MEMCTL_{table}_{name}".upper()  # the new name's variable, last, wins over the old's
                if env in os.environ:
                    _say_renamed_once(f"${env}", table, name)
                    table_values[key] = check(table, key, _from_env(os.environ[env]), f"${env}")
                    came_from[table, key] = f"env ${env}"
    return values, came_from, ignored


def origins(config_file: Path) -> list[dict[str, Any]]:
    """Every setting's effective value and where it came from (`memctl config`): {"table", "key",
    "value", "source": default | user config <file> | store <memctl.toml> | env $VAR}, table by table;
    then each program setting the store's memctl.toml names, with "ignored": why (PROGRAM_SETTINGS).
    A flag overrides a setting for the one command it is given to, and so is not shown here."""
    values, came_from, ignored = _layered(config_file)
    rows = [{"table": table, "key": key, "value": value, "source": came_from[table, key]}
            for table, keys in values.items() for key, value in keys.items()]
    rows += [{"table": table, "key": key, "value": value, "source": f"store {config_file}",
              "ignored": ignored_program_note(table, key)} for table, key, value in ignored]
    return rows


def defaults() -> Settings:
    """Every setting at its default: for code run without a store."""
    return Settings()


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
    what = "a server to send data to" if (table, key) == ("cache", "backend") else "a program to run"
    return (f"[{table}] {key} is ignored: a store may not name {what}; put it in "
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


def _text_of(config_file: Path) -> str:
    from memctl.store.store import read_file

    try:
        return read_file(config_file).decode("utf-8")
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
            name = RENAMED.get((table, key), key)
            if name != key:
                if name in values:
                    continue  # the new name, given too, wins
                _say_renamed_once(source, table, key)
            try:
                found[table, name] = check(table, name, value, source)
            except InputError as exc:
                exc.line = _line_of_key(text, table, key)
                raise
    return found


_said_renamed: set[tuple[str, str, str]] = set()
_renamed_seen: list[tuple[str, str, str]] | None = None  # while load() reads: the renamed settings it met


def say_notes_again() -> None:
    """Let the once-a-process notes (an ignored program setting, a renamed one) be said again: a
    resident server's next call is a new process to the person who made it."""
    _said_ignored.clear()
    _said_renamed.clear()


def _say_renamed_once(source: str, table: str, key: str) -> None:
    """The one line on stderr for a setting read under its old name (RENAMED)."""
    new = RENAMED.get((table, key))
    if new is not None and _renamed_seen is not None:
        _renamed_seen.append((source, table, key))  # load() says it, now and on each load it keeps
        return
    if new is None or (source, table, key) in _said_renamed:
        return
    _said_renamed.add((source, table, key))
    print(f"memctl: {source}: [{table}] {key} is deprecated, read as {new} (the same number: days for the "
          f"factor to fall to 1/e, not to half)", file=sys.stderr)


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
