"""Settings (memctl/config.py): typed tables, the order they are read in, and their errors."""

from __future__ import annotations

import dataclasses
import os

import pytest

from memctl import config
from memctl.runtime import Runtime
from memctl.clock import Clock, parse_ts
from memctl.errors import InputError
from memctl.store.store import Store


@pytest.fixture
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in [n for n in os.environ if n.startswith("MEMCTL_")]:
        monkeypatch.delenv(name)
    return tmp_path / "xdg" / "memctl" / "config.toml"


@pytest.mark.real_model  # memctl's own default [embedding] model, not the tests' fake
def test_every_setting_is_a_typed_field_with_its_default(tmp_path, no_user_config):
    settings = config.load(tmp_path / "memctl.toml")
    assert settings == config.Settings()
    assert (settings.topics.keep_recent, settings.retrieval.recency_decay_days, settings.cache.consolidate_on) \
        == (20, 14.0, ["clear"])
    assert list(config.TABLES) == [f.name for f in dataclasses.fields(config.Settings)]
    with pytest.raises(AttributeError):
        _ = settings.topics.keep_recnt  # type: ignore[attr-defined]  # fails where it is read, no KeyError later
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.topics.keep_recent = 3  # type: ignore[misc]


def test_store_file_over_user_file_under_environment(tmp_path, no_user_config, monkeypatch):
    no_user_config.parent.mkdir(parents=True)
    no_user_config.write_text("[topics]\nllm_batch = 9\nkeep_recent = 4\n\n[cache]\nttl = 10\n")
    store_file = tmp_path / "memctl.toml"
    store_file.write_text("[topics]\nllm_batch = 7\n")
    monkeypatch.setenv("MEMCTL_CACHE_TTL", "12.5")
    settings = config.load(store_file)
    assert (settings.topics.llm_batch, settings.topics.keep_recent, settings.cache.ttl) == (7, 4, 12.5)
    assert isinstance(settings.cache.ttl, float)


def test_a_misspelt_key_names_its_file_and_line(tmp_path, no_user_config):
    store_file = tmp_path / "memctl.toml"
    store_file.write_text("[topics]\nllm_batch = 7\n\n[retrieval]\ncandidats = 5\n")
    with pytest.raises(InputError) as caught:
        config.load(store_file)
    assert (caught.value.source, caught.value.line) == (str(store_file), 5)
    assert caught.value.message.startswith("unknown key 'candidats' in [retrieval]; known: fusion, ")


@pytest.mark.parametrize("text, message", [
    ("[state]\nwindow_size = 4\n", "state.window_size must be 3, 5 or 10, got 4"),
    ("[cache]\nttl = 0\n", "cache.ttl must be above 0, got 0.0"),
    ("[topics]\nsplit_at = 'half'\n", "topics.split_at must be float, got 'half'"),
    ("[retrieval]\ntime_decay_days = 0\n", "retrieval.time_decay_days must be above 0, got 0.0"),
    ("[governance]\narchive_below = 0.5\n", "governance.archive_below must not exceed governance.low_priority_below"),
])
def test_limits_beside_the_fields_keep_their_messages(tmp_path, no_user_config, text, message):
    store_file = tmp_path / "memctl.toml"
    store_file.write_text(text)
    with pytest.raises(InputError, match=message.replace(".", r"\.").replace("(", r"\(")):
        config.load(store_file)


def test_the_limits_table_is_read_from_the_fields():
    assert config.LIMITS["state", "window_size"][1] == "3, 5 or 10"
    field = {f.name: f for f in dataclasses.fields(config.Ingest)}["max_text_bytes"]
    assert field.metadata["limit"] is config.LIMITS["ingest", "max_text_bytes"]


def test_the_old_retrieval_decay_names_are_read_with_a_note(tmp_path, no_user_config, monkeypatch, capsys):
    """They were called half-lives but are e-folding times: renamed, the numbers unchanged."""
    store_file = tmp_path / "memctl.toml"
    store_file.write_text("[retrieval]\nrecency_half_life_days = 10\ntime_decay_half_life_days = 30\n")
    settings = config.load(store_file)
    assert (settings.retrieval.recency_decay_days, settings.retrieval.time_decay_days) == (10.0, 30.0)
    config.load(store_file)  # the note is said once a process
    err = capsys.readouterr().err
    assert err.count("recency_half_life_days is deprecated, read as recency_decay_days") == 1
    assert err.count("time_decay_half_life_days is deprecated, read as time_decay_days") == 1
    store_file.write_text("[retrieval]\nrecency_half_life_days = 10\nrecency_decay_days = 12\n")
    assert config.load(store_file).retrieval.recency_decay_days == 12.0  # the new name wins
    monkeypatch.setenv("MEMCTL_RETRIEVAL_TIME_DECAY_HALF_LIFE_DAYS", "45")
    assert config.load(store_file).retrieval.time_decay_days == 45.0
    assert "$MEMCTL_RETRIEVAL_TIME_DECAY_HALF_LIFE_DAYS: [retrieval] time_decay_half_life_days is deprecated" \
        in capsys.readouterr().err


def test_kept_settings_follow_every_edit_variable_and_note(tmp_path, no_user_config, monkeypatch, capsys):
    """load() keeps what it read (a resident server loads every call); an edit of either file
    within the same tick and at the same size, a variable, and the notes of a new 'process' all
    still count."""
    store_file = tmp_path / "memctl.toml"
    store_file.write_text("[topics]\nllm_batch = 7\n")
    stamp = store_file.stat()
    assert config.load(store_file).topics.llm_batch == 7
    store_file.write_text("[topics]\nllm_batch = 8\n")
    os.utime(store_file, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the same size and time as before
    assert config.load(store_file).topics.llm_batch == 8
    no_user_config.parent.mkdir(parents=True)
    no_user_config.write_text("[topics]\nkeep_recent = 4\n")
    assert config.load(store_file).topics.keep_recent == 4
    no_user_config.write_text("[topics]\nkeep_recent = 5\n")
    assert config.load(store_file).topics.keep_recent == 5
    monkeypatch.setenv("MEMCTL_TOPICS_LLM_BATCH", "9")
    assert config.load(store_file).topics.llm_batch == 9
    monkeypatch.delenv("MEMCTL_TOPICS_LLM_BATCH")
    assert config.load(store_file).topics.llm_batch == 8
    store_file.write_text("[retrieval]\nrecency_half_life_days = 10\n\n[topics]\nllm_command = 'x'\n")
    capsys.readouterr()
    for _ in range(2):  # as a resident server's two calls: each a process to its user
        config.say_notes_again()
        assert config.load(store_file).retrieval.recency_decay_days == 10.0
        assert config.load(store_file, notes=False).retrieval.recency_decay_days == 10.0
    err = capsys.readouterr().err
    assert err.count("recency_half_life_days is deprecated") == 2
    assert err.count("[topics] llm_command is ignored") == 2


def test_a_runtime_reads_the_settings_once_and_pins_the_clock(tmp_path, no_user_config, monkeypatch):
    store_file = tmp_path / "memctl.toml"
    store_file.write_text("[topics]\nllm_batch = 7\n")
    monkeypatch.setenv("MEMCTL_NOW", "2026-11-24T10:00:00Z")
    runtime = Runtime(Store(tmp_path))
    assert runtime.settings.topics.llm_batch == 7
    store_file.write_text("[topics]\nllm_batch = 8\n")
    assert runtime.settings.topics.llm_batch == 7  # read once: a new Memory reads the change
    assert runtime.clock == Clock(parse_ts("2026-11-24T10:00:00Z"))
    assert runtime.clock.seconds() == parse_ts("2026-11-24T10:00:00Z").timestamp()


def test_every_operation_takes_the_time_of_its_memorys_runtime(tmp_path, monkeypatch):
    """Nothing below the API reads MEMCTL_NOW behind the runtime's back: a Memory made at a pinned
    time writes that time everywhere, whatever the environment says by the time it writes."""
    from memctl.api import Memory

    monkeypatch.setenv("MEMCTL_NOW", "2026-11-24T10:00:00Z")
    memory = Memory(tmp_path / "store")
    monkeypatch.setenv("MEMCTL_NOW", "2031-01-01T00:00:00Z")  # what a module reading the clock itself would see
    memory.ingest('{"text": "Kestrel uses PostgreSQL for orders", "section": "Decisions"}\n', kind="memory")
    memory.ingest('{"text": "Kestrel deploys on Fridays", "section": "Decisions"}\n', kind="memory", pending=True)
    memory.ingest(b"".join(b'{"session": "s", "role": "user", "text": "which database holds the orders %d"}\n' % n
                           for n in range(6)), fmt="jsonl")
    assert memory.search("which database does Kestrel use", k=3, mode="bm25")
    memory.state.record(["Decisions"])
    memory.review.confirm([memory.review.pending().rows[0]["id"]])
    memory.topics.split("s", force=True, keep_recent=0)
    memory.forget([memory.search("Fridays", k=1, mode="bm25")[0].record_id], yes=True)
    written = b"".join(path.read_bytes() for path in (tmp_path / "store").rglob("*")
                       if path.is_file() and path.suffix not in (".db", ".npy", ".lock"))
    assert b"2031" not in written
    assert written.count(b"2026-11-24T10:00:00Z") >= 8
