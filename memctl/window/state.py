"""The section-hit window (W1-W5): which MEMORY.md sections recent turns used.

An agent runs one loop per turn:

    memctl state plan MESSAGE    -> the sections worth searching this turn (W3)
    memctl search ... --json     -> results, each naming its section (W5)
    memctl state record -        -> the sections this turn used (W2)

so that once a conversation has settled on one section (its share of the hits
in the last N turns is at least the dominant threshold), the agent stops
loading the sections the conversation no longer needs.

The state lives in index_state.json in the store, with exactly the fields of
the design (000 §三):

    {
      "window_size": 5,                 3, 5 or 10: turns kept
      "dominant_threshold": 0.7,        in (0, 1]
      "turns": [{"turn_id": 1, "ts": "2026-02-08T12:00:00Z", "sections_hit": ["重要決定"]}],
      "proportions": {"重要決定": 0.833, "待辦": 0.167},
      "current_topic": "重要決定",       "" until a section has been dominant long enough
      "topic_summary": "...",           one line, also in MEMORY_TOPIC.md
      "last_updated": "2026-02-08T12:20:00Z",
      "miss_count": {"待辦": 4, "重要決定": 0},
      "topic_activation": {...}         the other part: topic activation (T6), owned
                                        and checked by memctl/topics/activation.py
    }

Proportions are a section's occurrences over all occurrences in the window
(a turn names a section at most once). The file stores them rounded to 3
decimals, for people, as the design shows; every decision (dominance, the
plan, the topic) is made from the exact counts over `turns`, which are the
truth, so hand-edited or stale proportions change nothing.

A missing file means "no state yet". A file that is not valid JSON, or whose
fields have the wrong type or value, is an InputError naming the file (and
the line or field), and is never reset silently: `memctl state reset` is the
way out. Every read-modify-write happens under the store lock, reading the
state inside the transaction, so concurrent `state record` calls never lose a
turn.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal

import orjson

from memctl import clock
from memctl import config
from memctl.errors import InputError, StoreError
from memctl.store.store import Store, Transaction, read_file
from memctl.text.cjk import CJK
from memctl.text.shape import Shape, derived, hidden, shown
from memctl.text.words import STOPWORDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from memctl.runtime import Runtime

TOPIC_FILE = "MEMORY_TOPIC.md"
FIELDS = ("window_size", "dominant_threshold", "turns", "proportions", "current_topic",
          "topic_summary", "last_updated", "miss_count", "topic_activation")
_FIX_HINT = "fix the file by hand, or start over with 'memctl state reset'"


# -- the state file ----------------------------------------------------------

@dataclass
class Turn(Shape):
    """A recorded turn."""
    turn_id: int = shown()
    ts: str = shown()
    sections_hit: list[str] = shown("The MEMORY.md sections the turn used.")


@dataclass
class State(Shape):
    """index_state.json: the section window (see the module doc for the fields)."""
    window_size: int = shown("Turns in the window (3, 5 or 10).", default=5)
    dominant_threshold: float = shown("The share of the window's hits that makes a section dominant.",
                                      default=0.7)
    turns: list[Turn] = shown("The window's turns, oldest first.", default_factory=list)
    proportions: dict[str, float] = shown("Each section's share of the window's hits.", default_factory=dict)
    current_topic: str = shown(default="")
    topic_summary: str = shown(default="")
    last_updated: str = shown(default="")
    miss_count: dict[str, int] = shown("Turns in a row each section went unused.", default_factory=dict)
    # The topic activation part (T6): kept as it was read, written back as it is;
    # memctl/topics/activation.py reads, checks and replaces it. None: not there yet.
    topic_activation: dict[str, Any] | None = shown("The topics' activation (T6), once there is one.",
                                                    omit="none", default=None)

    @classmethod
    def new(cls, state_settings: config.State) -> "State":
        """An empty state with the window and threshold of memctl.toml [state]."""
        return cls(window_size=state_settings.window_size,
                   dominant_threshold=float(state_settings.dominant_threshold))

    # -- derived values (all from the exact counts over `turns`) --------------
    def counts(self) -> dict[str, int]:
        """Hits per section in the window, most hit first (ties: most recently hit first)."""
        counts: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, turn in enumerate(self.turns):
            for section in turn.sections_hit:
                counts[section] = counts.get(section, 0) + 1
                last[section] = i
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], -last[kv[0]])))

    def exact_proportions(self) -> dict[str, float]:
        counts = self.counts()
        total = sum(counts.values())
        return {s: n / total for s, n in counts.items()} if total else {}

    def dominant(self) -> list[str]:
        """Sections whose share of the window's hits is >= the threshold, largest first.

        At most one when the threshold is above 0.5 (the usual case).
        """
        return [s for s, p in self.exact_proportions().items() if p >= self.dominant_threshold]

    def dominant_streak(self) -> tuple[str | None, int]:
        """The leading dominant section and for how many turns in a row it has been dominant.

        The window after each earlier turn is rebuilt from the turns still
        kept up to that turn; turns already dropped from the window are not
        known, so a streak counts at most the kept turns.
        """
        dominant = self.dominant()
        if not dominant:
            return None, 0
        section = dominant[0]
        streak = 0
        for end in range(len(self.turns), 0, -1):
            if section not in State(dominant_threshold=self.dominant_threshold,
                                    turns=self.turns[:end]).dominant():
                break
            streak += 1
        return section, streak

    def next_turn_id(self) -> int:
        return self.turns[-1].turn_id + 1 if self.turns else 1

    def recompute(self) -> None:
        """Keep the last window_size turns and recompute the stored proportions."""
        del self.turns[:-self.window_size]
        self.proportions = {s: round(p, 3) for s, p in self.exact_proportions().items()}

    # -- serialisation --------------------------------------------------------
    def dumps(self) -> bytes:
        return orjson.dumps(self.as_dict(), option=orjson.OPT_INDENT_2) + b"\n"


def parse_state(data: bytes, source: str, state_settings: config.State | None = None) -> State:
    """A State from the bytes of index_state.json; InputError naming `source` if corrupt.

    Missing fields take their defaults (window and threshold from `state_settings`,
    memctl.toml [state]); a field with a wrong type or value is an error.
    Turns beyond window_size are dropped and proportions recomputed.
    """
    def bad(message: str, fieldname: str | None = None, line: int | None = None) -> InputError:
        return InputError(f"{message}; {_FIX_HINT}", source=source, field=fieldname, line=line)

    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        reason = str(exc).split(":", 1)[0]
        raise bad(f"not valid JSON ({reason})", line=getattr(exc, "lineno", None)) from None
    if not isinstance(obj, dict):
        raise bad("expected a JSON object")
    unknown = [k for k in obj if k not in FIELDS]
    if unknown:
        raise bad(f"unknown field '{unknown[0]}'; the fields are {', '.join(FIELDS)}")
    defaults = State.new(state_settings or config.State())
    state = State(window_size=obj.get("window_size", defaults.window_size),
                  dominant_threshold=obj.get("dominant_threshold", defaults.dominant_threshold))
    for name in ("window_size", "dominant_threshold"):
        problem = _out_of_limits(name, getattr(state, name))
        if problem:
            raise bad(problem, name)
    state.dominant_threshold = float(state.dominant_threshold)

    state.turns = _parse_turns(obj.get("turns", []), bad)
    proportions = obj.get("proportions", {})
    if not (isinstance(proportions, dict) and all(_is_number(v) for v in proportions.values())):
        raise bad("must be an object of section: number", "proportions")
    miss_count = obj.get("miss_count", {})
    if not (isinstance(miss_count, dict) and all(_is_int(v) and v >= 0 for v in miss_count.values())):
        raise bad("must be an object of section: whole number >= 0", "miss_count")
    state.miss_count = dict(miss_count)
    activation = obj.get("topic_activation")
    if activation is not None and not isinstance(activation, dict):
        raise bad("must be an object (the topic activation part)", "topic_activation")
    state.topic_activation = activation
    for name in ("current_topic", "topic_summary", "last_updated"):
        value = obj.get(name) or ""
        if not isinstance(value, str):
            raise bad(f"must be text, got {value!r}", name)
        setattr(state, name, value)
    state.recompute()
    return state


def _parse_turns(turns: Any, bad: Callable[..., InputError]) -> list[Turn]:
    """The window's turns as stored, each checked: ids rising, a time, a list of section names."""
    if not isinstance(turns, list):
        raise bad("must be a list of turns", "turns")
    out: list[Turn] = []
    previous = 0
    for i, turn in enumerate(turns):
        where = f"turns[{i}]"
        if not isinstance(turn, dict):
            raise bad("must be an object {turn_id, ts, sections_hit}", where)
        turn_id, ts, hit = turn.get("turn_id"), turn.get("ts"), turn.get("sections_hit")
        if not _is_int(turn_id) or turn_id <= previous:
            raise bad(f"must be a whole number above the previous turn's ({previous}), got {turn_id!r}",
                      f"{where}.turn_id")
        if not isinstance(ts, str):
            raise bad(f"must be an ISO 8601 time, got {ts!r}", f"{where}.ts")
        if not (isinstance(hit, list) and all(isinstance(s, str) for s in hit)):
            raise bad(f"must be a list of section names, got {hit!r}", f"{where}.sections_hit")
        extra = set(turn) - {"turn_id", "ts", "sections_hit"}
        if extra:
            raise bad(f"unknown field '{sorted(extra)[0]}'", where)
        out.append(Turn(turn_id, ts, _unique(hit)))
        previous = turn_id
    return out


def load_state(store: Store, state_settings: config.State | None = None) -> State | None:
    """The store's state, or None when index_state.json does not exist yet."""
    path = store.state_file
    try:
        data = read_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_state(data, str(path), state_settings)


def topic_file(store: Store) -> Path:
    return store.path(TOPIC_FILE)


def memory_sections(store: Store) -> list[str]:
    """MEMORY.md's section titles (its headings) in file order; [] when it does not exist."""
    from memctl.store import memoryfile

    return [s for s in memoryfile.load(store.memory_md).sections() if s]


# -- end of a turn: record (W2, W4) ------------------------------------------

@dataclass
class Suggestion(Shape):
    """A section the window has not used for a while."""
    section: str = shown()
    miss_count: int = shown("Turns in a row it went unused.")

    @derived("What to do about it, in words.", name="suggestion")
    def text(self) -> str:
        turns = "turn" if self.miss_count == 1 else f"{self.miss_count} turns"
        return (f"{self.section}: not used in the last {turns}; consider removing it "
                "from MEMORY.md or merging it into another section")


@dataclass
class RecordResult(Shape):
    """A turn recorded at its end (`memctl state record --json`, the MCP state_record tool)."""
    turn: Turn = hidden()
    state: State = hidden()
    unknown_sections: list[str] = shown("Hits that are not MEMORY.md headings (recorded all the same).")
    suggestions: list[Suggestion] = shown()
    topic_written: bool = shown("MEMORY_TOPIC.md was (or, dry run, would be) rewritten.")
    dry_run: bool = shown(default=False)

    key_order = ("turn_id", "ts", "sections_hit", "unknown_sections", "window_size", "turns_in_window",
                 "proportions", "dominant", "miss_count", "suggestions", "current_topic", "topic_summary",
                 "topic_written", "dry_run")

    @derived()
    def turn_id(self) -> int:
        return self.turn.turn_id

    @derived()
    def ts(self) -> str:
        return self.turn.ts

    @derived("The sections the turn used.")
    def sections_hit(self) -> list[str]:
        return self.turn.sections_hit

    @derived()
    def window_size(self) -> int:
        return self.state.window_size

    @derived()
    def turns_in_window(self) -> int:
        return len(self.state.turns)

    @derived("Each section's share of the window's hits.")
    def proportions(self) -> dict[str, float]:
        return self.state.proportions

    @derived("The dominant sections of the window.")
    def dominant(self) -> list[str]:
        return self.state.dominant()

    @derived("Turns in a row each section went unused.")
    def miss_count(self) -> dict[str, int]:
        return self.state.miss_count

    @derived()
    def current_topic(self) -> str:
        return self.state.current_topic

    @derived()
    def topic_summary(self) -> str:
        return self.state.topic_summary


def record(rt: Runtime, hits: Iterable[str], *, summary: str | None = None, dry_run: bool = False) -> RecordResult:
    """End a turn: append the sections it hit, and update the window, miss counts and topic.

    `hits` are section names (duplicates and blanks are dropped). A hit that
    is not a MEMORY.md heading is recorded all the same and listed in
    `unknown_sections`. miss_count covers MEMORY.md's sections and this
    turn's hits: hit -> 0, else +1; sections gone from MEMORY.md are dropped.
    Sections missed miss_threshold turns in a row come back as suggestions.
    When one section has been dominant topic_after_turns turns in a row (at
    most window_size) and is not yet the current topic, it becomes
    current_topic and MEMORY_TOPIC.md is written; `summary`, if given, is
    the one-line topic summary (else one is made from the counts) and
    replaces the summary of a topic that is still dominant.
    """
    hits = _unique(h.strip() for h in hits if h and h.strip())
    store, state_settings = rt.store, rt.settings.state
    with store.transaction(dry_run=dry_run) as tx:
        state = load_state(store, state_settings) or State.new(state_settings)
        sections = memory_sections(store)
        ts = clock.format_ts(rt.clock.now())
        turn = Turn(state.next_turn_id(), ts, hits)
        state.turns.append(turn)
        state.recompute()

        known = set(sections)
        unknown = [h for h in hits if h not in known]
        state.miss_count = {s: 0 if s in hits else state.miss_count.get(s, 0) + 1
                            for s in sections + unknown}
        suggestions = [Suggestion(s, n) for s, n in state.miss_count.items()
                       if s in known and n >= state_settings.miss_threshold]
        topic_written = _update_topic(store, tx, state, state_settings, summary, ts)
        state.last_updated = ts
        tx.replace(store.state_file, state.dumps())
    return RecordResult(turn, state, unknown, suggestions, topic_written, dry_run)


def _update_topic(store: Store, tx: Transaction, state: State, state_settings: config.State,
                  summary: str | None, ts: str) -> bool:
    section, streak = state.dominant_streak()
    needed = min(state_settings.topic_after_turns, state.window_size)
    if section is None or streak < needed:
        return False
    summary = " ".join(summary.split()) if summary else ""
    if section == state.current_topic and (not summary or summary == state.topic_summary):
        return False
    if section != state.current_topic:
        since = state.turns[-streak].turn_id
        share = round(state.exact_proportions()[section] * 100)
        summary = summary or (f"Since turn {since}, most of the memory used came from {section}: "
                              f"{share}% of section hits over the last {len(state.turns)} turns.")
    state.current_topic, state.topic_summary = section, summary
    tx.replace(topic_file(store), render_topic(state, ts).encode("utf-8"))
    return True


def render_topic(state: State, ts: str) -> str:
    """MEMORY_TOPIC.md: the current topic and its one-line summary, in readable Markdown."""
    return (f"# Current topic: {state.current_topic}\n\n"
            f"{state.topic_summary}\n\n"
            f"_Written by `memctl state record` at {ts} (turn {state.turns[-1].turn_id}); "
            f"the same topic is current_topic in index_state.json._\n")


def hits_from_search_output(data: bytes, source: str = "<stdin>") -> list[str]:
    """Sections named by `memctl search --json` output (W5), in order, each once.

    Accepts JSON lines that are each a result ({"id", "kind", "text", ...,
    "section"}) or a batch answer ({"query_id", "results": [...]}). Results
    whose section is null or empty (messages, logs) are skipped. A line that
    is not such an object is an InputError naming `source` and the line.
    """
    from memctl.store import jsonl

    sections: list[str] = []
    for rec in jsonl.read_input(jsonl.decode(data, source), source):
        obj = rec.value
        if "results" in obj:
            results = obj["results"]
            if not isinstance(results, list):
                raise InputError("must be a list of search results", source=source, line=rec.line,
                                 field="results")
            for i, result in enumerate(results):
                sections.extend(_section_of(result, source, rec.line, f"results[{i}]."))
        else:
            sections.extend(_section_of(obj, source, rec.line, ""))
    return _unique(sections)


def _section_of(result: Any, source: str, line: int, prefix: str) -> list[str]:
    if not isinstance(result, dict):
        raise InputError("expected a search result object", source=source, line=line, field=prefix[:-1] or None)
    if "section" not in result:
        raise InputError("missing; expected memctl search --json output, where each result names its "
                         "section (null when it has none)", source=source, line=line, field=f"{prefix}section")
    section = result["section"]
    if section is None:
        return []
    if not isinstance(section, str):
        raise InputError(f"must be text or null, got {section!r}", source=source, line=line,
                         field=f"{prefix}section")
    return [section.strip()] if section.strip() else []


# -- start of a turn: the plan (W3) ------------------------------------------

# CJK prefixes that mean "about"; 關於老蔡 is about 老蔡.
_CJK_ABOUT = ("關於", "关于", "有關", "有关", "對於", "对于", "について")
_LATIN = "0-9a-z\u00b5\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff"  # letters after casefold, digits


@functools.cache
def _re(name: str) -> re.Pattern[str]:
    """The keyword patterns, compiled on first use (record and show need none of them)."""
    return re.compile({
        "pieces": rf"[{CJK}]+|(?:(?![{CJK}])[^\W_])+",  # CJK runs, other word runs
        "cjk": rf"[{CJK}]",
        "latin": rf"[{_LATIN}]",
    }[name])


def normalize(text: str) -> str:
    """NFKC (full-width letters and punctuation to plain ones), case-folded, spaces collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def heading_keywords(section: str) -> list[str]:
    """The keywords a section's heading gives it.

    The whole heading, and each word of it: Latin words split at spaces and
    punctuation (stopwords such as about/the/of dropped, a plural -s dropped
    from words over 4 letters), CJK runs split at punctuation such as ／ and
    、 and at a change of script, with a leading 關於/关于 ("about") removed.
    Pieces shorter than 2 characters are dropped, so 關於我 does not match
    every message with 我 in it.
    """
    whole = normalize(section)
    words = [whole]
    for piece in _re("pieces").findall(whole):
        if _re("cjk").match(piece):
            for prefix in _CJK_ABOUT:
                if piece.startswith(prefix) and len(piece) > len(prefix):
                    words.append(piece)
                    piece = piece[len(prefix):]
                    break
        elif len(piece) > 4 and piece.endswith("s") and not piece.endswith(("ss", "us", "is")):
            piece = piece[:-1]
        words.append(piece)
    return _unique(w for w in words if len(w) >= 2 and w not in STOPWORDS)


def section_keywords(sections: Iterable[str], configured: dict[str, list[str]] | None = None
                     ) -> dict[str, list[str]]:
    """Keywords per section: its heading's, then those of memctl.toml [state.keywords]."""
    configured = configured or {}
    return {s: _unique(heading_keywords(s) + [normalize(k) for k in configured.get(s, []) if normalize(k)])
            for s in sections}


def match_keywords(message: str, keywords: Iterable[str]) -> list[str]:
    """The keywords that appear in the message, CJK-aware.

    Both sides are normalized (NFKC, case-folded). A keyword's Latin ends
    must fall on word boundaries (a CJK character next to them counts as a
    boundary, so "bob" matches "問bob吧"), and a keyword ending in a Latin
    letter also matches its plural; CJK text matches as a substring, since
    Chinese and Japanese do not put spaces between words.
    """
    text = normalize(message)
    return [k for k in keywords if _keyword_pattern(k).search(text)]


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    body = r"\s+".join(re.escape(part) for part in keyword.split())
    if _re("latin").match(keyword[0]):
        body = rf"(?<![{_LATIN}])" + body
    if _re("latin").match(keyword[-1]):
        body += rf"(?:e?s)?(?![{_LATIN}])" if keyword[-1].isalpha() else rf"(?![{_LATIN}])"
    return re.compile(body)


@dataclass
class PlannedSection(Shape):
    """A MEMORY.md section worth searching this turn."""
    section: str = shown()
    reason: Literal["dominant", "keyword"] = shown()
    matched: list[str] = shown("Keywords found in the message (may be empty for a dominant section).")
    proportion: float | None = shown("Its share of the window's hits, rounded to 3 places; null without state.")


@dataclass
class Plan(Shape):
    """The sections to search at the start of a turn (the MCP state_plan tool)."""
    sections: list[PlannedSection] = shown()
    dominant: list[str] = shown("The dominant sections of the window (even if not in MEMORY.md).")
    has_state: bool = shown("Whether any turn was recorded yet.")

    @property
    def names(self) -> list[str]:
        """The section names, in plan order: what `memctl search --section` takes."""
        return [p.section for p in self.sections]


def plan(rt: Runtime, message: str, *, state: State | None = None) -> Plan:
    """The sections to search this turn (W3), for `state plan` and `search --plan`.

    With a dominant section (share of the window's hits >= the threshold):
    the dominant section, then the sections whose keywords appear in the
    message; without one (or without any state yet): the keyword-matched
    sections. Only MEMORY.md headings are planned; keyword-matched sections
    come in MEMORY.md order. An empty plan means: nothing to search.
    `state` defaults to the store's index_state.json.
    """
    store, state_settings = rt.store, rt.settings.state
    if state is None:
        with store.reading():
            state = load_state(store, state_settings)
    has_state = state is not None
    state = state or State.new(state_settings)
    sections = memory_sections(store)
    keywords = section_keywords(sections, state_settings.keywords)
    proportions = state.exact_proportions()
    dominant = state.dominant()

    def share(section: str) -> float | None:
        return round(proportions.get(section, 0.0), 3) if has_state else None

    matched = {s: match_keywords(message, keywords[s]) for s in sections}
    planned = [PlannedSection(s, "dominant", matched[s], share(s)) for s in dominant if s in matched]
    planned += [PlannedSection(s, "keyword", matched[s], share(s))
                for s in sections if matched[s] and s not in dominant]
    return Plan(planned, dominant, has_state)


# -- show, reset, config -----------------------------------------------------

def show(rt: Runtime) -> dict[str, Any] | None:
    """The `state show --json` object, or None when there is no state yet.

    The fields of index_state.json as stored, plus `dominant` (sections at or
    over the threshold, largest share first) and `suggestions` (sections
    missed miss_threshold turns in a row: [{"section", "miss_count",
    "suggestion"}]).
    """
    store, state_settings = rt.store, rt.settings.state
    store.require()
    with store.reading():
        state = load_state(store, state_settings)
    if state is None:
        return None
    suggestions = [Suggestion(s, n).as_dict() for s, n in state.miss_count.items()
                   if n >= state_settings.miss_threshold]
    return {**state.as_dict(), "dominant": state.dominant(), "suggestions": suggestions}


@dataclass
class ResetResult:
    had_state: bool        # index_state.json existed
    turns: int             # turns it held (0 when unreadable)
    readable: bool         # it could be read (a corrupt file is reset all the same)
    topic_removed: bool    # MEMORY_TOPIC.md existed and is removed
    state: State           # the state written


def reset(rt: Runtime, *, dry_run: bool = False) -> ResetResult:
    """Start the window over: no turns, proportions, miss counts or topic; MEMORY_TOPIC.md removed.

    The window size and threshold are kept when the old file is readable;
    a corrupt file is replaced by a fresh state from memctl.toml. Without an
    index_state.json there is no state to reset, and none is created.
    """
    store, state_settings = rt.store, rt.settings.state
    with store.transaction(dry_run=dry_run) as tx:
        old: State | None = None
        readable = True
        try:
            old = load_state(store, state_settings)
        except InputError:
            readable = False
        had_state = store.state_file.exists()
        fresh = State.new(state_settings)
        if old is not None:  # the window starts over; the topic activation part is not the window's
            fresh.window_size, fresh.dominant_threshold = old.window_size, old.dominant_threshold
            fresh.topic_activation = old.topic_activation
        fresh.last_updated = clock.format_ts(rt.clock.now())
        topic = topic_file(store)
        topic_removed = topic.exists()
        tx.delete(topic)
        if had_state:
            tx.replace(store.state_file, fresh.dumps())
    return ResetResult(had_state, len(old.turns) if old else 0, readable, topic_removed, fresh)


def check_window(window: Any, source: str = "--window") -> int:
    problem = _out_of_limits("window_size", window)
    if problem:
        raise InputError(problem, source=source)
    return window


def check_threshold(threshold: Any, source: str = "--threshold") -> float:
    problem = _out_of_limits("dominant_threshold", threshold)
    if problem:
        raise InputError(problem, source=source)
    return float(threshold)


def _out_of_limits(name: str, value: Any) -> str | None:
    """Why a window size or threshold is not allowed; the rule is memctl.toml's own (config.LIMITS)."""
    test, allowed = config.LIMITS[("state", name)]
    typed = _is_int(value) if name == "window_size" else _is_number(value)
    return None if typed and test(value) else f"must be {allowed}, got {value!r}"


def configure(rt: Runtime, *, window: int | None = None, threshold: float | None = None,
              dry_run: bool = False) -> State:
    """Set the window size (3, 5 or 10) and/or dominant threshold (0, 1] in index_state.json.

    A smaller window drops the oldest turns at once and recomputes the
    proportions. With neither value given, nothing is written and the
    current state (or the one a first record would start) is returned.
    """
    if window is not None:
        check_window(window)
    if threshold is not None:
        threshold = check_threshold(threshold)
    store, state_settings = rt.store, rt.settings.state
    if window is None and threshold is None:
        return load_state(store, state_settings) or State.new(state_settings)
    with store.transaction(dry_run=dry_run) as tx:
        state = load_state(store, state_settings) or State.new(state_settings)
        if window is not None:
            state.window_size = window
        if threshold is not None:
            state.dominant_threshold = threshold
        state.recompute()
        state.last_updated = clock.format_ts(rt.clock.now())
        tx.replace(store.state_file, state.dumps())
    return state


# -- helpers -----------------------------------------------------------------

def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
