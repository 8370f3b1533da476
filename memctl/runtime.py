"""What one `Memory` reads once and every module below the API shares (see Runtime).

Its own module, apart from config.py: building the settings' dataclasses costs ~11 ms of
import, which a `memctl` call that ends in a usage error or `--help` should not pay; a
Runtime imports config only when a setting is first read.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from memctl.clock import Clock

if TYPE_CHECKING:
    from memctl.config import Settings
    from memctl.store.store import Store


class Runtime:
    """What one `Memory` reads once and every module below it shares: the store, its settings
    (loaded on first use), the clock (MEMCTL_NOW, read when the runtime is made) and the query
    embedding model (opened on first use by `open_embedder`, which the API passes in: config
    sits below index). Every operation takes it first (`ingest(rt, data)`, `split(rt, session)`)
    and reads the settings and the time from it, nowhere else. Settings are read once per
    runtime: a change to memctl.toml takes a new Memory."""

    def __init__(self, store: Store, *, clock: Clock | None = None,
                 open_embedder: Callable[[Settings], Any] | None = None):
        self.store = store
        self.clock = clock or Clock.from_environment()
        self._settings: Settings | None = None
        self._open_embedder = open_embedder
        self._embedder: Any = None
        self._opening = threading.Lock()

    @property
    def config_file(self) -> Path:
        return self.store.config_file

    def on(self, store: Store) -> "Runtime":
        """This runtime's settings and clock over `store`, another Store object of the same store
        (one by absolute path, for a thread that outlives the call)."""
        other = Runtime(store, clock=self.clock, open_embedder=self._open_embedder)
        other._settings = self.settings
        return other

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from memctl.config import load

            self._settings = load(self.config_file)
        return self._settings

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            with self._opening:  # warm_embedder may be opening it on another thread: that one is taken
                if self._embedder is None:
                    self._embedder = self._opened()
        return self._embedder

    def warm_embedder(self) -> None:
        """Open the embedder for many calls (its warm(), if it has one) unless it is open already.
        The one thing of a runtime another thread may do beside the calls: a call that needs the
        model meanwhile waits for it, and a call that does not is not held up."""
        with self._opening:
            if self._embedder is None:
                embedder = self._opened()
                getattr(embedder, "warm", lambda: None)()
                self._embedder = embedder  # only once warm: a call never finds it half laid out

    def _opened(self) -> Any:
        if self._open_embedder is None:
            raise RuntimeError("this runtime opens no embedding model")
        return self._open_embedder(self.settings)
