"""The command-line contract, through real `memctl` processes (C1, C2, C5)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import orjson
import pytest

from conftest import FIXTURES, REPO, memctl_command, snapshot
from memctl.cli import cli
from memctl.errors import InputError

COMMANDS = cli.list_commands(None)


def test_version_and_top_level_help(run_process):
    # A real process: `python -m memctl` itself starts, answers and exits 0.
    version = run_process("--version")
    assert version.returncode == 0 and version.stdout.decode().startswith("memctl, version ")
    top = run_process("--help")
    assert top.returncode == 0
    for name in ("ingest", "index", "search", "split", "review", "state", "health"):
        assert name in top.stdout.decode()


@pytest.mark.parametrize("args, stdin, status", [
    (["ingest", "-"], b"Bob moved to Taipei in March.", 0),                  # ids on stdout
    (["search", "--mode", "bm25", "window seats on trains"], None, 0),        # BM25 alone: the process
    (["search", "--mode", "bm25", "zqxj vorpt"], None, 1),                    # embeds with another model
    (["ingest", "--format", "xml", "-"], b"", 2),                            # click's usage error
    (["ingest", "-"], b"\xff\xfe\x00garbage", 2),                             # memctl's input error
    (["nosuchcommand"], None, 2),
])
def test_the_in_process_runner_answers_as_the_process_does(run, run_process, tmp_path, args, stdin, status):
    """The `run` fixture most tests use stands for `python -m memctl`: the same status and bytes."""
    answers, pinned = [], {"MEMCTL_NOW": "2026-11-22T12:00:00Z"}  # new ids hash the time of ingest
    for runner, store in ((run, tmp_path / "in-process"), (run_process, tmp_path / "process")):
        assert run("ingest", "-", input="Ana prefers window seats on trains.", store=store, env=pinned).returncode == 0
        done = runner(*args, input=stdin, store=store, env=pinned)
        answers.append((done.returncode, done.stdout, done.stderr.replace(str(store).encode(), b"STORE")))
    assert answers[0] == answers[1] and answers[0][0] == status
    assert b"Traceback" not in answers[0][2]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_examples(run, name):
    result = run(name, "--help")
    assert result.returncode == 0
    text = result.stdout.decode()
    assert text.startswith(f"Usage: memctl {name}")
    if "not available yet" not in cli.get_command(None, name).help:  # placeholders say so instead
        assert "Examples:" in text and f"memctl {name}" in text.split("Examples:")[1]


def test_ingest_from_stdin_prints_ids_then_json(run, store_dir):
    first = run("ingest", "-", input='{"id": "a1", "text": "I moved to Taipei last month"}\n')
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode() == "a1\n"
    second = run("ingest", "--json", "-", input='{"id": "a1", "text": "I moved to Taipei last month"}\n'
                                                  '{"id": "a2", "text": "hello"}\n')
    assert second.returncode == 0
    rows = [orjson.loads(line) for line in second.stdout.splitlines()]
    assert rows == [{"id": "a1", "kind": "message", "status": "duplicate", "line": 1},
                    {"id": "a2", "kind": "message", "status": "noise", "line": 2, "reason": "greeting"}]
    assert b"skipped <stdin>:2 (greeting): hello" in second.stderr
    assert b"1 already stored" in second.stderr


def test_fixtures_through_the_cli(run, store_dir):
    chat = run("ingest", str(FIXTURES / "demo" / "chat.jsonl"))
    notes = run("ingest", str(FIXTURES / "demo" / "MEMORY.md"))
    assert chat.returncode == notes.returncode == 0
    assert len(chat.stdout.splitlines()) == 21 and len(notes.stdout.splitlines()) == 5
    assert (store_dir / "sessions" / "2026-11-16-review.jsonl").exists()
    assert "## 待辦" in (store_dir / "MEMORY.md").read_text()


def test_bad_input_is_one_line_exit_2_and_no_change(run, store_dir):
    run("ingest", str(FIXTURES / "demo" / "chat.jsonl"))
    before = snapshot(store_dir)
    bad = run("ingest", "-", input='{"text": "good line here"}\n{"text": 5}\n')
    assert bad.returncode == 2
    assert bad.stdout == b""
    assert bad.stderr.decode() == "memctl: error: <stdin>:2: field 'text': must be text, got a number\n"
    assert snapshot(store_dir) == before


@pytest.mark.parametrize("args, stdin, fragment", [
    (["ingest", "/no/such/file.jsonl"], None, "/no/such/file.jsonl: No such file or directory"),
    (["ingest", "-"], b"\xff\xfe\x00garbage", "<stdin>: binary input"),
    (["ingest", "--format", "xml", "-"], b"", "Invalid value for '-f' / '--format'"),
    (["ingest", "--ttl", "-1", "-"], b"x", "Invalid value for '--ttl'"),
    (["nosuchcommand"], None, "No such command 'nosuchcommand'"),
    (["search"], None, "give a QUERY"),
    (["search", "-k", "99999999999999999999", "x"], None, "-k: must be a whole number from 1 to 100000"),
    (["search", "--min-score", "inf", "x"], None, "--min-score: must be a finite number"),
    (["ingest", "--pending", "--ttl", "inf", "-"], b"a note", "--ttl: ingest.pending_ttl_hours must be a finite"),
    (["ingest", "--pending", "--ttl", "nan", "-"], b"a note", "--ttl: ingest.pending_ttl_hours must be a finite"),
    (["ingest", "--pending", "--ttl", "1e308", "-"], b"a note", "at most 87600 (ten years)"),
    (["ingest", "-"], b"[" * 100_000 + b"]" * 100_000, "<stdin>:1: nested more than 100 levels deep"),
])
def test_usage_and_input_errors_exit_2_without_traceback(run, args, stdin, fragment):
    result = run(*args, input=stdin)
    assert result.returncode == 2
    assert fragment in result.stderr.decode()
    assert result.stderr.startswith(b"memctl: error: ") and result.stderr.count(b"\n") == 1, result.stderr


def test_plain_results_name_who_spoke_and_explain_each_stage(run, store_dir):
    run("ingest", str(FIXTURES / "demo" / "chat.jsonl"))
    lines = run("search", "--kind", "message", "-k", "20", "--min-score", "0", "--mode", "bm25", "--explain",
                "Kestrel").stdout.decode().splitlines()
    results = [line.split("  ") for line in lines if not line.startswith(" ")]
    assert {"Mei", "assistant"} <= {fields[1] for fields in results}  # a speaker, else the role: never a session
    stages = next(line for line in lines if "importance ×" in line)
    assert re.search(r"recency \+\d\.\d{4} → \d\.\d{4}  importance ×\d\.\d{3} → \d\.\d{4}  length ×", stages)


@pytest.mark.parametrize("args, why", [
    (["--mode", "bm25", "zzzqqq"], "no unit matched the query's words or meaning"),
    (["--kind", "log", "--mode", "bm25", "Kestrel"], "no unit matched the query's words or meaning within the filters"),
    (["--min-score", "0.999", "Kestrel database"], "is under --min-score 0.999"),
    # (the fake model's hashed bigrams put "quantum chromodynamics on a lattice" at cosine .41 to a
    # demo line: over the threshold of a 24-message store, subject.SubjectTest.min_cosine)
    (["xylophone zebra quiz"], "the store does not seem to know the subject"),
    # ... and names the threshold it was judged against: lower in a store of the demo chat's 21 units
    (["xylophone zebra quiz"], "(subject_min_cosine 0.5; 0.356 in a store of 21 units)"),
])
def test_explain_says_why_nothing_passed(run, store_dir, args, why):
    """--explain on a search that finds nothing printed nothing at all."""
    run("ingest", str(FIXTURES / "demo" / "chat.jsonl"))
    run("index")
    done = run("search", "--explain", *args)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().startswith("memctl: nothing passed: ") and why in done.stderr.decode(), done.stderr
    assert b"nothing passed" not in run("search", *args).stderr  # said for --explain only


@pytest.mark.process
def test_store_from_environment_and_flag(tmp_path):
    env_store, flag_store = tmp_path / "env", tmp_path / "flag"
    base = [*memctl_command()]
    common = {"input": b"from the environment", "capture_output": True}
    import os
    env = {**os.environ, "MEMCTL_STORE": str(env_store)}
    assert subprocess.run([*base, "ingest", "-"], env=env, **common).returncode == 0
    assert (env_store / "sessions" / "default.jsonl").exists()
    assert subprocess.run([*base, "--store", str(flag_store), "ingest", "-"], env=env,
                          **common).returncode == 0  # the flag wins over the environment
    assert (flag_store / "sessions" / "default.jsonl").exists()
    assert len((env_store / "sessions" / "default.jsonl").read_bytes().splitlines()) == 1


def test_split_without_a_session_is_a_usage_error(run):
    result = run("split")
    assert result.returncode == 2
    assert b"--session" in result.stderr


@pytest.mark.process
def test_man_pages_and_completions_are_up_to_date():
    check = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.process
@pytest.mark.skipif(shutil.which("groff") is None, reason="no groff (scripts/bootstrap.sh installs groff-base)")
def test_every_man_page_renders_without_a_troff_warning():
    """As man shows it on a UTF-8 terminal: every warning (-ww) is a page that renders other than written
    (a backslash taken for an escape, a line for a request, a character dropped)."""
    pages = sorted((REPO / "man").glob("*.1"))
    assert pages
    for page in pages:
        lint = subprocess.run(["groff", "-ww", "-z", "-man", "-Tutf8", str(page)], capture_output=True, text=True)
        assert (lint.returncode, lint.stderr) == (0, ""), page.name
    text = (REPO / "man" / "memctl.1").read_text()
    assert "..." not in text.split(".SH COMMANDS")[1]  # every command's summary whole


@pytest.mark.process
def test_completion_script_completes_subcommands(tmp_path):
    import os
    env = {**os.environ, "_MEMCTL_COMPLETE": "bash_complete", "COMP_WORDS": "memctl ing", "COMP_CWORD": "1"}
    result = subprocess.run(memctl_command(), env=env, capture_output=True, text=True)
    assert "ingest" in result.stdout


# -- one bound on what a search reads, for every face (#31 item 6) ------------------------------------

def test_a_text_over_the_bound_is_refused_by_every_face_naming_where(run, store_dir):
    from memctl.api import Memory
    from memctl.mcp.tools import TOOLS
    from memctl.text.bounds import MAX_QUERY_CHARS

    assert run("ingest", "-", input=b"We chose Postgres for the Kestrel inventory service.\n").returncode == 0
    long = "postgres " * (MAX_QUERY_CHARS // 9 + 1)
    said = f"{len(long):,} characters; a search reads at most {MAX_QUERY_CHARS:,}: send the gist"
    batch = orjson.dumps({"query": "postgres"}) + b"\n" + orjson.dumps({"id": "q2", "query": long}) + b"\n"
    for args, stdin, where in [
        (("search", long), None, "query"),
        (("search", "--layered", long), None, "query"),
        (("search", "--plan", long), None, "plan"),
        (("search", "--batch", "-"), batch, "<stdin>:2: field 'query'"),
        (("context", "--session", "s1", "--no-record"), long, "message"),
        (("context", "--session", "s1", "--no-record", "--message", long), None, "message"),
        (("state", "plan", "-"), long, "message"),
        (("topics", "activate", long), None, "query"),
        (("cache", "search", long), None, "query"),
    ]:
        done = run(*args, input=stdin)
        assert (done.returncode, done.stdout) == (2, b""), args[:2]
        assert done.stderr.decode() == f"memctl: error: {where}: {said}\n", args[:2]
    memory = Memory(store_dir)
    with pytest.raises(InputError, match=f"^query: {said}$"):
        memory.search(long)
    with pytest.raises(InputError, match=f"^message: {said}$"):
        memory.context("s1", long, no_record=True)
    # MCP checks the same bound in its schema, before the call
    assert TOOLS["search"].input_schema["properties"]["query"]["maxLength"] == MAX_QUERY_CHARS
    edge = run("search", "--json", "postgres " * (MAX_QUERY_CHARS // 9) + "p" * (MAX_QUERY_CHARS % 9))
    assert edge.returncode in (0, 1) and b"error" not in edge.stderr  # at the bound: searched


# -- the README's agent recipes take any message (#31 item 9) ------------------------------------------

def test_the_readme_agent_recipes_take_a_message_that_starts_with_a_dash(tmp_path, store_dir, run):
    """`memctl search "$USER_MESSAGE"` read "-5 degrees in Kyoto..." as an unknown option -5 (exit 2)."""
    # as the README shows them: a command of a generated console block after "$ ", its comment and
    # its `; echo "exit $?"` left off
    lines = [line.split("  #")[0].strip().removeprefix("$ ").removesuffix('; echo "exit $?"')
             for block in re.findall(r"```(?:sh|console)\n(.*?)```", (REPO / "README.md").read_text(), re.S)
             for line in block.splitlines() if re.search(r'"\$(USER_)?MESSAGE"', line)]
    assert len(lines) == 5, lines
    assert run("ingest", "-", input=b"It was -5 degrees in Kyoto on the morning we left.\n").returncode == 0
    message = shlex.quote("-5 degrees in Kyoto: what did I pack?")
    for line in lines:  # as sh reads it: the variable one word, each command of a pipe fed the last's output
        piped = None
        for command in line.replace('"$USER_MESSAGE"', message).replace('"$MESSAGE"', message).split(" | "):
            words = shlex.split(command)
            assert words[0] == "memctl", line
            done = run(*words[1:], input=piped)
            assert done.returncode in (0, 1) and b"error" not in done.stderr, (command, done.stderr)
            piped = done.stdout
    for command in [c for c in cli.commands.values()] + [s for g in cli.commands.values()
                                                        for s in getattr(g, "commands", {}).values()]:
        for example in re.findall(r"memctl [^\n]*\"\$[A-Z_]+\"", command.help or ""):
            assert re.search(r'(-- |--plan |--message )"\$[A-Z_]+"', example), example


@pytest.mark.parametrize("args", [("topics", "list"), ("topics", "list", "--archived"), ("topics", "log")])
def test_topics_without_a_store_is_exit_2_as_elsewhere(run, store_dir, args):
    """It said "no topics" (exit 1): a cron line naming the wrong store passed as if all were well."""
    done = run(*args)
    assert (done.returncode, done.stdout) == (2, b"") and not store_dir.exists()
    assert done.stderr.decode() == f"memctl: error: no store at {store_dir}\n"
