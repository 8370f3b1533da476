"""Reading what callers hand to `ingest`: bytes in, located records out.

Every record keeps the line it came from, so that any error names the file,
the line and the field at fault (C5). Formats: JSON lines; a JSON document
(a list of messages, an OpenAI-style list of {role, content}, one message, or
a session object like PCAI's {"ID", "Messages": [...], "LastUpdate"}); a
Markdown notes file in MEMORY.md form; plain text; and the chat exports people
download: ChatGPT's and Claude's conversations.json (read_chatgpt, read_claude),
each conversation a session, each message keeping the export's own id, so that
importing the next export again stores only what is new.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from memctl.errors import InputError
from memctl.store.jsonl import MAX_DEPTH, Record, checked_record, json_type

FORMATS = ("auto", "jsonl", "json", "md", "text", "chatgpt", "claude")
# The keys that open a conversation of each export (a key: not inside a string, where quotes are escaped).
_EXPORT_KEYS = {"chatgpt": re.compile(r'(?<!\\)"mapping"\s*:\s*\{'),
                "claude": re.compile(r'(?<!\\)"chat_messages"\s*:\s*\[')}
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
                   ".md": "md", ".markdown": "md", ".txt": "text"}
_SESSION_KEYS = ("messages", "Messages")
# One input is parsed whole, at several times its size in memory; past this, split it.
MAX_INPUT_BYTES = 256 << 20


def read_source(name: str) -> tuple[bytes, str]:
    """The bytes of a file, or of stdin for "-", with the name errors will use."""
    import sys

    try:
        if name == "-":
            data, source = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1), "<stdin>"
        else:
            with open(name, "rb") as fh:
                data, source = fh.read(MAX_INPUT_BYTES + 1), name
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), source=name) from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"larger than {MAX_INPUT_BYTES >> 20} MiB; split it into smaller inputs", source=source)
    return data, source


def detect_format(text: str, source: str) -> str:
    """The format of an input, from its file name or else its first characters."""
    for suffix, fmt in _SUFFIX_FORMATS.items():
        if source.lower().endswith(suffix):
            return (export_format(text) or fmt) if fmt == "json" else fmt
    head = text.lstrip()
    if head.startswith("["):
        return export_format(text) or "json"
    if head.startswith("{"):
        first_line = head.split("\n", 1)[0].strip()
        try:  # one object per line is JSON lines; an object spread over lines is JSON
            orjson.loads(first_line)
            return "jsonl"
        except orjson.JSONDecodeError:
            return "json"
    if head.startswith("#") or head.startswith("<!-- memory"):
        return "md"
    return "text"


def export_format(text: str) -> str | None:
    """chatgpt or claude when a JSON list opens like that export's conversations.json."""
    start = text[:8192].lstrip()
    if not start.startswith("["):
        return None
    for fmt, key in _EXPORT_KEYS.items():
        if key.search(start):
            return fmt
    return None


def read_chatgpt(text: str, source: str) -> list[Record]:
    """Messages of ChatGPT's conversations.json: a list of conversations, each a tree of nodes
    ("mapping": id -> {"message", "parent", "children"}) of which "current_node" ends the branch
    the user last saw (an edited prompt leaves the old branch beside it). That branch is read,
    root first; the user's and the assistant's text messages are kept (content.parts that are
    text), system and tool messages, the assistant's calls to tools and what is hidden from
    the conversation are not."""
    records = []
    for conversation in _conversations(text, source, "mapping"):
        value, line = conversation.value, conversation.line
        mapping = value["mapping"]
        if not isinstance(mapping, dict):
            raise InputError("must be an object of nodes", source=source, line=line, field="mapping")
        session = _export_session("chatgpt", value.get("conversation_id") or value.get("id"), source, line)
        node_id = value.get("current_node")
        if node_id is None:  # no branch marked: the last leaf written
            leaves = [k for k, n in mapping.items() if isinstance(n, dict) and not n.get("children")]
            node_id = leaves[-1] if leaves else None
        branch, seen = [], set()
        while node_id is not None and node_id not in seen:
            seen.add(node_id)
            node = mapping.get(node_id)
            if not isinstance(node, dict):
                raise InputError(f"names node {node_id!r:.60}, which the mapping lacks", source=source, line=line,
                                 field="mapping")
            branch.append(node)
            node_id = node.get("parent")
        for node in reversed(branch):
            message = node.get("message")
            if not isinstance(message, dict):
                continue
            role = (message.get("author") or {}).get("role")
            content = message.get("content") or {}
            metadata = message.get("metadata") or {}
            if (role not in ("user", "assistant") or metadata.get("is_visually_hidden_from_conversation")
                    or message.get("recipient", "all") != "all"):  # not to a tool (a search, code) either
                continue
            parts = content.get("parts") if isinstance(content, dict) else None
            text_parts = [p for p in parts or [] if isinstance(p, str) and p.strip()]
            if not text_parts:
                continue  # an image, a file, a tool call: nothing to read
            record = {"id": message.get("id") or node.get("id"), "session": session, "role": role,
                      "text": "\n".join(text_parts)}
            if message.get("create_time") is not None:
                record["ts"] = message["create_time"]
            records.append(Record(line, record))
    return records


def read_claude(text: str, source: str) -> list[Record]:
    """Messages of Claude's conversations.json: a list of conversations, each with its
    "chat_messages" in order ({"uuid", "sender": "human"|"assistant", "text", "content",
    "created_at"}); the text is "text", else the content's text blocks."""
    records = []
    for conversation in _conversations(text, source, "chat_messages"):
        value, line = conversation.value, conversation.line
        session = _export_session("claude", value.get("uuid"), source, line)
        messages = value["chat_messages"]
        if not isinstance(messages, list):
            raise InputError("must be a list of messages", source=source, line=line, field="chat_messages")
        for number, message in enumerate(messages):
            if not isinstance(message, dict):
                raise InputError(f"expected message objects, got {json_type(message)}", source=source, line=line,
                                 field="chat_messages")
            sender = message.get("sender")
            role = {"human": "user", "assistant": "assistant"}.get(sender)
            if role is None:
                continue
            body = message.get("text")
            if body is not None and not isinstance(body, str):  # said, as the JSON-lines reader says it
                raise InputError(f"must be text, got {json_type(body)}", source=source, line=line,
                                 field=f"chat_messages[{number}].text")
            if not isinstance(body, str) or not body.strip():
                blocks = message.get("content") if isinstance(message.get("content"), list) else []
                body = "\n".join(b["text"] for b in blocks
                                 if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
            if not body.strip():
                continue  # attachments only
            record = {"id": message.get("uuid"), "session": session, "role": role, "text": body}
            if record["id"] is None:
                del record["id"]
            if message.get("created_at") is not None:
                record["ts"] = message["created_at"]
            records.append(Record(line, record))
    return records


def _conversations(text: str, source: str, key: str) -> list[Record]:
    """The conversations of an export: a JSON list of objects, each with `key`."""
    if not text.lstrip().startswith("["):
        raise InputError("expected the export's list of conversations ([...])", source=source, line=1)
    conversations = read_json(text, source)
    for conversation in conversations:
        if key not in conversation.value:
            raise InputError(f"a conversation without '{key}': not this export's conversations.json",
                             source=source, line=conversation.line, field=key)
    return conversations


def _export_session(export: str, conversation_id: Any, source: str, line: int) -> str:
    """The session of an exported conversation: the export's name and the conversation's id."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InputError("a conversation without its id", source=source, line=line, field="id")
    return f"{export}-{conversation_id}"[:128]


def read_json(text: str, source: str) -> list[Record]:
    """Records of a JSON document, each with the line its object starts on."""
    decoder = json.JSONDecoder()
    start = _skip_ws(text, 0)
    try:
        document, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=source, line=exc.lineno) from None
    except RecursionError:  # the standard library's parser recurses once a level
        raise InputError(f"nested more than {MAX_DEPTH} levels deep", source=source, line=1) from None
    if _skip_ws(text, end) != len(text):
        line = text.count("\n", 0, _skip_ws(text, end)) + 1
        raise InputError("extra data after the JSON document (use --format jsonl for one object a line)",
                         source=source, line=line)
    if isinstance(document, list):
        return _located_items(text, start, document, source, None)
    if not isinstance(document, dict):
        raise InputError(f"expected a JSON object or list, got {json_type(document)}", source=source, line=1)
    key = next((k for k in _SESSION_KEYS if isinstance(document.get(k), list)), None)
    if key is None:
        return [checked_record(text.count("\n", 0, start) + 1, document, source)]
    defaults = {}
    for name in ("ID", "id", "session"):
        if isinstance(document.get(name), str):
            defaults["session"] = document[name]
            break
    for name in ("LastUpdate", "last_update", "ts"):
        if document.get(name) is not None:
            defaults["ts"] = document[name]
            break
    array_start = _value_offset(text, start, key)
    return _located_items(text, array_start, document[key], source, defaults)


def read_text(text: str, by: str) -> list[Record]:
    """Plain text: one record a non-blank line (by='line') or a paragraph (by='paragraph')."""
    records = []
    if by == "line":
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip():
                records.append(Record(number, line.strip()))
        return records
    paragraph: list[str] = []
    first = 0
    for number, line in enumerate(text.split("\n") + [""], 1):
        if line.strip():
            if not paragraph:
                first = number
            paragraph.append(line.rstrip())
        elif paragraph:
            records.append(Record(first, "\n".join(paragraph)))
            paragraph = []
    return records


def _located_items(text: str, array_start: int, items: list, source: str,
                   defaults: dict[str, Any] | None) -> list[Record]:
    decoder = json.JSONDecoder()
    records = []
    position = array_start + 1  # past the '['
    for index, item in enumerate(items):
        position = _skip_ws(text, position)
        line = text.count("\n", 0, position) + 1
        if not isinstance(item, dict):
            raise InputError(f"item {index + 1}: expected a JSON object, got {json_type(item)}",
                             source=source, line=line)
        records.append(checked_record(line, item, source, defaults))
        _, position = decoder.raw_decode(text, position)
        position = _skip_ws(text, position)
        if position < len(text) and text[position] == ",":
            position += 1
    return records


def _value_offset(text: str, object_start: int, wanted: str) -> int:
    """Offset of the value of top-level key `wanted` in the object at object_start."""
    decoder = json.JSONDecoder()
    position = _skip_ws(text, object_start + 1)
    while position < len(text) and text[position] != "}":
        key, position = decoder.raw_decode(text, position)
        position = _skip_ws(text, _skip_ws(text, position) + 1)  # past ':'
        if key == wanted:
            return position
        _, position = decoder.raw_decode(text, position)
        position = _skip_ws(text, position)
        if text[position] == ",":
            position = _skip_ws(text, position + 1)
    raise ValueError(wanted)  # unreachable: the key was found by the full parse


def _skip_ws(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position
