"""Retrieval: queries, filters, hybrid ranking, layered search."""


def open_retriever(rt, *, say=None):
    """The searcher of `rt`'s store: over .index/ for a folder, in its database for a store on PostgreSQL."""
    if rt.store.is_folder:
        from memctl.search.search import Retriever
    else:
        from memctl.search.postgres import PgRetriever as Retriever
    return Retriever(rt, say=say)
