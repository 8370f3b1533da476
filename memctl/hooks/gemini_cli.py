"""Gemini CLI's hooks: BeforeAgent gets memory's context, AfterAgent stores the turn it carries.

The protocol (google-gemini/gemini-cli docs/hooks/reference.md and packages/core/src/hooks/, read
2026-11 at 5411f11, v0.56 nightly; tests/fixtures/gemini-cli/README.md): a hook is a command given
one event as a JSON object on stdin, with `session_id`, `transcript_path`, `cwd`,
`hook_event_name`, `timestamp` (ISO 8601) and the event's own fields. BeforeAgent (after the user
submits a prompt, before the agent plans) carries `prompt`; its answer
`{"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": TEXT}}` (types.ts
BeforeAgentOutput) is added to the prompt of this turn (as a <hook_context> part, core/client.ts). AfterAgent (once a turn, after the final answer) carries
`prompt` (the request as the user sent it, before any hook context: client.ts originalRequest),
`prompt_response` (all the text the model answered in the turn, tool calls and results left out)
and `stop_hook_active` (a retry another hook asked for). No cap on the added text is documented.

Exit codes (hookRunner.ts): 0 success, 1 a warning, any other (2 included) blocks. On exit 0 with
nothing on stdout, Gemini CLI shows stderr to the user as a system message: a handled event
therefore prints `{}` when it adds nothing (quiet_stdout), so only a failure's line is shown.

The turn is stored from the AfterAgent event itself, not from the transcript: the reference
documents only that `transcript_path` is "the session transcript", and the file (chats/
session-*.jsonl, services/chatRecordingService.ts) also holds the environment memctl's context
is added to, compression summaries as user messages and the same message rewritten under one
id. So PreCompress and SessionEnd have nothing to add: each turn was stored when it ended.

Settings: ~/.gemini/settings.json ($GEMINI_CLI_HOME/.gemini when set) or a project's
.gemini/settings.json, `{"hooks": {EVENT: [{"matcher"?, "hooks": [{"type": "command",
"command", "timeout"}]}]}}`, timeout in milliseconds (default 60000). Project hooks are
fingerprinted: a new or changed one is untrusted until the user accepts it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from memctl.hooks.protocol import Client, Event, cut_text, home_settings

NO_RESPONSE = "[no response text]"  # what AfterAgent carries for a turn the model did not answer


def settings_path(*, settings: str | None = None, project: bool = False, home: Path | None = None,
                  environ: dict[str, str] | None = None) -> Path:
    """`settings`, else the project's .gemini/settings.json with `project`, else the user's:
    ~/.gemini/settings.json, under $GEMINI_CLI_HOME when set."""
    import os

    environ = os.environ if environ is None else environ
    base = environ.get("GEMINI_CLI_HOME") or home or Path.home()
    return home_settings(settings, project, ".gemini/settings.json", Path(base) / ".gemini" / "settings.json")


def turn_messages(event: Event, max_text_bytes: int) -> list[dict]:
    """The user's prompt and the model's answer an AfterAgent event carries, as messages to store.
    Each id is the event's session, time and role: the same event run again stores nothing new.
    A retry (stop_hook_active) stores only its answer: its prompt was stored by the turn retried."""
    fields = event.fields or {}
    stamp = fields.get("timestamp") if isinstance(fields.get("timestamp"), str) else None
    said = [] if fields.get("stop_hook_active") is True else [("user", fields.get("prompt"))]
    said.append(("assistant", fields.get("prompt_response")))
    records = []
    for role, text in said:
        if not isinstance(text, str) or not text.strip() or text == NO_RESPONSE:
            continue
        key = hashlib.sha256(f"{event.session}\0{stamp or text}\0{role}".encode()).hexdigest()[:32]
        record = {"id": f"gemini-{key}", "role": role, "text": cut_text(text, max_text_bytes)}
        if stamp:
            record["ts"] = stamp
        records.append(record)
    return records


CLIENT = Client(
    name="gemini-cli",
    prompt_event="BeforeAgent",
    store_events=("AfterAgent",),
    settings_path=settings_path,
    timeout=30_000,  # milliseconds; the hook gives up sooner by itself ([hooks] timeout_seconds)
    event_messages=turn_messages,
    quiet_stdout="{}\n",
)
