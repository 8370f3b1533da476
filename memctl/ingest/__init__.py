"""Ingest: input formats in, messages and notes into the store."""
