"""MEMORY.md: byte-exact round trips, tolerant parsing, problems reported by line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from memctl.store import memoryfile
from memctl.store.memoryfile import Entry


def test_fixture_round_trips_byte_for_byte():
    text = (FIXTURES / "demo" / "MEMORY.md").read_text(encoding="utf-8")
    doc = memoryfile.parse(text)
    assert doc.render() == text
    assert doc.issues == []
    assert [e.id for e in doc.entries][:3] == ["mem-about-role", "mem-answer-language", "mem-kestrel-db"]
    assert doc.sections() == ["About Mei", "重要決定", "待辦"]


def test_fields_are_typed_and_text_is_separate():
    doc = memoryfile.parse((FIXTURES / "demo" / "MEMORY.md").read_text(encoding="utf-8"))
    core = doc.find("mem-answer-language")
    assert core.get("is_core") is True
    assert core.get("enforcement_level") == "hard"
    assert core.text == "Always answer in English unless Mei writes in Chinese or asks for Chinese."
    db = doc.find("mem-kestrel-db")
    assert db.section == "重要決定"
    assert db.get("importance") == 0.9 and db.get("user_weight") == 7
    assert db.get("scope") == "project:kestrel"


def test_hand_written_items_become_entries_with_stable_ids():
    text = "## 待辦\n\n- Book the repair\n- 寄報表\n  continued line\n\nA paragraph\nof two lines.\n"
    doc = memoryfile.parse(text)
    assert [e.text for e in doc.entries] == ["Book the repair", "寄報表\n  continued line",
                                             "A paragraph\nof two lines."]
    assert all(not e.annotated and e.id.startswith("md-") for e in doc.entries)
    assert [e.id for e in memoryfile.parse(text).entries] == [e.id for e in doc.entries]
    assert doc.render() == text


def test_hand_edits_of_any_shape_round_trip():
    text = (
        "Preamble without heading\r\n\r\n# Title\n## A ##\n<!-- memory\nid: x1\nsummary: s\n"
        "memory_class: mixed\nscope: global\n-->\n\n\ntext after blank lines\n```\n# not a heading\n```\n"
        "   \n## B\n<!-- memory\nid: x2\n"  # unclosed block at the end
    )
    doc = memoryfile.parse(text)
    assert doc.render() == text
    assert doc.find("x1").text == "text after blank lines\n```\n# not a heading\n```"
    assert doc.find("x1").section == "A"
    assert any("never closed" in i.message for i in doc.issues)


def test_malformed_metadata_is_reported_with_its_line_and_kept():
    text = ("## S\n\n<!-- memory\nid: m1\nsummary: ok\nmemory_class: opinion\nscope: team:x\n"
            "user_weight: 11\nfavourite: blue\nthis line has no colon\nsupersedes: [\"a\"\n-->\nbody\n")
    doc = memoryfile.parse(text)
    found = {(i.line, i.message.split(":")[0]) for i in doc.issues}
    assert (6, "field 'memory_class'") in found
    assert (7, "field 'scope'") in found
    assert (8, "field 'user_weight'") in found
    assert (9, "field 'favourite'") in found
    assert any(i.line == 10 and "not 'key: value'" in i.message for i in doc.issues)
    assert any(i.line == 11 and "supersedes" in i.message for i in doc.issues)
    assert doc.render() == text  # nothing dropped
    assert doc.find("m1").get("favourite") == "blue"


def test_changing_one_entry_leaves_every_other_byte_alone():
    text = (FIXTURES / "demo" / "MEMORY.md").read_text(encoding="utf-8")
    doc = memoryfile.parse(text)
    doc.find("mem-kestrel-db").set("status", "deprecated")
    out = doc.render()
    changed = [line for line in out.splitlines() if line not in text.splitlines()]
    assert changed == ["status: deprecated"]
    assert memoryfile.parse(out).find("mem-kestrel-db").get("status") == "deprecated"


def test_adding_entries_creates_sections_and_keeps_them_apart():
    doc = memoryfile.parse("## Notes\n\nhand written\n## Other\n")
    doc.add(Entry("first", {"id": "a", "summary": "a", "memory_class": "mixed", "scope": "global"}, "Notes"))
    doc.add(Entry("second", {"id": "b", "summary": "b", "memory_class": "mixed", "scope": "global"}, "New"))
    out = doc.render()
    again = memoryfile.parse(out)
    assert [(e.id, e.section) for e in again.entries] == [
        (again.entries[0].id, "Notes"), ("a", "Notes"), ("b", "New")]
    assert again.entries[0].text == "hand written"
    assert "hand written\n\n<!-- memory\nid: a\n" in out
    assert "## New\n\n<!-- memory\nid: b" in out


def test_body_lines_that_look_like_structure_are_escaped():
    doc = memoryfile.parse("")
    text = "# looks like a heading\n<!-- memory\n\\already escaped"
    doc.add(Entry(text, {"id": "e", "summary": "e", "memory_class": "mixed", "scope": "global"}, "S"))
    again = memoryfile.parse(doc.render())
    assert [e.id for e in again.entries] == ["e"]
    assert again.find("e").text == text
    assert again.sections() == ["S"]


field_values = st.fixed_dictionaries(
    {"id": st.from_regex(r"[a-z0-9-]{1,20}", fullmatch=True),
     "summary": st.text(min_size=1, max_size=50).filter(lambda s: "\n" not in s and "\r" not in s),
     "memory_class": st.sampled_from(memoryfile.MEMORY_CLASSES),
     "scope": st.sampled_from(["global", "project:a", "lang:zh"])},
    optional={"user_weight": st.integers(0, 10), "importance": st.floats(0, 1),
              "is_core": st.booleans(), "supersedes": st.lists(st.text(max_size=5), max_size=3),
              "claims": st.lists(st.text(max_size=10), max_size=2), "canonical_topic": st.text(max_size=20)},
)
body = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               min_size=1, max_size=200).map(str.strip).filter(bool)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(field_values, body, st.sampled_from(["A", "重要決定", "B c"])), min_size=1, max_size=5,
                unique_by=lambda t: t[0]["id"]))
def test_written_entries_read_back_exactly(entries):
    doc = memoryfile.parse("")
    for fields, text, section in entries:
        doc.add(Entry(text, dict(fields), section))
    out = doc.render()
    again = memoryfile.parse(out)
    assert again.render() == out
    got = {e.id: (e.fields, e.text, e.section) for e in again.entries}
    for fields, text, section in entries:
        assert got[fields["id"]] == (fields, text, section)
