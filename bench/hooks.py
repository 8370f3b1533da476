"""What a Claude Code prompt waits for memctl's UserPromptSubmit hook (issue #34), as ratios taken in one run.

    python bench/hooks.py [--runs 40]

The bundled demo (fixtures/demo: 24 messages, 5 memories) is ingested into a fresh store with
memctl's default model; the store's resident server is started and warmed. Then, in one loop,
each round times, as fresh processes started as the console script starts them:
  - `memctl --store STORE hooks run claude-code` given a UserPromptSubmit event on stdin
    (the prompts below in turn; the session is a new one, as a Claude Code session's first prompt),
    through the warm server;
  - `python -c pass`, the floor any hook command pays.
Reported: p50 and p95 of each (ms), the hook's share of characters given, and the load average
before and after (`uptime`). Finally three calls with the server off (MEMCTL_SERVER=off): what a
prompt waits when no server runs yet (the model loads in the call).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "import sys\nfrom memctl.__main__ import main\nsys.exit(main())\n"  # what pip's console script does
PROMPTS = ["which database does Kestrel use?", "when is the first demo and who reviews it?",
           "what should the sync job use as a queue?", "what do I send the Tamsui branch every morning?",
           "how should answers be written for Mei?", "待辦還有什麼？"]


def event(prompt: str) -> bytes:
    return json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "bench-new-session",
                       "transcript_path": "/tmp/bench-new-session.jsonl", "cwd": str(REPO),
                       "permission_mode": "default", "prompt": prompt}).encode()


def timed(argv: list[str], env: dict, stdin: bytes = b"") -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env)
    return (time.perf_counter() - start) * 1000, done.stdout


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    runtime = tempfile.mkdtemp(prefix="mh-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update({"PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": runtime, "MEMCTL_SERVER": "on"})
    memctl = [sys.executable, "-c", SCRIPT]
    store = Path(tempfile.mkdtemp(prefix="memctl-bench-hooks-")) / "memory"
    for source in ("chat.jsonl", "MEMORY.md"):
        subprocess.run([*memctl, "--store", str(store), "ingest", str(REPO / "fixtures" / "demo" / source)],
                       env={**env, "MEMCTL_SERVER": "off"}, check=True, capture_output=True)
    subprocess.run([*memctl, "--store", str(store), "server", "start"], env=env, check=True, capture_output=True)
    try:
        for prompt in PROMPTS:  # warm: the index built, the model and its sessions loaded
            timed([*memctl, "--store", str(store), "hooks", "run", "claude-code"], env, event(prompt))
        load_before = os.getloadavg()
        hook, floor, chars = [], [], []
        for n in range(args.runs):
            ms, out = timed([*memctl, "--store", str(store), "hooks", "run", "claude-code"], env,
                            event(PROMPTS[n % len(PROMPTS)]))
            hook.append(ms)
            chars.append(len(json.loads(out)["hookSpecificOutput"]["additionalContext"]) if out else 0)
            floor.append(timed([sys.executable, "-c", "pass"], env)[0])
        load_after = os.getloadavg()
        served = json.loads(subprocess.run([*memctl, "--store", str(store), "server", "status", "--json"], env=env,
                                           capture_output=True).stdout)["calls"]
    finally:
        subprocess.run([*memctl, "--store", str(store), "server", "stop"], env=env, capture_output=True)
    cold = [timed([*memctl, "--store", str(store), "hooks", "run", "claude-code"],
                  {**env, "MEMCTL_SERVER": "off"}, event(PROMPTS[n]))[0] for n in range(3)]
    shutil.rmtree(store.parent, ignore_errors=True)
    shutil.rmtree(runtime, ignore_errors=True)
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} cores); "
          f"{args.runs} prompts; server calls {served}")
    print(f"hooks run claude-code, warm server: p50 {percentile(hook, .5):.0f} ms, p95 {percentile(hook, .95):.0f} ms")
    print(f"python -c pass, same loop:         p50 {percentile(floor, .5):.0f} ms, p95 {percentile(floor, .95):.0f} ms")
    print(f"ratio of p50s {statistics.median(hook) / statistics.median(floor):.2f}; context given: "
          f"{min(chars)}-{max(chars)} characters (cap 10,000)")
    print(f"no server (MEMCTL_SERVER=off), model loaded in the call: {', '.join(f'{c:.0f}' for c in cold)} ms")


if __name__ == "__main__":
    main()
