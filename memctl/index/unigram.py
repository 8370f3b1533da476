"""A SentencePiece unigram tokenizer that opens in a millisecond, for a query or a few texts.

`tokenizers` reads e5's 250,002-piece vocabulary from tokenizer.json in about
0.75 s of CPU (the whole cost of a cold query was 0.2 s with MiniLM). Here the
pieces sit in a hash table written once as .npy files and memory-mapped:
opening costs about a millisecond, a lookup about a microsecond, so a query
of a few hundred characters is tokenised in a few ms. A thousand texts are
faster through `tokenizers` once it is loaded, which is what Embedder does
beyond FEW_TEXTS. It gives the same ids as the tokenizer.json that
e5.py writes (same normalisation, a space-split Viterbi over the same scores,
consecutive unknown characters fused into one <unk>), checked on the
benchmark's English and Chinese texts (tests/test_embedding_e5.py).
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from pathlib import Path

import numpy as np

FOLDER = "unigram"  # in a model directory: the tables below, which Embedder then uses for a few texts
_FILES = ("blob", "offsets", "scores", "table")
_SPACE = "▁"
_UNK_PENALTY = 10.0  # an unknown character scores the lowest piece's score minus this (SentencePiece's rule)


def write_tables(folder: Path, pieces: list[str], scores: np.ndarray, dropped: str, spaces: str,
                 special: dict[str, int]) -> None:
    """The tables of `pieces`: their UTF-8 bytes end to end, offsets, scores, and an open-addressing
    hash table (crc32 of the bytes, linear probing) of piece id + 1."""
    folder.mkdir(parents=True, exist_ok=True)
    encoded = [piece.encode() for piece in pieces]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    size = 1 << (2 * len(encoded) - 1).bit_length()
    table = np.zeros(size, dtype=np.int32)
    for piece_id, data in enumerate(encoded):
        if piece_id in special.values():
            continue  # <s>, </s>, <pad>, <unk> are never read from text
        slot = zlib.crc32(data) & (size - 1)
        while table[slot]:
            slot = (slot + 1) & (size - 1)
        table[slot] = piece_id + 1
    np.save(folder / "blob.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))
    np.save(folder / "offsets.npy", offsets)
    np.save(folder / "scores.npy", np.asarray(scores, dtype=np.float32))
    np.save(folder / "table.npy", table)
    (folder / "normalise.txt").write_text(
        "\n".join([dropped.encode("unicode_escape").decode(), spaces.encode("unicode_escape").decode()]
                  + [f"{name} {piece_id}" for name, piece_id in special.items()]) + "\n")


class Unigram:
    def __init__(self, folder: Path, max_length: int):
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in _FILES}
        self._blob = arrays["blob"]
        self._offsets, self._scores, self._table = arrays["offsets"], arrays["scores"], arrays["table"]
        self._mask = len(self._table) - 1
        lines = (folder / "normalise.txt").read_text().splitlines()
        dropped, spaces = (line.encode().decode("unicode_escape") for line in lines[:2])
        self._dropped = re.compile(f"[{re.escape(dropped)}]") if dropped else None
        self._spaces = re.compile(f"[{re.escape(spaces)}]") if spaces else None
        special = {name: int(piece_id) for name, piece_id in (line.split() for line in lines[2:])}
        self.bos, self.eos, self.unk = special["<s>"], special["</s>"], special["<unk>"]
        self._unk_score = float(np.min(self._scores)) - _UNK_PENALTY
        self._longest = int(np.max(np.diff(self._offsets)))  # in bytes
        self._max_length = max_length
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        """<s>, the text's piece ids (at most max_length - 2), </s>."""
        ids: list[int] = []
        for word in self._words(text):
            found = self._cache.get(word)
            if found is None:
                found = self._cache[word] = self._viterbi(word)
            ids.extend(found)
        return [self.bos, *ids[:self._max_length - 2], self.eos]

    def _words(self, text: str) -> list[str]:
        if self._dropped:
            text = self._dropped.sub("", text)
        if self._spaces:
            text = self._spaces.sub(" ", text)
        text = re.sub(" {2,}", " ", unicodedata.normalize("NFKC", text)).replace(" ", _SPACE)
        if not text:
            return []
        if not text.startswith(_SPACE):
            text = _SPACE + text
        return [_SPACE + word for word in text.split(_SPACE)[1:]]

    def _piece(self, data: bytes) -> int:
        slot = zlib.crc32(data) & self._mask
        while True:
            entry = int(self._table[slot])
            if not entry:
                return -1
            start, end = self._offsets[entry - 1], self._offsets[entry]
            if end - start == len(data) and self._blob[start:end].tobytes() == data:
                return entry - 1
            slot = (slot + 1) & self._mask

    def _viterbi(self, word: str) -> list[int]:
        """The best-scoring split of one space-led word into pieces."""
        encoded = [c.encode() for c in word]
        count = len(word)
        best = [0.0] + [-np.inf] * count
        back: list[tuple[int, int]] = [(0, 0)] * (count + 1)  # (start, piece id or -1 for unknown)
        for start in range(count):
            if best[start] == -np.inf:
                continue
            data = b""
            for end in range(start + 1, count + 1):
                data += encoded[end - 1]
                if len(data) > self._longest:
                    break
                piece = self._piece(data)
                if piece >= 0:
                    score = best[start] + float(self._scores[piece])
                    if score > best[end]:
                        best[end], back[end] = score, (start, piece)
            score = best[start] + self._unk_score
            if score > best[start + 1]:
                best[start + 1], back[start + 1] = score, (start, -1)
        ids: list[int] = []
        end = count
        while end > 0:
            start, piece = back[end]
            if piece < 0 and ids and ids[-1] == -1:
                pass  # consecutive unknown characters make one <unk>
            else:
                ids.append(piece)
            end = start
        return [self.unk if piece < 0 else piece for piece in reversed(ids)]
