"""The README's cron lines, run as cron runs them, and --quiet on every command.

The lines are read from README.md itself, so the documentation cannot drift from
what is tested. Cron starts a job with an environment of its own (HOME, a PATH of
/usr/bin:/bin, the crontab's NAME=value lines) in $HOME: `env -i` gives exactly that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import orjson
import pytest

from conftest import REPO

CRON_PATH = "/usr/bin:/bin"
OLD_MEMORY = '# General\n\n<!-- memory\nid: mem-old\ncreated_at: 2020-01-01T00:00:00Z\n-->\nAn old note.\n'


def readme_crontab() -> tuple[dict[str, str], list[str]]:
    """The variables and the job commands of README's ```cron block."""
    block = re.search(r"```cron\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    variables, jobs = {}, []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assignment = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", line.strip())
        if assignment:
            variables[assignment[1]] = assignment[2]
        else:
            jobs.append(line.split(None, 5)[5])  # after minute, hour, day, month, weekday
    return variables, jobs


@pytest.fixture
def cron(tmp_path: Path):
    """Run a README cron job as cron would, in a home of the test's own; MEMCTL (the one line a
    user edits: where memctl is installed) is this checkout's memctl."""
    home = tmp_path / "home"
    (home / "exports").mkdir(parents=True)
    memctl = tmp_path / "bin" / "memctl"  # the install's bin/memctl, of this checkout
    memctl.parent.mkdir()
    memctl.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m memctl "$@"\n')
    memctl.chmod(0o755)
    # The user's model cache: an export of the bundled model is made once a machine, not per test.
    from memctl.index.embedding import cache_dir

    (home / ".cache").mkdir()
    (home / ".cache" / "memctl").symlink_to(cache_dir().parent)
    variables, jobs = readme_crontab()
    assert set(variables) == {"MEMCTL"}, "the README's crontab names memctl's install by MEMCTL"
    env = [f"{name}={memctl if name == 'MEMCTL' else value}" for name, value in variables.items()]

    def run(job: int) -> subprocess.CompletedProcess:
        return subprocess.run(["env", "-i", f"HOME={home}", f"PATH={CRON_PATH}", *env, "sh", "-c", jobs[job]],
                              cwd=home, capture_output=True, timeout=300)

    run.home = home
    return run


HOURLY, NIGHTLY = 0, 1


def write_export(home: Path, texts: list[str]) -> None:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(texts)]
    (home / "exports" / "latest.json").write_bytes(orjson.dumps(messages))


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_readme_has_an_hourly_and_a_nightly_job_that_name_the_store():
    variables, jobs = readme_crontab()
    assert len(jobs) == 2
    for job in jobs:
        steps = job.split("&&")
        assert len(steps) == 2
        for step in steps:
            assert step.split()[:2] == ["$MEMCTL", "-q"] and "--store" in step.split(), step


@pytest.mark.process
def test_cron_lines_are_silent_when_every_step_succeeds(cron):
    write_export(cron.home, ["Mei's demo for the Kestrel team is on December 12th",
                             "Noted: the Kestrel demo is on December 12th"])
    first = cron(HOURLY)
    assert (first.returncode, first.stdout, first.stderr) == (0, b"", b"")
    store = cron.home / "agent" / ".memory"
    stored = (store / "sessions" / "telegram_42.jsonl").read_bytes()
    assert stored.count(b"\n") == 2
    assert (store / ".index").is_dir()  # the second step ran
    again = cron(HOURLY)  # the next hour, the same export: silent, and nothing new stored
    assert (again.returncode, again.stdout, again.stderr) == (0, b"", b"")
    assert (store / "sessions" / "telegram_42.jsonl").read_bytes() == stored
    (store / "MEMORY.md").write_text(OLD_MEMORY)
    nightly = cron(NIGHTLY)
    assert (nightly.returncode, nightly.stdout, nightly.stderr) == (0, b"", b"")
    assert "status: archived" in (store / "MEMORY.md").read_text()  # the lifecycle step did its work


@pytest.mark.process
def test_hourly_line_fails_with_one_line_when_the_import_fails(cron):
    failed = cron(HOURLY)  # no export this hour
    assert failed.returncode == 2 and failed.stdout == b""
    assert one_line(failed.stderr).startswith("memctl: error: ") and "latest.json" in failed.stderr.decode()
    assert not (cron.home / "agent" / ".memory" / ".index").exists()  # `&&` stopped the line


@pytest.mark.process
def test_nightly_line_fails_with_one_line_when_the_check_finds_a_problem(cron):
    write_export(cron.home, ["Mei's demo for the Kestrel team is on December 12th"])
    assert cron(HOURLY).returncode == 0
    with open(cron.home / "agent" / ".memory" / "sessions" / "telegram_42.jsonl", "ab") as f:
        f.write(b'{"id": "m-cut", "text": "a line cut sh\n')
    failed = cron(NIGHTLY)
    assert failed.returncode == 1 and failed.stdout == b""
    line = one_line(failed.stderr)
    assert line.startswith("memctl: health: 1 error(s)") and "sessions/telegram_42.jsonl:2" in line


@pytest.mark.process
def test_nightly_line_fails_at_the_lifecycle_with_its_own_error_and_checks_nothing_after(cron):
    store = cron.home / "agent" / ".memory"
    write_export(cron.home, ["Mei's demo for the Kestrel team is on December 12th"])
    assert cron(HOURLY).returncode == 0
    (store / "MEMORY.md").write_text(OLD_MEMORY)
    (store / ".journal").mkdir()
    (store / ".journal" / "journal.json").write_text("not json")  # a journal no writer can undo
    failed = cron(NIGHTLY)
    assert failed.returncode == 2 and failed.stdout == b""
    line = one_line(failed.stderr)  # health, which would list the journal too, did not run
    assert line.startswith("memctl: error: ") and "journal" in line and "health" not in line


@pytest.mark.process
def test_nightly_line_fails_when_the_named_store_is_not_there(cron):
    failed = cron(NIGHTLY)
    assert failed.returncode == 2
    assert one_line(failed.stderr) == f"memctl: error: no store at {cron.home}/agent/.memory"


@pytest.mark.process
def test_a_store_nobody_named_is_said_even_under_quiet(tmp_path):
    (tmp_path / "n.jsonl").write_text('{"role": "user", "content": "a plain chat line, long enough"}\n')
    env = {k: v for k, v in os.environ.items() if k != "MEMCTL_STORE"}
    made = subprocess.run([sys.executable, "-m", "memctl", "-q", "ingest", "n.jsonl"], cwd=tmp_path, env=env,
                          capture_output=True, timeout=120)
    assert made.returncode == 0 and made.stdout == b""
    assert one_line(made.stderr) == (f"memctl: warning: made a new store at {tmp_path}/.memory, as no --store "
                                     "or MEMCTL_STORE named one")
    again = subprocess.run([sys.executable, "-m", "memctl", "-q", "ingest", "n.jsonl"], cwd=tmp_path, env=env,
                           capture_output=True, timeout=120)
    assert (again.returncode, again.stderr) == (0, b"")  # said once, when it was made


# -- --quiet ------------------------------------------------------------------------------------
def every_command():
    from memctl.cli import cli

    def walk(command: click.Command, path: tuple[str, ...]):
        yield path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(None):
                yield from walk(command.get_command(None, name), (*path, name))

    return list(walk(cli, ()))


def test_every_command_has_quiet():
    commands = every_command()
    assert len(commands) > 30
    for path, command in commands:
        names = {name for p in command.params for name in p.opts}
        assert {"-q", "--quiet"} <= names, " ".join(path)


def test_quiet_silences_data_and_notes_but_not_errors(run):
    line = '{"role": "user", "content": "Mei moved to Taipei last spring"}\n'
    loud = run("ingest", "-", input=line)
    assert loud.stdout and loud.returncode == 0
    assert run("ingest", "-", input=line).stderr  # "1 already stored, skipped"
    quiet = run("ingest", "-q", "-", input=line)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    found = run("-q", "search", "Taipei")  # like grep -q: the exit status is the answer
    assert (found.returncode, found.stdout, found.stderr) == (0, b"", b"")
    assert run("search", "Taipei").stdout
    bad = run("-q", "ingest", "-", input='{"role": "user"}\n')
    assert bad.returncode == 2 and bad.stdout == b""
    assert one_line(bad.stderr).startswith("memctl: error: <stdin>:1")
    usage = run("review", "lifecycle", "-q", "--no-such-option")
    assert usage.returncode == 2 and one_line(usage.stderr).startswith("memctl: error: ")


def test_quiet_silences_what_else_prints_on_stderr_but_not_the_failure(run, store_dir):
    line = '{"role": "user", "content": "Mei moved to Taipei last spring"}\n'
    assert run("ingest", "-", input=line).returncode == 0
    (store_dir / "memctl.toml").write_text('[topics]\nllm_command = "./not-from-a-store"\n')
    (store_dir / "memctl.toml").chmod(0o600)
    loud = run("review", "daily", "--dry-run")
    assert b"is ignored: a store may not name a program" in loud.stderr  # a settings note, printed directly
    quiet = run("-q", "review", "daily", "--dry-run")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    with open(store_dir / "sessions" / "default.jsonl", "ab") as f:
        f.write(b"{cut\n")
    failed = run("-q", "health")
    assert failed.returncode == 1
    assert one_line(failed.stderr).startswith(
        "memctl: health: 1 error(s), 1 warning(s); first: sessions/default.jsonl:2")


def test_quiet_asks_no_question_it_could_not_show(run):
    assert run("ingest", "-", input='{"role": "user", "content": "Mei moved to Taipei last spring"}\n').returncode == 0
    refused = run("-q", "state", "reset")
    assert refused.returncode == 2
    assert one_line(refused.stderr) == "memctl: error: state reset: --quiet asks nothing; pass --yes to confirm"
    assert run("-q", "state", "reset", "--yes").returncode == 0
