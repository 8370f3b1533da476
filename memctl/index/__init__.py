"""The derived index: units, Tantivy BM25, embeddings; everything under .index/ (or, for a store
on PostgreSQL, in its database)."""


def open_index(rt):
    """The index of `rt`'s store (seam.Searchable): .index/ for a folder, tables beside the truth for
    a store on PostgreSQL; each module (and psycopg) is loaded only for its kind of store."""
    if rt.store.is_folder:
        from memctl.index.index import Index
    else:
        from memctl.index.postgres import PgIndex as Index
    return Index(rt)
