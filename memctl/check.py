"""`memctl health check`: a `git fsck` for the store.

It stands above every part of memctl whose files it reads (governance, the
window, topics, the cache, the index), so none of them depends on it.
check() reads every file of the store and reports each problem once, with
the file (relative to the store) and line where it is:

    MEMORY.md:14: field 'status': must be one of active, deprecated, low_priority, archived
    sessions/s1.jsonl:7: not valid JSON
    MEMORY.md:40: warning: canonical_topic 'database:choice' has 2 current memories: 'a', 'b'

Errors are damage or broken rules (unparseable lines, duplicate ids, broken
or cyclic supersedes links, loose permissions, leftovers of a killed writer);
warnings are states a person may have chosen (two current memories in one
topic after `ingest --add`, expired pending items, a stale temp file, a
program named in memctl.toml, which memctl ignores).
fix() repairs only what is safe: rolls back an unfinished transaction,
drops expired pending items, makes permissions private, removes stale temp
files. It never edits a memory.

The check holds the store lock shared, so it waits for writers to finish and
never sees half a write, and it changes nothing.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal

import orjson

from memctl import clock
from memctl import config
from memctl.governance import governance
from memctl.store.status import is_current, status_of
from memctl.text.shape import Shape, shown
from memctl.governance import lifecycle
from memctl.store import memoryfile
from memctl.governance import review as pending
from memctl.errors import InputError, MemctlError, StoreError
from memctl.store import counters, jsonl
from memctl.store.store import DIR_MODE, FILE_MODE, NotRegularFile, Store, load_journal, mended_tail, read_file

if TYPE_CHECKING:
    from memctl.clock import Clock
    from memctl.runtime import Runtime

_TEMP = re.compile(r"^\..+\.(\d+)\.tmp$")
_TOML_LINE = re.compile(r"at line (\d+)")


@dataclass
class Problem(Shape):
    """A problem of the store, as `memctl health` reports it."""
    file: str = shown('The store file, relative to the store ("." for the store itself).')
    line: int | None = shown("Its line, or null for the whole file.")
    message: str = shown("What is wrong, in words.")
    code: str = shown("Stable: parse, field, duplicate-id, dangling-link, cycle, fork, superseded-current, "
                      "topic-conflict, missing-field, pending-expired, permissions, journal, temp-file, config, "
                      "program, index, symlink, special-file, hard-link, store, cache, unterminated.")
    severity: Literal["error", "warning"] = shown(default="error")
    fixable: bool = shown("`memctl health --fix` repairs it.", default=False)

    key_order = ("file", "line", "severity", "code", "message", "fixable")

    def line_text(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {'warning: ' if self.severity == 'warning' else ''}{self.message}"


# -- check -------------------------------------------------------------------
def check(rt: Runtime) -> list[Problem]:
    """Every problem in the store, in a stable order (by file, then line)."""
    store = rt.store
    store.require()
    now = rt.clock.now()
    problems: list[Problem] = _check_files(store)
    if any(p.file == ".lock" and p.code != "hard-link" for p in problems):
        return problems  # without its lock the store cannot be read consistently: that comes first
    with store.reading(recover=False):  # report an unfinished transaction, don't undo it
        settings = _guarded(problems, lambda: _check_config(rt, problems))  # memctl.toml read once
        problems += _guarded(problems, lambda: _check_programs(store)) or []
        problems += _guarded(problems, lambda: _check_leftovers(store)) or []
        problems += _guarded(problems, lambda: _check_permissions(store)) or []
        ids: dict[str, str] = {}  # id -> where first seen
        doc = _guarded(problems, lambda: _check_memory_md(store, problems, ids))
        _guarded(problems, lambda: _check_messages(store, problems, ids))
        _guarded(problems, lambda: _check_pending(store, problems, ids, now, settings or config.defaults()))
        _guarded(problems, lambda: _check_json(store, problems, settings or config.defaults()))
        _guarded(problems, lambda: _check_daily_logs(store, problems))
        deleted = _guarded(problems, lambda: _check_deleted(store, problems)) or []
        _guarded(problems, lambda: _check_topics(store, problems))
        _guarded(problems, lambda: _check_cache(store, problems, rt.clock))
        if doc is not None:
            _check_chains(doc, deleted, problems)
        if settings is not None:  # else the config check said why
            problems += _guarded(problems, lambda: index_problems(rt)) or []
    order = {"MEMORY.md": 0}
    problems.sort(key=lambda p: (order.get(p.file, 1), p.file, p.line or 0))
    return problems


def _guarded(problems: list[Problem], check):
    """A check's result; one that cannot go on (a link it may not follow, a folder that is a
    file) is a problem of its own, and the other checks still run."""
    try:
        return check()
    except NotRegularFile as exc:
        if not any(p.code in _FILE_KINDS and exc.path.as_posix().endswith("/" + p.file) for p in problems):
            problems.append(Problem(".", None, str(exc), "special-file"))  # outside the store: the user's config
    except InputError as exc:
        problems.append(Problem(exc.source or ".", exc.line, _message_of(exc), "field"))
    except MemctlError as exc:
        if not _is_link_refusal(str(exc)):  # a link: _check_links names each one already, once
            problems.append(Problem(".", None, str(exc), "store"))
    except OSError as exc:
        problems.append(Problem(str(exc.filename or "."), None, exc.strerror or str(exc), "store"))
    return None


def _is_link_refusal(message: str) -> bool:
    """Whether a check stopped at a symbolic link (Store.confine's refusal, naming it)."""
    path, sep, _ = message.partition(": a symbolic link inside the store;")
    return bool(sep) and os.path.islink(path)


def _message_of(exc: InputError) -> str:
    return (f"field '{exc.field}': " if exc.field else "") + exc.message


_FILE_KINDS = ("symlink", "special-file", "hard-link")


def _check_files(store: Store) -> list[Problem]:
    """Every file inside the store that memctl will not open as it is (store.open_file), each named
    here and refused by every command that meets it: a symbolic link (memctl follows none), what is
    no regular file (a FIFO waited forever at its opening), and a file of several hard links (an
    append through one reached a file outside the store). The journal's backups are links by
    design (Transaction: the old version of a file replaced), they and their files are not named."""
    out = []
    journal = store.root / ".journal"
    backups = set()
    if journal.is_dir() and not journal.is_symlink():
        backups = {(info.st_dev, info.st_ino) for entry in os.scandir(journal)
                   if entry.is_file(follow_symlinks=False) for info in (entry.stat(follow_symlinks=False),)}
    for dirpath, dirnames, filenames in os.walk(store.root):  # os.walk does not descend into links
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            where = store.relative(path)
            if stat.S_ISLNK(info.st_mode):
                out.append(Problem(where, None, f"a symbolic link (to {os.readlink(path)}); "
                                   "memctl follows none: replace it with the real folder or file", "symlink"))
            elif not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                out.append(Problem(where, None, NotRegularFile.of_kind(where, info.st_mode).what, "special-file"))
            elif (stat.S_ISREG(info.st_mode) and info.st_nlink > 1
                  and (info.st_dev, info.st_ino) not in backups):
                out.append(Problem(where, None, NotRegularFile.of_links(where, info.st_nlink).what, "hard-link"))
    return out


def _check_topics(store: Store, problems: list[Problem]) -> None:
    """Topic files, archived ones, links, the time index, the activation log and auto summaries,
    each line as the topic commands read it (memctl.store.topicfile.check_record)."""
    from memctl.store import topicfile
    from memctl.topics import activation
    from memctl.topics.log import LOG

    if store.topics_dir.exists() and not store.topics_dir.is_dir():
        problems.append(Problem("topics", None, "not a folder (memctl keeps topic files in it)", "store"))
        return
    paths = store.listing(store.topics_dir, "t-*.jsonl")
    paths += [p for month in store.listing(store.path("topics", topicfile.ARCHIVED), "*") if month.is_dir()
              for p in store.listing(month, "t-*.jsonl")]
    _check_topic_files(store, paths, problems)
    _check_topic_indexes(store, {path.stem for path in paths}, problems)
    for _ in _jsonl(store, store.path("topics", LOG), problems, "a log event"):
        pass
    try:
        activation.load_part(store)
    except InputError as exc:
        problems.append(Problem(exc.source or activation.FILE_NAME, exc.line, _message_of(exc), "field"))
    _check_auto_summaries(store, problems)


def _check_topic_files(store: Store, paths: list[Path], problems: list[Problem]) -> None:
    """Each line of the topic files (live and archived), and no message in two live topics."""
    from memctl.store import topicfile

    owner: dict[str, str] = {}
    for path in paths:
        rel = store.relative(path)
        for number, record in _jsonl(store, path, problems, "a topic line"):
            try:
                topicfile.check_record(record, rel, number, file_id=path.stem)
            except InputError as exc:
                problems.append(Problem(rel, number, _message_of(exc), "field"))
                continue
            if record["type"] == "message":
                first = owner.setdefault(record["id"], rel)
                if first != rel and "/archived/" not in rel + first:
                    problems.append(Problem(rel, number, f"message '{record['id']}' is also in {first}: "
                                            "a message belongs to one topic", "duplicate-id"))


def _check_topic_indexes(store: Store, topics: set[str], problems: list[Problem]) -> None:
    """Each line of links.jsonl and the time index, and each link's ends among `topics`."""
    from memctl.store import topicfile

    links = []
    for name in (topicfile.LINKS, topicfile.TIME_INDEX):
        path = store.path("topics", name)
        for number, record in _jsonl(store, path, problems, "an index line"):
            problem = topicfile.check_index_line(name, record)
            if problem:
                problems.append(Problem(store.relative(path), number, f"field '{problem[0]}': {problem[1]}",
                                        "field"))
            elif name == topicfile.LINKS:
                links.append((number, record))
    _check_topic_links(store, links, topics, problems)


def _check_auto_summaries(store: Store, problems: list[Problem]) -> None:
    from memctl.topics.daily import AUTO_SUMMARIES

    for number, record in _jsonl(store, store.path(AUTO_SUMMARIES), problems, "an auto summary"):
        for key, ok in (("session", isinstance(record.get("session"), str)),
                        ("until", isinstance(record.get("until"), str)),
                        ("summary", isinstance(record.get("summary", ""), str)),
                        ("keywords", isinstance(record.get("keywords", []), list))):
            if not ok:
                problems.append(Problem(AUTO_SUMMARIES, number, f"field '{key}': wrong type", "field"))
                break


def _check_topic_links(store: Store, links: list[tuple[int, dict]], topics: set[str],
                       problems: list[Problem]) -> None:
    """A link whose end is no topic: neither a topic file (live or archived) nor a topic merged
    into another (its file goes by design; `Memory.topic(old)` follows the link). Such a link was
    left by a topic file deleted by hand: `topics show` names a topic it cannot open."""
    from memctl.store import topicfile

    merged = {record["from"] for _, record in links if record["kind"] == "merged-into"}
    rel = store.relative(store.path("topics", topicfile.LINKS))
    for number, record in links:
        for end in ("from", "to"):
            if record[end] not in topics and record[end] not in merged:
                problems.append(Problem(rel, number, f"field '{end}': no topic {record[end]} (its file is gone)",
                                        "dangling-link", "warning"))


def _check_cache(store: Store, problems: list[Problem], clock: Clock) -> None:
    """The files cache backend's entries and event logs: warnings, since reading the cache
    takes each as a miss (the next run replaces it) and nothing remembered is lost."""
    from memctl.cache import cache_problems

    named = {p.file for p in problems if p.code in _FILE_KINDS}  # a FIFO among them: said once, by _check_files
    problems += [Problem(file, line, message, "cache", "warning")
                 for file, line, message in cache_problems(store, clock)
                 if file not in named and not _is_link_refusal(message)]  # _check_links names each link


def index_problems(rt: Runtime) -> list[Problem]:
    """Is .index/ in step with the files? A stale or missing index is a warning, never
    damage: search rebuilds it by itself, and `health --fix` does it now."""
    from memctl.index import open_index

    try:
        index = open_index(rt)
    except InputError:
        return []  # a broken memctl.toml is reported by the config check
    return [Problem(file, None, message, "index", "warning", True) for file, message in index.rebuild_reasons()]


def _check_config(rt: Runtime, problems: list[Problem]) -> config.Settings | None:
    """The store's settings, loaded (and checked: every table, then the governance rule); None,
    with the problem added, when they cannot be."""
    store = rt.store
    try:
        return rt.settings
    except InputError as exc:
        match = _TOML_LINE.search(exc.message)
        line = exc.line if exc.line is not None else int(match.group(1)) if match else None
        # Settings come from the user's config.toml and the environment too: name the one at fault.
        outside = exc.source not in (None, str(store.config_file))
        problems.append(Problem(exc.source if outside else "memctl.toml", line, exc.message, "config"))
    except NotRegularFile:
        raise  # named by _check_files
    except MemctlError as exc:
        problems.append(Problem("memctl.toml", None, str(exc).removeprefix(f"{store.config_file}: "), "config"))
    return None


def _check_programs(store: Store) -> list[Problem]:
    """A program named in the store's memctl.toml: never run (config.PROGRAM_SETTINGS), and worth a
    look, since a store is data anyone may have written."""
    from memctl import config

    try:
        named = config.programs_named(store.config_file)
    except MemctlError:
        return []  # a broken memctl.toml: the config check reports it
    return [Problem("memctl.toml", line, config.ignored_program_note(table, key), "program", "warning")
            for table, key, line in named]


def _check_leftovers(store: Store) -> list[Problem]:
    out = []
    if (store.root / ".journal").exists():
        try:
            load_journal(store)
        except NotRegularFile:
            pass  # named by _check_files
        except StoreError as exc:
            out.append(Problem(".journal/journal.json", None, str(exc).split(": ", 1)[1], "journal-invalid"))
        else:
            out.append(Problem(".journal", None, "unfinished transaction of a killed writer; the next command "
                               "rolls it back (or: memctl health check --fix)", "journal", fixable=True))
    for path in _walk_files(store):
        match = _TEMP.match(path.name)
        if match and not _pid_alive(int(match.group(1))):
            out.append(Problem(store.relative(path), None, "temp file left by a killed writer", "temp-file",
                               "warning", fixable=True))
    return out


def _walk_files(store: Store) -> Iterator[Path]:
    """Every file of the store except inside .index/ and .journal/ (derived or transient)."""
    for dirpath, dirnames, filenames in os.walk(store.root):
        if Path(dirpath) == store.root:
            dirnames[:] = [d for d in dirnames if d not in (".index", ".journal")]
        for name in filenames:
            yield Path(dirpath) / name


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_permissions(store: Store) -> list[Problem]:
    """Folders 0700, files 0600 (no access for group or others). Inside .index/ only the folder:
    a private folder keeps whatever the index libraries create in it private."""
    out = []
    paths = [store.root] + ([store.index_dir] if store.index_dir.is_dir() else [])
    for dirpath, dirnames, filenames in os.walk(store.root):
        if Path(dirpath) == store.root:
            dirnames[:] = [d for d in dirnames if d != ".index"]
        paths += [Path(dirpath) / d for d in dirnames] + [Path(dirpath) / f for f in filenames]
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode) or not mode & 0o077:
            continue
        want = DIR_MODE if stat.S_ISDIR(mode) else FILE_MODE
        name = store.relative(path) if path != store.root else "."
        if path == store.config_file and not mode & 0o022:
            # Settings a person wrote (umask 022 makes it 0644): they hold no memory, so others reading
            # them is no leak, and a nightly `memctl health` in cron must not fail on them.
            out.append(Problem(name, None, f"readable by others (mode {stat.S_IMODE(mode):04o}); to keep the "
                               f"store private: chmod {want:o} {path}, or memctl health check --fix", "permissions",
                               "warning", fixable=True))
            continue
        out.append(Problem(name, None, f"readable by others (mode {stat.S_IMODE(mode):04o}, want {want:04o})",
                           "permissions", fixable=True))
    return out


def _check_memory_md(store: Store, problems: list[Problem], ids: dict[str, str]) -> memoryfile.Document | None:
    if not store.memory_md.exists():
        return memoryfile.Document()
    try:
        doc = memoryfile.load(store.memory_md)
    except NotRegularFile:
        raise  # named by _check_files
    except StoreError as exc:
        match = re.search(r":(\d+): (.*)$", str(exc))
        problems.append(Problem("MEMORY.md", int(match.group(1)) if match else None,
                                match.group(2) if match else str(exc), "parse"))
        return None
    for issue in doc.issues:
        code = "field" if issue.message.startswith("field ") else "parse"
        problems.append(Problem("MEMORY.md", issue.line, issue.message, code, issue.severity))
    for entry in doc.entries:
        _note_id(ids, entry.id, "MEMORY.md", entry.line, problems)
        if entry.annotated and "id" in entry.fields:
            missing = [f for f in ("summary", "memory_class", "scope") if f not in entry.fields]
            if missing:
                problems.append(Problem("MEMORY.md", entry.line, f"'{entry.id}' has no {', '.join(missing)} "
                                        "(required schema fields)", "missing-field", "warning"))
    return doc


def _note_id(ids: dict[str, str], memory_id: str, file: str, line: int, problems: list[Problem]) -> None:
    where = f"{file}:{line}"
    if memory_id in ids:
        problems.append(Problem(file, line, f"id '{memory_id}' is not unique: also at {ids[memory_id]}",
                                "duplicate-id"))
    else:
        ids[memory_id] = where


def _jsonl(store: Store, path: Path, problems: list[Problem], what: str) -> Iterator[tuple[int, dict]]:
    """Parse a JSON-lines file line by line, reporting every bad line; yields (line, object)."""
    rel = store.relative(path)
    try:
        lines = list(jsonl.read(path))
    except NotRegularFile:
        return  # named by _check_files
    for line in lines:
        if line.problem == jsonl.UNTERMINATED:  # --fix ends it (or cuts it) as the next append would
            problems.append(Problem(rel, line.number, f"{line.problem} ({what})", "unterminated", fixable=True))
        elif line.problem:
            problems.append(Problem(rel, line.number, f"{line.problem} ({what})", "parse"))
        else:
            yield line.number, line.value


def _check_messages(store: Store, problems: list[Problem], ids: dict[str, str]) -> None:
    for path in store.listing(store.sessions_dir, "*.jsonl"):
        rel = store.relative(path)
        for number, message in _jsonl(store, path, problems, "a message"):
            if not isinstance(message.get("id"), str):
                problems.append(Problem(rel, number, "message has no text 'id'", "field"))
                continue
            if not isinstance(message.get("text"), str):
                problems.append(Problem(rel, number, f"message '{message['id']}': field 'text' must be text",
                                        "field"))
            for key in ("session", "role", "speaker"):
                if message.get(key) is not None and not isinstance(message[key], str):
                    problems.append(Problem(rel, number, f"message '{message['id']}': field '{key}' must be text",
                                            "field"))
            if message.get("ts") is not None and not _is_time(message["ts"]):
                problems.append(Problem(rel, number, f"message '{message['id']}': field 'ts' must be an "
                                        "ISO 8601 time", "field"))
            _note_id(ids, message["id"], rel, number, problems)


def _is_time(value) -> bool:
    try:
        clock.parse_ts(value)
    except (ValueError, TypeError, OverflowError, OSError):
        return False
    return isinstance(value, str)


def _check_pending(store: Store, problems: list[Problem], ids: dict[str, str], now: datetime,
                   settings: config.Settings) -> None:
    path = store.pending_file
    for number, item in _jsonl(store, path, problems, "a pending memory"):
        if not isinstance(item.get("id"), str):
            problems.append(Problem(pending.SOURCE, number, "pending memory has no text 'id'", "field"))
            continue
        _note_id(ids, item["id"], pending.SOURCE, number, problems)
        try:  # what `review confirm` would refuse
            pending.note_of(pending.Pending(number, b"", item), settings.ingest, now)
        except InputError as exc:
            what = f"field '{exc.field}': " if exc.field else ""
            problems.append(Problem(pending.SOURCE, number, f"'{item['id']}': {what}{exc.message}", "field"))
        expires = pending.Pending(number, b"", item).expires()
        if expires is None:
            problems.append(Problem(pending.SOURCE, number, f"'{item['id']}': field 'expires_at' must be an "
                                    "ISO 8601 time", "field"))
        elif expires <= now:
            problems.append(Problem(pending.SOURCE, number, f"'{item['id']}' expired at {item['expires_at']} "
                                    "(memctl review drops it)", "pending-expired", "warning", fixable=True))


def _check_json(store: Store, problems: list[Problem], settings: config.Settings) -> None:
    if store.state_file.exists():
        _check_state(store, problems, settings.state)
    for path, what in ((store.path(counters.FILE_NAME), counters.FILE_NAME),):
        if not path.exists():
            continue
        try:
            data = orjson.loads(read_file(path))
        except NotRegularFile:
            continue  # named by _check_files
        except orjson.JSONDecodeError as exc:
            problems.append(Problem(what, None, f"not valid JSON ({exc})", "parse"))
            continue
        if not isinstance(data, dict):
            problems.append(Problem(what, None, "expected a JSON object", "parse"))
        else:
            for memory_id, value in data.items():
                count = value.get("count") if isinstance(value, dict) else None
                if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
                    problems.append(Problem(what, None, f"'{memory_id}': expected {{\"count\": N, \"last\": "
                                            "time}}", "field"))
    for _ in _jsonl(store, governance.log_path(store), problems, "a log record"):
        pass
    for number, record in _jsonl(store, store.path(counters.LOG_NAME), problems, "a logged access"):
        if not (isinstance(record.get("at"), str) and isinstance(record.get("ids"), list)):
            problems.append(Problem(counters.LOG_NAME, number, "expected {\"at\": time, \"ids\": [ids]}", "field"))


def _check_state(store: Store, problems: list[Problem], state_settings: config.State) -> None:
    """index_state.json, parsed as `memctl state` parses it: what it would refuse is an error here."""
    from memctl.window.state import parse_state

    data = read_file(store.state_file)
    try:
        parse_state(data, "index_state.json", state_settings)
    except InputError as exc:
        line = exc.line
        if line is None and exc.field:  # the line the field is on, for a person to go to
            key = b'"' + re.split(r"[.\[]", exc.field)[0].encode() + b'"'
            line = data[:data.find(key)].count(b"\n") + 1 if key in data else None
        code = "parse" if exc.message.startswith(("not valid JSON", "expected a JSON")) else "field"
        what = f"field '{exc.field}': " if exc.field else ""
        problems.append(Problem("index_state.json", line, what + exc.message, code))


def _check_daily_logs(store: Store, problems: list[Problem]) -> None:
    for path in store.listing(store.daily_dir, "*.md"):
        try:
            data = read_file(path)
        except NotRegularFile:
            continue  # named by _check_files
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(store.relative(path), data[:exc.start].count(b"\n") + 1,
                                    "not valid UTF-8", "parse"))


def _check_deleted(store: Store, problems: list[Problem]) -> list[memoryfile.Entry]:
    entries: list[memoryfile.Entry] = []
    for path in store.listing(store.path(lifecycle.DELETED_DIR), "*.md"):
        rel = store.relative(path)
        try:
            doc = memoryfile.load(path)
        except NotRegularFile:
            continue  # named by _check_files
        except StoreError as exc:
            problems.append(Problem(rel, None, str(exc).split(": ", 1)[-1], "parse"))
            continue
        problems += [Problem(rel, issue.line, issue.message, "parse", issue.severity) for issue in doc.issues]
        entries += doc.entries
    return entries


def _check_chains(doc: memoryfile.Document, deleted: list[memoryfile.Entry], problems: list[Problem]) -> None:
    graph = governance.Graph(doc.entries, deleted)
    line = {e.id: e.line for e in doc.entries}
    for new, old in graph.dangling():
        problems.append(Problem("MEMORY.md", line.get(new), f"'{new}' supersedes '{old}', which is in no "
                                "memory file (deleted by hand?)", "dangling-link"))
    for cycle in graph.cycles():
        first = min(cycle, key=lambda i: line.get(i, 0))
        problems.append(Problem("MEMORY.md", line.get(first), "supersedes cycle: "
                                + " -> ".join(cycle + [cycle[0]]), "cycle"))
    for old, news in graph.newer.items():
        if len(news) > 1 and old in graph.entries:
            problems.append(Problem("MEMORY.md", line.get(old), f"'{old}' is superseded by more than one "
                                    f"memory: {', '.join(news)}", "fork", "warning"))
    for entry in doc.entries:
        if not is_current(entry):
            continue
        newer = [n for n in graph.newer.get(entry.id, []) if n in graph.entries and n not in graph.deleted
                 and is_current(graph.entries[n])]
        if newer:
            problems.append(Problem("MEMORY.md", entry.line, f"'{entry.id}' is still {status_of(entry)} "
                                    f"though '{newer[0]}' supersedes it (set status: deprecated?)",
                                    "superseded-current", "warning"))
    for topic, ids in governance.topic_conflicts(doc).items():
        names = ", ".join(f"'{i}'" for i in ids)
        problems.append(Problem("MEMORY.md", line.get(ids[-1]), f"canonical_topic '{topic}' has {len(ids)} current "
                                f"memories: {names} (supersede the older, or keep both on purpose)",
                                "topic-conflict", "warning"))


# -- fix ---------------------------------------------------------------------
def _end_last_line(store: Store, path: Path, problem: Problem, dry_run: bool) -> str:
    """A JSON-lines file's unterminated last line ended, as an append would: with the store's lock
    held it is no append under way but one cut short (or a hand edit); one that parses gets its
    newline, one that does not is cut (Store.append's rule: a torn record is no record)."""
    where = f"{problem.file}:{problem.line}"
    with store.transaction(dry_run=dry_run) as tx:
        size = path.stat().st_size
        mended = mended_tail(path)
        if mended is None:
            return f"{where}: already ended"
        tx.replace(path, mended)
    return f"{where}: " + ("ended the last line" if len(mended) > size else
                           f"cut the torn last line ({size - len(mended)} bytes)")


def fix(rt: Runtime, problems: list[Problem], *, dry_run: bool = False) -> list[str]:
    """Repair the fixable problems; returns one line per repair (made, or that would be made)."""
    store = rt.store
    done: list[str] = []
    codes = {p.code for p in problems if p.fixable}
    if "journal" in codes:
        done.append(".journal: rolled back the unfinished transaction")
        if not dry_run:
            with store.lock():  # taking the lock rolls an unfinished transaction back
                pass
    if "pending-expired" in codes:
        if dry_run:  # taking the lock would roll back a journal: a dry run must not even do that
            done += [f"{p.file}:{p.line}: drop {p.message.split(' (')[0]}" for p in problems
                     if p.code == "pending-expired"]
        else:
            for item in pending.drop_expired(rt):
                done.append(f"{pending.SOURCE}:{item['line']}: dropped '{item['id']}' "
                            f"(expired {item['expires_at']})")
    for problem in problems:
        if problem.code == "permissions":
            path = store.root if problem.file == "." else store.root / problem.file
            mode = DIR_MODE if path.is_dir() else FILE_MODE
            if not dry_run:
                os.chmod(path, mode)  # never a symlink: check skips them
            done.append(f"{problem.file}: mode set to {mode:04o}")
        elif problem.code == "unterminated":
            done.append(_end_last_line(store, store.root / problem.file, problem, dry_run))
        elif problem.code == "temp-file":
            if not dry_run:
                (store.root / problem.file).unlink(missing_ok=True)
            done.append(f"{problem.file}: removed")
    if "index" in codes:
        if not dry_run:
            from memctl.index import open_index

            open_index(rt).update()
        done.append(".index: brought up to date with the files")
    if done and not dry_run:
        stamp = clock.format_ts(rt.clock.now())
        with store.transaction() as tx:
            tx.append(governance.log_path(store), governance.log_records(
                [{"ts": stamp, "action": "fix", "what": line} for line in done]))
    return done
