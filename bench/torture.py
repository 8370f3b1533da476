"""Torture memctl: concurrency, SIGKILL mid-write, crafted journals, permissions, fuzzed bad input.

    python bench/torture.py                 # everything, the sizes of issue 8
    python bench/torture.py --only kill --kill-trials 30
    python bench/torture.py --only fuzz --fuzz 10000
    python bench/torture.py --only crafted --crafted-tag fifo --crafted-tag hard-link

Every part prints its figures; the exit status is 1 if any target was missed:

- concurrency: P processes x N ingests of one message into one store, and
  W note writers beside R searchers: 0 lost, 0 duplicated, every file parses.
- kill: SIGKILL at a random moment of an ingest, a notes ingest, an index
  rebuild or a review confirm, then a search (which rolls back what the dead
  writer left): no half batch visible, no acknowledged write lost, no file
  that does not parse.
- journals: crafted journals (absolute path, ../, a .. inside, a symlink, a
  copied store with a live journal): no file outside the store touched; a
  writer refuses in one line, a reader reads on with a warning.
- crafted: the corrupt and crafted store files of bench/crafted_cases.py under
  every command: no traceback, no hang, nothing outside read or written,
  health names each.
- store-commands: programs named in a store's memctl.toml: none run.
- sizes: a 50 MB message and a 1 MB LLM answer: refused quickly, no process left.
- permissions: a whole workflow under umask 022: every path 0700 / 0600.
- fuzz: bad inputs of bench/fuzz_cases.py through the CLI (in process, for
  speed; tests/test_fuzz.py runs some as real processes): exit 2, one line on
  stderr, no traceback, the store's bytes unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(
    os.pathsep) if p])
ENV = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
DEMO = REPO / "fixtures" / "demo"
MEMCTL = [sys.executable, "-m", "memctl"]


def memctl(store: Path, *args: str, input: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*MEMCTL, "--store", str(store), *args], input=input, capture_output=True, env=ENV,
                          timeout=timeout)


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root (but the lock) with a digest of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink() and p.name != ".lock"}


def unparseable(store: Path) -> list[str]:
    """Store files that do not parse as what they should be (the index excluded: it is derived)."""
    from memctl.store import memoryfile

    bad = []
    for path in sorted(store.rglob("*")):
        rel = path.relative_to(store)
        if not path.is_file() or rel.parts[0] in (".index", ".journal") or path.name == ".lock":
            continue
        data = path.read_bytes()
        try:
            if path.suffix == ".jsonl":
                if data and not data.endswith(b"\n"):
                    raise ValueError("last line cut short")
                for line in data.splitlines():
                    if not isinstance(orjson.loads(line), dict):
                        raise ValueError("not an object")
            elif path.suffix == ".json":
                orjson.loads(data)
            elif path.suffix == ".md":
                doc = memoryfile.parse(data.decode("utf-8"))
                if path.name == "MEMORY.md" and any(i.severity == "error" for i in doc.issues):
                    raise ValueError(doc.issues[0].message)
        except (ValueError, UnicodeDecodeError) as exc:
            bad.append(f"{rel}: {exc}")
    return bad


def base_store(root: Path) -> Path:
    """The demo store, indexed, with ten pending notes for review."""
    store = root / "base"
    assert memctl(store, "ingest", str(DEMO / "chat.jsonl")).returncode == 0
    assert memctl(store, "ingest", str(DEMO / "MEMORY.md")).returncode == 0
    notes = b"".join(orjson.dumps({"id": f"held-{i}", "text": f"held note zqheld number {i}"}) + b"\n"
                     for i in range(10))
    assert memctl(store, "ingest", "--pending", "-f", "jsonl", "-", input=notes).returncode == 0
    assert memctl(store, "index").returncode == 0
    return store


def message_ids(store: Path) -> list[str]:
    ids = []
    for path in sorted((store / "sessions").glob("*.jsonl")):
        ids += [orjson.loads(line)["id"] for line in path.read_bytes().splitlines() if line.strip()]
    return ids


# -- concurrency -------------------------------------------------------------
def concurrency(root: Path, procs: int, ingests: int, writers: int, readers: int, notes_each: int) -> dict:
    store = root / "concurrent"
    acknowledged: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()

    def ingest_worker(worker: int) -> None:
        for n in range(ingests):
            record = orjson.dumps({"id": f"c{worker}-{n}", "session": f"w{worker % 4}",
                                   "text": f"worker {worker} message {n} about zqconc"})
            done = memctl(store, "ingest", "-", input=record + b"\n")
            with lock:
                if done.returncode == 0:
                    acknowledged.extend(done.stdout.decode().split())
                else:
                    failures.append(done.stderr.decode()[-200:])

    started = time.perf_counter()
    threads = [threading.Thread(target=ingest_worker, args=(w,)) for w in range(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ingest_seconds = time.perf_counter() - started
    stored = message_ids(store)
    out = {"ingests": procs * ingests, "acknowledged": len(acknowledged),
           "lost": len(set(acknowledged) - set(stored)), "duplicated": len(stored) - len(set(stored)),
           "failed": len(failures), "unparseable": len(unparseable(store)), "seconds": round(ingest_seconds, 1)}

    # W note writers beside R searchers
    notes_store = root / "readers"
    assert memctl(notes_store, "ingest", str(DEMO / "MEMORY.md")).returncode == 0
    written: list[str] = []
    reader_errors: list[str] = []
    searches = [0]
    stop = threading.Event()

    def note_writer(worker: int) -> None:
        for n in range(notes_each):
            note = orjson.dumps({"text": f"writer {worker} note {n} zqnote", "section": f"W{worker}"})
            done = memctl(notes_store, "ingest", "--kind", "memory", "-", input=note + b"\n")
            with lock:
                if done.returncode == 0:
                    written.extend(done.stdout.decode().split())
                else:
                    failures.append(done.stderr.decode()[-200:])

    def reader() -> None:
        while not stop.is_set():
            found = memctl(notes_store, "search", "--mode", "bm25", "-k", "5", "zqnote")
            with lock:
                searches[0] += 1
                if found.returncode not in (0, 1) or b"Traceback" in found.stderr:
                    reader_errors.append(found.stderr.decode()[-200:])

    readers_threads = [threading.Thread(target=reader) for _ in range(readers)]
    writer_threads = [threading.Thread(target=note_writer, args=(w,)) for w in range(writers)]
    for t in readers_threads + writer_threads:
        t.start()
    for t in writer_threads:
        t.join()
    stop.set()
    for t in readers_threads:
        t.join()
    from memctl.store import memoryfile

    ids = [e.id for e in memoryfile.load(notes_store / "MEMORY.md").entries]
    out.update({"notes": writers * notes_each, "notes_acknowledged": len(written),
                "notes_lost": len(set(written) - set(ids)), "notes_duplicated": len(ids) - len(set(ids)),
                "searches": searches[0], "search_errors": len(reader_errors),
                "notes_unparseable": len(unparseable(notes_store))})
    out["ok"] = (out["lost"] == out["duplicated"] == out["unparseable"] == out["failed"] == 0
                 and out["notes_lost"] == out["notes_duplicated"] == out["search_errors"] == 0
                 and out["notes_unparseable"] == 0 and out["acknowledged"] == out["ingests"]
                 and out["notes_acknowledged"] == out["notes"])
    return out


# -- SIGKILL -------------------------------------------------------------------
BATCH = 200
NOTES = 20


def _operation(kind: str, trial: int) -> tuple[list[str], bytes | None]:
    if kind == "ingest":
        data = b"".join(orjson.dumps({"id": f"k{trial}-{i}", "session": f"kill{trial}-{i % 2}",
                                      "text": f"zqk{trial} message {i} of the batch"}) + b"\n"
                        for i in range(BATCH))
        return ["ingest", "-"], data
    if kind == "notes":
        data = b"".join(orjson.dumps({"text": f"zqk{trial} note {i}", "section": "Kill"}) + b"\n"
                        for i in range(NOTES))
        return ["ingest", "--kind", "memory", "-"], data
    if kind == "index":
        return ["index", "--rebuild"], None
    return ["review", "confirm", *[f"held-{i}" for i in range(10)]], None


def _visible(store: Path, kind: str, trial: int) -> tuple[int, int, subprocess.CompletedProcess]:
    """(how many of the trial's batch the files hold, the batch's size) after a search ran."""
    from memctl.store import memoryfile

    query = "zqheld" if kind == "review" else f"zqk{trial}" if kind != "index" else "Kestrel"
    found = memctl(store, "search", "--mode", "bm25", "--json", "-k", "1000", "--min-score", "0", query)
    if kind == "ingest":
        ids = [i for i in message_ids(store) if i.startswith(f"k{trial}-")]
        return len(ids), BATCH, found
    entries = memoryfile.load(store / "MEMORY.md").entries
    if kind == "notes":
        return sum(f"zqk{trial} note" in e.text for e in entries), NOTES, found
    if kind == "review":
        confirmed = sum(e.id.startswith("held-") for e in entries)
        lines = (store / "pending.jsonl").read_bytes().splitlines() if (store / "pending.jsonl").exists() else []
        pending = sum(orjson.loads(line)["id"].startswith("held-") for line in lines if line.strip())
        return (confirmed if confirmed + pending == 10 else -1), 10, found
    results = [orjson.loads(line) for line in found.stdout.splitlines()]
    return (1 if results else 0), 1, found


def kill_trials(root: Path, base: Path, trials: int, seed: int) -> dict:
    rng = random.Random(seed)
    kinds = ["ingest", "notes", "index", "review"]
    # How long each operation takes uninterrupted: kills land anywhere in that span.
    durations = {}
    for kind in kinds:
        store = root / f"time-{kind}"
        shutil.copytree(base, store, symlinks=True)
        args, data = _operation(kind, 0)
        started = time.perf_counter()
        memctl(store, *args, input=data)
        durations[kind] = time.perf_counter() - started
        shutil.rmtree(store)
    base_ids = set(message_ids(base))
    counts = {"trials": 0, "killed_mid_write": 0, "partial_visible": 0, "acknowledged_lost": 0,
              "unparseable": 0, "search_failed": 0, "journal_left": 0, "base_lost": 0,
              "whole_unacknowledged": 0}
    problems: list[str] = []
    for trial in range(trials):
        kind = kinds[trial % len(kinds)]
        store = root / "kill"
        if store.exists():
            shutil.rmtree(store)
        shutil.copytree(base, store, symlinks=True)
        args, data = _operation(kind, trial)
        process = subprocess.Popen([*MEMCTL, "--store", str(store), *args], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        if data is not None:
            process.stdin.write(data)
        process.stdin.close()
        time.sleep(rng.uniform(0.0, durations[kind]))
        process.send_signal(signal.SIGKILL)
        process.wait()
        acknowledged = process.returncode == 0
        journal = (store / ".journal").exists()
        counts["trials"] += 1
        counts["killed_mid_write"] += journal
        held, size, found = _visible(store, kind, trial)
        # A writer killed after starting its journal but before changing a file leaves the files as
        # they were: the search, finding the index fresh, has nothing to read; the next writer removes it.
        counts["journal_left"] += (store / ".journal").exists()
        if found.returncode not in (0, 1) or b"Traceback" in found.stderr:
            counts["search_failed"] += 1
            problems.append(f"trial {trial} {kind}: search exit {found.returncode}: {found.stderr[-200:]!r}")
        if held not in (0, size):
            counts["partial_visible"] += 1
            problems.append(f"trial {trial} {kind}: {held} of {size} visible")
        if acknowledged and held != size:
            counts["acknowledged_lost"] += 1
            problems.append(f"trial {trial} {kind}: acknowledged, {held} of {size} kept")
        if not acknowledged and held == size and kind in ("ingest", "notes", "review"):
            counts["whole_unacknowledged"] += 1  # killed after the commit, before printing: all there
        if not base_ids <= set(message_ids(store)):
            counts["base_lost"] += 1
        bad = unparseable(store)
        counts["unparseable"] += bool(bad)
        problems += [f"trial {trial} {kind}: {b}" for b in bad]
    counts["durations"] = {k: round(v, 2) for k, v in durations.items()}
    counts["problems"] = problems[:10]
    counts["ok"] = all(counts[k] == 0 for k in ("partial_visible", "acknowledged_lost", "unparseable",
                                                "search_failed", "base_lost"))
    return counts


# -- crafted journals ----------------------------------------------------------
def journals(root: Path, base: Path) -> dict:
    outside = root / "outside"
    outside.mkdir()
    cases = []

    def crafted(name: str, ops: list, setup=None) -> None:
        store = root / f"journal-{name}"
        shutil.copytree(base, store, symlinks=True)
        victim = outside / f"victim-{name}"
        victim.write_bytes(b"precious bytes outside the store\n")
        if setup:
            setup(store, victim)
        (store / ".journal").mkdir(mode=0o700)
        ops = [{k: (str(victim) if v == "VICTIM" else v) for k, v in op.items()} for op in ops]
        (store / ".journal" / "journal.json").write_bytes(orjson.dumps({"store": str(store), "ops": ops}))
        cases.append((name, store, [victim]))

    crafted("absolute", [{"op": "append", "path": "VICTIM", "size": 0}])
    crafted("absolute-replace", [{"op": "replace", "path": "VICTIM", "backup": None}])
    relative = os.path.relpath(outside, root / "journal-relative")
    crafted("relative", [{"op": "append", "path": f"{relative}/victim-relative", "size": 0}])
    crafted("dotdot-inside", [{"op": "append", "path": "sessions/../../outside/victim-dotdot-inside", "size": 0}])

    def plant_link(store: Path, victim: Path) -> None:
        (store / "sessions" / "link.jsonl").symlink_to(victim)
        (store / "memory" / "linkdir").symlink_to(victim.parent, target_is_directory=True)

    crafted("symlink", [{"op": "append", "path": "sessions/link.jsonl", "size": 0},
                        {"op": "append", "path": "memory/linkdir/victim-symlink", "size": 0}], plant_link)
    # A copied store with a real, valid journal: rolling back the copy must touch only the copy.
    original = root / "journal-original"
    shutil.copytree(base, original, symlinks=True)
    session = original / "sessions" / "2026-11-02-planning.jsonl"
    size = session.stat().st_size
    with open(session, "ab") as fh:
        fh.write(b'{"id": "half", "text": "half a batch"}\n')
    (original / ".journal").mkdir(mode=0o700)
    (original / ".journal" / "journal.json").write_bytes(orjson.dumps(
        {"store": str(original), "ops": [{"op": "append", "path": "sessions/2026-11-02-planning.jsonl",
                                          "size": size}]}))
    copy = root / "journal-copy"
    shutil.copytree(original, copy, symlinks=True)
    before_original = snapshot(original)
    results = {}
    for name, store, victims in cases:
        before = {v: v.read_bytes() for v in victims}
        search, ingest = memctl(store, "search", "kestrel"), memctl(store, "ingest", "-", input=b"a new message here")
        touched = sum(not v.exists() or v.read_bytes() != before[v] for v in victims)
        # a writer refuses a journal it cannot trust; a reader reads on and says why (a link it meets: exit 2)
        read_on = (search.returncode in (0, 1) and b"warning:" in search.stderr
                   or search.returncode == 2 and b"symbolic link" in search.stderr)
        results[name] = {"touched_outside": touched, "exits": [search.returncode, ingest.returncode],
                         "writer_refused_in_one_line": ingest.returncode == 2 and ingest.stderr.count(b"\n") == 1,
                         "reader_read_on_or_named_the_link": read_on}
    runs = [memctl(copy, "search", "kestrel")]
    copy_rolled_back = b'"half"' not in (copy / "sessions" / "2026-11-02-planning.jsonl").read_bytes()
    results["copied-store"] = {"touched_outside": int(snapshot(original) != before_original),
                               "exits": [r.returncode for r in runs], "copy_rolled_back": copy_rolled_back}
    total = sum(r["touched_outside"] for r in results.values())
    refused = all(r["writer_refused_in_one_line"] and r["reader_read_on_or_named_the_link"]
                  for n, r in results.items() if n != "copied-store")
    return {"cases": len(results), "touched_outside": total, "writers_refused_readers_warned": refused,
            "copy_rolled_back_itself": copy_rolled_back, "detail": results,
            "ok": total == 0 and refused and copy_rolled_back}


# -- permissions ----------------------------------------------------------------
def permissions(root: Path) -> dict:
    store = root / "perms"
    old = os.umask(0o022)
    try:
        steps = [
            ("ingest", str(DEMO / "chat.jsonl")), ("ingest", str(DEMO / "MEMORY.md")), ("index",),
            ("search", "kestrel"), ("search", "--layered", "--workspace", "project:kestrel", "queue"),
            ("state", "record", "--hit", "待辦"), ("state", "record", "--hit", "待辦"),
            ("state", "record", "--hit", "待辦"), ("state", "record", "--hit", "待辦"),
        ]
        for args in steps:
            memctl(store, *args)
        memctl(store, "ingest", "--pending", "-", input=b"a held note")
        held = orjson.loads((store / "pending.jsonl").read_bytes().splitlines()[0])["id"]
        memctl(store, "review", "confirm", held)
        memctl(store, "review", "lifecycle")
    finally:
        os.umask(old)
    paths = [store] + sorted(store.rglob("*"))
    loose = []
    for path in paths:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            continue
        want = 0o700 if stat.S_ISDIR(mode) else 0o600
        if stat.S_IMODE(mode) != want:
            loose.append(f"{path.relative_to(store.parent)} {stat.S_IMODE(mode):04o}")
    return {"paths": len(paths), "not_private": len(loose), "loose": loose[:10], "ok": not loose}


# -- fuzz ------------------------------------------------------------------------
def fuzz(root: Path, base: Path, count: int, seed: int) -> dict:
    """Bad inputs through the CLI in this process (click's runner): ~20 ms a case, not ~300 ms."""
    from click.testing import CliRunner

    import fuzz_cases
    from memctl.cli import cli

    store = root / "fuzz"
    shutil.copytree(base, store, symlinks=True)
    input_file = root / "fuzz-input"
    rng = random.Random(seed)
    runner = CliRunner()
    counts = {"cases": 0, "tracebacks": 0, "wrong_exit": 0, "not_one_line": 0, "store_changed": 0}
    by_category: dict[str, int] = {}
    failures: list[str] = []
    clean = snapshot(store)
    for _ in range(count):
        case = fuzz_cases.case(rng)
        by_category[case.category] = by_category.get(case.category, 0) + 1
        for rel, data in case.files.items():
            (store / rel).parent.mkdir(mode=0o700, exist_ok=True)
            (store / rel).write_bytes(data)
        args = case.args
        if case.input_file is not None:
            path = input_file.with_suffix(case.input_suffix)
            path.write_bytes(case.input_file)
            args = [str(path) if a == "{input}" else a for a in args]
        before = snapshot(store)
        result = runner.invoke(cli, ["--store", str(store), *args], input=case.stdin, prog_name="memctl")
        counts["cases"] += 1
        stderr = result.stderr
        traceback = result.exception is not None and not isinstance(result.exception, SystemExit)
        problems = []
        if traceback or "Traceback" in stderr:
            counts["tracebacks"] += 1
            problems.append(f"traceback {type(result.exception).__name__}: {result.exception}")
        if result.exit_code != 2:
            counts["wrong_exit"] += 1
            problems.append(f"exit {result.exit_code}")
        if stderr.count("\n") != 1 or not stderr.startswith("memctl: error: "):
            counts["not_one_line"] += 1
            problems.append(f"stderr {stderr[:200]!r}")
        if snapshot(store) != before:
            counts["store_changed"] += 1
            problems.append("store changed")
        if problems:
            failures.append(f"{case.describe()}: {'; '.join(problems)}")
        for rel in case.files:
            (store / rel).unlink(missing_ok=True)
        shutil.rmtree(store / ".journal", ignore_errors=True)
        if snapshot(store) != clean:  # a case that did change the store: start the next one clean
            shutil.rmtree(store)
            shutil.copytree(base, store, symlinks=True)
    counts["by_category"] = by_category
    counts["failures"] = failures[:15]
    counts["ok"] = all(counts[k] == 0 for k in ("tracebacks", "wrong_exit", "not_one_line", "store_changed"))
    return counts


def topic_store(root: Path) -> Path:
    """The demo chat split into topics, three of them archived, and a cache scope with one entry:
    the store the crafted cases of bench/crafted_cases.py corrupt."""
    store = root / "topics-base"
    assert memctl(store, "ingest", str(DEMO / "chat.jsonl")).returncode == 0
    assert memctl(store, "ingest", str(DEMO / "MEMORY.md")).returncode == 0
    sessions = sorted(p.stem for p in (store / "sessions").glob("*.jsonl"))
    for session in sessions:
        assert memctl(store, "split", "--session", session, "--force", "--keep-recent", "2").returncode == 0
    for _ in range(6):  # the later session's subject makes the others dormant ...
        memctl(store, "context", "--session", sessions[-1], "--message", "redis streams sync queue")
    later = {**ENV, "MEMCTL_NOW": "2027-01-20T00:00:00Z"}  # ... and two months on, review archives them
    assert subprocess.run([*MEMCTL, "--store", str(store), "review", "daily"], env=later,
                          capture_output=True).returncode == 0
    assert memctl(store, "cache", "put", "--scope", "run1", "--tool", "grep", "--", "grep", "-r", "kestrel",
                  input=b"notes.md: Kestrel uses PostgreSQL 16\n").returncode == 0
    assert memctl(store, "index").returncode == 0
    return store


def crafted(root: Path, base: Path, commands: int | None, timeout: float, tags: list[str] | None = None) -> dict:
    """Every crafted store of bench/crafted_cases.py (or those of `tags`) under every command, as real processes."""
    import crafted_cases

    counts = {"cases": 0, "runs": 0, "tracebacks": 0, "hangs": 0, "not_one_line": 0, "outside_touched": 0,
              "outside_printed": 0, "health_silent": 0}
    failures: list[str] = []
    chosen = crafted_cases.COMMANDS[:commands] if commands else crafted_cases.COMMANDS
    for number, case in enumerate(crafted_cases.CASES):
        if tags and not case.tags & set(tags):
            continue
        folder = root / f"crafted-{number}"
        store, victim = folder / "store", folder / "outside" / "victim.txt"
        shutil.copytree(base, store, symlinks=True)
        victim.parent.mkdir(parents=True)
        victim.write_text(crafted_cases.SECRET + "\n")
        case.apply(store, victim)
        outside = snapshot(victim.parent)
        counts["cases"] += 1
        for args in [["health", "check", "--json"]] + chosen:  # health first: a later write mends a torn line
            counts["runs"] += 1
            what = f"{case.name} | {' '.join(args)}"
            try:
                result = memctl(store, *args, timeout=timeout)
            except subprocess.TimeoutExpired:
                counts["hangs"] += 1
                failures.append(f"{what}: over {timeout:.0f} s")
                continue
            stderr = result.stderr.decode(errors="replace")
            if "Traceback" in stderr or result.returncode not in (0, 1, 2):
                counts["tracebacks"] += 1
                failures.append(f"{what}: exit {result.returncode} {stderr.strip().splitlines()[-1:]}")
            elif result.returncode == 2 and len([line for line in stderr.splitlines() if "error" in line]) != 1:
                counts["not_one_line"] += 1
                failures.append(f"{what}: stderr {stderr[:300]!r}")
            if crafted_cases.SECRET.encode() in result.stdout + result.stderr:
                counts["outside_printed"] += 1
                failures.append(f"{what}: printed the file outside the store")
            if args[0] == "health" and case.health:
                files = [orjson.loads(line).get("file", "") for line in result.stdout.splitlines() if line.strip()]
                if result.returncode not in (0, 1) or not any(f.startswith(case.file) or case.file.startswith(f)
                                                     for f in files if f):
                    counts["health_silent"] += 1
                    failures.append(f"{what}: health did not name {case.file} (exit {result.returncode}, {files})")
        if snapshot(victim.parent) != outside:
            counts["outside_touched"] += 1
            failures.append(f"{case.name}: a file outside the store changed")
        shutil.rmtree(folder)
    counts["failures"] = failures
    counts["ok"] = all(counts[k] == 0 for k in counts if k not in ("cases", "runs", "failures"))
    return counts


def store_commands(root: Path, base: Path) -> dict:
    """A store whose memctl.toml names programs: none of them may run, whatever command reads it."""
    store = root / "commanding"
    shutil.copytree(base, store, symlinks=True)
    marker = root / "PWNED"
    program = f"sh -c 'echo ran >> {marker}'"
    (store / "memctl.toml").write_text(f'[topics]\nllm_command = "{program}"\n\n'
                                        f'[cache]\nsummary_command = "{program}"\n')
    session = sorted(p.stem for p in (base / "sessions").glob("*.jsonl"))[0]
    commands = [["context", "--session", session, "--message", "which database?", "--no-record"],
                ["context", "--session", session, "--message", "which database?"],
                ["split", "--session", session, "--force", "--keep-recent", "2"],
                ["topics", "activate", "database"], ["review", "daily"],
                ["cache", "put", "--scope", "r", "--tool", "t", "--", "x"],
                ["cache", "consolidate", "--scope", "r", "--all"], ["health", "check"]]
    warned = 0
    for args in commands:
        result = memctl(store, *args, input=b"output\n")
        warned += b"llm_command" in result.stderr or b"summary_command" in result.stderr
    ran = len(marker.read_text().splitlines()) if marker.exists() else 0
    return {"commands": len(commands), "programs_run": ran, "commands_that_warned": warned, "ok": ran == 0}


def sizes(root: Path, base: Path, llm_timeout: float) -> dict:
    """A 50 MB message is refused whole, quickly; a 1 MB LLM answer is refused within the timeout and
    leaves no process behind (the command's grandchild included)."""
    store = root / "sizes"
    shutil.copytree(base, store, symlinks=True)
    big = orjson.dumps({"session": "big", "role": "user", "text": "word " * (10 << 20)}) + b"\n"
    before = snapshot(store)
    started = time.perf_counter()
    result = memctl(store, "ingest", "-", input=big)
    message = {"exit": result.returncode, "seconds": round(time.perf_counter() - started, 2),
               "stored_nothing": snapshot(store) == before, "stderr": result.stderr.decode().strip()[:200]}
    pids = root / "llm-pids"
    answer = root / "answer.py"
    answer.write_text("import os, sys\nsys.stdin.read()\n"
                      f"open({str(pids)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
                      "sys.stdout.write('<topic>x</topic>' * 70000)\nsys.stdout.flush()\n")
    wrapper = f"sh -c '{sys.executable} {answer}; sleep 300'"  # the grandchild the timeout must also end
    env = {**ENV, "MEMCTL_TOPICS_LLM_TIMEOUT": str(llm_timeout)}
    session = "llm-sized"  # a session of its own, with messages left to split
    chat = b"".join(orjson.dumps({"session": session, "role": "user", "text": f"message {i} about the sync queue"})
                    + b"\n" for i in range(12))
    assert memctl(store, "ingest", "-", input=chat).returncode == 0
    started = time.perf_counter()
    result = subprocess.run([*MEMCTL, "--store", str(store), "split", "--session", session, "--force",
                             "--keep-recent", "2", "--llm", wrapper], env=env, capture_output=True, timeout=120)
    seconds = time.perf_counter() - started
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(answer)], capture_output=True).stdout.split()
    sleeping = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True).stdout.split()
    llm = {"exit": result.returncode, "seconds": round(seconds, 2), "processes_left": len(left) + len(sleeping),
           "stderr": result.stderr.decode().strip()[-200:]}
    ok = (message["exit"] == 2 and message["seconds"] < 5 and message["stored_nothing"]
          and llm["exit"] == 2 and llm["seconds"] < 10 and llm["processes_left"] == 0)
    return {"message_50mb": message, "llm_answer_1mb": llm, "ok": ok}


def huge_input(root: Path, base: Path) -> dict:
    """An input past the size limit (a sparse file: no disk used) is refused in one line."""
    store = root / "huge"
    shutil.copytree(base, store, symlinks=True)
    path = root / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(300 << 20)
    before = snapshot(store)
    result = memctl(store, "ingest", str(path))
    path.unlink()
    return {"exit": result.returncode, "stderr": result.stderr.decode().strip(),
            "ok": result.returncode == 2 and result.stderr.count(b"\n") == 1 and snapshot(store) == before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["concurrency", "kill", "journals", "permissions", "fuzz", "huge",
                                           "crafted", "store-commands", "sizes"],
                        action="append", help="Run only these parts (repeatable).")
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--ingests", type=int, default=100)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--notes-each", type=int, default=75)
    parser.add_argument("--kill-trials", type=int, default=300)
    parser.add_argument("--fuzz", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--crafted-commands", type=int, help="Only the first N commands of each crafted case.")
    parser.add_argument("--crafted-tag", action="append", help="Only the crafted cases of this tag (repeatable): "
                        "fifo, hard-link, link, cache.")
    parser.add_argument("--hang", type=float, default=10.0, help="Seconds after which a crafted run is a hang.")
    parser.add_argument("--llm-timeout", type=float, default=5.0, help="[topics] llm_timeout of the sizes part.")
    options = parser.parse_args()
    parts = options.only or ["permissions", "journals", "crafted", "store-commands", "sizes", "huge", "fuzz",
                             "kill", "concurrency"]
    ok = True
    with tempfile.TemporaryDirectory(prefix="memctl-torture-") as tmp:
        root = Path(tmp)
        base = base_store(root)
        topics = None  # the split store of the topic parts, made once if one of them runs
        for part in parts:
            started = time.perf_counter()
            if part == "concurrency":
                result = concurrency(root, options.procs, options.ingests, options.writers, options.readers,
                                     options.notes_each)
            elif part == "kill":
                result = kill_trials(root, base, options.kill_trials, options.seed)
            elif part == "journals":
                result = journals(root, base)
            elif part == "permissions":
                result = permissions(root)
            elif part == "huge":
                result = huge_input(root, base)
            elif part in ("crafted", "store-commands", "sizes"):
                topics = topics or topic_store(root)
                result = (crafted(root, topics, options.crafted_commands, options.hang, options.crafted_tag) if part == "crafted"
                          else store_commands(root, topics) if part == "store-commands"
                          else sizes(root, topics, options.llm_timeout))
            else:
                result = fuzz(root, base, options.fuzz, options.seed)
            result["wall_seconds"] = round(time.perf_counter() - started, 1)
            print(orjson.dumps({"part": part, **result}).decode(), flush=True)
            ok = ok and result["ok"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
