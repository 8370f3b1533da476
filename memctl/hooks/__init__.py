"""Agent clients' hooks: memory given and kept without the model calling a tool ("push beats pull").

A client that runs a command at documented points of its loop (a prompt submitted, a turn
ended, a compaction coming, a session ending) gets, from `memctl hooks run CLIENT`, the context
memory has for each prompt, and has its conversation stored after each turn. protocol.py holds
what they share; one module a client holds its events, its limits, where its settings are and
how its conversation is read (README "Hooks" says which clients and why not the others).
"""

CLIENTS = ("claude-code", "codex", "gemini-cli")


def client(name: str):
    """The Client of `name` (one of CLIENTS), its module imported only now: a hook runs every prompt."""
    import importlib

    return importlib.import_module(f"memctl.hooks.{name.replace('-', '_')}").CLIENT
