"""A store is data, not code: programs to run come only from the user, and what they answer is
bounded (README "Trust"). Real processes stand in for the LLM and the summary command."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import orjson
import pytest

from conftest import snapshot
from memctl import config
from memctl.programs import OUTPUT_LIMIT, ProgramFailed, run_program
from test_topics import HOTEL, WEATHER, session_lines

IGNORED = "is ignored: a store may not name a program to run"


@pytest.fixture(autouse=True)
def user_config_dir(tmp_path, monkeypatch) -> Path:
    """The user's config folder ($XDG_CONFIG_HOME), empty unless a test writes memctl/config.toml;
    every memctl process a test starts inherits it, so the tester's own settings never count."""
    folder = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    return folder


def write_user_config(folder: Path, text: str) -> None:
    (folder / "memctl").mkdir(parents=True, exist_ok=True)
    (folder / "memctl" / "config.toml").write_text(text)


@pytest.fixture
def planter(python_command, tmp_path):
    """A command that leaves a file behind when it runs (and answers nothing), and that file."""
    mark = tmp_path / "PWNED"
    command = python_command("plant", f"import sys; sys.stdin.read(); open({str(mark)!r}, 'a').write('ran\\n')")
    return command, mark


def toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string


def store_with_topics(run, store_dir: Path) -> None:
    """Two topics, split by the built-in method, and a cached tool result: every command that may run a
    program has something to run it on."""
    run("ingest", "-", input=session_lines(WEATHER + HOTEL))
    done = run("split", "--session", "s1", "--force", "--keep-recent", "0")
    assert done.returncode == 0, done.stderr
    cached = run("cache", "run", "--scope", "s", "--tool", "lookup", "--", sys.executable, "-c", "print('found it')")
    assert cached.returncode == 0, cached.stderr


# -- programs come only from the user ---------------------------------------------------------

@pytest.mark.process
def test_a_program_named_in_the_store_is_never_run(run, store_dir, planter):
    command, mark = planter
    store_with_topics(run, store_dir)
    (store_dir / "memctl.toml").write_text(f"[topics]\nllm_batch = 5\nllm_command = {toml_string(command)}\n\n"
                                           f"[cache]\nsummary_command = {toml_string(command)}\n")
    (store_dir / "memctl.toml").chmod(0o600)
    run("ingest", "-", input=session_lines(WEATHER + HOTEL + ["Is breakfast included?", "Yes, from 7 to 10."]))
    for args in (("context", "--session", "s1", "--message", "and the booking?", "--no-record"),
                 ("split", "--session", "s1", "--force", "--keep-recent", "0"),
                 ("review", "daily", "--dry-run"),
                 ("cache", "consolidate", "--scope", "s", "--all", "--dry-run")):
        done = run(*args)
        assert done.returncode == 0, (args, done.stderr)
        said = done.stderr.decode().splitlines()
        notes = [line for line in said if IGNORED in line]
        # One line a setting and process, however often the settings are loaded.
        assert notes == [f"memctl: {store_dir}/memctl.toml:3: [topics] llm_command {IGNORED}; put it in "
                         f"{config.user_config_file()} or MEMCTL_TOPICS_LLM_COMMAND",
                         f"memctl: {store_dir}/memctl.toml:6: [cache] summary_command {IGNORED}; put it in "
                         f"{config.user_config_file()} or MEMCTL_CACHE_SUMMARY_COMMAND"], args
        assert not mark.exists(), args
    health = run("health", "check", "--json")
    warned = [orjson.loads(line) for line in health.stdout.splitlines() if b'"program"' in line]
    assert health.returncode == 0
    assert [(w["file"], w["line"], w["severity"]) for w in warned] == [("memctl.toml", 3, "warning"),
                                                                       ("memctl.toml", 6, "warning")]
    assert all(str(config.user_config_file()) in w["message"] for w in warned)


@pytest.mark.process
def test_the_same_program_runs_from_the_environment_or_the_users_config(run, store_dir, planter, python_command,
                                                                        user_config_dir):
    command, mark = planter
    run("ingest", "-", input=session_lines(WEATHER + HOTEL))
    split = ("split", "--session", "s1", "--force", "--keep-recent", "0")
    from_env = run(*split, env={"MEMCTL_TOPICS_LLM_COMMAND": command})
    assert from_env.returncode == 2 and b"it was empty" in from_env.stderr   # it ran, and answered nothing
    assert mark.read_text() == "ran\n"
    # The user's config.toml: its command runs, the one the store names does not.
    other = python_command("other", f"import sys; sys.stdin.read(); open({str(mark)!r}, 'a').write('store\\n')")
    (store_dir / "memctl.toml").write_text(f"[topics]\nllm_command = {toml_string(other)}\n")
    write_user_config(user_config_dir, f"[topics]\nllm_command = {toml_string(command)}\n")
    from_user = run(*split)
    assert from_user.returncode == 2 and b"it was empty" in from_user.stderr
    assert mark.read_text() == "ran\nran\n"


@pytest.mark.process
def test_the_summary_command_runs_from_the_users_config(run, store_dir, python_command, user_config_dir):
    summariser = python_command("summarise", "import sys; print('SUMMARY of ' + sys.stdin.read().strip())")
    write_user_config(user_config_dir, f"[cache]\nsummary_command = {toml_string(summariser)}\n")
    run("cache", "run", "--scope", "s", "--tool", "lookup", "--", sys.executable, "-c", "print('found it')")
    done = run("cache", "consolidate", "--scope", "s", "--all")
    assert done.returncode == 0, done.stderr
    assert "SUMMARY of found it" in (store_dir / "MEMORY.md").read_text()


def test_the_users_config_lies_under_the_store_and_the_environment(tmp_path, user_config_dir, monkeypatch, capsys):
    write_user_config(user_config_dir, '[topics]\nllm_command = "mine"\nllm_batch = 9\nllm_timeout = 3\n\n'
                                       '[retrieval]\nrecency_weight = 0.2\n')
    store_file = tmp_path / "memctl.toml"
    store_file.write_text('[topics]\nllm_command = "theirs"\nllm_batch = 7\n')
    monkeypatch.setenv("MEMCTL_TOPICS_LLM_TIMEOUT", "4")
    settings = config.load(store_file)
    assert (settings.topics.llm_command, settings.topics.llm_batch, settings.topics.llm_timeout,
            settings.retrieval.recency_weight) == ("mine", 7, 4.0, 0.2)
    monkeypatch.setenv("MEMCTL_TOPICS_LLM_COMMAND", "from-env")
    assert config.load(store_file).topics.llm_command == "from-env"
    assert capsys.readouterr().err.count(IGNORED) == 1


@pytest.mark.parametrize("model, from_store", [("../../models/evil", False), ("/opt/model", False),
                                               ("~/model", False), ("usem3", True)])
def test_a_model_directory_is_the_users_to_name_a_model_name_is_not(tmp_path, model, from_store, capsys):
    """A model directory is loaded through torch (pickle: code); a registered model's name is data."""
    store_file = tmp_path / "memctl.toml"
    store_file.write_text(f'[embedding]\nmodel = "{model}"\n')
    assert (config.load(store_file).embedding.model == model) is from_store
    assert ("[embedding] model is ignored" in capsys.readouterr().err) is not from_store
    assert bool(config.programs_named(store_file)) is not from_store


@pytest.mark.process
def test_a_cache_server_is_the_users_to_name(run, store_dir, user_config_dir, tmp_path):
    """A store naming a Redis server would have every output of the user's tools handed to it; the
    listener stands in for such a server and must never be reached."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    reached = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                reached.append(listener.accept()[0])
            except OSError:
                pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    store_dir.mkdir(parents=True, exist_ok=True)
    (store_dir / "memctl.toml").write_text(f'[cache]\nttl = 60\nbackend = "{url}"\n')
    try:
        done = run("cache", "run", "--scope", "s", "--tool", "secret", "--", sys.executable, "-c", "print('token 42')")
        assert done.returncode == 0 and b"token 42" in done.stdout, done.stderr
        assert (f"memctl: {store_dir}/memctl.toml:3: [cache] backend is ignored: a store may not name a server "
                f"to send data to; put it in {config.user_config_file()}") in done.stderr.decode()
        again = run("cache", "get", "--scope", "s", "--tool", "secret", "--", sys.executable, "-c",
                    "print('token 42')")
        assert again.returncode == 0 and b"token 42" in again.stdout  # kept in the store's own files
        assert config.load(store_dir / "memctl.toml").cache.ttl == 60  # the rest of the file still counts
        warned = [orjson.loads(line) for line in run("health", "check", "--json").stdout.splitlines()
                  if b'"program"' in line]
        assert [(w["file"], w["line"]) for w in warned] == [("memctl.toml", 3)]
        # The user's own config may name it (here: the same listener, which is then reached).
        write_user_config(user_config_dir, f'[cache]\nbackend = "{url}"\nsocket_timeout = 0.5\n')
        assert config.load(store_dir / "memctl.toml").cache.backend == url
    finally:
        stop.set()
        watcher.join()
        listener.close()
    assert reached == []


def test_a_broken_user_config_is_named_by_its_own_path(run, store_dir, user_config_dir):
    run("ingest", "--kind", "memory", "-", input='{"text": "Kestrel uses PostgreSQL"}')
    write_user_config(user_config_dir, "[topics]\nllm_batch = 'many'\n")
    where = f"{user_config_dir}/memctl/config.toml:2"
    search = run("search", "kestrel")
    assert search.returncode == 2 and search.stderr.decode().startswith(f"memctl: error: {where}: ")
    health = run("health", "check")
    assert health.stdout.decode().startswith(f"{where}: topics.llm_batch must be int")


# -- what a program answers is bounded ----------------------------------------------------------

def refused(run, store_dir, llm: str, timeout: float = 200) -> str:
    """Split the weather and hotel chat with `llm`: the one-line refusal, after checking that
    nothing was written."""
    run("ingest", "-", input=session_lines(WEATHER + HOTEL))
    before = snapshot(store_dir)
    done = run("split", "--session", "s1", "--force", "--keep-recent", "0", "--llm", llm,
               env={"MEMCTL_TOPICS_LLM_TIMEOUT": str(timeout)})
    message = done.stderr.decode().strip()
    assert done.returncode == 2 and len(message.splitlines()) == 1 and snapshot(store_dir) == before, message
    assert message.endswith("; nothing was split")
    return message


@pytest.mark.process
def test_an_answer_over_the_limit_is_refused_without_waiting_for_the_rest(run, store_dir, python_command,
                                                                            tmp_path):
    # Had memctl waited for the program's own end, the program would have lived to write `slept`.
    slept = tmp_path / "slept"
    flood = python_command("flood", f"""
        import sys, time
        sys.stdin.read()
        sys.stdout.write("<topic_split>" * {OUTPUT_LIMIT // 13 + 100})
        sys.stdout.flush()
        time.sleep(100)
        open({str(slept)!r}, "w").close()
    """)
    message = refused(run, store_dir, flood)
    assert f"printed more than {OUTPUT_LIMIT} bytes" in message and not slept.exists()


@pytest.mark.process
def test_an_answer_just_under_the_limit_is_read_in_linear_time(run, store_dir, python_command):
    # Unclosed tags: the regexes rescanned the rest of the answer from each (84 KB took half a minute).
    nested = python_command("nested", """
        import re, sys
        ids = re.findall(r'<message id="([^"]+)"', sys.stdin.read())
        print("<topic_split>" + "".join(f'<assignment msg_id="{i}" topic="new" topic_name="x">r</assignment>'
                                        for i in ids) + "</topic_split>" + "<topic>" * 148000)
    """)
    # No time is asserted: a return of the quadratic rescans shows as a slow test, not a failure.
    assert "no <topic>…</topic> element" in refused(run, store_dir, nested)


@pytest.mark.process
def test_an_answer_declaring_entities_is_refused(run, store_dir, python_command):
    laughs = python_command("laughs", """
        import re, sys
        ids = re.findall(r'<message id="([^"]+)"', sys.stdin.read())
        print('<!DOCTYPE topic_split [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>')
        print("<topic_split>" + "".join(f'<assignment msg_id="{i}" topic="new" topic_name="&b;">r</assignment>'
                                        for i in ids) + "</topic_split>")
    """)
    message = refused(run, store_dir, laughs)
    assert "the answer declares a DOCTYPE or an entity, which memctl refuses" in message


def sleeper(python_command, tmp_path) -> tuple[list[str], Path, Path]:
    """`sh -c` running a Python process that writes its pid, sleeps, then writes a second file, which
    exists only if nobody killed it first: a grandchild of memctl (the `; exit 0` keeps sh from
    exec'ing it in its own place). The command, the pid file, the file of a sleep run to its end."""
    pid_file, slept = tmp_path / "grandchild.pid", tmp_path / "slept"
    script = python_command("sleeper", f"""
        import os, sys, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(100)
        open({str(slept)!r}, "w").close()
    """)
    return ["sh", "-c", f"{script}; exit 0"], pid_file, slept


def gone(pid: int, within: float = 10.0) -> bool:
    """The process ended (a zombie waiting for its new parent to reap it counts as ended)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.process
def test_a_timeout_kills_the_wrappers_children_too(run, store_dir, python_command, tmp_path):
    argv, pid_file, slept = sleeper(python_command, tmp_path)
    message = refused(run, store_dir, shlex.join(argv), timeout=2)
    assert "gave no answer within 2 s ([topics] llm_timeout)" in message and not slept.exists()
    assert gone(int(pid_file.read_text()))


@pytest.mark.process
def test_the_runner_kills_the_whole_group_and_returns_at_the_deadline(python_command, tmp_path):
    argv, pid_file, slept = sleeper(python_command, tmp_path)
    with pytest.raises(ProgramFailed, match="gave no answer within 1 s") as failed:
        run_program(argv, b"", 1)
    # subprocess.run(timeout=) killed sh alone and then waited for the sleeper's end of the pipe.
    assert failed.value.timed_out and not slept.exists()
    assert gone(int(pid_file.read_text()))


@pytest.mark.process
@pytest.mark.parametrize("terminal", [True, False])
def test_a_slow_program_is_named_on_a_terminal_while_memctl_waits(monkeypatch, terminal):
    """An --llm command that does not answer held a person's terminal for its whole timeout with no
    word; on a terminal memctl says once what it waits for, and elsewhere (cron, a pipe) nothing."""
    import os
    import pty

    from memctl import programs

    monkeypatch.setattr(programs, "WAIT_NOTE_SECONDS", 0.2)
    controller, terminal_end = pty.openpty()
    read_end, write_end = os.pipe()
    stderr = os.fdopen(terminal_end if terminal else write_end, "w")
    monkeypatch.setattr(sys, "stderr", stderr)
    answer = run_program([sys.executable, "-c", "import time; time.sleep(1); print('done')"], b"", 30)
    stderr.close()
    os.close(write_end if terminal else terminal_end)
    said = b""
    for fd in (controller, read_end):
        os.set_blocking(fd, False)
        try:
            said += os.read(fd, 4096)
        except OSError:  # nothing written: a pty's controller reads EIO once its other end is closed
            pass
        os.close(fd)
    assert answer == b"done\n"
    note = f"memctl: waiting for '{sys.executable}' to answer (it is given 30 s in all)".encode()
    assert (note in said) == terminal, said
