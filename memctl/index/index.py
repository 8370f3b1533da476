"""The derived index in .index/: Tantivy (BM25), vectors, and unit metadata (P2, C3).

    .index/manifest.json   what the index was built from: file stamps, model, format
    .index/tantivy/        BM25 over the units' text, with filter fields
    .index/units.db        SQLite: one row a unit (metadata, hashes), row = vector row
    .index/vectors.npy     float32 unit vectors, memory-mapped by search

Everything here can be deleted and rebuilt from the store's files. An update
reads only the files whose stamp changed: size, modification time and inode
(an append changes the size; a rewrite through a Transaction, as governance
rewrites MEMORY.md, makes a new inode even when size and time stay the same).
Units of those files whose content is unchanged keep their rows; only new
text is embedded (content hashes). An unchanged store costs one stat per
file; 20 new messages in a store of 50k read one session file and one daily
log. Updates hold .index/.lock; readers never block: the table changes in one
SQLite transaction, Tantivy commits atomically, new vector rows are appended
past the ones readers use, and a compaction replaces files whole. The
manifest is written last, so an update cut short is simply done again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import orjson

from memctl.store import locking
from memctl import clock
from memctl import config
from memctl.errors import MemctlError
from memctl.store.store import (DAILY_DIR, MEMORY_MD, SESSIONS_DIR, TOPICS_DIR, KeptWhileUnchanged, NotRegularFile,
                                Store, atomic_write, bytes_under, open_file, read_file)
from memctl.store.seam import Searchable
from memctl.text.shape import Shape, shown

if TYPE_CHECKING:
    from memctl.index.units import Unit
    from memctl.runtime import Runtime

FORMAT = 4  # 2: units carry tool, agent, cache_scope (H4); 3: stamps with inodes, the model named by content;
            # 4: BM25 reads a message with the turn before it; units name that turn (context_id)
# What BM25's terms are made of (lexical.py): an index of another version has its Tantivy
# part written anew from the units at the next update (a text embedded again only if it changed).
# 2: Traditional characters read as Simplified. 3: a daily-log entry is in its own scope (its heading's,
# else its session's, else none: units.log_units), no longer global: the whole store is read once again.
# 4: a message is read with the turn before it only when that turn was said within the hour (units.py):
# the units whose text changed are embedded again, the others keep their vectors.
LEXICAL = 4
_TABLE = "units"
_COLUMNS = {"row": int, "id": str, "digest": str, "embed_digest": str, "kind": str, "record_id": str,
            "source": str, "section": str, "session": str, "scope": str, "status": str, "ts_epoch": float,
            "text": str, "line_start": int, "line_end": int, "speaker": str, "ts": str, "fields": str,
            "tool": str, "agent": str, "cache_scope": str, "context_id": str}
# status: a search's default filter (nothing superseded or archived) scans this index instead of
# the whole table (50,000 units: 33 -> 11 ms). Tables written before it get it at their next update.
_INDEXED = (("id", True), ("embed_digest", False), ("source", False), ("record_id", False), ("status", False),
            ("context_id", False))
# Most texts a resident server embeds ahead of the update that needs them (Index.embed_ahead):
# an agent's turn or a chat's few new messages; a larger import is embedded by its update, with
# its progress bar (512 chat turns take ~2 s of CPU here).
AHEAD_MOST = 512
CHUNK = 500  # SQLite parameters a statement (select_in; search walks its chunks the same way)


_MANIFESTS = KeptWhileUnchanged()  # manifest.json's path -> its data (kept_manifest)


def _read_manifest(index_dir: Path) -> dict | None:
    try:
        data = orjson.loads(read_file(index_dir / "manifest.json"))
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def manifest_stamp(index_dir: Path) -> tuple[int, int, int, int] | None:
    """manifest.json's device, inode, size and change time: every update writes it anew (a new
    file), last; None when there is none."""
    try:
        info = os.stat(index_dir / "manifest.json")
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_ctime_ns


def kept_manifest(index_dir: Path) -> tuple[tuple[int, int, int, int] | None, dict | None]:
    """manifest.json's stamp and data, the data kept while it is the same file as it was: the
    freshness check before each search read and parsed its ~8 KB (110 files' stamps), ~0.15 ms
    of a resident server's warm search (6k store; bench/README.md "Cited measurements"). An update writes it anew (a new
    file); one changed in place is told by its size and change time (KeptWhileUnchanged).
    Read-only: the caller may not change it."""
    stamp = manifest_stamp(index_dir)
    if stamp is None:
        return None, None
    path = str(index_dir / "manifest.json")
    manifest = _MANIFESTS.get(path, stamp)
    if manifest is None:
        read_at = time.time_ns()
        manifest = _read_manifest(index_dir)
        if manifest is not None:
            _MANIFESTS.keep(path, stamp, manifest, [stamp[3]], read_at)
    return stamp, manifest


class IndexCorrupt(Exception):
    """The index cannot be read; it is rebuilt from the files."""


@dataclass
class UpdateReport(Shape):
    """What an index update did."""
    units: int = shown("Search units in the index now.", default=0)
    added: int = shown("Units added.", default=0)
    changed: int = shown("Units changed.", default=0)
    removed: int = shown("Units removed.", default=0)
    embedded: int = shown("Texts embedded (a text that units share, each once; the rest took a vector the index held).", default=0)
    files_read: int = shown("Source files read: those whose size, time or inode changed, or all of them.", default=0)
    rebuilt: bool = shown("The index was started over.", default=False)
    reason: str = shown("Why it was rebuilt: asked, missing, old format, model changed: ..., corrupt (...).",
                        default="")
    skipped: list[str] = shown('Lines of the files read that are no message ("FILE:LINE: why"): passed over, '
                               "not indexed.", default_factory=list)

    @property
    def touched(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.rebuilt)

    def skipped_notes(self) -> list[str]:
        """What a person is told of the lines the update passed over: one line each, a few at most."""
        notes = [f"memctl: skipped {line} (not indexed)" for line in self.skipped[:SKIPPED_SHOWN]]
        if len(self.skipped) > SKIPPED_SHOWN:
            notes.append(f"memctl: skipped {len(self.skipped) - SKIPPED_SHOWN} more bad lines; "
                         "`memctl health` lists them")
        return notes


    def tell(self, say: Callable[[str], None] | None) -> UpdateReport:
        """Say what a search's refresh did (an update, a rebuild and why, lines passed over); itself."""
        if say and self.touched:
            what = f"rebuilt the index ({self.reason})" if self.rebuilt else "updated the index"
            say(f"memctl: {what}: {self.added} added, {self.changed} changed, {self.removed} removed")
        if say:
            for line in self.skipped_notes():
                say(line)
        return self


SKIPPED_SHOWN = 3  # a file of bad lines is said in a few lines; `memctl health` lists them all


class Index(Searchable):
    def __init__(self, rt: Runtime):
        """`rt`: the store, its settings and the clock, as its Memory holds them."""
        self.rt = rt
        self.store = rt.store
        self.dir = self.store.index_dir
        self.settings = rt.settings
        # SQLite, Tantivy and the vector files open their names inside .index/ as they find them:
        # a link planted there would lead a write outside the store, so none is followed.
        _refuse_links(self.store, self.dir)

    # -- freshness -------------------------------------------------------------
    def stamps(self) -> dict[str, list[int]]:
        # The root joined by hand, not os.path.join: 0.8 of ~3 ms for the 945 files of a 50k store.
        prefix = os.path.join(os.fspath(self.store.root), "")
        stat = os.stat
        return {name: [info.st_size, info.st_mtime_ns, info.st_ino]
                for name in self.store.source_names() for info in (stat(prefix + name),)}

    def manifest(self) -> dict | None:
        return _read_manifest(self.dir)

    def summary(self) -> dict:
        """The index as `memctl status` shows it (its manifest: reading it costs no model)."""
        manifest = self.manifest()
        if manifest is None:
            return {"built": False, "updated_at": None, "units": 0, "model": None, "fresh": False}
        model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
        return {"built": True, "updated_at": manifest.get("updated_at"), "units": manifest.get("units", 0),
                "model": model.get("name") or None, "fresh": self.is_fresh()}

    def size(self) -> int:
        """Bytes of .index/ on disk."""
        return bytes_under(self.dir)

    def rebuild_reasons(self) -> list[tuple[str, str]]:
        """(file, message) for each way .index/ needs more than the next search's update.

        Files changed since the last index are not reported: that is the state
        after every ingest, and a search updates the index by itself, re-reading
        only those files. What is worth a warning is what costs a full rebuild
        (the whole store embedded again) at the next search.
        """
        manifest = self.manifest()
        if manifest is None:  # no index yet is no fault: search builds it
            if (self.dir / "manifest.json").exists():
                return [(".index/manifest.json", "unreadable; the next search rebuilds the index")]
            return []
        if manifest.get("format") != FORMAT:
            return [(".index", "written by another version of memctl; the next search rebuilds it")]
        if manifest.get("embedding") != self._embedding_settings():
            return [(".index", "built with other embedding settings; the next search rebuilds it")]
        return []

    def is_fresh(self) -> bool:
        """True when the index reflects the files as they are now (one stat a file)."""
        return self._fresh(self.stamps())

    def _fresh(self, stamps: dict[str, list[int]]) -> bool:
        manifest = kept_manifest(self.dir)[1]
        return bool(manifest and manifest.get("format") == FORMAT and manifest.get("stamps") == stamps
                    and manifest.get("embedding") == self._embedding_settings()
                    and manifest.get("lexical", 1) == LEXICAL)

    def _embedding_settings(self) -> dict:
        """The settings that change what is embedded: a change means re-indexing."""
        embedding_settings = self.settings.embedding
        return {k: getattr(embedding_settings, k) for k in ("model", "precision", "with_previous_turn")}

    # -- updating --------------------------------------------------------------
    def update(self, *, rebuild: bool = False, progress: Callable[[str, int, int], None] | None = None) -> UpdateReport:
        """Bring the index up to date with the files; start over with `rebuild`."""
        if not self.store.exists():
            return UpdateReport()
        # shared store lock: the files are read as a finished writer left them, never half a batch
        with self.store.reading(), self._lock():
            # Stamped before reading: a write during the update leaves the index stale, not wrong.
            stamps = self.stamps()
            if not rebuild and self._fresh(stamps):
                return UpdateReport(units=self.manifest().get("units", 0))
            return self._update(stamps, rebuild, progress)

    def scrub(self) -> UpdateReport:
        """Bring the index up to date writing every file of it anew, so that nothing taken out of
        the store's files stays in it: an update's patch leaves a removed unit's text in SQLite's
        free pages and in Tantivy's segments until a merge. No text is embedded again but the
        changed units'. An index that cannot be read (or was built with another model) is removed
        instead; the next search builds it. What `forget` calls inside its transaction: the
        caller holds the store's lock."""
        if not self.dir.exists():
            return UpdateReport()
        with self._lock():
            return self._update(self.stamps(), False, None, scrub=True)

    def refresh(self, say: Callable[[str], None] | None = None) -> UpdateReport:
        """Index first if the files changed since the last index (what a search does)."""
        if self.is_fresh():
            return UpdateReport()
        return self.update().tell(say)

    def _update(self, stamps: dict[str, list[int]], rebuild: bool, progress, scrub: bool = False) -> UpdateReport:
        """Read what changed, work out the units' new rows and vectors, then write them; with
        `scrub`, read every file and write every file of the index anew (see scrub)."""
        model = _Model(self.settings.embedding)
        table, reason = (None, "asked") if rebuild else self._previous(model)
        if scrub and table is None:
            for path in self.dir.iterdir():
                if path.name != ".lock":
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            return UpdateReport(reason=f"removed ({reason}); the next search builds it")
        # every unit's terms anew, in Tantivy written anew, when they were made another way, or
        # when an update was cut short after its table took new rows (see _write): Tantivy may lack them
        scrub = scrub or (table is not None and (table.manifest.get("lexical", 1) != LEXICAL
                                                 or self._cut_short(table)))
        try:
            reading = self._read(table, stamps, whole=scrub)
            change = _Change.between(reading.old, reading.units)
            report = UpdateReport(added=change.added, changed=len(change.gone) - change.removed,
                                  removed=change.removed, files_read=reading.files, rebuilt=table is None,
                                  reason=reason, skipped=reading.skipped)
            compact = scrub or self._compacts(table, change)
            # A patch writes Tantivy while the model loads and embeds and the vectors and the
            # table are written: its commit is mostly waiting for a dozen fsyncs (20 units,
            # 6,000-unit index, a shared disk: 115-145 ms wall, 15 ms CPU; 20 into 50k, load 7:
            # 60-230 ms wall, 1-5 ms CPU, as long as the embedding on two threads). It only needs
            # the units' text; the manifest, written once both are done, says what is done.
            tantivy = _Meanwhile(self._write_tantivy, change.fresh, change.gone, False, table.tantivy) \
                if not compact and (change.fresh or change.gone) else None
            try:
                new_vectors, embed_digests = self._vectors_for(change.fresh, table, model, progress, report)
                report.units = self._write(table, change, new_vectors, embed_digests, compact,
                                           every_unit=reading.units if scrub else None)
            finally:
                if tantivy is not None:
                    tantivy.wait()
        finally:
            if table is not None:
                table.close()
        # Written last, it says what is done. A power cut that loses its new name leaves the old
        # one, whose vector rows are fewer than the file's, and the next call writes the index
        # anew (no text embedded again): for that the directory is not synced (an fsync, ~4 ms
        # on this disk; bench/README.md "Cited measurements").
        atomic_write(self.dir / "manifest.json", lasting=False, data=orjson.dumps({
            "format": FORMAT, "lexical": LEXICAL, "model": model.identity, "embedding": self._embedding_settings(),
            "units": report.units, "vector_rows": self._vector_rows(), "stamps": stamps,
            "shared_ids": reading.shared_ids, "log_tails": reading.log_tails,
            "updated_at": clock.format_ts(self.rt.clock.now())}))
        return report

    def _vector_rows(self) -> int:
        from memctl.index import vectors

        return vectors.shape(self.dir / "vectors.npy")[0]

    def _cut_short(self, table: _Table) -> bool:
        """Whether an update was cut short after appending vectors: its table may name units that
        Tantivy, still committing, never got. (A manifest written before it counted vector rows is
        judged by its units: the first update after an upgrade.)"""
        counted = table.manifest.get("vector_rows")
        return self._vector_rows() != counted if counted is not None else table.count() != table.manifest.get("units")

    def _previous(self, model: _Model) -> tuple[_Table | None, str]:
        """The index as it stands, or None and why it is built from scratch."""
        manifest = self.manifest()
        if manifest is None:
            return None, "missing"
        if manifest.get("format") != FORMAT:
            return None, "old format"
        if manifest.get("compacting"):
            return None, "corrupt (a compaction was cut short)"
        built_with = manifest.get("model") or {}
        if not model.same_vectors(built_with):
            return None, f"model changed: {built_with.get('name')} ({built_with.get('precision')}) to " \
                         f"{model.identity['name']} ({model.identity['precision']})"
        if (manifest.get("embedding") or {}).get("with_previous_turn") != model.embedding_settings.with_previous_turn:
            return None, "embedding settings changed"
        try:
            table = _Table(self.dir / "units.db")
            try:
                table.check(self.dir / "vectors.npy")
                tantivy = self._open_tantivy()
            except BaseException:
                table.close()
                raise
        except (IndexCorrupt, sqlite3.Error, OSError, ValueError) as exc:
            return None, f"corrupt ({exc})"
        table.manifest, table.tantivy = manifest, tantivy
        return table, ""

    # -- reading ---------------------------------------------------------------
    def _read(self, table: _Table | None, stamps: dict, whole: bool = False) -> _Reading:
        """Only the files whose stamps changed are read, unless an id is shared
        between files: which copy counts depends on every file, so such a store
        is read whole (`memctl health` reports the shared ids), as it is when asked (`whole`).
        """
        from memctl.index.units import collect

        if table is not None and not table.manifest.get("shared_ids") and not whole:
            old_stamps = table.manifest.get("stamps") or {}
            changed = {name for name in set(old_stamps) | set(stamps) if old_stamps.get(name) != stamps.get(name)}
            partial = read_files(self.store, table, changed)
            if partial is not None:
                return partial
        skipped: list[str] = []
        units, shared_ids = _unique(collect(self.store, skipped))
        return _Reading(units, table.rows() if table is not None else {}, shared_ids, len(stamps), skipped)

    # -- vectors -----------------------------------------------------------------
    def _vectors_for(self, fresh: list[Unit], table: _Table | None, model: _Model, progress,
                     report: UpdateReport):
        """Vectors of the new and changed units: copied where the table holds the same
        text's vector (an unchanged text under new metadata), embedded otherwise."""
        import numpy as np

        from memctl.index import vectors

        texts, embed_digests, donors = _to_embed(fresh, table, model)
        missing = [i for i, digest in enumerate(embed_digests) if digest not in donors]
        dimension = vectors.shape(self.dir / "vectors.npy")[1] if table is not None else \
            model.embedder().dimension
        out = np.zeros((len(fresh), dimension), dtype=np.float32)
        if len(missing) < len(fresh):
            old = vectors.open_readonly(self.dir / "vectors.npy")
            copied = [i for i, digest in enumerate(embed_digests) if digest in donors]
            out[copied] = old[[donors[embed_digests[i]] for i in copied]]
        wanted, place = _each_once(texts, embed_digests, donors)
        if missing:
            made = _embedded_ahead(self.dir, model, wanted)
            if made is None:
                step = (lambda n: progress("embedding", n, len(wanted))) if progress else None
                made = model.embedder().embed(wanted, progress=step)
            out[missing] = made[[place[embed_digests[i]] for i in missing]]
        report.embedded = len(wanted)
        return out, embed_digests

    def embed_ahead(self, most: int = AHEAD_MOST) -> None:
        """Start a thread that embeds the texts the next update will embed, if they are at most
        `most`: that update then takes their vectors instead of embedding them on its caller's
        time. What a resident server does after a call that wrote the store, so that `memctl
        index` (or the search that indexes first) after `memctl ingest` finds the new messages
        embedded, or being embedded while its own process starts. The update still reads, writes
        and reports all it does, and takes the vectors only if it would embed exactly these texts,
        in this order, with the same embedder: a text's int8 vector depends on the texts batched
        with it (up to 0.04 a component; bench/README.md "Cited measurements"), so they are the vectors
        it would have made.
        A first build, a rebuild and an update cut short embed on their own. The store's root
        must be absolute: the thread outlives the call that started it."""
        if self.store.exists() and (self.dir / "manifest.json").exists():
            _AHEAD[_ahead_key(self.dir)] = _EmbeddingAhead(self, most)

    def _texts_ahead(self, model: _Model, most: int) -> list[str]:
        """What the next update would embed (embed_ahead), or nothing. Read without the store's
        and the index's locks: an update that holds them waits for this thread (a deadlock had
        it waited for them), and what a writer left half done can only make texts that the
        update does not embed, which it does not take."""
        stamps = self.stamps()
        if self._fresh(stamps):
            return []
        table, _ = self._previous(model)
        if table is None:
            return []
        try:
            if table.manifest.get("lexical", 1) != LEXICAL or self._cut_short(table):
                return []
            reading = self._read(table, stamps)
            texts, embed_digests, donors = _to_embed(_Change.between(reading.old, reading.units).fresh, table, model)
        finally:
            table.close()
        wanted = _each_once(texts, embed_digests, donors)[0]
        return wanted if len(wanted) <= most else []

    # -- writing -----------------------------------------------------------------
    def _compacts(self, table: _Table | None, change: _Change) -> bool:
        """Whether the update writes every row anew rather than patching.

        A unit keeps its row while it is unchanged; changed and new units take rows at
        the end, and the rows they leave are holes. Once holes would pass a fifth of
        the rows, every row is written anew (without embedding anything again).
        """
        from memctl.index import vectors

        if table is None:
            return True
        old_count = vectors.shape(self.dir / "vectors.npy")[0]
        holes = old_count - (table.count() - len(change.gone))  # rows of the vectors file no unit will name
        return holes > 0.2 * (old_count + len(change.fresh))

    def _write(self, table: _Table | None, change: _Change, new_vectors, embed_digests: list[str],
               compact: bool, every_unit: list[Unit] | None = None) -> int:
        """Write vectors, Tantivy, then the table (whose digests say which units are done); the unit
        count. Given `every_unit`, Tantivy is written anew from them. A patch's Tantivy is being
        written meanwhile (`_update`): cut short, the next update finds more vector rows than
        the manifest counted and writes the index anew (_cut_short)."""
        from memctl.index import vectors

        path = self.dir / "vectors.npy"
        kept = table.count() - len(change.gone) if table is not None else 0
        if compact:
            self._write_compacted(table, change, new_vectors, embed_digests, every_unit)
        elif change.fresh or change.gone:
            old_count = vectors.shape(path)[0]
            hole_rows = table.rows_of(change.gone)
            vectors.append(path, new_vectors)
            table.patch(change.gone, _records(change, range(old_count, old_count + len(change.fresh)),
                                              embed_digests))
            vectors.clear(path, hole_rows)
        return kept + len(change.fresh)

    def _write_compacted(self, table: _Table | None, change: _Change, new_vectors, embed_digests,
                         every_unit: list[Unit] | None = None) -> None:
        """New files for the vectors and the table, rows renumbered (and for Tantivy, given `every_unit`)."""
        import numpy as np

        from memctl.index import vectors

        path = self.dir / "vectors.npy"
        kept_rows = table.rows_in_order(excluding=change.gone) if table is not None else []
        matrix = np.concatenate([vectors.open_readonly(path)[kept_rows], new_vectors]) if kept_rows else new_vectors
        partial_vectors = vectors.save_partial(path, matrix)
        del matrix
        start_over = table is None or every_unit is not None
        if start_over:
            shutil.rmtree(self.dir / "tantivy", ignore_errors=True)
        self._write_tantivy(every_unit if every_unit is not None else change.fresh, change.gone, start_over=start_over)
        records = _records(change, range(len(kept_rows), len(kept_rows) + len(change.fresh)), embed_digests)
        partial_table = _Table.write_new(self.dir / "units.db", records, previous=table, gone=change.gone)
        # Two files cannot be replaced at once: until the manifest is written anew, this one
        # says that the table and the vectors may not belong together (then it is rebuilt).
        atomic_write(self.dir / "manifest.json", orjson.dumps({"format": FORMAT, "compacting": True}))
        os.replace(partial_vectors, path)
        os.replace(partial_table, self.dir / "units.db")

    def _write_tantivy(self, fresh: list[Unit], gone: list[str], start_over: bool, opened=None) -> None:
        """`opened`: the index as _previous opened it (opening it again, its analyzer built anew,
        cost an update ~3 ms; bench/README.md "Cited measurements")."""
        from memctl.index import lexical

        path = self.dir / "tantivy"
        index = lexical.create_index(path) if start_over or not path.exists() else opened or self._open_tantivy()
        writer = index.writer(heap_size=64_000_000, num_threads=1)
        # A commit killed midway leaves files the next commit makes again under the same names
        # (its opstamp was never recorded): "FileAlreadyExists(...del)", every update failing
        # from then on. Tantivy's own collection removes them (~0.1 ms when there are none).
        writer.garbage_collect_files()
        if start_over:
            writer.delete_all_documents()
        else:  # every unit written is deleted first: an update cut short and done again adds no twins
            for unit_id in {*gone, *(unit.id for unit in fresh)}:
                writer.delete_documents_by_term("id", unit_id)
        with_previous_turn = self.settings.embedding.with_previous_turn
        for unit in fresh:
            writer.add_document(lexical.document(unit.id, _bm25_text(unit), _meta(unit),
                                                 context=unit.context if with_previous_turn else None))
        writer.commit()
        writer.wait_merging_threads()

    def _open_tantivy(self):
        from memctl.index import lexical

        try:
            return lexical.open_index(self.dir / "tantivy")
        except (ValueError, OSError) as exc:
            raise IndexCorrupt(f"tantivy: {exc}") from None

    @contextmanager
    def unchanging(self) -> Iterator[None]:
        """No update of the index runs while this is held (its lock, shared): what a search that
        met one update after another reads under (search.Retriever); searches share it."""
        with self._lock(locking.LOCK_SH):
            yield

    @contextmanager
    def _lock(self, operation: int = locking.LOCK_EX) -> Iterator[None]:
        """The index's own lock; while held, new files are private (Tantivy and SQLite create
        theirs with the process umask, which left .index/tantivy 0755 and its files 0644)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = open_file(self.dir / ".lock", os.O_RDWR | os.O_CREAT)
        old_umask = os.umask(0o077)
        try:
            locking.flock(fd, operation)
            yield
        finally:
            os.umask(old_umask)
            os.close(fd)


def _to_embed(fresh: list[Unit], table: _Table | None, model: _Model) -> tuple[list[str], list[str], dict]:
    """What the fresh units are embedded as, those texts' digests, and the table's rows that already
    hold a vector of the same text (an unchanged text under new metadata): digest -> row."""
    texts = [_embed_text(unit, model.embedding_settings.with_previous_turn) for unit in fresh]
    embed_digests = [hashlib.sha1(text.encode()).hexdigest() for text in texts]
    return texts, embed_digests, table.donors(set(embed_digests)) if table is not None else {}


def _each_once(texts: list[str], embed_digests: list[str], donors: dict) -> tuple[list[str], dict[str, int]]:
    """The texts that no donor holds, each once, and each one's digest -> its place among them. A
    store that says one thing many times (a session copied under another name, a reply repeated)
    embeds it once: a first build of bench/pg_scale.py's 50k messages, the 9,371 of its data sets
    again and again, embedded every one of them."""
    wanted: list[str] = []
    place: dict[str, int] = {}
    for text, digest in zip(texts, embed_digests):
        if digest not in donors and digest not in place:
            place[digest] = len(wanted)
            wanted.append(text)
    return wanted, place


class _EmbeddingAhead:
    """The texts the next update of an index will embed, worked out and embedded in a thread
    (Index.embed_ahead)."""

    def __init__(self, index: Index, most: int):
        self.texts: list[str] = []
        self.embedder = None
        self._vectors = None
        self._job = _Meanwhile(self._embed, index, most)

    def _embed(self, index: Index, most: int) -> None:
        model = _Model(index.settings.embedding)
        texts = index._texts_ahead(model, most)
        if texts:
            self.embedder = model.embedder()
            self._vectors = self.embedder.embed(texts)
            self.texts = texts

    def vectors_of(self, texts: list[str], embedder):
        """The vectors of `texts` by `embedder` once made, if these are what was embedded; else
        None (and if embedding failed: the update embeds, and says why)."""
        try:
            self._job.wait()
        except Exception:
            return None
        return self._vectors if self.texts == texts and self.embedder is embedder else None


# Each index's texts being embedded ahead (by its folder's real path); only a process that calls
# Index.embed_ahead (the resident server) ever puts one here, and the next update of the index takes it.
_AHEAD: dict[str, _EmbeddingAhead] = {}


def _ahead_key(index_dir: Path) -> str:
    return os.path.realpath(index_dir)


def _embedded_ahead(index_dir: Path, model: _Model, texts: list[str]):
    """The vectors of `texts` embedded ahead for this index by `model`'s embedder, or None."""
    job = _AHEAD.pop(_ahead_key(index_dir), None) if _AHEAD else None
    return job.vectors_of(texts, model.embedder()) if job is not None else None


class _Meanwhile:
    """Runs `function(*args)` in a thread; `wait()` joins it and raises what it raised."""

    def __init__(self, function: Callable, *args):
        import threading

        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function, args), name="memctl-index")
        self._thread.start()

    def _run(self, function: Callable, args: tuple) -> None:
        try:
            function(*args)
        except BaseException as exc:  # raised again in the thread that waits
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


class _Model:
    """The configured embedding model: named cheaply, loaded only when something is embedded."""

    def __init__(self, embedding_settings: config.Embedding):
        from memctl.index.embedders import backend_for, open_embedder
        from memctl.index.embedding import model_identity

        self.embedding_settings = embedding_settings
        self._embedder = None
        name = embedding_settings.model
        backend = backend_for(name)
        if backend.directory is None:
            # A packaged model with its own engine (embedders.py) is named by its package's
            # version: opening one reads no weights yet.
            named = open_embedder(embedding_settings)
            self.identity = {"name": name or backend.name, "sha256": named.key,
                             "precision": getattr(named, "precision", "package")}
        else:
            try:
                self.directory = backend.directory(name)
            except ImportError:
                raise MemctlError(f"[embedding] model '{name}' needs {backend.install}") from None
            self.identity = model_identity(self.directory, embedding_settings.precision, name or backend.name)

    def same_vectors(self, identity: dict) -> bool:
        """Vectors made under `identity` are this model's: the same exported graph at the same precision."""
        return all(identity.get(key) == self.identity[key] for key in ("sha256", "precision"))

    def embedder(self):
        """The embedder, opened at first use: the same object a search of this process uses (a
        few texts run on its query session's thread count or its batch session's, embedding.py)."""
        if self._embedder is None:
            from memctl.index.embedders import open_embedder

            self._embedder = open_embedder(self.embedding_settings)
        return self._embedder


def read_files(store: Store, table, names: set[str]) -> _Reading | None:
    """The units of the named files (and of the daily logs their messages affect) and the rows
    `table` (a folder's _Table, or a PostgreSQL index's: index/postgres.py) holds of them; None
    if an id is shared with a file not read."""
    from memctl.index.units import log_ids, log_units, memory_units, message_units, read_logs, topic_units

    sessions = sorted(name for name in names if name.startswith(SESSIONS_DIR + "/"))
    logs = {name for name in names if name.startswith(DAILY_DIR + "/")}
    units = list(memory_units(store)) if MEMORY_MD in names else []
    skipped: list[str] = []
    messages = list(message_units(store, _existing(store, sessions), skipped=skipped))
    now, before = {u.record_id for u in messages}, table.message_ids(sessions)
    # A daily log's entry is a unit only while no stored message has its id: a new
    # message hides an entry (found through the table), a message gone may uncover
    # one in any daily log (rare: memctl only appends to session files).
    whole = table.log_sources(now - before)
    if before - now:
        whole |= {store.relative(path) for path in store.daily_logs()}
    logs |= whole
    # A log only appended to is read from its last entry on (units.read_logs), unless an entry
    # before may have changed its fate (hidden or uncovered by a message): read whole then.
    known = table.manifest.get("log_tails")
    known = known if isinstance(known, dict) else {}
    log_paths = _existing(store, sorted(logs))
    logs_read = read_logs(log_paths, {path: known[name] for path in log_paths
                                      if (name := store.relative(path)) in known and name not in whole})
    # Entries that are stored messages, those just read or the table's from the session files
    # not read, are no units of their own: asked in one go (today's log of an agent's busy
    # day, 5,000 entries, asked one at a time took 35 ms of every update under cProfile; in
    # one go 9 ms).
    outside = set(sessions)
    skip = now | {record_id for record_id, source in table.message_sources(log_ids(logs_read.entries)).items()
                  if source not in outside}
    units += messages + list(log_units(store, skip, log_paths, logs_read.entries))
    topics = sorted(name for name in names if name.startswith(TOPICS_DIR + "/"))
    units += topic_units(store, _existing(store, topics))
    units, shared_ids = _unique(units)
    read = names | logs
    if shared_ids or any(source not in read for source in table.sources_of([u.id for u in units]).values()):
        return None
    # the table's rows of what was read: of a log read from its tail, those from the tail on
    from_tail = {store.relative(path): line for path, line in logs_read.first_line.items() if line > 1}
    old = table.rows(sorted(read - set(from_tail)))
    for name, line in from_tail.items():
        old.update(table.rows_from(name, line))
    tails = {name: tail for name, tail in known.items() if name not in read}
    tails.update((store.relative(path), tail) for path, tail in logs_read.tails.items())
    return _Reading(units, old, False, files=len(_existing(store, sorted(read))), skipped=skipped,
                    log_tails=tails)


def _existing(store: Store, names: list[str]) -> list[Path]:
    """The named files that are there, each located by its name: a PostgreSQL store brings just
    those into its working folder."""
    return [path for path in (store.located(name) for name in names) if path.exists()]


@dataclass
class _Reading:
    units: list[Unit]                      # the units of the files read
    old: dict[str, tuple[int, str, str]]   # the table's rows of the same files: id -> (row, digest, embed digest)
    shared_ids: bool                       # an id sits in two files
    files: int                             # how many files were read
    skipped: list[str]                     # lines passed over: "FILE:LINE: why"
    # where each daily log ends, for the next update to read it from there (units.read_logs);
    # a read of the whole store keeps none (each log is then read whole once more)
    log_tails: dict[str, list] = field(default_factory=dict)


@dataclass
class _Change:
    """What an update does to the units of the files it read."""
    fresh: list[Unit]         # new or changed units: each takes a new row
    digests: list[str]        # their content digests
    gone: list[str]           # ids whose rows become holes: removed units, then changed ones
    added: int
    removed: int

    @classmethod
    def between(cls, old: dict[str, tuple[int, str, str]], units: list[Unit]) -> _Change:
        current = {unit.id for unit in units}
        fresh, digests = [], []
        for unit in units:
            digest = unit.digest
            if old.get(unit.id, (0, None))[1] != digest:
                fresh.append(unit)
                digests.append(digest)
        removed = [unit_id for unit_id in old if unit_id not in current]
        changed = [unit.id for unit in fresh if unit.id in old]
        return cls(fresh, digests, removed + changed, added=len(fresh) - len(changed), removed=len(removed))


class _Table:
    """units.db: one row a unit, its `row` being its row in vectors.npy.

    Written whole (rebuild, compaction) with sqlite-utils; patched and read with
    plain sqlite3, since importing sqlite_utils costs 0.2 s and an update of a
    few messages, or a search, must not pay it."""

    manifest: dict
    tantivy: Any = None  # its Tantivy index, opened while checking it (Index._previous)

    def __init__(self, path: Path):
        if not path.exists():
            raise IndexCorrupt("units.db missing")
        self.path = path
        self.conn = sqlite3.connect(path)
        self._count: int | None = None

    def close(self) -> None:
        self.conn.close()

    def check(self, vectors_path: Path) -> None:
        from memctl.index import vectors

        top = self.conn.execute(f"SELECT max(row) FROM {_TABLE}").fetchone()[0]
        if top is not None and vectors.shape(vectors_path)[0] <= top:
            raise IndexCorrupt("vectors and units disagree")

    def count(self) -> int:
        """The rows before this update's patch (counted once: a scan of 50,000 rows is ~3 ms)."""
        if self._count is None:
            self._count = self.conn.execute(f"SELECT count(*) FROM {_TABLE}").fetchone()[0]
        return self._count

    def rows(self, sources: list[str] | None = None) -> dict[str, tuple[int, str, str]]:
        """id -> (row, digest, embed digest) of every unit, or of the units from `sources`."""
        columns = "id, row, digest, embed_digest"
        found = select_in(self.conn, columns, "source", sources) if sources is not None else \
            self.conn.execute(f"SELECT {columns} FROM {_TABLE}")
        return {unit_id: (row, digest, embed_digest) for unit_id, row, digest, embed_digest in found}

    def rows_from(self, source: str, line: int) -> dict[str, tuple[int, str, str]]:
        """id -> (row, digest, embed digest) of the units of `source` from line `line` on."""
        found = self.conn.execute(f"SELECT id, row, digest, embed_digest FROM {_TABLE} WHERE source = ? AND "
                                  "line_start >= ?", (source, line))
        return {unit_id: (row, digest, embed_digest) for unit_id, row, digest, embed_digest in found}

    def rows_of(self, ids: list[str]) -> list[int]:
        return [row for (row,) in select_in(self.conn, "row", "id", ids)]

    def rows_in_order(self, excluding: list[str]) -> list[int]:
        gone = set(excluding)
        return [row for unit_id, row in self.conn.execute(f"SELECT id, row FROM {_TABLE} ORDER BY row")
                if unit_id not in gone]

    def sources_of(self, ids: list[str]) -> dict[str, str]:
        return dict(select_in(self.conn, "id, source", "id", ids))

    def donors(self, embed_digests: set[str]) -> dict[str, int]:
        """embed digest -> a row holding the vector of that text."""
        return dict(select_in(self.conn, "embed_digest, row", "embed_digest", sorted(embed_digests)))

    def message_ids(self, sources: list[str]) -> set[str]:
        return {record_id for record_id, kind in select_in(self.conn, "record_id, kind", "source", sources)
                if kind == "message"}

    def message_sources(self, record_ids: list[str]) -> dict[str, str]:
        """record id -> the session file of each stored message among `record_ids`."""
        return {unit_id: source for unit_id, source, kind in select_in(self.conn, "id, source, kind", "id", record_ids)
                if kind == "message"}

    def log_sources(self, record_ids: set[str]) -> set[str]:
        return {source for source, kind in select_in(self.conn, "source, kind", "record_id", sorted(record_ids))
                if kind == "log"}

    def patch(self, gone: list[str], records: list[dict]) -> None:
        """Delete and insert rows in one SQLite transaction; readers see before or after."""
        with self.conn:
            _create_indexes(self.conn)
            for start in range(0, len(gone), CHUNK):
                chunk = gone[start:start + CHUNK]
                self.conn.execute(f"DELETE FROM {_TABLE} WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
            _insert(self.conn, records)

    @staticmethod
    def write_new(path: Path, records: list[dict], previous: _Table | None, gone: list[str]) -> Path:
        """A new table beside `path`: the previous one's rows but `gone`, renumbered in order, then
        `records`. Returns the new file, for the caller to put in place."""
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.unlink(missing_ok=True)
        import sqlite_utils

        conn = sqlite3.connect(partial)
        try:
            db = sqlite_utils.Database(conn)
            db[_TABLE].create(_COLUMNS, pk="row")
            if previous is not None:
                conn.execute("ATTACH DATABASE ? AS old", (str(previous.path),))
                conn.execute("CREATE TEMP TABLE gone (id TEXT PRIMARY KEY)")
                conn.executemany("INSERT OR IGNORE INTO gone VALUES (?)", ((unit_id,) for unit_id in gone))
                rest = ", ".join(name for name in _COLUMNS if name != "row")
                conn.execute(f"INSERT INTO {_TABLE} SELECT ROW_NUMBER() OVER (ORDER BY row) - 1, {rest} "
                             f"FROM old.{_TABLE} WHERE id NOT IN (SELECT id FROM gone) ORDER BY row")
                conn.commit()
                conn.execute("DETACH DATABASE old")
            _insert(conn, records)
            _create_indexes(conn)
            conn.commit()
        finally:
            conn.close()
        os.chmod(partial, 0o600)
        return partial



def _refuse_links(store: Store, folder: Path) -> None:
    """StoreError (from Store.confine, naming it) for a link anywhere under `folder`, NotRegularFile
    for a FIFO, socket or device (SQLite, Tantivy and numpy would wait at a FIFO's opening). An
    entry's kind comes with the directory listing: a confine() of each of Tantivy's files cost
    every search ~1 ms (6,000-message store; bench/README.md "Cited measurements")."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_symlink():
                    store.confine(Path(entry.path))
                elif entry.is_dir():
                    _refuse_links(store, Path(entry.path))
                elif not entry.is_file():
                    raise NotRegularFile.of_kind(entry.path, entry.stat(follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        pass


def select_in(conn: sqlite3.Connection, columns: str, key: str, values: list, where: Iterable[str] = (),
              params: Iterable[Any] = ()) -> Iterator[tuple]:
    """`SELECT columns FROM units WHERE key IN values [AND where]`, CHUNK values a statement
    (the table's reader here and the search's)."""
    for start in range(0, len(values), CHUNK):
        chunk = values[start:start + CHUNK]
        sql = f"SELECT {columns} FROM {_TABLE} WHERE " + " AND ".join(
            [f"{key} IN ({', '.join('?' * len(chunk))})", *where])
        yield from conn.execute(sql, [*chunk, *params])


def _create_indexes(conn: sqlite3.Connection) -> None:
    for column, unique in _INDEXED:
        conn.execute(f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS {_TABLE}_{column} "
                     f"ON {_TABLE} ({column})")


def _insert(conn: sqlite3.Connection, records: list[dict]) -> None:
    names = list(_COLUMNS)
    conn.executemany(f"INSERT INTO {_TABLE} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                     ([record[name] for name in names] for record in records))


def _records(change: _Change, rows: range, embed_digests: list[str]) -> list[dict]:
    return [_record(unit, row, digest, embed_digest)
            for unit, row, digest, embed_digest in zip(change.fresh, rows, change.digests, embed_digests)]


def _unique(units: Iterable[Unit]) -> tuple[list[Unit], bool]:
    """Units with distinct ids, and whether an id sat in two files; a repeated id (a hand-copied
    entry) keeps its first place."""
    seen: dict[str, Unit] = {}
    shared = False
    for unit in units:
        first = seen.setdefault(unit.id, unit)
        shared = shared or first.source != unit.source
    return list(seen.values()), shared


def _record(unit: Unit, row: int, digest: str, embed_digest: str) -> dict:
    return {"row": row, "id": unit.id, "digest": digest, "embed_digest": embed_digest, **_meta(unit),
            "text": unit.text, "line_start": unit.line_start, "line_end": unit.line_end, "speaker": unit.speaker,
            "ts": unit.ts, "fields": orjson.dumps(unit.fields).decode(), "context_id": unit.context_id}


def _meta(unit: Unit) -> dict:
    from memctl.clock import epoch_or_none

    epoch = epoch_or_none(unit.ts)
    status = unit.fields.get("status") if unit.kind == "memory" else None
    return {"kind": unit.kind, "record_id": unit.record_id, "source": unit.source, "section": unit.section,
            "session": unit.session, "scope": unit.scope, "status": status or "active", "ts_epoch": epoch,
            **{name: unit.fields.get(name) if unit.kind == "memory" else None
               for name in ("tool", "agent", "cache_scope")}}


def _bm25_text(unit: Unit) -> str:
    """What BM25 reads: the text, with who said it or the section it sits in (a message's
    turn before it goes to its own field, lexical.document)."""
    label = unit.speaker if unit.kind != "memory" else unit.section
    return f"{label}: {unit.text}" if label else unit.text


def _embed_text(unit: Unit, with_previous_turn: bool) -> str:
    """What the model reads: for a message, the turn before it too (a reply alone often
    lacks its subject); on LoCoMo this lifted vector recall@10 from .43 to .48."""
    own = f"{unit.speaker}: {unit.text}" if unit.speaker else unit.text
    return f"{unit.context}\n{own}" if unit.context and with_previous_turn else own
