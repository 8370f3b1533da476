"""memctl: long-term memory for LLM agents, kept in plain files."""

__version__ = "0.1.0"
