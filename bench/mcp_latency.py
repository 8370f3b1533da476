"""Warm search through `memctl mcp`: the round trip of one `search` tool call, median over N queries.

    python bench/mcp_latency.py [--messages 6000] [--queries 100] [--data ../shared/bench]

Builds the store of bench/latency.py (N LoCoMo turns, indexed), starts
`python -m memctl --store STORE mcp` of this checkout and drives it with the
MCP SDK's own stdio client, as an agent's host does. The first call of each
mode loads the index (and, for hybrid, the model) and is reported apart; the
median and p90 are over the LoCoMo questions after it, each timed from the
client's request to its parsed result (JSON-RPC over pipes included).
The server's own CPU time per query (from /proc, Linux) is given beside it:
on a shared machine the wall time mostly measures waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency import DEFAULT_DATA, build_store  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def children_cpu_seconds() -> float:
    """User + system CPU time of this process's child processes (the server), from /proc."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        if int(fields[1]) == os.getpid():  # fields[1] is the parent's pid
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def timed_search(session: ClientSession, question: str, mode: str) -> float:
    start = time.perf_counter()
    result = await session.call_tool("search", {"query": question, "mode": mode, "k": 10})
    if result.is_error:
        raise SystemExit(f"search failed: {result.content[0].text}")
    return (time.perf_counter() - start) * 1000


async def measure(store: str, questions: list[str], modes: tuple[str, ...]) -> list[tuple]:
    """Per mode: (mode, first call ms, sorted warm call ms, server CPU ms per warm call)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the server runs this checkout's code
    server = StdioServerParameters(command=sys.executable, args=["-m", "memctl", "--store", store, "mcp"], env=env)
    rows = []
    with open(os.devnull, "w") as quiet:
        async with stdio_client(server, errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for mode in modes:
                    first = await timed_search(session, questions[0], mode)
                    cpu = children_cpu_seconds()
                    times = [await timed_search(session, question, mode) for question in questions[1:]]
                    cpu_ms = (children_cpu_seconds() - cpu) * 1000 / len(times)
                    rows.append((mode, first, sorted(times), cpu_ms))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=6000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(REPO)  # the builder's memctl processes run this checkout too
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        questions = build_store(store, args.messages, args.data)
        rows = anyio.run(measure, store, questions[:args.queries + 1], ("hybrid", "bm25"))
    load = os.getloadavg()[0]
    print(f"\nstore of {args.messages} messages, {args.queries} warm queries a mode "
          f"({os.cpu_count()} cores, load average {load:.1f})\n")
    print("| search through memctl mcp | first call | warm p50 | warm p90 | server CPU a warm call |")
    print("| --- | --- | --- | --- | --- |")
    for mode, first, times, cpu_ms in rows:
        print(f"| --mode {mode} | {first:.0f} ms | {statistics.median(times):.1f} ms | "
              f"{times[int(len(times) * 0.9) - 1]:.1f} ms | {cpu_ms:.1f} ms |")


if __name__ == "__main__":
    main()
