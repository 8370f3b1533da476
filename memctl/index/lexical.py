"""BM25 with Tantivy, CJK-aware (P1).

Tantivy's default tokenizer keeps a run of Han characters as one token, so
a word inside a Chinese sentence is never found. memctl's analyzer makes each
Han or kana character a token and keeps other words whole, lower-cased and
stemmed (English); a query then adds each adjacent pair of CJK characters as
a phrase, so a two-character word ranks its exact occurrences first. On the
MADial Chinese data this beat jieba segmentation (recall@5 .525 vs .468) and
costs no dictionary load. Documents and queries alike are read with Traditional
characters in their Simplified form (text.cjk.simplified), so a query in one
script finds a text written in the other. Tantivy does not store registered analyzers in the
index: `open_index` registers it after every open.

Queries are built from analysed tokens, never parsed, so user text such as
`foo:bar`, an unbalanced quote or a bare AND is searched as words.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import tantivy

from memctl.index.filters import Filters
from memctl.text.cjk import IDEOGRAPHIC, IDEOGRAPHIC_RUN, simplified
from memctl.text.words import STOPWORDS

ANALYZER = "memctl_cjk_v1"
# One token per ideographic character, other words whole (Hangul words among them).
TOKEN_PATTERN = f"[{IDEOGRAPHIC}]|[^{IDEOGRAPHIC}\\W]+"
FILTER_FIELDS = ("kind", "scope", "section", "session", "status", "source", "source_dir", "tool", "agent",
                 "cache_scope")

def analyzer() -> tantivy.TextAnalyzer:
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(TOKEN_PATTERN))
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("body", stored=False, tokenizer_name=ANALYZER)
    builder.add_text_field("context", stored=False, tokenizer_name=ANALYZER)
    for name in FILTER_FIELDS:
        builder.add_text_field(name, stored=False, tokenizer_name="raw")
    builder.add_integer_field("ts", stored=False, indexed=True, fast=True)
    return builder.build()


def create_index(path: Path) -> tantivy.Index:
    path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(schema(), path=str(path))
    index.register_tokenizer(ANALYZER, analyzer())
    return index


def open_index(path: Path) -> tantivy.Index:
    index = tantivy.Index.open(str(path))
    index.register_tokenizer(ANALYZER, analyzer())  # not persisted: needed after every open
    return index


def document(unit_id: str, body: str, meta: dict, context: str | None = None) -> tantivy.Document:
    """`context`: the turn before a message, searched in its own field (see `search`)."""
    source = meta["source"]
    fields = {"id": unit_id, "body": simplified(body), "context": simplified(context or ""), "kind": meta["kind"], "scope": meta["scope"],
              "section": meta.get("section") or "", "session": meta.get("session") or "",
              "status": meta.get("status") or "active", "source": source,
              "source_dir": source.rsplit("/", 1)[0] + "/" if "/" in source else "",
              **{name: meta.get(name) or "" for name in ("tool", "agent", "cache_scope")}}
    if meta.get("ts_epoch") is not None:
        fields["ts"] = int(meta["ts_epoch"])
    return tantivy.Document(**fields)


@dataclass
class Hits:
    """BM25 matches, and the score a document holding each query word once would get.

    Max-normalised BM25 makes the best hit 1.0 whatever it matched. `ideal`
    is Σ idf over the query's words and CJK pairs (BM25 with tf = 1 at the
    average length), so score / ideal is the share of the query's weight a
    hit matched: a calibrated relevance, near 0 when only a common word or
    nothing of the query occurs in the store. A long query (a whole dialogue
    so far) is judged as if it held `ideal_terms` words of its average
    weight: no single memory can hold all of a dialogue's words.
    """
    scores: dict[str, float]
    ideal: float
    weights: dict[str, float] = field(default_factory=dict)  # the query's words (not CJK pairs) -> idf

    def coverage(self, unit_id: str) -> float:
        return min(1.0, self.scores.get(unit_id, 0.0) / self.ideal) if self.ideal > 0 else 0.0


class Reader:
    """An open index's documents as they were when it was opened (one Tantivy searcher), and the
    unit ids of the documents read from it so far. A search reads its ~200 hits' ids: loading
    their stored documents took 0.25 ms of a warm 6k search, known addresses' ids 0.12 (after
    80 questions, 95% of the next 100's hits were known; bench/README.md "Cited measurements"). An
    address names a document of
    one segment set only, so the ids are kept with the searcher that gave them; the search's
    caller opens a Reader anew when the index changed (search.Searcher)."""

    def __init__(self, index: tantivy.Index):
        self.index = index
        self.searcher = index.searcher()
        self._ids: dict[tuple[int, int], str] = {}  # (segment_ord, doc) -> unit id

    def unit_ids(self, addresses: list[tantivy.DocAddress]) -> list[str]:
        ids, doc = self._ids, self.searcher.doc
        out = []
        for address in addresses:
            key = (address.segment_ord, address.doc)
            unit_id = ids.get(key)
            if unit_id is None:
                unit_id = ids[key] = doc(address)["id"][0]
            out.append(unit_id)
        return out


def search(reader: Reader, text: str, filters: Filters, limit: int, ideal_terms: int = 8,
           context_weight: float = 0.0) -> Hits:
    """The best `limit` matches of `text` within `filters`, by unit id.

    A message's turn before it (the `context` field) is searched too, at
    `context_weight` times its BM25: a reply is found by the words of the
    question it answers. Each query word counts once, from the field where it
    scores best (a disjunction max), so a reply that repeats a word of the turn
    before gains nothing from that turn's copy of it, and ranks below the turn
    that holds the words itself.
    """
    terms, pairs = _query_terms(simplified(text))
    if not terms and not pairs:
        return Hits({}, 0.0)

    def each_field(make) -> tantivy.Query:
        body = make("body")
        if context_weight <= 0:
            return body
        return tantivy.Query.disjunction_max_query([body, tantivy.Query.boost_query(make("context"), context_weight)])

    schema = reader.index.schema
    clauses = [(tantivy.Occur.Should, each_field(lambda name, t=term: tantivy.Query.term_query(schema, name, t)))
               for term in terms]
    clauses += [(tantivy.Occur.Should,
                 each_field(lambda name, p=pair: tantivy.Query.phrase_query(schema, name, list(p))))
                for pair in pairs]
    # A filter admits, it does not score: a filter's query scores its matches (Tantivy's term-set
    # query, which filters were, 1.0 each), which raised every match's BM25 (and its coverage,
    # score / ideal) by that much a filter, so a filter that admits everything (a scope all
    # records are in) reordered the results.
    clauses = [(tantivy.Occur.Must, tantivy.Query.boolean_query(clauses))] + [
        (occur, tantivy.Query.const_score_query(query, 0.0)) for occur, query in filters.tantivy_clauses(schema)]
    searcher = reader.searcher
    hits = searcher.search(tantivy.Query.boolean_query(clauses), limit=limit, count=False).hits
    documents = searcher.num_docs
    idf = {}
    for term in {*terms, *(c for pair in pairs for c in pair)}:
        found = searcher.doc_freq("body", term)
        idf[term] = math.log(1 + (documents - found + 0.5) / (found + 0.5))
    ideal = sum(idf[t] for t in terms) + sum(idf[a] + idf[b] for a, b in pairs)
    words = len(terms) + 2 * len(pairs)
    if words > ideal_terms:
        ideal *= ideal_terms / words
    return Hits(dict(zip(reader.unit_ids([address for _, address in hits]), [score for score, _ in hits])), ideal,
                {term: idf[term] for term in terms})


def rare_terms(doc_freqs, words: set[str], most: int) -> set[str]:
    """Of a text's content words (content_terms), those not numbers that at most `most` units hold
    (`doc_freqs`: words -> how many units hold each, search.candidates.UnitWords')."""
    asked = {word for word in words if not word.isdigit()}
    found = doc_freqs(asked) if asked else {}
    return {word for word in asked if 0 < found[word] <= most}


def content_terms(text: str) -> set[str]:
    """The analysed content words of `text`, as the index holds them."""
    return {t for t in _QUERY_ANALYZER.analyze(simplified(text)) if t not in _STEMMED_STOPWORDS}


def _query_terms(text: str) -> tuple[list[str], list[str]]:
    """The query's analysed words (stopwords dropped unless nothing else is left) and CJK pairs."""
    tokens = _QUERY_ANALYZER.analyze(text)
    content = [t for t in tokens if t not in _STEMMED_STOPWORDS]
    terms = list(Counter(content or tokens))  # a query of stopwords only still searches them
    pairs = list({run[i:i + 2]: None for run in IDEOGRAPHIC_RUN.findall(text) for i in range(len(run) - 1)})
    return terms, pairs


_QUERY_ANALYZER = analyzer()
_STEMMED_STOPWORDS = frozenset(t for word in STOPWORDS for t in _QUERY_ANALYZER.analyze(word))
