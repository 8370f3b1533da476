"""Where a warm `memctl search` in the resident server spends its CPU, part by part (issue #23).

    python bench/server_path.py --store DIR [--calls 100] [--code CHECKOUT] [-- SEARCH OPTIONS...]

Runs the command line's call as the server runs it (memctl.server.serve.Server._run_command:
click, the Memory, settings, the index's freshness check, the search, the output) in this
process, warm, learning the open index ahead between calls as the server does (Server._learning),
over the questions beside the store (DIR.questions, bench/latency.py), and
gives each part's thread CPU exclusive of the parts inside it, p50 and mean a call: the search
itself (Searcher.search), the freshness check (Index.refresh), click's parsing, the settings,
the Memory and Index objects, the output, and the rest (click's dispatch and memctl's glue).
Thread CPU, not wall time: on a shared machine a call's wall time mostly measures waiting for
a core. The socket, the server's hand-over and the client are not in it: bench/server.py
step 4 times the whole round trip. --code runs another checkout's memctl (main's, for a before).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Parts:
    """Exclusive thread CPU by part: a wrapped function's time, less that of the wrapped functions it calls."""

    def __init__(self):
        self.spent: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [part, started]

    def wrap(self, owner, attribute: str, part: str) -> None:
        function = getattr(owner, attribute)

        def timed(*args, **kwargs):
            now = time.thread_time()
            if self._stack:
                outer = self._stack[-1]
                self.spent[outer[0]] += now - outer[1]
            self._stack.append([part, now])
            try:
                return function(*args, **kwargs)
            finally:
                now = time.thread_time()
                inner = self._stack.pop()
                self.spent[inner[0]] += now - inner[1]
                if self._stack:
                    self._stack[-1][1] = now

        setattr(owner, attribute, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose memctl runs (default: this one)")
    parser.add_argument("options", nargs="*", help="options of `memctl search` (after --)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the command line and the server have it
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="mp-")  # no server is started; its place only
    import gc

    import click

    import memctl.api
    import memctl.cli.output
    import memctl.cli.search
    import memctl.config
    import memctl.index.index
    import memctl.search.search
    from memctl.cli import cli
    from memctl.server.serve import Server

    gc.set_threshold(100_000)  # as memctl.cli.main sets it for the server
    server = Server(str(args.store), cli, idle_minutes=5, make_memory=memctl.api.Memory)
    parts = Parts()
    parts.wrap(server, "_run_command", "the rest: click's dispatch, memctl's glue")
    parts.wrap(click.Command, "make_context", "click: parsing the arguments")
    parts.wrap(memctl.config, "load", "settings (config.load)")
    parts.wrap(memctl.api.Memory, "__init__", "Memory()")
    parts.wrap(memctl.index.index.Index, "__init__", "Index()")
    parts.wrap(memctl.index.index.Index, "refresh", "freshness check (Index.refresh)")
    parts.wrap(memctl.search.search.Searcher, "search", "the search itself (Searcher.search)")
    parts.wrap(memctl.cli.search, "_print_result", "output")
    parts.wrap(memctl.cli.output, "json_lines", "output")
    questions = Path(f"{args.store}.questions").read_text().splitlines()
    quiet, shown = open(os.devnull, "w"), sys.stdout
    calls: list[dict[str, float]] = []
    for number, question in enumerate(questions[:10 + args.calls]):
        parts.spent.clear()
        sys.stdout = quiet
        try:
            server._run_command(["--store", str(args.store), "search", *args.options, question])
        finally:
            sys.stdout = shown
        if number >= 10:  # the first ten open the index and the model
            calls.append({part: seconds * 1000 for part, seconds in parts.spent.items()})
        while server._learning():  # as the server does between calls (Server.run)
            pass
    by_part = {part: [call.get(part, 0.0) for call in calls] for part in {p for call in calls for p in call}}
    totals = [sum(call.values()) for call in calls]
    load = os.getloadavg()
    print(f"\n{args.calls} warm calls, {os.cpu_count()} cores, load average {load[0]:.1f}; thread CPU a call\n")
    print("| part | p50 | mean |\n| --- | --- | --- |")
    for part, spent in sorted(by_part.items(), key=lambda item: -statistics.mean(item[1])):
        print(f"| {part} | {statistics.median(spent):.2f} ms | {statistics.mean(spent):.2f} ms |")
    print(f"| whole call | {statistics.median(totals):.2f} ms | {statistics.mean(totals):.2f} ms |")


if __name__ == "__main__":
    main()
