"""Agent clients' hooks: memory given and kept without the model calling a tool ("push beats pull").

A client that runs a command at documented points of its loop (a prompt submitted, a turn
ended, a compaction coming, a session ending) gets, from `memctl hooks run CLIENT`, the context
memory has for each prompt, and has its conversation stored after each turn. One module a
client: its event and transcript formats, and the entries `memctl hooks install` adds to its
settings. claude_code.py is the only one so far (README "Hooks" says why not the others).
"""

CLIENTS = ("claude-code",)
