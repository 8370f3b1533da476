"""MEMORY.md: long-term memory a person can read and edit (P1, G2).

Sections are the file's headings. An entry is a metadata block followed by
its text, which runs to the next entry or heading:

    ## Decisions

    <!-- memory
    id: mem-3f2a9c0d1e
    summary: Use PostgreSQL for pcai
    memory_class: episodic
    scope: project:pcai
    created_at: 2026-11-20T10:03:12Z
    -->
    The project moved from MySQL to PostgreSQL for its JSONB support.

The block is an HTML comment, so rendered Markdown shows only the text. A
value is plain text, or JSON when it is a list, an object, or text that would
otherwise read as a number or boolean. Text written by hand without a block is
kept too: each paragraph or top-level list item is an entry with a derived
id. A parse keeps every line's bytes, so writing a document back changes
exactly the entries that were changed and nothing else.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from memctl.errors import StoreError
from memctl.store.store import SCOPE_RULE, is_name, is_scope, read_file
from memctl.text.clip import clip

META_OPEN = "<!-- memory"
META_CLOSE = "-->"
DEFAULT_SECTION = "General"

MEMORY_CLASSES = ("policy", "episodic", "mixed")
STATUSES = ("active", "deprecated", "low_priority", "archived")
ENFORCEMENT_LEVELS = ("soft", "hard")
SUMMARY_MAX = 50
FIELD_ORDER = (
    "id", "summary", "memory_class", "scope", "canonical_topic", "status",
    "is_core", "enforcement_level", "user_weight", "importance", "supersedes",
    "claims", "created_at", "access_count",
    # Kept by governance (G5): when `status` last changed, so that "archived
    # for over 60 days" can be measured; and when a memory was soft-deleted.
    "status_changed_at", "deleted_at",
    # Where a memory consolidated from the tool-output cache came from (H3, H4):
    # the tool, the agent that ran it, and the cache scope (the run) it was shared in.
    "tool", "agent", "cache_scope",
)
FIELD_NAME = re.compile(r"[A-Za-z_][\w-]*")  # a metadata key
_HEADING = re.compile(r"^(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_LIST_ITEM = re.compile(r"^(?:[-*+]|\d{1,9}[.)])[ \t]+")
_FENCE = re.compile(r"^[ ]{0,3}(```|~~~)")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


def note_scope(fields: dict) -> str:
    """A note's scope (a MEMORY.md entry's, a pending note's): its `scope` field; global without one,
    as search takes it (a field that is no scope is an error the store check reports)."""
    scope = fields.get("scope")
    return scope if isinstance(scope, str) and check_field("scope", scope) is None else "global"


def check_field(name: str, value: Any) -> str | None:
    """Why `value` is not valid for schema field `name`, or None if it is."""
    if name in ("id", "summary", "canonical_topic", "created_at", "status_changed_at", "deleted_at", "tool",
                "agent", "cache_scope") and not isinstance(value, str):
        return "must be text"
    return _text_problem(name, value) or _choice_problem(name, value) or _number_or_list_problem(name, value)


def _text_problem(name: str, value: Any) -> str | None:
    """What is wrong with the text of an id, a summary, a scope or a time, if anything."""
    if name == "id" and not is_name(value):
        return "must be 1-128 letters, digits or . _ : @ + -"
    if name == "summary" and len(value) > SUMMARY_MAX:
        return f"must be at most {SUMMARY_MAX} characters (has {len(value)})"
    if name == "scope" and not is_scope(value):
        return f"must be {SCOPE_RULE}"
    if name in ("created_at", "status_changed_at", "deleted_at"):
        from memctl.clock import parse_ts
        try:
            parse_ts(value)
        except ValueError:
            return "must be an ISO 8601 time"
    return None


def _choice_problem(name: str, value: Any) -> str | None:
    """What is wrong with a field that takes one of a few words, if anything."""
    for field_name, choices in (("memory_class", MEMORY_CLASSES), ("status", STATUSES),
                                ("enforcement_level", ENFORCEMENT_LEVELS)):
        if name == field_name and value not in choices:
            return f"must be one of {', '.join(choices)}"
    return None


def _number_or_list_problem(name: str, value: Any) -> str | None:
    """What is wrong with a flag, a number or a list field, if anything."""
    def is_number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if name == "is_core" and not isinstance(value, bool):
        return "must be true or false"
    if name == "user_weight" and not (is_number(value) and 0 <= value <= 10):
        return "must be a number from 0 to 10"
    if name == "importance" and not (is_number(value) and 0 <= value <= 1):
        return "must be a number from 0 to 1"
    if name == "access_count" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return "must be a whole number >= 0"
    if name == "supersedes" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return "must be a list of ids"
    if name == "claims" and not isinstance(value, list):
        return "must be a list"
    return None


@dataclass
class Issue:
    """Something wrong in the file, reported with its line; never fatal to a read."""
    line: int
    message: str
    severity: str = "error"  # error: commands refuse such input | warning: kept, and reported


@dataclass
class Heading:
    level: int
    title: str
    line: int
    raw: str


@dataclass
class Entry:
    """One memory: schema fields plus free text, under a section."""
    text: str
    fields: dict[str, Any] = field(default_factory=dict)
    section: str = DEFAULT_SECTION
    line: int = 0          # first line of the entry in the file (1-based), 0 if new
    text_line: int = 0     # first line of its text
    raw: str | None = None  # original bytes; None once changed, so it is rendered
    annotated: bool = True  # False for hand-written text with no metadata block
    derived_id: str = ""
    list_item: str = ""    # an entry that is one list item: its marker ("- ", "1. "), which the text leaves out
    headings: tuple[tuple[int, str], ...] = ()  # (level, title) from the top heading down to its section

    @property
    def id(self) -> str:
        return self.fields.get("id") or self.derived_id

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def set(self, name: str, value: Any) -> None:
        """Change a field; the entry is rendered anew when the file is written."""
        if not self.annotated:
            self.fields.setdefault("id", self.derived_id)
            self.annotated = True
        self.fields[name] = value
        self.raw = None

    def render(self) -> str:
        lines = [META_OPEN]
        ordered = [k for k in FIELD_ORDER if k in self.fields]
        ordered += [k for k in self.fields if k not in FIELD_ORDER]
        for key in ordered:
            lines.append(f"{key}: {_render_value(self.fields[key])}")
        lines.append(META_CLOSE)
        body = escape_body(self.list_item + self.text)
        if not self.list_item and _one_list_item(self.text):
            body = "\\" + body  # text that itself begins "- 0": escaped, or it would read back as a list item "0"
        lines.extend(body.split("\n"))
        return "\n".join(lines) + "\n"


@dataclass
class Blank:
    raw: str


Block = Heading | Entry | Blank


@dataclass
class Document:
    blocks: list[Block] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    @property
    def entries(self) -> list[Entry]:
        return [b for b in self.blocks if isinstance(b, Entry)]

    def sections(self) -> list[str]:
        """Section titles in file order, each once."""
        seen: dict[str, None] = {}
        for block in self.blocks:
            if isinstance(block, Heading):
                seen.setdefault(block.title, None)
        return list(seen)

    def find(self, entry_id: str) -> Entry | None:
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        return None

    def add(self, entry: Entry) -> None:
        """Put a new entry at the end of its section, creating the section if needed.

        A new section gets the heading level of entry.headings (the headings it
        sat under in its source), after those of its parents that are missing,
        so that a notes file keeps its outline; otherwise a level-2 heading.
        """
        entry.raw = None
        position = self._section_end(entry.section)
        if position is None:
            path = list(entry.headings) if entry.headings and entry.headings[-1][1] == entry.section \
                else [(2, entry.section)]
            present = set(self.sections())
            for level, title in path:
                if title in present and title != entry.section:
                    continue
                if self.blocks and not _ends_with_blank_line(self.render()):
                    self.blocks.append(Blank("\n" if self.render().endswith("\n") else "\n\n"))
                self.blocks.append(Heading(level, title, 0, f"{'#' * level} {title}\n"))
                self.blocks.append(Blank("\n"))
                present.add(title)
            position = len(self.blocks)
        else:
            before = self._tail(position)
            if not _ends_with_blank_line(before):
                self.blocks.insert(position, Blank("\n" if before.endswith("\n") else "\n\n"))
                position += 1
        self.blocks.insert(position, entry)
        if position + 1 < len(self.blocks):
            self.blocks.insert(position + 1, Blank("\n"))

    def _tail(self, position: int) -> str:
        """The last characters of the document before `position`: enough to tell how it ends
        (rendering all of it on every add made writing 1,000 notes quadratic: 25 s)."""
        tail = ""
        for block in reversed(self.blocks[:position]):
            tail = _raw(block) + tail
            if len(tail) >= 2:
                break
        return tail

    def _section_end(self, section: str) -> int | None:
        """Index just after the last non-blank block of `section`, or None."""
        start = None
        for i, block in enumerate(self.blocks):
            if isinstance(block, Heading):
                if start is not None:
                    break
                if block.title == section:
                    start = i
        if start is None:
            return None
        end = start + 1
        for i in range(start + 1, len(self.blocks)):
            block = self.blocks[i]
            if isinstance(block, Heading):
                break
            if not isinstance(block, Blank):
                end = i + 1
        return end

    def remove(self, entry: Entry) -> None:
        """Take an entry out with the blank lines that separated it, keeping one."""
        i = next(n for n, block in enumerate(self.blocks) if block is entry)
        del self.blocks[i]
        before_blank = i == 0 or isinstance(self.blocks[i - 1], Blank)
        while before_blank and i < len(self.blocks) and isinstance(self.blocks[i], Blank):
            del self.blocks[i]

    def render(self) -> str:
        return "".join(_raw(b) for b in self.blocks)


def _raw(block: Block) -> str:
    if isinstance(block, Entry) and block.raw is None:
        return block.render()
    return block.raw  # type: ignore[return-value]


def _ends_with_blank_line(text: str) -> bool:
    return text == "" or text.endswith("\n\n")


def parse(text: str) -> Document:
    """Parse MEMORY.md text; `render()` of the result gives the same text back."""
    # Only \n ends a line: str.splitlines would also split on form feeds and
    # other separators that are ordinary characters in Markdown.
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    doc = Document()
    section = DEFAULT_SECTION
    outline: list[tuple[int, str]] = []  # the headings above the current line, top first
    i = 0
    derived_seen: dict[str, int] = {}

    def derive_id(sec: str, body: str) -> str:
        digest = hashlib.sha1(f"{sec}\n{body}".encode()).hexdigest()[:10]
        n = derived_seen.get(digest, 0)
        derived_seen[digest] = n + 1
        return f"md-{digest}" + (f"-{n + 1}" if n else "")

    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip("\r\n")
        heading = _HEADING.match(stripped)
        if heading:
            section = (heading.group(2) or "").strip()
            level = len(heading.group(1))
            outline = [h for h in outline if h[0] < level] + [(level, section)]
            doc.blocks.append(Heading(level, section, i + 1, line))
            i += 1
        elif not stripped.strip():
            doc.blocks.append(Blank(line))
            i += 1
        elif stripped.strip() == META_OPEN:
            i = _parse_annotated(lines, i, section, tuple(outline), doc)
        else:
            start = i
            i = _hand_written_end(lines, i)
            body = "".join(lines[start:i])
            marker = _LIST_ITEM.match(body)
            text = body.strip()[marker.end():] if marker else body.strip()
            entry = Entry(text=text, section=section, line=start + 1, text_line=start + 1,
                          raw=body, annotated=False, list_item=marker.group(0) if marker else "",
                          headings=tuple(outline))
            entry.derived_id = derive_id(section, text)
            doc.blocks.append(entry)
    return doc


def load(path: Path) -> Document:
    """Parse the MEMORY.md at `path` (empty if missing), keeping its exact bytes."""
    try:
        data = read_file(path)
    except FileNotFoundError:
        return Document()
    try:
        return parse(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StoreError(f"{path}:{line}: not valid UTF-8; fix or remove that byte") from None


def _parse_annotated(lines: list[str], i: int, section: str, headings: tuple[tuple[int, str], ...],
                     doc: Document) -> int:
    start = i
    fields, text_start, closed = _parse_metadata(lines, i + 1, doc)
    if not closed:
        doc.issues.append(Issue(start + 1, f"metadata block opened here is never closed with '{META_CLOSE}'"))
    i = _entry_text_end(lines, text_start)
    # Trailing blank lines belong to the layout, not to the entry.
    end = i
    while end > text_start and not lines[end - 1].strip():
        end -= 1
    body = "\n".join(part.rstrip("\r") for part in "".join(lines[text_start:end]).split("\n"))
    body = body.strip("\n")
    # Looked for before unescaping: an escaped first line ("\\- 0") is text, not a marker.
    marker = _one_list_item(body)
    list_item = marker.group(0) if marker else ""  # one list item: its text is past the marker
    text = unescape_body(body[len(list_item):])
    entry = Entry(text=text, fields=fields, section=section, line=start + 1,
                  text_line=text_start + 1, raw="".join(lines[start:end]), headings=headings,
                  list_item=list_item)
    if "id" not in fields:  # optional (G2): the entry goes by an id derived from its section and text
        entry.derived_id = "md-" + hashlib.sha1(f"{section}\n{text}".encode()).hexdigest()[:10]
    doc.blocks.append(entry)
    doc.blocks.extend(Blank(line) for line in lines[end:i])
    return i


def _parse_metadata(lines: list[str], i: int, doc: Document) -> tuple[dict[str, Any], int, bool]:
    """The fields of the metadata block whose first field line is line i, the line after its close
    (the end of the file when it is never closed) and whether it was closed; what is wrong in it goes to
    doc.issues."""
    fields: dict[str, Any] = {}
    first_line: dict[str, int] = {}
    while i < len(lines):
        stripped = lines[i].strip()
        i += 1
        if stripped == META_CLOSE:
            return fields, i, True
        if not stripped:
            continue
        key, sep, value = stripped.partition(":")
        key = key.strip()
        if not sep or not FIELD_NAME.fullmatch(key):
            doc.issues.append(Issue(i, f"metadata line is not 'key: value': {stripped[:60]!r}"))
        elif key in first_line:  # which one was meant is the writer's call, not ours
            doc.issues.append(Issue(i, f"field '{key}' given twice: lines {first_line[key]} and {i}"))
        else:
            first_line[key] = i
            fields[key] = _parse_field_value(key, value.strip(), i, doc)
    return fields, i, False


def _parse_field_value(key: str, value: str, line: int, doc: Document) -> Any:
    """A field's value as parsed (as written when it does not parse), its problem reported."""
    try:
        parsed = _parse_value(value)
    except ValueError as exc:
        doc.issues.append(Issue(line, f"field '{key}': {exc}"))
        return value
    if key not in FIELD_ORDER:
        doc.issues.append(Issue(line, f"field '{key}': unknown field (kept as written)", "warning"))
    elif problem := check_field(key, parsed):
        doc.issues.append(Issue(line, f"field '{key}': {problem}"))
    return parsed


def _entry_text_end(lines: list[str], i: int) -> int:
    """The line after an entry's text that starts at line i: the next heading or metadata block
    outside a code fence, or the end of the file."""
    in_fence = False
    while i < len(lines):
        stripped = lines[i].rstrip("\r\n")
        if _FENCE.match(stripped):
            in_fence = not in_fence
        elif not in_fence and (_HEADING.match(stripped) or stripped.strip() == META_OPEN):
            break
        i += 1
    return i


def _hand_written_end(lines: list[str], i: int) -> int:
    """End of a hand-written paragraph or list item starting at line i."""
    starts_item = bool(_LIST_ITEM.match(lines[i]))
    in_fence = bool(_FENCE.match(lines[i]))
    i += 1
    while i < len(lines):
        stripped = lines[i].rstrip("\r\n")
        if _FENCE.match(stripped):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence:
            i += 1
            continue
        if not stripped.strip() or _HEADING.match(stripped) or stripped.strip() == META_OPEN:
            break
        if starts_item and _LIST_ITEM.match(stripped):
            break  # the next item of the same list
        i += 1
    return i


def _parse_value(text: str) -> Any:
    if text[:1] in ('[', '{', '"'):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc})") from None
    if text in ("true", "false"):
        return text == "true"
    if _NUMBER.match(text):
        return float(text) if any(c in text for c in ".eE") else int(text)
    return text


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        plain = (value == value.strip() and value and value.isprintable() and META_CLOSE not in value
                 and value[:1] not in ('[', '{', '"') and value not in ("true", "false")
                 and not _NUMBER.match(value))
        return value if plain else orjson.dumps(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    return orjson.dumps(value).decode()


def _one_list_item(text: str) -> re.Match | None:
    """The marker of a text that is one list item ("- x"), not a list of several."""
    marker = _LIST_ITEM.match(text)
    if marker and not any(_LIST_ITEM.match(rest) for rest in text.split("\n")[1:]):
        return marker
    return None


def escape_body(text: str) -> str:
    """Keep body lines that look like headings or metadata from being read as such."""
    out = []
    for line in text.split("\n"):
        if _HEADING.match(line) or line.strip() == META_OPEN or line.startswith("\\"):
            line = "\\" + line
        out.append(line)
    return "\n".join(out)


def unescape_body(text: str) -> str:
    return "\n".join(line[1:] if line.startswith("\\") else line for line in text.split("\n"))


def summary_of(entry: Entry) -> str:
    """What a memory shows as its summary: its summary field, else its text cut to SUMMARY_MAX."""
    summary = entry.get("summary")
    return summary if isinstance(summary, str) else clip(entry.text, SUMMARY_MAX)
