"""Retrieval: queries, filters, hybrid ranking, layered search."""
