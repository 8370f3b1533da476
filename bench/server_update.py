"""bench/server.py's step 3 alone, with more rounds: `memctl index` of 20 new messages through
the warm server of a store (issue #23), the client's wall time against `python -c pass` in the
same loop, and the server's CPU a call.

    python bench/server_update.py --store DIR [--rounds 15] [--checkout DIR] [--pause SECONDS]

DIR is a store bench/server.py's step 3 would use (the 50k one); like it, each round ingests
20 messages into it first, so run it on a copy. The server runs in a runtime directory of this
run's own and is stopped at the end. --checkout: another checkout's memctl is measured (main's,
say), run the same way. --pause: between the ingest and the index, wait that long instead of
timing `python -c pass` there (an agent's turn between writing and searching; 0: a cron chain's
`memctl ingest && memctl index`, no gap but the index's own process start).
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

from installed import compile_package
from server import REPO, SCRIPT, ingest_new_messages, process_cpu, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--pause", type=float, default=None)
    args = parser.parse_args()
    compile_package()
    compileall.compile_dir(args.checkout / "memctl", quiet=1)
    work = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))
    args.store, args.checkout = args.store.resolve(), args.checkout.resolve()
    os.chdir(work)  # not a checkout's: `python -c` runs the working directory's memctl/ first (bench/server.py)
    runtime = work / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update({"XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(args.checkout)})
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    sys.path.insert(0, str(args.checkout))
    from memctl.server.client import ask

    memctl, store = [sys.executable, "-c", SCRIPT], str(args.store)
    try:
        subprocess.run([*memctl, "--store", store, "server", "start"], env=env, check=True)
        subprocess.run([*memctl, "--store", store, "index"], env=env, capture_output=True)
        subprocess.run([*memctl, "--store", store, "search", "sourdough"], env=env, capture_output=True)
        pid = ask(store, "status")["pid"]
        walls, cpus, bare = [], [], []
        for _ in range(args.rounds):
            ingest_new_messages(memctl, store, env)
            if args.pause is None:
                bare.append(timed([sys.executable, "-c", "pass"], env))
            else:
                time.sleep(args.pause)
            cpu = process_cpu(pid)
            walls.append(timed([*memctl, "--store", store, "index"], env))
            cpus.append((process_cpu(pid) - cpu) * 1000)
    finally:
        subprocess.run([*memctl, "--store", store, "server", "stop"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    p50 = statistics.median
    load = os.getloadavg()
    print(f"{args.checkout}: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; "
          f"{args.rounds} rounds")
    against = f"÷ `python -c pass` {p50(bare):.0f} ms = {p50(walls) / p50(bare):.2f}×" if bare else \
        f"{args.pause:g} s after the ingest"
    print(f"`memctl index`, 20 new, server warm: wall p50 {p50(walls):.0f} ms (min {min(walls):.0f}, slowest "
          f"{max(walls):.0f}) {against}; server CPU p50 {p50(cpus):.0f} ms")


if __name__ == "__main__":
    main()
