"""Claude Code's hooks: its events in, memory's context out, its transcript into a session.

The protocol (Claude Code's hooks reference, code.claude.com/docs/en/hooks, read 2026-11; the
fixtures in tests/fixtures/claude-code/ are written from it): a hook is a command given one
event as a JSON object on stdin, with `session_id`, `transcript_path`, `cwd`, `hook_event_name`
and the event's own fields (`prompt` for UserPromptSubmit, `trigger` for PreCompact, `reason`
for SessionEnd, `stop_hook_active` for Stop). Exit 0 and stdout is read: for UserPromptSubmit,
`{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": TEXT}}` puts
TEXT in front of the prompt. Exit 2 blocks the prompt (or the stop). Text a hook adds to the
context is capped at 10,000 characters (longer is saved to a file and replaced by a preview and
its path). Settings: ~/.claude/settings.json ($CLAUDE_CONFIG_DIR), a project's
.claude/settings.json; "timeout" in seconds (default 60).

The transcript (`transcript_path`, ~/.claude/projects/<project>/<session>.jsonl) is JSON lines,
one a line, appended as the session goes: `type` "user" or "assistant" with `uuid`, `timestamp`
and `message` {`role`, `content`}: a string, or blocks ("text", "image", "tool_use",
"tool_result", "thinking"); other types ("summary", "system", "file-history-snapshot", ...) are
not messages. A user line whose blocks are tool results is the tool's output, not the user's;
`isMeta` lines are Claude Code's own notes, `isSidechain` ones a sub-agent's, and
`isCompactSummary` the summary a compaction wrote: none is a message of the conversation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memctl.hooks.protocol import Client, cut_text, home_settings, json_line


def settings_path(*, settings: str | None = None, project: bool = False, home: Path | None = None,
                  environ: dict[str, str] | None = None) -> Path:
    """The settings file hooks go in: `settings`, else the project's .claude/settings.json (the
    working directory's) with `project`, else the user's: $CLAUDE_CONFIG_DIR/settings.json,
    ~/.claude/settings.json by default."""
    import os

    environ = os.environ if environ is None else environ
    base = environ.get("CLAUDE_CONFIG_DIR") or (home or Path.home()) / ".claude"
    return home_settings(settings, project, ".claude/settings.json", Path(base) / "settings.json")


def transcript_message(line: bytes, max_text_bytes: int) -> dict | None:
    """One transcript line as a message to store ({"id": its uuid, "role", "ts", "text"}), or None
    for a line that is no message of the conversation (see the module doc). Images and documents
    are named ("[image: image/png]"), not stored; a text over [ingest] max_text_bytes is cut there."""
    value = json_line(line)
    if value is None or value.get("type") not in ("user", "assistant"):
        return None
    if value.get("isMeta") or value.get("isSidechain") or value.get("isCompactSummary"):
        return None
    uuid, message = value.get("uuid"), value.get("message")
    if not isinstance(uuid, str) or not isinstance(message, dict):
        return None
    text = _text_of(message.get("content"))
    if not text.strip():
        return None
    record = {"id": uuid, "role": value["type"], "text": cut_text(text, max_text_bytes)}
    if isinstance(value.get("timestamp"), str):
        record["ts"] = value["timestamp"]
    return record


def _text_of(content: Any) -> str:
    """The said text of a message's content: its text blocks; an image or document is named;
    tool calls, tool results and thinking are not what was said."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind in ("image", "document"):
            source = block.get("source") if isinstance(block.get("source"), dict) else {}
            parts.append(f"[{kind}: {source.get('media_type') or 'attached'}]")
    return "\n\n".join(p for p in parts if p.strip())


CLIENT = Client(
    name="claude-code",
    prompt_event="UserPromptSubmit",
    store_events=("Stop", "PreCompact", "SessionEnd"),
    settings_path=settings_path,
    # Seconds Claude Code gives the command before it ends it (its default is 60). The hook gives up
    # sooner by itself ([hooks] timeout_seconds); this is the ceiling should memctl hang regardless.
    timeout=30,
    cap_chars=10_000,
    transcript_message=transcript_message,
)
