"""The resident server's figures (issue #23), as ratios taken in one run.

    python bench/server.py --store6k DIR --store50k DIR [--runs 15] [--before REV]

DIR are stores built by bench/latency.py (`--store`; the 6k one from all 5,882 LoCoMo turns:
--messages 5882, and its questions beside it). Reported, with the load average:
  1. a hybrid `memctl search` as a fresh process with the server warm, against `python -c pass`
     in the same loop;
  2. the first call with no server running (it runs in-process, then starts one), against a
     cold call of memctl at REV (default: the commit before the server, 1a3f5c4), same loop;
     after each first call its server is waited for and stopped, so that its model load does
     not share the cores with the next sample;
  3. `memctl index` of 20 new messages (each round ingested first) through the warm server
     of the 50k store, wall time of the process;
  4. warm hybrid search through the server: the round trip of a call handed to it from this
     process (memctl.server.client.forward: connect, run the command line, exit status),
     without a process's start, over the LoCoMo questions; and the server's CPU a call;
  5. with --mcp, the same questions through `memctl mcp` of REV and of this checkout
     (bench/mcp_latency.py): what the search path itself gained.

The package (and REV's) is compiled first, as an install has it (bench/installed.py); the
command is the console script's body (`from memctl.__main__ import main`). Servers run in a
runtime directory of this run's own and are stopped at the end.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from installed import compile_package

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "import sys\nfrom memctl.__main__ import main\nsys.exit(main())\n"  # what pip's console script does
BEFORE_SCRIPT = "import sys\nfrom memctl.cli import main\nsys.exit(main())\n"  # the script before the server


def timed(argv: list[str], env: dict, stdin: bytes = b"") -> float:
    start = time.perf_counter()
    subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - start) * 1000


def ingest_new_messages(memctl: list[str], store: str, env: dict, count: int = 20) -> None:
    """A round of step 3: `count` new messages in a session of their own, ingested (not indexed)."""
    stamp = f"{time.time_ns()}"
    lines = b"\n".join(orjson.dumps({"id": f"bench-{stamp}-{n}", "session": f"bench-{stamp}",
                                     "text": f"a brand new message {stamp}-{n} about sourdough starters"})
                       for n in range(count))
    subprocess.run([*memctl, "--store", store, "ingest", "-f", "jsonl", "-"], input=lines, env=env,
                   check=True, capture_output=True)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (Linux /proc): on a shared machine
    the wall time of a warm call mostly measures waiting for a core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(condition, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store6k", type=Path, required=True)
    parser.add_argument("--store50k", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--before", default="1a3f5c4")
    parser.add_argument("--mcp", action="store_true", help="also warm search through memctl mcp, before and "
                        "after (bench/mcp_latency.py's client; needs the mcp extra)")
    args = parser.parse_args()
    compile_package()
    work = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))
    args.store6k, args.store50k = args.store6k.resolve(), args.store50k.resolve()
    # Every process runs in an empty directory: `python -c` puts the working directory first on
    # the module path, and run from a checkout its memctl/ was what ran, not PYTHONPATH's (the
    # "cold call at 1a3f5c4" of earlier runs from the repository measured this checkout).
    os.chdir(work)
    before = work / "before"
    before.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before, "memctl"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
    compileall.compile_dir(before / "memctl", quiet=1)
    runtime = work / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update({"XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(REPO)})
    env_before = {**env, "PYTHONPATH": str(before)}
    python = sys.executable
    memctl = [python, "-c", SCRIPT]
    store6k, store50k = str(args.store6k), str(args.store50k)
    question = "When did Caroline go to the LGBTQ support group?"
    search6k = ["--store", store6k, "search", question]
    sys.path.insert(0, str(REPO))
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    from memctl.server.client import ask, forward

    def stop(store: str) -> None:
        subprocess.run([*memctl, "--store", store, "server", "stop"], env=env, capture_output=True)

    try:
        # 2. first call with no server, against the cold call before the server. REV searches a
        # copy of its own, brought up to date by one untimed call: an index of another format or
        # model would otherwise be rebuilt by every other call.
        store_before = work / "before-6k"
        shutil.copytree(store6k, store_before, symlinks=True)
        search_before = ["--store", str(store_before), *search6k[2:]]
        subprocess.run([python, "-c", BEFORE_SCRIPT, *search_before], env=env_before, capture_output=True)
        first, cold, off = [], [], []
        for _ in range(args.runs):
            cold.append(timed([python, "-c", BEFORE_SCRIPT, *search_before], env_before))
            off.append(timed([*memctl, *search6k], {**env, "MEMCTL_SERVER": "off"}))
            first.append(timed([*memctl, *search6k], env))
            wait_for(lambda: ask(store6k, "status") is not None)
            stop(store6k)
            time.sleep(0.5)  # the stopped server's memory freed before the next sample
        # 1. fresh process with the server warm, against python -c pass
        subprocess.run([*memctl, "--store", store6k, "server", "start"], env=env, check=True)
        timed([*memctl, *search6k], env)  # loads the model
        bare, warm_process = [], []
        for _ in range(args.runs):
            bare.append(timed([python, "-c", "pass"], env))
            warm_process.append(timed([*memctl, *search6k], env))
        # 4. warm hybrid search through the server, from this process
        questions = Path(store6k + ".questions").read_text().splitlines()[:100]
        saved = os.dup(1)
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        pid = ask(store6k, "status")["pid"]
        cpu_before = process_cpu(pid)
        try:
            round_trips = []
            for text in questions:
                start = time.perf_counter()
                code = forward(["--store", store6k, "search", text])
                round_trips.append((time.perf_counter() - start) * 1000)
                if code is None:
                    raise SystemExit("the server did not take the call")
        finally:
            os.dup2(saved, 1)
            os.close(quiet)
        server_cpu = (process_cpu(pid) - cpu_before) * 1000 / len(questions)
        # 3. index 20 new messages into the 50k store through its warm server
        subprocess.run([*memctl, "--store", store50k, "server", "start"], env=env, check=True)
        subprocess.run([*memctl, "--store", store50k, "index"], env=env, capture_output=True)
        subprocess.run([*memctl, "--store", store50k, "search", question], env=env, capture_output=True)
        updates, update_cpu = [], []
        pid50k = ask(store50k, "status")["pid"]
        for _ in range(max(5, args.runs // 3)):
            ingest_new_messages(memctl, store50k, env)
            cpu = process_cpu(pid50k)
            updates.append(timed([*memctl, "--store", store50k, "index"], env))
            update_cpu.append((process_cpu(pid50k) - cpu) * 1000)
        # 5. warm hybrid search through `memctl mcp`, before and after, on the same 6k store
        mcp_rows = []
        if args.mcp:
            import anyio
            import mcp_latency

            for name, code in ((args.before, before), ("this", REPO)):
                mcp_latency.REPO = code
                (_, _, times, cpu_ms), = anyio.run(mcp_latency.measure, store6k, questions, ("hybrid",))
                mcp_rows.append((name, statistics.median(times), cpu_ms))
    finally:
        stop(store6k)
        stop(store50k)
        shutil.rmtree(work, ignore_errors=True)
    p50 = statistics.median
    load = os.getloadavg()
    print(f"\n{os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min); "
          f"{args.runs} runs a row, medians\n")
    print("| measure | this | against | ratio |\n| --- | --- | --- | --- |")
    print(f"| hybrid `memctl search` (6k store), server warm ÷ `python -c pass` | {p50(warm_process):.0f} ms | "
          f"{p50(bare):.0f} ms | {p50(warm_process) / p50(bare):.2f}× |")
    print(f"| first call, no server ÷ cold call at {args.before} | {p50(first):.0f} ms | {p50(cold):.0f} ms | "
          f"{p50(first) / p50(cold):.2f}× |")
    print(f"| ... the same call with MEMCTL_SERVER=off ÷ cold call at {args.before} | {p50(off):.0f} ms | "
          f"{p50(cold):.0f} ms | {p50(off) / p50(cold):.2f}× |")
    print(f"| `memctl index`, 20 new into the 50k store, server warm: wall p50, slowest; the server's CPU p50 "
          f"| {p50(updates):.0f} ms, {max(updates):.0f} ms | CPU {p50(update_cpu):.0f} ms | |")
    round_trips.sort()
    print(f"| warm hybrid search through the server, p50 / p90 ({len(round_trips)} questions) | "
          f"{p50(round_trips):.1f} / {round_trips[int(len(round_trips) * 0.9) - 1]:.1f} ms | "
          f"server CPU {server_cpu:.1f} ms a call | |")
    for name, median, cpu_ms in mcp_rows:
        print(f"| warm hybrid search through `memctl mcp` at {name}, p50 | {median:.1f} ms | "
              f"server CPU {cpu_ms:.1f} ms a call | |")


if __name__ == "__main__":
    main()
