"""The ONNX model cache: what the first process saves, later processes load unchanged."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from memctl.index import embedding

# The bundled model's own files, sessions and vectors are what these tests are about.
pytestmark = pytest.mark.real_model

TEXTS = ["Kestrel uses PostgreSQL for the recipe metadata.", "What did Caroline research for her adoption?",
         "淡水分店的店長是陳小姐。", "a"]


def test_the_optimised_graph_is_saved_once_with_its_weights_beside_it(tmp_path, monkeypatch):
    directory = embedding.model_dir("")
    export = embedding.ensure_onnx(directory, embedding.model_key(directory), "int8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = embedding.cache_dir() / embedding.model_key(directory)
    target.mkdir(parents=True)
    os.symlink(export, target / export.name)  # the export itself (10 s of torch) is not what is tested here

    first = embedding.Embedder(directory, threads=1, precision="int8").embed(TEXTS)
    saved = target / "model.int8.optimised"
    graph, weights = saved / "model.onnx", saved / "weights.bin"
    assert graph.stat().st_size < 1_000_000 < 20_000_000 < weights.stat().st_size
    assert sorted(p.name for p in target.iterdir()) == ["model.int8.onnx", "model.int8.optimised"]  # no partial left
    stamps = graph.stat().st_mtime_ns, weights.stat().st_mtime_ns

    again = embedding.Embedder(directory, threads=1, precision="int8").embed(TEXTS)
    assert np.array_equal(first, again)
    assert (graph.stat().st_mtime_ns, weights.stat().st_mtime_ns) == stamps  # loaded, not saved again


def test_a_session_opened_for_a_few_texts_gives_the_vectors_of_one_opened_for_many():
    directory = embedding.model_dir("")
    many = embedding.Embedder(directory, threads=1, precision="int8")
    many.embed(TEXTS * embedding.FEW_TEXTS)  # opens its session with the weights prepacked
    few = embedding.Embedder(directory, threads=1, precision="int8")
    few.embed_queries(TEXTS[:1])  # without
    for text in TEXTS:
        assert np.array_equal(few.embed_queries([text]), many.embed([text])), text


def test_a_long_lived_memory_loads_the_model_once_for_its_updates_and_searches(tmp_path, monkeypatch):
    """An agent's server ingests a turn, then searches, turn after turn: one ONNX session for all."""
    import onnxruntime

    from memctl import Memory
    from memctl.index import embedders

    opened = []

    class CountedSession(onnxruntime.InferenceSession):
        def __init__(self, *args, **kwargs):
            opened.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", CountedSession)
    monkeypatch.setattr(embedders, "_OPENED", {})  # what earlier tests of this process opened
    memory = Memory(tmp_path / ".memory")
    for turn, text in enumerate(["Kestrel uses PostgreSQL for the recipe metadata.",
                                 "The boiler in the basement was serviced on Monday.",
                                 "Ana is learning the cello."]):
        memory.ingest(f'{{"id": "t{turn}", "text": "{text}"}}', fmt="jsonl")
        assert memory.index().embedded == 1
        assert memory.search("which database does Kestrel use")[0].text.startswith("Kestrel")
    assert len(opened) == 1
    # Other settings are another embedder: a rebuild's many texts run on [embedding] threads.
    assert embedders.open_embedder(replace(memory_settings(memory), threads=3)) is not \
        embedders.open_embedder(replace(memory_settings(memory), threads=1))


def memory_settings(memory):
    from memctl import config

    return config.load(memory.store.config_file).embedding


def test_several_texts_run_on_threads_and_one_on_query_threads_with_the_same_vectors(monkeypatch):
    """A server's update of 20 messages runs on two threads; a query stays on one."""
    import onnxruntime

    threads = []

    class CountedSession(onnxruntime.InferenceSession):
        def __init__(self, path, options, *args, **kwargs):
            threads.append(options.intra_op_num_threads)
            super().__init__(path, options, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", CountedSession)
    directory = embedding.model_dir("")
    both = embedding.Embedder(directory, threads=2, query_threads=1, precision="int8")
    queries = [both.embed_queries([text]) for text in TEXTS]
    assert threads == [1]
    batch = both.embed(TEXTS)
    one = both.embed(TEXTS[:1])
    assert threads == [1, 2]  # one session each, kept
    alone = embedding.Embedder(directory, threads=1, precision="int8")
    assert np.array_equal(batch, alone.embed(TEXTS))  # a batch's vectors do not depend on its threads
    assert np.array_equal(one, queries[0]) and threads == [1, 2, 1]


def test_a_model_named_by_a_relative_path_is_the_one_under_the_working_directory(tmp_path, monkeypatch):
    """Embedders are kept for the process's life (a resident server's), and its calls come from
    many directories: `model = "./model"` in two of them is two models."""
    from memctl.index import embedders

    class Opened:
        pass

    made = []
    bundled = replace(embedders.BACKENDS[embedders.BUNDLED], open=lambda embedding: made.append(os.getcwd()) or Opened())
    monkeypatch.setitem(embedders.BACKENDS, embedders.BUNDLED, bundled)
    monkeypatch.setattr(embedders, "_OPENED", {})
    from memctl.config import Embedding

    opened = []
    for folder in ("one", "two", "one"):
        (tmp_path / folder).mkdir(exist_ok=True)
        monkeypatch.chdir(tmp_path / folder)
        opened.append(embedders.open_embedder(Embedding(model="./model")))
    assert opened[0] is opened[2] and opened[0] is not opened[1]
    assert made == [str(tmp_path / "one"), str(tmp_path / "two")]
