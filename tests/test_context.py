"""memctl context, graded activation, amnesia cues, the tuning log and the daily review (T4-T7, T11, T12, P8)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from conftest import snapshot
from memctl import config
from memctl.text.tokens import count_tokens
from memctl.topics import activation
from test_topics import HOTEL, TAXI, WEATHER, session_lines, topic_files

SETTINGS = config.Topics()
FEW_RECENT = {"MEMCTL_TOPICS_KEEP_RECENT": "2", "MEMCTL_NOW": "2026-11-21T09:00:00Z"}


# -- T6: the formulas ------------------------------------------------------------

@pytest.mark.parametrize("active, activate, dormant", [(3, 0.29, 0.145), (10, 0.50, 0.25), (18, 0.74, 0.37)])
def test_thresholds_follow_the_formula(active, activate, dormant):
    got = activation.thresholds(active, SETTINGS)
    assert got == pytest.approx((0.2 + 0.03 * active, (0.2 + 0.03 * active) / 2))
    assert got == pytest.approx((activate, dormant))


def test_sliding_average_is_the_mean_of_the_last_five_scores():
    part: dict = {}
    for score in (1.0, 0.0, 0.2, 0.4, 0.6, 0.8):
        averages = activation.add_scores(part, {"t-a": score}, SETTINGS.score_window)
    assert part["topics"]["t-a"]["scores"] == [0.0, 0.2, 0.4, 0.6, 0.8]
    assert averages["t-a"] == pytest.approx(0.4) and part["rounds"] == 6


def topics_with(averages: list[float], state: str = "active") -> tuple[dict, dict]:
    ids = [f"t-{n:02d}" for n in range(len(averages))]
    return {t: state for t in ids}, dict(zip(ids, averages))


@pytest.mark.parametrize("active", [3, 10, 18])
def test_an_active_topic_goes_dormant_below_half_the_activation_threshold(active):
    _, dormancy = activation.thresholds(active, SETTINGS)
    states, averages = topics_with([0.9] * (active - 2) + [dormancy + 0.01, dormancy - 0.01])
    # active_target out of the way: this case is about the dormancy threshold alone
    decision = activation.decide(states, averages, set(states), replace(SETTINGS, active_min=1, active_target=20))
    assert decision.made_dormant == ["t-%02d" % (active - 1)]
    assert "t-%02d" % (active - 2) in decision.active  # just over: stays (hysteresis)


@pytest.mark.parametrize("active", [3, 10, 18])
def test_a_dormant_topic_needs_the_activation_threshold_to_come_back(active):
    threshold, _ = activation.thresholds(active, SETTINGS)
    states, averages = topics_with([0.95] * active)
    states.update({"t-over": "dormant", "t-under": "dormant", "t-unscored": "dormant"})
    averages.update({"t-over": threshold + 0.01, "t-under": threshold - 0.01, "t-unscored": 0.99})
    decision = activation.decide(states, averages, set(states) - {"t-unscored"}, SETTINGS)
    assert decision.activated == ["t-over"]  # every case stays under active_max (20)
    assert "t-under" not in decision.active and "t-unscored" not in decision.active


def test_lenient_with_few_active_strict_with_many():
    # The same average 0.3: enough to come back with 2 active (threshold 0.26), not with 18 (0.74).
    few_states, few = topics_with([0.9, 0.9])
    many_states, many = topics_with([0.9] * 18)
    for states, averages in ((few_states, few), (many_states, many)):
        states["t-x"], averages["t-x"] = "dormant", 0.3
    assert "t-x" in activation.decide(few_states, few, set(few_states), SETTINGS).activated
    assert "t-x" not in activation.decide(many_states, many, set(many_states), SETTINGS).activated


def test_active_count_stays_within_its_bounds():
    states, averages = topics_with([0.99] * 25)
    assert len(activation.decide(states, averages, set(states), SETTINGS).active) == SETTINGS.active_max
    states, averages = topics_with([0.0] * 5)
    kept = activation.decide(states, averages, set(states), SETTINGS)
    assert len(kept.active) == SETTINGS.active_min and len(kept.made_dormant) == 2
    # Above active_target only topics over the activation threshold keep a place past that rank.
    threshold, dormancy = activation.thresholds(12, SETTINGS)
    states, averages = topics_with([0.9] * 10 + [(threshold + dormancy) / 2] * 2)
    assert activation.decide(states, averages, set(states), SETTINGS).made_dormant == ["t-10", "t-11"]


@pytest.mark.parametrize("message, cue", [("你忘了我的生日嗎", "你忘了"), ("我之前說過我不吃辣", "我之前說過"),
                                          ("We talked about this before, remember?", "We talked about this before"),
                                          ("did you forget the hotel?", "did you forget"),
                                          ("what is the weather tomorrow?", None)])
def test_amnesia_cues(message, cue):
    assert activation.amnesia_cue(message) == cue


# -- memctl context through real processes ---------------------------------------

SPLIT_ON = {"MEMCTL_NOW": "2026-11-20T10:00:00Z"}  # the daily review tests' topics, dated


def split_three_subjects(run, store_dir, extra_env: dict | None = None) -> dict[str, str]:
    """Weather, hotel, taxi split into topics (the last two taxi messages stay recent); returns
    name-word -> topic id. `extra_env`: the ingest's and split's (MEMCTL_NOW, to date the topics)."""
    assert run("ingest", "-", input=session_lines(WEATHER + HOTEL + TAXI), env=extra_env).returncode == 0
    done = run("split", "--session", "s1", "--force", "--keep-recent", "2", "--json", env=extra_env)
    assert done.returncode == 0, done.stderr
    ids = {}
    for tid, records in topic_files(store_dir).items():
        text = " ".join(r.get("text", "") for r in records)
        ids["weather" if "Redwood" in text else "hotel" if "ACG-42" in text else "taxi"] = tid
    return ids


def context_json(run, *args, env=FEW_RECENT):
    done = run("context", "--session", "s1", "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr.decode()


def shown_ids(result: dict, kind: str | None = None) -> list[str]:
    return [m["id"] for s in result["sections"] if kind in (None, s["kind"]) for m in s["messages"]]


@pytest.mark.real_model
def test_context_puts_the_relevant_topic_first_and_no_message_twice(run, store_dir):
    ids = split_three_subjects(run, store_dir)
    result, _ = context_json(run, "--message", "What was the reference of the Acorn Guest House booking?",
                             "--budget", "2000")
    kinds = [s["kind"] for s in result["sections"]]
    assert kinds[0] == "found" and kinds[-1] == "recent"
    topics = [s for s in result["sections"] if s["kind"] == "topic"]
    assert topics[0]["topic_id"] == ids["hotel"] and topics[0]["score"] >= 0.7
    found = [m for s in result["sections"] if s["kind"] == "found" for m in s["messages"]]
    hits = [m for m in found if m["score"] is not None]  # a hit's reply, shown after it, has no score
    assert max(hits, key=lambda m: m["score"])["id"] == "m7"  # the message holding ACG-42, verbatim
    order = [int(m["id"][1:]) for m in found]
    assert order[0] == max(order) and order.index(7) < order.index(6)  # newest first (a reply after its hit)
    assert result["sections"][-1]["messages"][-1]["text"].startswith("What was the reference")
    every = shown_ids(result)
    assert len(every) == len(set(every))
    assert result["tokens"] <= result["budget"] == 2000 and result["dropped"] == []
    weather = [s for s in result["sections"] if s.get("topic_id") == ids["weather"]]
    assert not weather  # below 0.3: not in the context


def test_text_output_is_what_the_json_describes_within_the_budget(run, store_dir, tmp_path):
    split_three_subjects(run, store_dir)
    system = tmp_path / "system.md"
    system.write_text("You are a travel assistant.")
    question = "What was the reference of the Acorn Guest House booking?"
    for budget in (80, 120, 250, 4000):
        done = run("context", "--session", "s1", "--message", question, "--system", str(system),
                   "--budget", str(budget), "--no-record", env=FEW_RECENT)
        assert done.returncode == 0, done.stderr
        text = done.stdout.decode()
        assert count_tokens(text) <= budget
        assert text.startswith("You are a travel assistant.") and question in text
        result, said = context_json(run, "--message", question, "--system", str(system), "--budget", str(budget),
                                    "--no-record")
        assert result["tokens"] == count_tokens(text)
        # Nothing dropped silently: every candidate message is shown or dropped, and stderr names each drop.
        recent = {"m10", "m11"}
        assert recent <= set(shown_ids(result)) | {d.get("message_id") for d in result["dropped"]}
        for dropped in result["dropped"]:
            assert (dropped.get("message_id") or f"summary of {dropped['topic_id']}") in said
        for section in result["sections"]:
            for m in section["messages"]:
                assert m["id"] not in {d.get("message_id") for d in result["dropped"]}


def test_each_section_names_a_day_once_and_each_message_its_time(run, store_dir):
    split_three_subjects(run, store_dir)
    question = "What was the reference of the Acorn Guest House booking?"
    done = run("context", "--session", "s1", "--message", question, "--budget", "4000", "--no-record", env=FEW_RECENT)
    assert done.returncode == 0, done.stderr
    result, _ = context_json(run, "--message", question, "--budget", "4000", "--no-record")
    blocks = done.stdout.decode().split("\n\n")
    assert len(blocks) == len(result["sections"])
    for block, section in zip(blocks, result["sections"]):
        lines = block.splitlines()
        if not section["messages"]:
            continue  # a topic shown by its summary alone
        # Every message of the session was said on 2026-11-20 (session_lines): one day line a section,
        # before its first message, then each message with its time of day to the minute.
        assert lines.count("[2026-11-20]") == 1 and lines[1] == "[2026-11-20]"
        for m in section["messages"]:
            stamp = m["ts"][11:16]
            assert any(line.startswith(f"[{stamp}] ") and f"({m['id']}): " in line for line in lines)
        assert not any("2026-11-20T" in line for line in lines)


def test_a_time_is_said_once_a_run_of_lines_of_its_minute(run, store_dir):
    said = [("m0", "10:00:05", "Did you book the Acorn Guest House for Friday?"),
            ("m1", "10:00:40", "Yes, the Acorn Guest House is booked, reference ACG-42."),
            ("m2", "10:02:10", "Great, what time is check-in at the Acorn Guest House?"),
            ("m3", "10:02:30", "Check-in at the Acorn Guest House is from 3 pm.")]
    lines = "".join(json.dumps({"id": mid, "session": "s1", "role": ("user", "assistant")[n % 2], "text": text,
                                "ts": f"2026-11-20T{at}Z"}) + "\n" for n, (mid, at, text) in enumerate(said))
    assert run("ingest", "-", input=lines).returncode == 0
    done = run("context", "--session", "s1", "--message", "When is check-in at the Acorn Guest House?",
               "--budget", "4000", "--no-record")
    assert done.returncode == 0, done.stderr
    minute_of = {mid: at[:5] for mid, at, _ in said}
    unstamped = 0
    for block in done.stdout.decode().split("\n\n"):
        before = None  # the minute of the message line before, in this section
        for line in block.splitlines():
            mid = next((m for m in minute_of if f"({m}): " in line), None)
            if mid is None:
                before = None if line.startswith("[2026-") else before
                continue
            # A line says its time when the line before was of another minute, and only then.
            assert line.startswith(f"[{minute_of[mid]}] ") == (minute_of[mid] != before), line
            unstamped += minute_of[mid] == before
            before = minute_of[mid]
    assert unstamped >= 1
    assert count_tokens(done.stdout.decode()) <= 4000


def test_an_excerpt_is_the_window_around_the_words_of_the_message():
    from memctl.context.turn import window

    filler = " ".join(f"Sentence {n} talks about the weather in spring." for n in range(60))
    text = filler + " The Acorn Guest House reference is ACG-42. " + filler
    shown = window(text, "What is the Acorn Guest House reference?", 60)
    assert "The Acorn Guest House reference is ACG-42." in shown and count_tokens(shown) <= 60
    assert text.startswith(window(text, "zebra crossing", 60))  # no word shared: the opening
    assert count_tokens(window(text, "zebra crossing", 60)) <= 60


def test_a_long_message_is_shown_by_an_excerpt_and_the_new_message_whole(run, store_dir):
    # The booking's reply runs on for ~600 tokens (as an assistant's reply does); the question too.
    long_reply = HOTEL[3] + " " + " ".join(f"Breakfast is served from {7 + n % 3} in room {n}." for n in range(80))
    texts = WEATHER + HOTEL[:3] + [long_reply] + TAXI
    assert run("ingest", "-", input=session_lines(texts)).returncode == 0
    assert run("split", "--session", "s1", "--force", "--keep-recent", "2").returncode == 0
    question = "What was the reference of the Acorn Guest House booking? " + "Please check carefully. " * 60
    result, _ = context_json(run, "--message", question, "--budget", "4000", "--no-record")
    shown = {m["id"]: m for s in result["sections"] for m in s["messages"]}
    assert shown["m7"]["excerpt"] is True and "ACG-42" in shown["m7"]["text"]
    assert count_tokens(shown["m7"]["text"]) <= 200 < count_tokens(long_reply)
    assert all("excerpt" not in m for mid, m in shown.items() if mid != "m7")  # the short ones whole
    new = result["sections"][-1]["messages"][-1]
    assert new["text"] == question and "excerpt" not in new  # the new message whole
    done = run("context", "--session", "s1", "--message", question, "--budget", "4000", "--no-record", env=FEW_RECENT)
    assert "(m7): Booked the Acorn Guest House: reference ACG-42" in done.stdout.decode()
    assert " […]" in done.stdout.decode() and count_tokens(done.stdout.decode()) <= 4000


def test_a_budget_below_the_new_message_is_an_error(run, store_dir):
    split_three_subjects(run, store_dir)
    done = run("context", "--session", "s1", "--message", "word " * 50, "--budget", "10")
    assert done.returncode == 2 and b"--budget" in done.stderr and done.stdout == b""


@pytest.mark.real_model
def test_no_record_changes_nothing_and_recording_logs_the_round(run, store_dir):
    split_three_subjects(run, store_dir)
    run("index")
    before = snapshot(store_dir)
    context_json(run, "--message", "hotel booking reference?", "--no-record")
    assert snapshot(store_dir) == before
    context_json(run, "--message", "hotel booking reference?")
    state = json.loads((store_dir / "topics" / "activation.json").read_text())
    assert state["rounds"] == 1 and len(state["topics"]) == 3
    assert not (store_dir / "index_state.json").exists()  # the section window's file: not topics' to write
    events = [json.loads(line) for line in run("topics", "log", "--json").stdout.splitlines()]
    assert events[-1]["event"] == "round" and set(events[-1]["scores"]) == set(state["topics"])
    assert run("topics", "log", "--since", "2999-01-01").returncode == 1


def write_topic(store_dir: Path, topic_id: str, name: str, messages: list[dict], state: str,
                summary: str | None = None) -> None:
    """A topic file as docs/topics.md describes it (header first, then the messages)."""
    header = {"type": "topic", "id": topic_id, "name": name, "summary": summary or " ".join(m["text"] for m in messages),
              "parent": None, "children": [], "state": state, "created": "2026-11-20T10:00:00Z",
              "updated": "2026-11-20T10:30:00Z", "messages": len(messages), "tokens": 50}
    (store_dir / "topics").mkdir(parents=True, exist_ok=True)
    (store_dir / "topics" / f"{topic_id}.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in [header, *({"type": "message", **m} for m in messages)]))


def make_dormant(store_dir: Path, topic_id: str) -> None:
    path = store_dir / "topics" / f"{topic_id}.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    header = next(r for r in reversed(records) if r["type"] == "topic")
    path.write_bytes(path.read_bytes() + orjson.dumps({**header, "state": "dormant"}) + b"\n")


def test_an_amnesia_cue_reactivates_the_dormant_topic_that_holds_the_answer(run, store_dir):
    ids = split_three_subjects(run, store_dir)
    make_dormant(store_dir, ids["hotel"])
    plain, _ = context_json(run, "--message", "What was the Acorn Guest House booking reference?", "--no-record")
    assert "m7" not in shown_ids(plain, "topic")  # dormant: not evaluated (the search may still find m7)
    assert ids["hotel"] not in {s.get("topic_id") for s in plain["sections"]}
    result, said = context_json(run, "--message", "Did you forget the Acorn Guest House booking reference?")
    assert [a["topic_id"] for a in result["activated"]] == [ids["hotel"]]
    assert result["activated"][0]["reason"] == "amnesia cue" and "m7" in shown_ids(result)
    assert ids["hotel"] in {s.get("topic_id") for s in result["sections"]}
    assert f"activated topic {ids['hotel']}" in said
    assert json.loads(run("topics", "show", ids["hotel"], "--json").stdout)["topic"]["state"] == "active"
    log = [json.loads(line) for line in run("topics", "log", "--json").stdout.splitlines()]
    assert {"event": "activated", "topic": ids["hotel"], "reason": "amnesia cue"}.items() <= log[-1].items()


def test_an_unclear_amnesia_cue_is_reported_with_its_candidates(run, store_dir):
    cambridge = ["Find me a guest house in Cambridge for Friday.", "The Acorn Guest House has rooms on Friday."]
    oxford = ["Find me a guest house in Oxford for Friday.", "The Oak Guest House has rooms on Friday."]
    filler = ["Thanks!", "You are welcome."]
    run("ingest", "-", input=session_lines(cambridge + oxford + WEATHER + filler))
    messages = [json.loads(line) for line in session_lines(cambridge + oxford + WEATHER + filler).splitlines()]
    write_topic(store_dir, "t-cambridge", "guest house · cambridge", messages[0:2], "dormant")
    write_topic(store_dir, "t-oxford", "guest house · oxford", messages[2:4], "dormant")
    write_topic(store_dir, "t-weather", "redwood · rain", messages[4:8], "active")
    result, said = context_json(run, "--message", "You forgot the guest house for Friday?")
    assert result["activated"] == []
    assert len(result["ambiguous"]) == 1 and len(result["ambiguous"][0]["candidates"]) >= 2
    assert "not clear which topic is meant" in said


def test_topics_activate_by_id_and_by_query(run, store_dir):
    ids = split_three_subjects(run, store_dir)
    make_dormant(store_dir, ids["hotel"])
    make_dormant(store_dir, ids["weather"])
    found = run("topics", "activate", "rain in Redwood City", "--json")
    assert found.returncode == 0, found.stderr
    activated = json.loads(found.stdout)["activated"]
    assert activated[0]["topic_id"] == ids["weather"]  # the best match first; with none active, lenient
    assert run("topics", "activate", ids["hotel"]).stdout.decode().startswith(ids["hotel"])
    assert run("topics", "activate", "quantum chromodynamics lecture").returncode == 1


def test_topics_activate_needs_the_querys_subject_not_one_shared_word(run, store_dir):
    from memctl.api import Memory
    from memctl.mcp.tools import topics_activate

    migration = ["We plan the database migration from MySQL to PostgreSQL for Friday.",
                 "The database migration needs a dump of the MySQL tables first."]
    hours = ["大安分館的營業時間改成早上十點。", "營業時間的公告週五前貼出。"]
    run("ingest", "-", input=session_lines(migration + hours + WEATHER))
    messages = [json.loads(line) for line in session_lines(migration + hours + WEATHER).splitlines()]
    write_topic(store_dir, "t-migration", "database migration · MySQL", messages[0:2], "dormant")
    write_topic(store_dir, "t-hours", "營業時間", messages[2:4], "dormant")
    write_topic(store_dir, "t-weather", "redwood · rain", messages[4:8], "active")
    # "migration" alone is in a topic; the query is about zebras in Kenya, which no topic is
    unrelated = run("topics", "activate", "zebra migration in kenya", "--json")
    assert unrelated.returncode == 1 and json.loads(unrelated.stdout)["activated"] == []
    assert "no topic matches" in unrelated.stderr.decode()
    assert run("topics", "activate", "斑马在肯尼亚迁徙").returncode == 1
    memory = Memory(store_dir)
    assert memory.topics.activate("zebra migration in kenya").activated == []
    assert topics_activate(memory, "zebra migration in kenya")["activated"] == []
    assert all(t["state"] == "dormant" for t in map(lambda r: r[0], topic_files(store_dir).values())
               if t["id"] != "t-weather")
    # the subject itself, in words or in Chinese, still activates its topic
    assert run("topics", "activate", "the MySQL database migration").stdout.decode().startswith("t-migration")
    assert run("topics", "activate", "上次說的營業時間").stdout.decode().startswith("t-hours")


# -- the LLM path (§6.1) ---------------------------------------------------------

EVALUATIONS = {
    "good": """
        import re, sys
        prompt = sys.stdin.read()
        ids = re.findall(r'<message id="(m\\d+)"', prompt.split("<unsplit_messages>")[0])
        hotel = "Acorn" in prompt.split("<unsplit_messages>")[0]
        print("<topic_result><relevance_score>%s</relevance_score>" % ("0.9" if hotel else "0.1"))
        if hotel:
            print("<referenced_messages>\\n%s\\n</referenced_messages><summary>Booked, ref ACG-42.</summary>" % ids[-1])
        print("</topic_result>")
    """,
    "malformed": "import sys; sys.stdin.read(); print('<topic_result><relevance_score>high</relevance_score></topic_result>')",
    "timeout": "import sys, time; sys.stdin.read(); time.sleep(30)",
}


@pytest.fixture
def evaluator(python_command):
    return lambda kind: python_command(f"evaluate_{kind}", EVALUATIONS[kind])


@pytest.mark.process
@pytest.mark.real_model
def test_llm_evaluation_answer_is_used(run, store_dir, evaluator):
    ids = split_three_subjects(run, store_dir)
    result, said = context_json(run, "--message", "and the booking?", "--llm", evaluator("good"))
    topic = next(s for s in result["sections"] if s["kind"] == "topic")
    assert topic["topic_id"] == ids["hotel"] and topic["score"] == 0.9 and topic["summary"] == "Booked, ref ACG-42."
    assert "not used" not in said


@pytest.mark.process
@pytest.mark.real_model
@pytest.mark.parametrize("kind, said", [("malformed", "relevance_score"), ("timeout", "no answer within 2 s")])
def test_bad_llm_evaluation_falls_back_to_the_builtin_score_per_topic(run, store_dir, evaluator, kind, said):
    ids = split_three_subjects(run, store_dir)
    builtin, _ = context_json(run, "--message", "What was the Acorn Guest House booking reference?", "--no-record")
    result, stderr = context_json(run, "--message", "What was the Acorn Guest House booking reference?",
                                  "--no-record", "--llm", evaluator(kind),
                                  env={**FEW_RECENT, "MEMCTL_TOPICS_LLM_TIMEOUT": "2"})
    assert result["sections"] == builtin["sections"]
    assert stderr.count("the LLM answer was not used") == len(ids) and said in stderr and ids["hotel"] in stderr


# -- links between topics ----------------------------------------------------------

BOOKING = "Booked the Acorn Guest House in Cambridge for 3 nights from Friday."
BREAKFAST = "The Acorn Guest House in Cambridge: breakfast is served from 7 to 10."
RAIN = "Will it rain in Redwood City this week? Drizzle on Wednesday."


def three_topics(store_dir: Path) -> None:
    """Two close subjects (summary cosine .76 with the bundled model) and one far from both."""
    for n, (tid, text) in enumerate((("t-booking", BOOKING), ("t-breakfast", BREAKFAST), ("t-rain", RAIN))):
        message = {"id": f"x{n}", "session": "s9", "role": "user", "text": text, "ts": "2026-11-20T10:00:00Z"}
        write_topic(store_dir, tid, tid[2:], [message], "active")


@pytest.mark.real_model
def test_daily_review_links_close_topics_as_related_once(run, store_dir):
    run("ingest", "-", input=session_lines(WEATHER))
    three_topics(store_dir)
    done = run("review", "daily", "--json", env=FEW_RECENT)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(r["topic_id"], r["with"]) for r in report["related"]] == [("t-booking", "t-breakfast")]
    assert report["merged"] == [] and 0.72 <= report["related"][0]["similarity"] < 0.85
    for one, other in (("t-booking", "t-breakfast"), ("t-breakfast", "t-booking")):
        shown = json.loads(run("topics", "show", one, "--json").stdout)["topic"]
        assert [(link["kind"], link["topic_id"]) for link in shown["links"]] == [("related", other)]
    assert "related: t-booking" in run("topics", "show", "t-breakfast").stdout.decode()
    again = json.loads(run("review", "daily", "--json", env=FEW_RECENT).stdout)
    assert again["related"] == []   # linked once


# -- the LLM path of the daily review ----------------------------------------------

REVIEWS = {
    "good": """
        import re, sys
        prompt = sys.stdin.read()
        if "<topic_review>" in prompt:
            print('<topic_review><merge topic_id="t-breakfast" into="t-booking">one stay</merge>'
                  '<related topic_id="t-booking" with="t-rain">the weather of the stay</related></topic_review>')
        else:
            name = re.search(r"- Name: (.*)", prompt).group(1)
            print(f"<topic><summary>{name}, compressed.</summary><importance>0.8</importance></topic>")
    """,
    "malformed": "import sys; sys.stdin.read(); print('<topic_review><merge topic_id=\"t-rain\">')",
    "unknown_id": """
        import sys; sys.stdin.read()
        print('<topic_review><merge topic_id="t-404" into="t-booking">r</merge></topic_review>')
    """,
    "merged_twice": """
        import sys; sys.stdin.read()
        print('<topic_review><merge topic_id="t-rain" into="t-booking">r</merge>'
              '<merge topic_id="t-rain" into="t-breakfast">r</merge></topic_review>')
    """,
    "bad_compression": """
        import sys
        prompt = sys.stdin.read()
        if "<topic_review>" in prompt:
            print("<topic_review></topic_review>")
        else:
            print("<topic><summary>s</summary><importance>very</importance></topic>")
    """,
    "empty": "import sys; sys.stdin.read()",
    "slow": "import sys, time; sys.stdin.read(); time.sleep(30)",
}


@pytest.fixture
def reviewer(python_command):
    return lambda kind: python_command(f"review_{kind}", REVIEWS[kind])


@pytest.mark.process
def test_llm_review_merges_links_and_compresses_dry_run_first(run, store_dir, reviewer):
    run("ingest", "-", input=session_lines(WEATHER))
    three_topics(store_dir)
    before = snapshot(store_dir)
    plan = run("review", "daily", "--dry-run", "--json", "--llm", reviewer("good"), env=FEW_RECENT)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert snapshot(store_dir) == before
    assert planned["merged"] == [{"topic_id": "t-breakfast", "into": "t-booking", "reason": "one stay"}]
    assert planned["related"] == [{"topic_id": "t-booking", "with": "t-rain", "reason": "the weather of the stay"}]
    # Compressed: the topics touched today, the LLM's importance averaged with nothing (no scores yet).
    assert sorted((c["topic_id"], c["importance"]) for c in planned["compressed"]) == [("t-booking", 0.8), ("t-rain", 0.8)]
    done = json.loads(run("review", "daily", "--json", "--llm", reviewer("good"), env=FEW_RECENT).stdout)
    assert done["merged"] == planned["merged"] and done["related"] == planned["related"]
    booking = json.loads(run("topics", "show", "t-breakfast", "--json").stdout)["topic"]
    assert booking["id"] == "t-booking" and booking["summary"] == "booking, compressed."
    assert {(link["kind"], link["topic_id"]) for link in booking["links"]} == {("merged-from", "t-breakfast"),
                                                                               ("related", "t-rain")}


@pytest.mark.process
@pytest.mark.parametrize("kind, said", [
    ("malformed", "no <topic_review>…</topic_review> element"), ("unknown_id", "topic_id='t-404' is not one of"),
    ("merged_twice", "t-rain is merged away twice"),
    ("bad_compression", "LLM compression of topic t-booking: <importance> must be one number from 0 to 1"),
    ("empty", "it was empty"), ("slow", "no answer within 2 s"),
])
def test_bad_llm_review_answers_change_nothing(run, store_dir, reviewer, kind, said):
    run("ingest", "-", input=session_lines(WEATHER))
    three_topics(store_dir)
    before = snapshot(store_dir)
    done = run("review", "daily", "--llm", reviewer(kind), env={**FEW_RECENT, "MEMCTL_TOPICS_LLM_TIMEOUT": "2"})
    assert done.returncode == 2
    message = done.stderr.decode().strip()
    assert said in message and message.endswith("; nothing was changed") and len(message.splitlines()) == 1
    assert snapshot(store_dir) == before


# -- the LLM path of topics activate (§6.3) ---------------------------------------

ROUTINGS = {
    # Matches the topic whose summary mentions the guest house: words the query does not share.
    "good": """
        import re, sys
        prompt = sys.stdin.read()
        listed = re.findall(r'<topic id="([^"]+)"[^>]*>\\n([^<]*)', prompt)
        print("<topic_routing><matched_topics>")
        for tid, summary in listed:
            if "Acorn" in summary:
                print(f'<topic id="{tid}" relevance="high">where they stay &amp; the booking</topic>')
        print("</matched_topics></topic_routing>")
    """,
    "none": """
        import sys; sys.stdin.read()
        print("<topic_routing><matched_topics></matched_topics>"
              "<no_match_reason>nothing about pets</no_match_reason></topic_routing>")
    """,
    "malformed": "import sys; sys.stdin.read(); print('<topic_routing><matched_topics><topic id=x>')",
    "unknown_id": """
        import sys; sys.stdin.read()
        print('<topic_routing><matched_topics><topic id="t-404" relevance="high">r</topic>'
              '</matched_topics></topic_routing>')
    """,
    "bad_relevance": """
        import re, sys
        tid = re.findall(r'<topic id="([^"]+)"', sys.stdin.read())[0]
        print(f'<topic_routing><matched_topics><topic id="{tid}" relevance="very">r</topic>'
              '</matched_topics></topic_routing>')
    """,
    "empty": "import sys; sys.stdin.read()",
    "slow": "import sys, time; sys.stdin.read(); time.sleep(30)",
}


@pytest.fixture
def router(python_command):
    return lambda kind: python_command(f"route_{kind}", ROUTINGS[kind])


def activate_json(run, *args, env=FEW_RECENT):
    done = run("topics", "activate", "--json", *args, env=env)
    return done.returncode, json.loads(done.stdout), done.stderr.decode()


@pytest.mark.process
def test_llm_routing_activates_the_topic_it_matches(run, store_dir, router):
    ids = split_three_subjects(run, store_dir)
    make_dormant(store_dir, ids["hotel"])
    make_dormant(store_dir, ids["weather"])
    code, found, said = activate_json(run, "where are we sleeping on Friday", "--llm", router("good"))
    assert code == 0 and found["method"] == "llm" and found["fallback"] is None and "not used" not in said
    assert [a["topic_id"] for a in found["activated"]] == [ids["hotel"]]
    assert found["candidates"] == [{"topic_id": ids["hotel"], "name": found["activated"][0]["name"], "score": 0.7,
                                    "relevance": "high", "reason": "where they stay & the booking"}]
    assert topic_files(store_dir)[ids["hotel"]][-1]["state"] == "active"


@pytest.mark.process
def test_llm_routing_that_matches_nothing_activates_nothing(run, store_dir, router):
    ids = split_three_subjects(run, store_dir)
    make_dormant(store_dir, ids["hotel"])
    code, found, said = activate_json(run, "the Acorn Guest House booking", "--llm", router("none"))
    assert code == 1 and found["activated"] == [] and found["no_match_reason"] == "nothing about pets"
    assert "nothing about pets" in said and topic_files(store_dir)[ids["hotel"]][-1]["state"] == "dormant"


@pytest.mark.process
@pytest.mark.parametrize("kind, said", [
    ("malformed", "no <topic_routing>…</topic_routing> element"), ("unknown_id", "id 't-404' is not one of the listed"),
    ("bad_relevance", "relevance='very' must be one of high, medium, low"), ("empty", "it was empty"),
    ("slow", "no answer within 2 s"),
])
def test_bad_llm_routing_falls_back_to_the_builtin_search(run, store_dir, router, kind, said):
    ids = split_three_subjects(run, store_dir)
    make_dormant(store_dir, ids["hotel"])
    make_dormant(store_dir, ids["weather"])
    env = {**FEW_RECENT, "MEMCTL_TOPICS_LLM_TIMEOUT": "2"}
    code, found, stderr = activate_json(run, "the Acorn Guest House booking", "--llm", router(kind), env=env)
    assert code == 0 and found["method"] == "builtin" and said in found["fallback"]
    assert [a["topic_id"] for a in found["activated"]][0] == ids["hotel"]   # what the built-in search finds
    assert stderr.count("the LLM routing answer was not used") == 1 and said in stderr


# -- the daily review (T12, P8) --------------------------------------------------

@pytest.mark.real_model
def test_daily_review_plans_then_archives_and_merges(run, store_dir):
    ids = split_three_subjects(run, store_dir, SPLIT_ON)  # dated: "later" is then a fixed 15 days on
    # A second topic on the hotel subject, from another session: the review merges it.
    again = ["I need a cheap hotel in the north of Cambridge with free parking.",
             "The Acorn Guest House is cheap, in the north, with free parking."]
    run("ingest", "-", input=session_lines(again, session="s2", prefix="h"))
    hotel = [orjson.loads(line) for line in (store_dir / "topics" / f"{ids['hotel']}.jsonl").read_bytes().splitlines()]
    duplicate = "t-duplicate"
    write_topic(store_dir, duplicate, hotel[0]["name"], [json.loads(line) for line in session_lines(
        again, session="s2", prefix="h").splitlines()], "active", summary=hotel[0]["summary"])
    make_dormant(store_dir, ids["weather"])
    later = {"MEMCTL_NOW": "2026-12-05T03:00:00Z"}

    before = snapshot(store_dir)
    plan = run("review", "daily", "--dry-run", "--json", env=later)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert snapshot(store_dir) == before and b"dry run" in plan.stderr
    assert [a["topic_id"] for a in planned["archived"]] == [ids["weather"]]
    assert planned["archived"][0]["to"] == f"topics/archived/{planned['archived'][0]['to'][16:23]}/{ids['weather']}.jsonl"
    assert {(m["topic_id"], m["into"]) for m in planned["merged"]} == {(duplicate, ids["hotel"])}
    assert {s["session"] for s in planned["idle_summaries"]} == {"s1", "s2"}
    assert all(3 <= len(s["keywords"]) <= 5 for s in planned["idle_summaries"])

    done = run("review", "daily", "--json", env=later)
    assert json.loads(done.stdout)["archived"] == planned["archived"]
    assert not (store_dir / "topics" / f"{ids['weather']}.jsonl").exists()
    archived = [json.loads(line) for line in run("topics", "list", "--archived", "--since", "2026-11",
                                                 "--json").stdout.splitlines()]
    assert [a["id"] for a in archived] == [ids["weather"]] and archived[0]["state"] == "archived"
    assert run("topics", "list", "--archived", "--since", "2027-01").returncode == 1
    merged = json.loads(run("topics", "show", duplicate, "--json").stdout)["topic"]
    assert merged["id"] == ids["hotel"]  # the merged id still resolves
    assert ("merged-from", duplicate) in [(link["kind"], link["topic_id"]) for link in merged["links"]]
    assert (store_dir / "auto_summaries.jsonl").exists()
    # Archived messages stay placed: they do not come back as unsplit.
    result, _ = context_json(run, "--message", "rain in Redwood City?", "--no-record", env={**FEW_RECENT, **later})
    assert not {"m0", "m1", "m2", "m3"} & set(shown_ids(result))
    # Only an explicit request brings an archived topic back.
    back = run("topics", "activate", "Redwood", "--include-archived", "--json", env=later)
    assert back.returncode == 0, back.stderr
    assert ids["weather"] in [a["topic_id"] for a in json.loads(back.stdout)["activated"]]
    assert (store_dir / "topics" / f"{ids['weather']}.jsonl").exists()
    again_plan = json.loads(run("review", "daily", "--dry-run", "--json", env=later).stdout)
    assert again_plan["merged"] == [] and again_plan["idle_summaries"] == []


def test_activation_of_an_earlier_store_is_read_from_index_state_json(run, store_dir):
    split_three_subjects(run, store_dir)
    context_json(run, "--message", "hotel booking reference?")
    moved = json.loads((store_dir / "topics" / "activation.json").read_text())
    (store_dir / "topics" / "activation.json").unlink()
    (store_dir / "index_state.json").write_text(json.dumps({"topic_activation": moved}))
    context_json(run, "--message", "hotel booking reference?")
    assert json.loads((store_dir / "topics" / "activation.json").read_text())["rounds"] == 2
