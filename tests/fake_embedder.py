"""A fake embedding model for tests, registered through memctl's real registry (embedders.py).

The bundled MiniLM costs ~0.5 s to load and tens of ms a batch; most tests need only *some*
vectors: deterministic, fast, and close for texts that share words. This one hashes words and
the character bigrams inside them into a fixed number of dimensions and L2-normalises the sum,
so "the boiler was serviced" is near "who serviced the boiler" and far from "a trip to Lisbon";
CJK text, which has no spaces, is matched by its bigrams. It knows no meaning: tests of recall
by meaning keep the real model (the `real_model` marker in conftest.py).

Its key names these exact features: an index built with it records "fake-hashing-1" in its
manifest, so a store indexed here and then searched with MiniLM is rebuilt, never mixed.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

from memctl.index.embedders import Backend, register

NAME = "fake"
DIMENSION = 256
_WORD = re.compile(r"\w+")
# A bigram says less than a whole word: weighted below it, so texts sharing only common
# letter pairs ("th", "er") stay far apart.
_BIGRAM_WEIGHT = 0.3


class FakeEmbedder:
    key = "fake-hashing-1"
    source = "tests/fake_embedder.py"
    cosine_floor = 0.0
    cosine_ceiling = 1.0

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed(self, texts: list[str], progress=None) -> np.ndarray:
        vectors = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                vectors[row, _bucket(word)] += 1.0
                for start in range(len(word) - 1):
                    vectors[row, _bucket(word[start:start + 2])] += _BIGRAM_WEIGHT
        if progress:
            progress(len(texts))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)

    def unknown_share(self, text: str) -> float:
        return 0.0  # every word hashes somewhere: nothing is unknown to it


def _bucket(feature: str) -> int:
    # crc32, not hash(): the same bucket in every process, whatever PYTHONHASHSEED is.
    return zlib.crc32(feature.encode()) % DIMENSION


register(Backend(NAME, "hashed words and character bigrams, for tests", "tests/fake_embedder.py",
                 FakeEmbedder.cosine_floor, FakeEmbedder.cosine_ceiling, lambda settings: FakeEmbedder()))
