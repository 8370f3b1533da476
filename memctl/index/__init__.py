"""The derived index: units, Tantivy BM25, embeddings; everything under .index/."""
