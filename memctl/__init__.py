"""memctl: long-term memory for LLM agents, kept in plain files.

    import os
    from memctl import Memory
    memory = Memory(os.path.expanduser("~/agent/.memory"))
    memory.ingest(open("chat.jsonl", "rb").read(), source="chat.jsonl")
    for result in memory.search("which database does Kestrel use"):
        print(result.score, result.text)

`Memory` is the whole API (docs/api.md): the per-turn calls are its methods,
the rest its rooms (memory.topics, .state, .review, .health, .cache); the
command line and the MCP server are front ends over it.
"""

__version__ = "0.1.0"

from memctl.api import Found, Memory  # noqa: E402  (after __version__, which the CLI imports)

__all__ = ["Memory", "Found", "__version__"]
