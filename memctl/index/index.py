"""The derived index in .index/: Tantivy (BM25), vectors, and unit metadata (P2, C3).

    .index/manifest.json   what the index was built from: file stamps, model, format
    .index/tantivy/        BM25 over the units' text, with filter fields
    .index/units.db        SQLite: one row a unit (metadata, hashes), row = vector row
    .index/vectors.npy     float32 unit vectors, memory-mapped by search

Everything here can be deleted and rebuilt from the store's files. An update
re-reads the files only when their sizes or times changed, and re-embeds only
units whose text changed (content hashes): an unchanged store costs one
stat per file. Updates hold .index/.lock; readers never block, since each
file is replaced atomically and Tantivy commits atomically. The manifest is
written last, so an update cut short is simply done again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import orjson

from memctl import clock
from memctl import config
from memctl.store.store import Store, atomic_write

if TYPE_CHECKING:
    from memctl.index.units import Unit

FORMAT = 2  # 2: units carry tool, agent, cache_scope (H4)
_TABLE = "units"
_SCHEMA = {"row": int, "id": str, "digest": str, "embed_digest": str, "kind": str, "record_id": str, "source": str,
           "section": str, "session": str, "scope": str, "status": str, "ts_epoch": float, "text": str,
           "line_start": int, "line_end": int, "speaker": str, "ts": str, "fields": str, "tool": str, "agent": str,
           "cache_scope": str}


class IndexCorrupt(Exception):
    """The index cannot be read; it is rebuilt from the files."""


@dataclass
class UpdateReport:
    units: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    embedded: int = 0
    rebuilt: bool = False
    reason: str = ""   # why a rebuild happened: missing, corrupt, model changed, asked

    @property
    def touched(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.rebuilt)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class Index:
    def __init__(self, store: Store):
        self.store = store
        self.dir = store.index_dir
        self.settings = config.load(store.config_file)

    # -- freshness -------------------------------------------------------------
    def stamps(self) -> dict[str, list[int]]:
        out = {}
        for path in self.store.source_files():
            stat = path.stat()
            out[self.store.relative(path)] = [stat.st_size, stat.st_mtime_ns]
        return out

    def manifest(self) -> dict | None:
        try:
            data = orjson.loads((self.dir / "manifest.json").read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def is_fresh(self) -> bool:
        """True when the index reflects the files as they are now (one stat a file)."""
        manifest = self.manifest()
        return bool(manifest and manifest.get("format") == FORMAT and manifest.get("stamps") == self.stamps()
                    and manifest.get("embedding") == self._embedding_settings())

    def _embedding_settings(self) -> dict:
        """The settings that change what is embedded: a change means re-indexing."""
        embedding = self.settings["embedding"]
        return {k: embedding[k] for k in ("model", "precision", "with_previous_turn")}

    # -- updating --------------------------------------------------------------
    def update(self, *, rebuild: bool = False, progress: Callable[[str, int, int], None] | None = None) -> UpdateReport:
        """Bring the index up to date with the files; start over with `rebuild`."""
        if not self.store.exists():
            return UpdateReport()
        # shared store lock: the files are read as a finished writer left them, never half a batch
        with self.store.reading(), self._lock():
            if not rebuild and self.is_fresh():
                return UpdateReport(units=self.manifest().get("units", 0))
            return self._update(rebuild, progress)

    def refresh(self, say: Callable[[str], None] | None = None) -> UpdateReport:
        """Index first if the files changed since the last index (what a search does)."""
        if self.is_fresh():
            return UpdateReport()
        report = self.update()
        if say and report.touched:
            what = f"rebuilt the index ({report.reason})" if report.rebuilt else "updated the index"
            say(f"memctl: {what}: {report.added} added, {report.changed} changed, {report.removed} removed")
        return report

    def _update(self, rebuild: bool, progress) -> UpdateReport:
        from memctl.index.embedding import Embedder, model_dir
        from memctl.index.units import collect

        import numpy as np

        report = UpdateReport()
        stamps = self.stamps()  # before reading: a write during the update leaves the index stale, not wrong
        embed_settings = self.settings["embedding"]
        directory = model_dir(embed_settings["model"])
        manifest = self.manifest()
        old_rows: dict[str, tuple[int, str, str]] = {}  # id -> (row, digest, embed digest)
        old_vectors = None
        if rebuild:
            report.rebuilt, report.reason = True, "asked"
        elif manifest is None or manifest.get("format") != FORMAT:
            report.rebuilt, report.reason = True, "missing" if manifest is None else "old format"
        else:
            try:
                old_rows = self._old_rows()
                old_vectors = np.load(self.dir / "vectors.npy", mmap_mode="r")
                if old_rows and len(old_vectors) <= max(row for row, _, _ in old_rows.values()):
                    raise IndexCorrupt("vectors and units disagree")
                self._open_tantivy()
            except (IndexCorrupt, sqlite3.Error, OSError, ValueError) as exc:
                report.rebuilt, report.reason, old_rows = True, f"corrupt ({exc})", {}
        embedder = Embedder(directory, threads=embed_settings["threads"], batch_size=embed_settings["batch_size"],
                            precision=embed_settings["precision"])
        if manifest and manifest.get("model") != embedder.key and not report.rebuilt:
            report.rebuilt, report.reason, old_rows = True, "model changed", {}
        if report.rebuilt:
            shutil.rmtree(self.dir / "tantivy", ignore_errors=True)
            old_vectors = None

        units = _unique(collect(self.store))
        report.units = len(units)
        digests = [u.digest for u in units]
        new_ids = {u.id: d for u, d in zip(units, digests)}
        removed = [uid for uid in old_rows if uid not in new_ids]
        fresh = [i for i, u in enumerate(units) if old_rows.get(u.id, (0, None))[1] != digests[i]]
        report.removed = len(removed)
        report.added = sum(units[i].id not in old_rows for i in fresh)
        report.changed = len(fresh) - report.added

        # A unit keeps its row while it is unchanged; changed and new units take rows at the
        # end, and the rows they leave are holes. Once holes would pass a fifth of the rows,
        # every row is written anew (without embedding anything again).
        old_count = len(old_vectors) if old_vectors is not None else 0
        holes = old_count - len(old_rows) + len(removed) + report.changed
        compact = report.rebuilt or holes > 0.2 * (old_count + len(fresh))
        todo = range(len(units)) if compact else fresh
        texts = {i: _embed_text(units[i], embed_settings["with_previous_turn"]) for i in todo}
        embed_digests = {i: hashlib.sha1(t.encode()).hexdigest() for i, t in texts.items()}
        reuse = {embed_digest: row for row, _, embed_digest in old_rows.values()}
        missing = [i for i in todo if embed_digests[i] not in reuse]
        rows = {i: n for n, i in enumerate(todo)} if compact else {i: old_count + n for n, i in enumerate(fresh)}
        vectors = np.zeros((len(units) if compact else old_count + len(fresh), embedder.dimension), dtype=np.float32)
        if not compact and old_count:
            vectors[:old_count] = old_vectors
            vectors[[old_rows[uid][0] for uid in removed]
                    + [old_rows[units[i].id][0] for i in fresh if units[i].id in old_rows]] = 0
        for i in todo:
            if embed_digests[i] in reuse:
                vectors[rows[i]] = old_vectors[reuse[embed_digests[i]]]
        if missing:
            step = (lambda n: progress("embedding", n, len(missing))) if progress else None
            vectors[[rows[i] for i in missing]] = embedder.embed([texts[i] for i in missing], progress=step)
        report.embedded = len(missing)

        # Vectors first (a superset of what the table names), then Tantivy, then the table:
        # the table's digests say what is done, so an update cut short is redone from there.
        # The manifest goes last.
        _save_npy(self.dir / "vectors.npy", vectors)
        self._write_tantivy(units, digests, {uid: d for uid, (_, d, _) in old_rows.items()},
                            rebuilt=report.rebuilt)
        records = [_record(units[i], rows[i], digests[i], embed_digests[i]) for i in todo]
        if compact:
            self._write_units(records)
        else:
            self._patch_units(records, gone=removed + [units[i].id for i in fresh if units[i].id in old_rows])
        atomic_write(self.dir / "manifest.json", orjson.dumps({
            "format": FORMAT, "model": embedder.key, "model_dir": str(directory),
            "embedding": self._embedding_settings(), "units": len(units), "stamps": stamps,
            "updated_at": clock.format_ts(clock.now())}))
        return report

    def _write_tantivy(self, units: list[Unit], digests: list[str], old_digest: dict[str, str], rebuilt: bool):
        from memctl.index import lexical

        path = self.dir / "tantivy"
        index = lexical.create_index(path) if rebuilt or not path.exists() else self._open_tantivy()
        writer = index.writer(heap_size=64_000_000, num_threads=1)
        if rebuilt:
            writer.delete_all_documents()
        new_ids = set()
        for unit, digest in zip(units, digests):
            new_ids.add(unit.id)
            if old_digest.get(unit.id) == digest:
                continue
            if unit.id in old_digest:
                writer.delete_documents_by_term("id", unit.id)
            writer.add_document(lexical.document(unit.id, _bm25_text(unit), _meta(unit)))
        for gone in set(old_digest) - new_ids:
            writer.delete_documents_by_term("id", gone)
        writer.commit()
        writer.wait_merging_threads()

    def _write_units(self, records: list[dict]) -> None:
        """The whole unit table, written to a new file that replaces the old one."""
        import sqlite_utils

        partial = self.dir / f".units.db.{os.getpid()}.tmp"
        partial.unlink(missing_ok=True)
        db = sqlite_utils.Database(partial)
        db[_TABLE].create(_SCHEMA, pk="row")
        db[_TABLE].insert_all(records, batch_size=2000)
        db[_TABLE].create_index(["id"], unique=True)
        db.conn.commit()
        db.close()
        os.chmod(partial, 0o600)
        os.replace(partial, self.dir / "units.db")

    def _patch_units(self, records: list[dict], gone: list[str]) -> None:
        """Delete and insert rows in one SQLite transaction; readers see before or after."""
        import sqlite_utils

        db = sqlite_utils.Database(self.dir / "units.db")
        with db.conn:
            for start in range(0, len(gone), 500):
                chunk = gone[start:start + 500]
                db[_TABLE].delete_where(f"id IN ({', '.join('?' * len(chunk))})", chunk)
            if records:
                db[_TABLE].insert_all(records, batch_size=2000)
        db.close()

    def _old_rows(self) -> dict[str, tuple[int, str, str]]:
        path = self.dir / "units.db"
        if not path.exists():
            raise IndexCorrupt("units.db missing")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute(f"SELECT id, row, digest, embed_digest FROM {_TABLE}").fetchall()
        finally:
            conn.close()
        return {uid: (row, digest, embed_digest) for uid, row, digest, embed_digest in rows}

    def _open_tantivy(self):
        from memctl.index import lexical

        try:
            return lexical.open_index(self.dir / "tantivy")
        except (ValueError, OSError) as exc:
            raise IndexCorrupt(f"tantivy: {exc}") from None

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """The index's own lock; while held, new files are private (Tantivy and SQLite create
        theirs with the process umask, which left .index/tantivy 0755 and its files 0644)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        old_umask = os.umask(0o077)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.umask(old_umask)
            os.close(fd)


def health_problems(store: Store) -> list[tuple[str, str]]:
    """(file, message) for each way .index/ needs more than the next search's update.

    Files changed since the last index are not reported: that is the state
    after every ingest, and a search updates the index by itself, re-reading
    only those files. What is worth a warning is what costs a full rebuild
    (the whole store embedded again) at the next search.
    """
    from memctl.errors import InputError

    try:
        index = Index(store)
    except InputError:
        return []  # a broken memctl.toml is reported by the config check
    manifest = index.manifest()
    if manifest is None:  # no index yet is no fault: search builds it
        if (index.dir / "manifest.json").exists():
            return [(".index/manifest.json", "unreadable; the next search rebuilds the index")]
        return []
    if manifest.get("format") != FORMAT:
        return [(".index", "written by another version of memctl; the next search rebuilds it")]
    if manifest.get("embedding") != index._embedding_settings():
        return [(".index", "built with other embedding settings; the next search rebuilds it")]
    return []


def _unique(units: Iterator[Unit]) -> list[Unit]:
    """Units with distinct ids; a repeated id (a hand-copied entry) keeps its first place."""
    seen: dict[str, Unit] = {}
    for unit in units:
        seen.setdefault(unit.id, unit)
    return list(seen.values())


def _record(unit: Unit, row: int, digest: str, embed_digest: str) -> dict:
    return {"row": row, "id": unit.id, "digest": digest, "embed_digest": embed_digest, **_meta(unit),
            "text": unit.text, "line_start": unit.line_start, "line_end": unit.line_end, "speaker": unit.speaker,
            "ts": unit.ts, "fields": orjson.dumps(unit.fields).decode()}


def _meta(unit: Unit) -> dict:
    from memctl.clock import parse_ts

    try:
        epoch = parse_ts(unit.ts).timestamp() if unit.ts else None
    except (ValueError, TypeError):
        epoch = None
    status = unit.fields.get("status") if unit.kind == "memory" else None
    return {"kind": unit.kind, "record_id": unit.record_id, "source": unit.source, "section": unit.section,
            "session": unit.session, "scope": unit.scope, "status": status or "active", "ts_epoch": epoch,
            **{name: unit.fields.get(name) if unit.kind == "memory" else None
               for name in ("tool", "agent", "cache_scope")}}


def _bm25_text(unit: Unit) -> str:
    """What BM25 reads: the text, with who said it or the section it sits in."""
    label = unit.speaker if unit.kind != "memory" else unit.section
    return f"{label}: {unit.text}" if label else unit.text


def _embed_text(unit: Unit, with_previous_turn: bool) -> str:
    """What the model reads: for a message, the turn before it too (a reply alone often
    lacks its subject); on LoCoMo this lifted vector recall@10 from .43 to .48."""
    own = f"{unit.speaker}: {unit.text}" if unit.speaker else unit.text
    return f"{unit.context}\n{own}" if unit.context and with_previous_turn else own


def _save_npy(path: Path, array) -> None:
    import numpy as np

    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(partial, "wb") as fh:
        np.save(fh, array)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(partial, 0o600)
    os.replace(partial, path)
