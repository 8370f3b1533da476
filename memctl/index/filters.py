"""The one filter definition of a search, rendered for Tantivy (BM25) and SQLite (vectors).

BM25 candidates are filtered inside Tantivy and vector candidates by the rows
of units.db that pass; both renderings are made here from the same fields,
so the two candidate lists can never disagree about what a filter admits.
"""

from __future__ import annotations

from dataclasses import dataclass

# Filter attribute -> the name of its field in Tantivy and its column in units.db.
_EXACT = (("kinds", "kind"), ("scope_set", "scope"), ("sections", "section"), ("sessions", "session"),
          ("tools", "tool"), ("agents", "agent"), ("cache_scopes", "cache_scope"))


@dataclass
class Filters:
    """What a search may return. Lists mean any of; scope also admits global (G7)."""
    kinds: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()      # a file, or a folder ending in '/'
    tools: tuple[str, ...] = ()        # memories consolidated from the tool cache (H4): which tool,
    agents: tuple[str, ...] = ()       # which agent ran it,
    cache_scopes: tuple[str, ...] = ()  # in which run
    exclude_status: tuple[str, ...] = ("deprecated", "superseded", "archived")
    since: int | None = None           # Unix seconds
    until: int | None = None

    @property
    def scope_set(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.scopes, "global"))) if self.scopes else ()

    def tantivy_clauses(self, schema) -> list:
        """(Occur, Query) pairs to add to a Tantivy boolean query."""
        import tantivy

        def any_of(name: str, values) -> tantivy.Query:
            # A union of term queries, not Tantivy's term set query (the same documents): with the
            # default filter (none of three statuses) Tantivy's search of a LoCoMo question on the
            # 6k store took 0.34-0.43 ms that way, 0.15-0.17 this way (200 questions; bench/README.md
            # "Cited measurements").
            return tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(schema, name, value))
                                                for value in values])

        must, clauses = tantivy.Occur.Must, []
        for attribute, name in _EXACT:
            values = getattr(self, attribute)
            if values:
                clauses.append((must, any_of(name, values)))
        if self.sources:
            either = [(tantivy.Occur.Should, tantivy.Query.term_query(
                schema, "source_dir" if source.endswith("/") else "source", source)) for source in self.sources]
            clauses.append((must, tantivy.Query.boolean_query(either)))
        if self.exclude_status:
            clauses.append((tantivy.Occur.MustNot, any_of("status", self.exclude_status)))
        if self.since is not None or self.until is not None:
            clauses.append((must, tantivy.Query.range_query(schema, "ts", tantivy.FieldType.Integer,
                                                            self.since, self.until)))
        return clauses

    def sql_where(self) -> tuple[list[str], list]:
        """(conditions to AND, parameters) over the units table; no conditions: no filter."""
        where, params = [], []
        for attribute, column in _EXACT:
            values = getattr(self, attribute)
            if values:
                where.append(f"{column} IN ({', '.join('?' * len(values))})")
                params += values
        if self.sources:
            either = []
            for source in self.sources:
                either.append("substr(source, 1, ?) = ?" if source.endswith("/") else "source = ?")
                params += [len(source), source] if source.endswith("/") else [source]
            where.append(f"({' OR '.join(either)})")
        if self.exclude_status:
            where.append(f"status NOT IN ({', '.join('?' * len(self.exclude_status))})")
            params += self.exclude_status
        if self.since is not None:
            where.append("ts_epoch >= ?")
            params.append(self.since)
        if self.until is not None:
            where.append("ts_epoch <= ?")
            params.append(self.until)
        return where, params
