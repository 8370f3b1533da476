"""The work a process serving many calls does between them: the resident server (serve.py) and
`memctl mcp` (memctl/mcp/server.py) both take their calls through one `Ahead`.

Between calls it learns the open index ahead (Memory.learn_ahead), a few rows a step, so that a
search does not learn its candidates itself; a call that comes meanwhile waits for one step at
most. After a call that wrote the store it starts embedding, in a thread, what the next index
update will embed (Memory.embed_ahead), while the agent or script behind the call goes on.
Neither changes a result. Standard library only: the Memory objects come from the caller.
"""

from __future__ import annotations

import queue
from collections import OrderedDict
from typing import Any, Callable


class Ahead:
    """The calls of `calls` (a queue), taken with the work ahead between them. `rows`: how many rows
    of an open index one step learns (each caller's figure, with its why, is beside its call);
    `written`: the store's Store.written_stamp when serving starts; `say` tells a failure."""

    def __init__(self, calls: queue.Queue | queue.SimpleQueue, *, rows: int, written: Any,
                 say: Callable[[str], None]):
        self.calls = calls
        self.rows = rows
        self.written = written  # the store's, after the last call (after_call)
        self.say = say
        # The Memory objects whose open indexes are learned ahead, oldest first; the caller keeps
        # them here (the resident server several, one a store path and working directory).
        self.memories: OrderedDict[Any, Any] = OrderedDict()
        self._more = False  # whether a kept Memory may have rows left to learn

    def next_call(self, timeout: float | None = None):
        """The next item of `calls`; while none waits, the kept Memories learn a step at a time.
        queue.Empty when `timeout` passes, with nothing left to learn, and no call came."""
        while self._more:
            try:
                return self.calls.get_nowait()
            except queue.Empty:
                self._more = self._learn()
        return self.calls.get(timeout=timeout)

    def after_call(self, memory=None) -> None:
        """After a call: learning starts again (the call may have opened the index, or opened it
        anew); and `memory`, the call's, if it may have written the store, embeds ahead."""
        self._more = bool(self.memories)
        if memory is None:
            return
        try:
            self.written = memory.embed_ahead(self.written)
        except Exception as exc:  # the index update meets the same trouble and says it
            self.say(f"embedding ahead failed: {type(exc).__name__}: {exc}")

    def _learn(self) -> bool:
        """One step of learning ahead, on the first kept Memory with rows left; whether any may
        have more. A failure drops the kept Memories (no later call adopts what failed)."""
        try:
            return not all(memory.learn_ahead(self.rows) for memory in list(self.memories.values()))
        except Exception as exc:  # the next call meets the same trouble and says it
            self.say(f"learning the index ahead stopped: {type(exc).__name__}: {exc}")
            self.memories.clear()
            return False
