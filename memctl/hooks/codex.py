"""Codex's hooks: the same events and answer as Claude Code's, its rollout file into a session.

The protocol (read 2026-11; tests/fixtures/codex/README.md names each source): Codex's hooks page
(developers.openai.com/codex/hooks) and its code, openai/codex codex-rs/hooks/. A hook is a
command given one event as a JSON object on stdin: `session_id`, `transcript_path` (null when the
session has no file), `cwd`, `hook_event_name`, `model`, `turn_id` and the event's own fields
(`prompt` for UserPromptSubmit; `stop_hook_active`, `last_assistant_message` for Stop; `trigger`
for PreCompact; `reason` for SessionEnd) -- schema/generated/*.command.input.schema.json. Exit 0
and stdout is read as in Claude Code: `{"hookSpecificOutput": {"hookEventName":
"UserPromptSubmit", "additionalContext": TEXT}}` gives TEXT to the model as developer context
(events/user_prompt_submit.rs); exit 2 with a reason on stderr blocks the prompt. Text a hook adds
is kept within 2,500 tokens counted as UTF-8 bytes / 4 (output_spill.rs HOOK_OUTPUT_TOKEN_LIMIT;
longer is saved under $CODEX_HOME/hook_outputs and replaced by a preview): cap_bytes below.
SessionEnd is on the hooks page ("when the main thread ends"), for the releases that have it.
An event fired inside a sub-agent carries `agent_id` and `agent_type` (#22882, the
SubagentCommandInputFields of user_prompt_submit.rs): a sub-agent's turns are not stored.

Settings: ~/.codex/hooks.json ($CODEX_HOME) or a project's .codex/hooks.json (loaded only when
the project is trusted), `{"hooks": {EVENT: [{"matcher"?, "hooks": [{"type": "command",
"command", "timeout"}]}]}}`, timeout in seconds (engine/config.rs). memctl writes hooks.json; a
layer that also has inline [hooks] in config.toml gets both, merged, with a warning. Codex runs a
hook only once the user has reviewed and trusted it (/hooks), and again after any change to it.

The transcript is the session's rollout (`transcript_path` is codex-rs/core's hook_transcript_path,
the rollout's path: $CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl): JSON
lines {"timestamp", "type", "payload"}, appended as the session goes. Two logs interleave:
`response_item` lines are what the model sees (the user's text, but also the environment and
AGENTS.md it is given as user messages, and hook context as developer messages), `event_msg`
lines what the user sees. The conversation is the latter's `user_message` (what the user typed,
`message`, with `images`) and `agent_message` (the assistant's text, `message`); tool calls and
their output are other lines (rollout/src/policy.rs, protocol's UserMessageEvent and
AgentMessageEvent). A line has no id of its own: its hash is its id, as stable as the line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from memctl.hooks.protocol import Client, cut_text, home_settings, json_line

ROLES = {"user_message": "user", "agent_message": "assistant"}


def settings_path(*, settings: str | None = None, project: bool = False, home: Path | None = None,
                  environ: dict[str, str] | None = None) -> Path:
    """`settings`, else the project's .codex/hooks.json with `project`, else $CODEX_HOME/hooks.json
    (~/.codex/hooks.json by default)."""
    import os

    environ = os.environ if environ is None else environ
    base = environ.get("CODEX_HOME") or (home or Path.home()) / ".codex"
    return home_settings(settings, project, ".codex/hooks.json", Path(base) / "hooks.json")


def transcript_message(line: bytes, max_text_bytes: int) -> dict | None:
    """One rollout line as a message to store ({"id", "role", "text", "ts"}), or None for a line
    that is not what the user or the assistant said (see the module doc)."""
    value = json_line(line)
    if value is None or value.get("type") != "event_msg" or not isinstance(value.get("payload"), dict):
        return None
    payload = value["payload"]
    role = ROLES.get(payload.get("type"))
    message = payload.get("message")
    if role is None or not isinstance(message, str):
        return None
    parts = [message] if message.strip() else []
    images = payload.get("images") if isinstance(payload.get("images"), list) else []
    local = payload.get("local_images") if isinstance(payload.get("local_images"), list) else []
    parts += [_image_name(image) for image in images + local]
    if not parts:
        return None
    record = {"id": "codex-" + hashlib.sha256(line.strip()).hexdigest()[:32], "role": role,
              "text": cut_text("\n\n".join(parts), max_text_bytes)}
    if isinstance(value.get("timestamp"), str):
        record["ts"] = value["timestamp"]
    return record


def _image_name(image: object) -> str:
    """An image is named, not stored: its media type when it is a data URL."""
    if isinstance(image, str) and image.startswith("data:") and ";" in image:
        return f"[image: {image[5:image.index(';')]}]"
    return "[image: attached]"


CLIENT = Client(
    name="codex",
    prompt_event="UserPromptSubmit",
    store_events=("Stop", "PreCompact", "SessionEnd"),
    settings_path=settings_path,
    timeout=30,  # seconds; the hook gives up sooner by itself ([hooks] timeout_seconds)
    cap_bytes=10_000,  # 2,500 tokens at 4 bytes a token
    transcript_message=transcript_message,
    subagent_field="agent_id",
    install_note="Codex runs a new or changed hook only once you trust it: open /hooks in Codex and trust "
                 "memctl's",
)
