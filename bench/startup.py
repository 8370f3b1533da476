"""Cold start of memctl commands that need no model: median wall time of N runs.

    python bench/startup.py [--runs 20]

Each run is a fresh process, as an agent's shell tool call is.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from installed import compile_package

MEMCTL = str(Path(sys.executable).parent / "memctl")


def median_ms(argv: list[str], runs: int, stdin: bytes = b"") -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, input=stdin, capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    compile_package()
    store = tempfile.mkdtemp()
    try:
        rows = [
            ("python -c pass", median_ms([sys.executable, "-c", "pass"], args.runs)),
            ("memctl --help", median_ms([MEMCTL, "--help"], args.runs)),
            ("memctl ingest - (one message)",
             median_ms([MEMCTL, "--store", store, "ingest", "--keep-noise", "-"], args.runs,
                       stdin=b'{"role": "user", "text": "a message to remember"}')),
        ]
    finally:
        shutil.rmtree(store)
    print(f"| command | median ms ({args.runs} runs) |\n| --- | --- |")
    for name, ms in rows:
        print(f"| `{name}` | {ms:.0f} |")


if __name__ == "__main__":
    main()
