"""Full-text ranking behind one small interface: a query and candidate rows in, scored ids out.

Filters (tenant, person, tags, dates) stay ordinary Django querysets; a ranker only orders and
cuts them. A semantic ranker can later implement the same protocol and be fused with this one
(e.g. reciprocal rank fusion over both lists) without the endpoints changing.

User text never reaches the database's query syntax: it is cut into words made of letters and
digits only, and those words are OR'ed — an AND of every word of a natural question ("does the
user have a preference for dark mode?") finds nothing in most stores. Stemming is the
database's: PostgreSQL's `english` configuration, SQLite FTS5's `porter` tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, FloatField, Model, QuerySet
from django.db.models.expressions import RawSQL

MAX_QUERY_TERMS = 32
# The longest query any search or context call takes (the API, the pages, the MCP tools).
MAX_QUERY_CHARS = 1000
_WORD = re.compile(r"[^\W_]+")

# Words that carry no meaning in a question; dropped so they neither match nor cost anything.
# (PostgreSQL drops its own list too; FTS5 would otherwise match them.)
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves user users""".split()  # noqa: SIM905 (a word list reads better as text)
)


class EmptySearchQuery(ValueError):
    """The query has no word that could match anything."""


def search_terms(text: str) -> list[str]:
    """The distinct lowercase words of `text` worth searching for, at most MAX_QUERY_TERMS.

    Raises EmptySearchQuery when nothing is left (punctuation only, or stopwords only).
    """
    words = [word.lower() for word in _WORD.findall(text[:MAX_QUERY_CHARS])]
    terms = [word for word in dict.fromkeys(words) if word not in STOPWORDS]
    if not terms:
        raise EmptySearchQuery("The query has no searchable words.")
    return terms[:MAX_QUERY_TERMS]


@dataclass(frozen=True)
class ScoredId:
    id: Any
    score: float


class Ranker(Protocol):
    def rank(self, *, query: str, candidates: QuerySet[Any], limit: int) -> list[ScoredId]:
        """The best `limit` of `candidates` for `query`, best first; higher scores are better."""
        ...


@dataclass(frozen=True)
class RankSQL:
    """A full-text match and its score as SQL fragments with their parameters."""

    match: str
    match_params: list[Any]
    score: str
    score_params: list[Any]


@dataclass(frozen=True)
class FullTextRanker:
    """Ranks rows of one model by one text column.

    PostgreSQL: `to_tsvector('english', column) @@ to_tsquery(...)`, scored by `ts_rank_cd`, over
    a GIN index on that expression — or over a stored tsvector column (`pg_vector_column`).
    SQLite: an FTS5 table (`fts_table`, external content, rowid = the model's integer pk) kept in
    step by triggers, matched with MATCH and scored by `bm25()` (negated: lower is better there).
    """

    column: str
    fts_table: str
    # PostgreSQL: a stored tsvector column of the same text, if the table has one (it saves
    # running to_tsvector on every candidate row).
    pg_vector_column: str | None = None

    def sql(self, *, query: str, model: type[Model], connection: BaseDatabaseWrapper) -> RankSQL:
        """The match condition and the score of `query` over `model`'s table, as SQL that
        names the table by its own name (no alias). Raises EmptySearchQuery."""
        terms = search_terms(query)
        quote = connection.ops.quote_name
        table = quote(model._meta.db_table)
        pk = quote(model._meta.pk.column)
        if connection.vendor == "postgresql":
            # Terms are letters and digits only, so joining them with | cannot form other syntax.
            tsquery = " | ".join(terms)
            vector = (
                f"{table}.{quote(self.pg_vector_column)}"
                if self.pg_vector_column
                else f"to_tsvector('english'::regconfig, {table}.{quote(self.column)})"
            )
            tsq = "to_tsquery('english'::regconfig, %s)"
            return RankSQL(
                match=f"{vector} @@ {tsq}",
                match_params=[tsquery],
                score=f"ts_rank_cd({vector}, {tsq})",
                score_params=[tsquery],
            )
        if connection.vendor == "sqlite":
            # Each term double-quoted: FTS5 reads a quoted string as plain text, never syntax.
            fts_query = " OR ".join(f'"{term}"' for term in terms)
            fts = quote(self.fts_table)
            return RankSQL(
                match=f"{table}.{pk} IN (SELECT rowid FROM {fts} WHERE {fts} MATCH %s)",
                match_params=[fts_query],
                score=(
                    f"(SELECT -bm25({fts}) FROM {fts} WHERE {fts} MATCH %s "
                    f"AND {fts}.rowid = {table}.{pk})"
                ),
                score_params=[fts_query],
            )
        raise NotImplementedError(connection.vendor)  # pragma: no cover - settings refuse others

    def rank(self, *, query: str, candidates: QuerySet[Any], limit: int) -> list[ScoredId]:
        connection = connections[candidates.db]
        parts = self.sql(query=query, model=candidates.model, connection=connection)
        match = RawSQL(parts.match, parts.match_params, output_field=BooleanField())
        score = RawSQL(parts.score, parts.score_params, output_field=FloatField())
        rows = (
            candidates.filter(match)
            .annotate(_score=score)
            .order_by("-_score", "-pk")
            .values_list("pk", "_score")[:limit]
        )
        return [ScoredId(id=pk_value, score=float(value or 0)) for pk_value, value in rows]
