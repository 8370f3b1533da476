"""memctl: long-term memory for LLM agents, kept in plain files.

    import os
    from memctl import Memory
    memory = Memory(os.path.expanduser("~/agent/.memory"))
    memory.ingest(open("chat.jsonl", "rb").read(), source="chat.jsonl")
    for result in memory.search("which database does Kestrel use"):
        print(result.score, result.text)

`Memory` is the whole API (docs/api.md): the per-turn calls are its methods,
the rest its command groups (memory.topics, .state, .review, .health, .cache); the
command line and the MCP server are front ends over it. The feature ids the
comments name (P3, G6, T12, ...) are said in words in docs/design.md; the
measurements they cite, with when and how, are in bench/README.md.
"""

__version__ = "0.1.0"

__all__ = ["Memory", "Found", "Filters", "__version__"]


def __getattr__(name: str):
    """`Memory` and `Found` are imported on first use: a `memctl` call that a resident server
    answers (memctl/server/) imports this package for its version and nothing more; importing
    the API here cost it ~5 ms of its ~25."""
    if name in ("Memory", "Found", "Filters"):
        from memctl import api

        return getattr(api, name)
    raise AttributeError(f"module 'memctl' has no attribute {name!r}")
