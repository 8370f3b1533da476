"""memctl cache (issue 13): the measures of its table, on files and on a real Redis server.

    python bench/cache.py [--backends files,redis] [--runs 30] [--procs 16] [--calls 200] [--keys 50]
                          [--items 1000]

Starts its own redis-server (loopback, no persistence) as the tests do.
Wall-clock figures on a shared machine are noisy: compare medians of a run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests"))
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
MEMCTL = str(Path(sys.executable).parent / "memctl")  # the console script an agent calls

from memctl.api import Memory  # noqa: E402
from memctl.cache import Cache, CacheError  # noqa: E402
from installed import compile_package  # noqa: E402


def command(effect: Path, key: int) -> list[str]:
    """A tool call whose every real run leaves a line naming its key."""
    return [sys.executable, "-c", f"open({str(effect)!r}, 'a').write('{key}\\n'); print('value-{key}')"]


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def cold_hit_ms(store: Path, backend: str, runs: int) -> tuple[float, float]:
    """Median wall time of `memctl cache run` answering a hit in a fresh process; and of `memctl --help`."""
    env = {**os.environ, "MEMCTL_CACHE_BACKEND": backend}
    argv = [MEMCTL, "--store", str(store), "cache", "run", "--scope", "cold", "--tool", "echo", "--", "echo", "hi"]
    subprocess.run(argv, env=env, capture_output=True, check=True)

    def timed(args):
        start = time.perf_counter()
        subprocess.run(args, env=env, capture_output=True, check=True)
        return (time.perf_counter() - start) * 1000

    hits, helps = [], []
    for _ in range(runs):
        hits.append(timed(argv))
        helps.append(timed([MEMCTL, "--help"]))
    return p50(hits), p50(helps)


def api_hit_ms(store: Path, backend: str, calls: int) -> float:
    cache = Cache(Memory(store).runtime, backend=backend)
    argv = ["echo", "hi"]
    cache.run("api", "echo", argv)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        cache.run("api", "echo", argv)
        times.append((time.perf_counter() - start) * 1000)
    return p50(times)


def _worker(store: str, backend: str, effect: str, worker: int, calls: int, keys: int, results) -> None:
    cache = Cache(Memory(store).runtime, backend=backend)
    wrong = errors = multi_line = 0
    for n in range(calls):
        key = (worker * 7 + n * 13) % keys
        try:
            answer = cache.run("crowd", "tool", command(Path(effect), key))
            wrong += answer.entry.output != f"value-{key}\n".encode()
        except CacheError as exc:
            errors += 1
            multi_line += "\n" in str(exc)
    results.put((wrong, errors, multi_line))


def crowd(store: Path, backend: str, procs: int, calls: int, keys: int, restart=None) -> dict:
    """procs processes x calls calls over keys keys; optionally restart the Redis server mid-run."""
    store.mkdir(exist_ok=True)  # the commands write their side-effect file there
    effect = store / "effect"
    results = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_worker, args=(str(store), backend, str(effect), w, calls, keys,
                                                             results)) for w in range(procs)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    cli_errors = []
    if restart is not None:
        cli_errors = restart()
    outcomes = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - start
    ran = effect.read_text().split() if effect.exists() else []
    per_key = {k: ran.count(str(k)) for k in range(keys)}
    cache = Cache(Memory(store).runtime, backend=backend)
    stored = {e.args[-1]: e.output for e in cache.entries("crowd")}
    corrupt = sum(1 for k in range(keys) if stored.get(command(effect, k)[-1]) not in (None, f"value-{k}\n".encode()))
    return {"seconds": seconds, "runs": len(ran), "keys_run_once": sum(v == 1 for v in per_key.values()),
            "keys_run_more": sum(v > 1 for v in per_key.values()),
            "wrong": sum(o[0] for o in outcomes), "errors": sum(o[1] for o in outcomes),
            "multi_line_errors": sum(o[2] for o in outcomes), "corrupt": corrupt, "cli": cli_errors}


def restart_midway(server, store: Path, down_seconds: float = 1.0):
    """Kill the server a moment into the run, probe the CLI while it is down, start it again."""
    def restart():
        time.sleep(0.5)
        server.stop()
        env = {**os.environ, "MEMCTL_CACHE_BACKEND": server.url, "MEMCTL_CACHE_SOCKET_TIMEOUT": "1"}
        probes = []
        began = time.perf_counter()
        while time.perf_counter() - began < down_seconds:
            t = time.perf_counter()
            done = subprocess.run([MEMCTL, "--store", str(store), "cache", "run", "--scope", "crowd", "--tool",
                                   "tool", "--", "echo", "x"], env=env, capture_output=True, timeout=60)
            probes.append((done.returncode, len(done.stderr.decode().strip().splitlines()),
                           (time.perf_counter() - t) * 1000))
        server.start()
        return probes
    return restart


def consolidation(store: Path, backend: str, items: int) -> dict:
    from memctl.index.index import Index

    cache = Memory(store).cache.on(backend)  # the consolidating cache: Memory gives it ingest's consolidator
    for n in range(items):
        args = {"company": n}
        cache.put("round", "lookup", args, f"company {n} reported revenue of {n * 37 % 1000} million in Q3\n")
        cache.get("round", "lookup", args)  # a second access: it qualifies
    start = time.perf_counter()
    first = cache.consolidate("round", index=False)
    write = time.perf_counter() - start
    start = time.perf_counter()
    Index(cache.runtime).update()
    index = time.perf_counter() - start
    again = cache.consolidate("round", index=False)
    memory = (store / "MEMORY.md").read_text()
    return {"write_s": write, "index_s": index, "stored": sum(r.status == "stored" for r in first),
            "second_pass_stored": sum(r.status == "stored" for r in again),
            "memories_in_file": memory.count("cache_scope: round")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="files,redis")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--api-calls", type=int, default=2000)
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args()
    compile_package()
    work = Path(tempfile.mkdtemp())
    server = None
    rows = []
    try:
        for name in args.backends.split(","):
            if name == "redis":
                from redis_server import RedisServer

                server = RedisServer(work / "redis")
                (work / "redis").mkdir()
                server.start()
                backend = server.url
            else:
                backend = "files"
            fresh = lambda label, name=name: work / f"{name}-{label}"  # noqa: E731
            hit, help_ms = cold_hit_ms(fresh("cold"), backend, args.runs)
            rows.append((name, "`memctl cache run` hit, cold process, p50", f"{hit:.0f} ms (`memctl --help`: "
                         f"{help_ms:.0f} ms)"))
            api = api_hit_ms(fresh("api"), backend, args.api_calls)
            rows.append((name, "hit through the API, p50", f"{api:.3f} ms"))
            got = crowd(fresh("crowd"), backend, args.procs, args.calls, args.keys)
            rows.append((name, f"{args.procs} processes x {args.calls} calls over {args.keys} keys",
                         f"{got['seconds']:.1f} s; {got['runs']} runs, {got['keys_run_once']}/{args.keys} keys ran "
                         f"once ({got['keys_run_more']} more than once); {got['wrong']} wrong outputs, "
                         f"{got['corrupt']} corrupt entries, {got['errors']} errors"))
            if name == "redis":
                store = fresh("restart")
                got = crowd(store, backend, args.procs, args.calls, args.keys,
                            restart=restart_midway(server, store))
                probes = got["cli"]
                rows.append((name, "same, Redis killed 0.5 s in and restarted 1 s later",
                             f"{got['seconds']:.1f} s; {got['wrong']} wrong outputs, {got['corrupt']} corrupt; "
                             f"{got['errors']} API calls failed ({got['multi_line_errors']} with more than one "
                             f"line); {got['runs']} runs (the restart empties the cache); CLI while down: "
                             f"{sum(p[0] == 2 and p[1] == 1 for p in probes)}/{len(probes)} exit 2 with one "
                             f"line, slowest {max((p[2] for p in probes), default=0):.0f} ms"))
            got = consolidation(fresh("consolidate"), backend, args.items)
            rows.append((name, f"consolidation of {args.items} items",
                         f"{got['write_s']:.2f} s to MEMORY.md + {got['index_s']:.2f} s to index (embed); "
                         f"{got['stored']} stored, {got['second_pass_stored']} on a second pass, "
                         f"{got['memories_in_file']} in the file"))
            if server is not None:
                server.stop()
                server = None
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("| backend | measure | result |\n| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
