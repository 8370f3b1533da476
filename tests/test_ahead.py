"""The between-calls loop of the resident server and `memctl mcp` (memctl/server/ahead.py), in
process on a real store, index and (fake) model: a call that waits is taken before the next step
of learning, learning goes on until every kept Memory has learned all, a failure drops the kept
Memories, and a call that wrote the store is embedded ahead."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from memctl import Memory
from memctl.server.ahead import Ahead

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def demo(tmp_path):
    memory = Memory(tmp_path / "demo")
    memory.ingest((FIXTURES / "demo" / "chat.jsonl").read_bytes(), source="chat.jsonl")
    memory.ingest((FIXTURES / "demo" / "MEMORY.md").read_bytes(), source="MEMORY.md")
    return memory.store


def test_calls_come_first_and_learning_goes_on_between_them(demo):
    calls: queue.SimpleQueue = queue.SimpleQueue()
    memory = Memory(demo.root)
    said: list[str] = []
    ahead = Ahead(calls, rows=2, written=memory.store.written_stamp(), say=said.append)
    ahead.memories["demo"] = memory
    memory.search("anything", kinds=["memory"])  # opens the index: rows to learn
    ahead.after_call()
    calls.put("first")
    assert ahead.next_call() == "first"  # a waiting call before any step
    steps = []
    learn = memory.learn_ahead

    def counted(rows):
        steps.append(rows)
        return learn(rows)

    memory.learn_ahead = counted
    try:
        ahead.next_call(timeout=0.01)
    except queue.Empty:
        pass
    assert len(steps) > 2 and set(steps) == {2}  # step by step, until all was learned
    assert memory.learn_ahead(2) and said == []
    steps.clear()
    try:
        ahead.next_call(timeout=0.01)
    except queue.Empty:
        pass
    assert steps == []  # nothing more to learn until the next call


def test_a_failure_to_learn_drops_the_kept_memories_and_is_said(demo):
    calls: queue.SimpleQueue = queue.SimpleQueue()
    said: list[str] = []
    memory = Memory(demo.root)

    def broken(rows):
        raise OSError("index gone")

    memory.learn_ahead = broken
    ahead = Ahead(calls, rows=8, written=None, say=said.append)
    ahead.memories["demo"] = memory
    ahead.after_call()
    calls.put("call")
    calls.put("next")
    assert ahead.next_call() == "call"
    ahead.after_call()
    assert ahead.next_call() == "next"  # a waiting call comes before a step
    assert said == [] and ahead.memories
    try:
        ahead.next_call(timeout=0.01)
    except queue.Empty:
        pass
    assert said == ["learning the index ahead stopped: OSError: index gone"] and not ahead.memories


def test_a_call_that_wrote_the_store_moves_the_stamp(demo):
    memory = Memory(demo.root)
    before = memory.store.written_stamp()
    ahead = Ahead(queue.SimpleQueue(), rows=8, written=before, say=print)
    ahead.after_call(memory)
    assert ahead.written == before  # nothing written: nothing embedded, the stamp as it was
    memory.ingest(b'{"id": "m-new", "session": "s9", "text": "The boiler is serviced every March"}\n')
    ahead.after_call(memory)
    assert ahead.written == memory.store.written_stamp() != before
