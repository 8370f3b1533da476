"""Eight agents at once on one store (#31 item 1): each a shell loop of `memctl ingest` and
`memctl -q search`, real processes as a user's agents run them.

    python bench/agents_stress.py                       # 20 rounds, in-process calls
    python bench/agents_stress.py --server --rounds 5   # through the resident server

A round: a fresh store, then AGENTS shell loops started together, each SEARCHES times
`echo ... | memctl -q ingest --session agentA -f text -` then `memctl -q search "heron survey I"`.
Counted: calls whose exit is not 0 (done, found) or 1 (nothing found), and calls that printed a
traceback (a search that died read as "nothing found" once: exit 1 with a traceback). With
--server the calls go through the store's resident server, in a runtime directory of this
bench's own; it is stopped at the end of each round. Exit status 1 if any call failed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEMCTL = f"{shlex.quote(sys.executable)} -m memctl"

# One agent: its exit statuses on stdout, one "ingest N" / "search N" a line; stderr to its own file.
AGENT = """
for i in $(seq 1 {searches}); do
  echo "agent {agent} counted $((i * 7)) herons at the lake in heron survey $i" \\
    | {memctl} -q --store {store} ingest --session agent{agent} -f text - >/dev/null
  echo "ingest $?"
  {memctl} -q --store {store} search "heron survey $i" >/dev/null
  echo "search $?"
done
"""


def one_round(root: Path, agents: int, searches: int, env: dict) -> dict:
    store = root / "store"
    loops = []
    for agent in range(agents):
        script = AGENT.format(searches=searches, agent=agent, store=shlex.quote(str(store)), memctl=MEMCTL)
        err = open(root / f"agent{agent}.err", "wb")
        loops.append((subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=err, env=env), err))
    calls = bad_exits = 0
    for process, err in loops:
        out, _ = process.communicate(timeout=1800)
        err.close()
        for line in out.decode().splitlines():
            calls += 1
            bad_exits += line.split()[1] not in ("0", "1")
    tracebacks = sum((root / f"agent{agent}.err").read_text(errors="replace").count("Traceback")
                     for agent in range(agents))
    errors = [line for agent in range(agents)
              for line in (root / f"agent{agent}.err").read_text(errors="replace").splitlines()
              if "Error" in line or "error" in line]
    if env.get("MEMCTL_SERVER") != "off":
        subprocess.run([sys.executable, "-m", "memctl", "--store", str(store), "server", "stop"], env=env,
                       capture_output=True, timeout=120)
    return {"calls": calls, "bad_exits": bad_exits, "tracebacks": tracebacks, "errors": errors[:3]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--searches", type=int, default=5)
    parser.add_argument("--server", action="store_true", help="through the resident server (a runtime dir of its own)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="memctl-stress-config-")
    env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="memctl-stress-run-")
    env["MEMCTL_SERVER"] = "on" if args.server else "off"
    totals = {"calls": 0, "bad_exits": 0, "tracebacks": 0}
    started = time.monotonic()
    for number in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="memctl-stress-") as folder:
            figures = one_round(Path(folder), args.agents, args.searches, env)
        for name in totals:
            totals[name] += figures[name]
        print(f"round {number}: {figures['calls']} calls, {figures['bad_exits']} exits not 0/1, "
              f"{figures['tracebacks']} tracebacks" + (f"; {figures['errors']}" if figures["errors"] else ""),
              flush=True)
    print(f"{args.rounds} rounds of {args.agents} agents x {args.searches} (ingest + search), "
          f"server {'on' if args.server else 'off'}: {totals['calls']} calls, {totals['bad_exits']} exits not "
          f"0/1, {totals['tracebacks']} tracebacks ({time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f})")
    return 1 if totals["bad_exits"] or totals["tracebacks"] else 0


if __name__ == "__main__":
    sys.exit(main())
