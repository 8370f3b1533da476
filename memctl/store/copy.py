"""`memctl store copy SRC DST`: a whole store from a folder or a PostgreSQL database into another,
empty one (#35). The truth goes over as files, by the path a folder store gives each: a folder
store reads them as they are, a PostgreSQL store rebuilds each from its rows (MEMORY.md from its
blocks, a session's file from its lines), and writing them is one transaction of the target's, so
a copy lands whole or not at all, and folder -> PostgreSQL -> folder gives the same bytes back.

What is derived or a process's own is not truth and stays behind: the index (.index/), an
unfinished transaction's journal (.journal/, rolled back by the reading first), the lock, and
every other hidden name (a writer's temporary file). A symbolic link or a file of no regular kind
in the source is refused, naming it, as every read of a store refuses it (README: Trust).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath

from memctl.errors import StoreError
from memctl.store.store import Store, read_file
from memctl.text.shape import Shape, derived, hidden, shown


@dataclass
class Copied(Shape):
    """What a copy took (or, dry, would take) from `source` to `target` (both as messages name them)."""

    source: str = shown("The store copied from: a folder, or a URL without its password.")
    target: str = shown("The store copied into.")
    files: dict[str, int] = hidden(default_factory=dict)  # path -> bytes
    dry_run: bool = shown("True when nothing was written (-n): what would go.", default=False)

    key_order = ("source", "target", "dry_run", "file_count", "byte_count", "kinds", "paths")

    @derived("How many files.", name="files")
    def file_count(self) -> int:
        return len(self.files)

    @derived("Their bytes in all.", name="bytes")
    def byte_count(self) -> int:
        return sum(self.files.values())

    @derived("Files by kind: notes (MEMORY.md), sessions, pending, and the rest kept whole.")
    def kinds(self) -> dict[str, int]:
        counts = {"notes": 0, "sessions": 0, "pending": 0, "other": 0}
        for path in self.files:
            kind = ("notes" if path == "MEMORY.md" else "pending" if path == "pending.jsonl"
                    else "sessions" if path.startswith("sessions/") and path.count("/") == 1 else "other")
            counts[kind] += 1
        return counts

    @derived("Each file's path in the store, as a folder store lays it out.")
    def paths(self) -> list[str]:
        return list(self.files)


def copy_store(source, target, *, dry_run: bool = False) -> Copied:
    """Copy the whole of `source` into `target` (each a Store or a PostgresStore), which must be empty."""
    if not source.exists():
        raise StoreError(f"no store at {source.shown}")
    if not is_empty(target):
        raise StoreError(f"{target.shown}: not empty; a copy goes into a new or empty store, never over one")
    with source.reading():
        files = files_of(source)
    with target.transaction(dry_run=dry_run) as tx:
        for path, data in files.items():
            tx.replace(place(target, path), data)
    return Copied(source.shown, target.shown, {path: len(data) for path, data in files.items()}, dry_run)


def is_empty(store) -> bool:
    if not store.is_folder:
        return store.is_empty()
    try:
        with os.scandir(store.root) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True
    except NotADirectoryError:
        raise StoreError(f"{store.root}: not a folder") from None


def place(store, path: str):
    """Where `path` (a name from the source, checked part by part) is written in `store`."""
    parts = PurePosixPath(path).parts
    return store.path(*parts) if store.is_folder else PurePosixPath(*parts)


def files_of(store) -> dict[str, bytes]:
    """Every file of a store's truth (a folder's or a PostgreSQL one's) by its path relative to the
    root, sorted; the caller holds `reading()` (or is inside a transaction) for a consistent view."""
    return folder_files(store) if store.is_folder else store.files()


def folder_files(store: Store) -> dict[str, bytes]:
    """Every file of a folder store's truth by its path relative to the root, sorted (see the module doc)."""
    found: dict[str, bytes] = {}

    def walk(folder, prefix: str) -> None:
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name.startswith("."):
                    continue
                path = store.confine(store.root.joinpath(*PurePosixPath(prefix + entry.name).parts))  # a link: refused
                if entry.is_dir(follow_symlinks=False):
                    walk(path, prefix + entry.name + "/")
                else:
                    found[prefix + entry.name] = read_file(path)  # anything but a regular file: refused

    walk(store.root, "")
    return found
