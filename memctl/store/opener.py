"""The one opener of a store by its name (--store, MEMCTL_STORE): a folder, or a PostgreSQL
database for a postgresql:// URL, whose module (memctl/store/postgres.py) is loaded only then, so
that a folder store's start-up is what it was."""

from __future__ import annotations

import os

from memctl.store.store import DEFAULT_STORE, STORE_ENV, Store


def is_store_url(name) -> bool:
    """Whether a store's name is a PostgreSQL URL rather than a folder (a folder of that name would
    be ./postgresql:/..., which no one means)."""
    return isinstance(name, str) and name[:13].lower().startswith(("postgresql://", "postgres://"))


def open_store(name: str | os.PathLike | None = None):
    """The store named by `name`, else $MEMCTL_STORE, else ./.memory: a Store (a folder) or a
    PostgresStore (a URL)."""
    name = os.fspath(name or os.environ.get(STORE_ENV) or DEFAULT_STORE)
    if is_store_url(name):
        from memctl.store.postgres import PostgresStore

        return PostgresStore(name)
    return Store(name)
