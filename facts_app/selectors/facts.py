"""Reads of facts, including full-text search."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, F, FilteredRelation, Q, QuerySet, TextField, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from facts_app.models import Fact
from facts_app.recall import (
    LEXICAL_ONLY,
    MAX_CANDIDATES,
    FactCandidate,
    candidates_rank,
    index_discard,
    recall_supported,
)
from memoryhub.accounts.models import EndUser, Tenant, end_user_id_is_storable
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from memoryhub.core.jsonfilters import filter_json_list_contains_all
from memoryhub.core.recall import Mode, Signals
from memoryhub.core.rows import (
    ColumnConverters,
    column_converters,
    compiled_timestamps,
    row_converted,
)
from memoryhub.core.search import FullTextRanker, Ranker
from memoryhub.llm.embeddings import get_embedder

FACT_RANKER = FullTextRanker(
    column="search_text", fts_table="facts_app_fact_fts", pg_vector_column="search_vector"
)


@dataclass(frozen=True)
class FactFilters:
    user_id: str | None = None
    tags: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    # Facts as they stood at that moment: created by then, not yet expired or superseded.
    valid_at: dt.datetime | None = None
    include_superseded: bool = False


def fact_get_for_tenant(*, tenant: Tenant, fact_id: int | str) -> Fact:
    try:
        pk = int(fact_id)
    except (TypeError, ValueError):
        raise ResourceNotFound("No such fact.") from None
    found = list(Fact.objects.for_tenant(tenant).select_related("end_user").filter(pk=pk)[:1])
    if not found:
        raise ResourceNotFound("No such fact.")
    return found[0]


def fact_list_for_tenant(*, tenant: Tenant, filters: FactFilters) -> QuerySet[Fact]:
    """The tenant's facts narrowed by `filters`; superseded or expired ones only on request."""
    facts: QuerySet[Fact] = Fact.objects.for_tenant(tenant).select_related("end_user")
    if filters.user_id is not None:
        # Naming the person's tenant too lets PostgreSQL use the (tenant, external_id) index;
        # without it the join scans every tenant's end users.
        facts = facts.filter(end_user__tenant=tenant, end_user__external_id=filters.user_id)
    facts = filter_json_list_contains_all(facts, field="tags", values=list(filters.tags))
    for position, (key, value) in enumerate(filters.metadata):
        alias = f"_metadata_{position}"
        # Compared as text: a metadata value is matched the way it reads ("5" matches 5 too).
        facts = facts.alias(**{alias: Cast(KeyTextTransform(key, "metadata"), TextField())}).filter(
            **{alias: value}
        )
    if filters.created_after is not None:
        facts = facts.filter(created_at__gte=filters.created_after)
    if filters.created_before is not None:
        facts = facts.filter(created_at__lt=filters.created_before)
    if filters.valid_at is not None:
        # Superseding sets valid_until, so this also finds what was true before a correction.
        facts = facts.filter(created_at__lte=filters.valid_at).filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=filters.valid_at)
        )
    elif not filters.include_superseded:
        facts = facts.filter(superseded_by__isnull=True).filter(
            Q(valid_until__isnull=True) | Q(valid_until__gt=timezone.now())
        )
    return facts


@dataclass(frozen=True)
class ScoredFact:
    fact: Fact
    score: float
    # The raw lexical (BM25 or the database's rank) and dense (cosine) scores, and which parts
    # of the ranking matched; a database search is lexical only.
    lexical_score: float | None = None
    dense_score: float | None = None
    signals: Signals = LEXICAL_ONLY


@dataclass(frozen=True)
class FactSearchResult:
    mode: Mode  # the mode that ran (hybrid with nothing embedded yet runs as lexical)
    hits: list[ScoredFact]


def fact_candidates(
    *,
    tenant: Tenant,
    filters: FactFilters,
    end_user_id: int | None = None,
    tenant_wide: bool = False,
) -> list[FactCandidate] | None:
    """Every fact of one person that `filters` allow (the person: `filters.user_id`, or
    `end_user_id`), newest first, with what ranking needs; None when there are more than
    MAX_CANDIDATES (the caller then searches in the database). One query.

    `tenant_wide` adds the facts of no person (with `end_user_id` None: those alone); the
    caller ranks each owner's apart (`candidates_rank` ranks one owner's at a time).

    The statement is the ORM's (so every filter is fact_list_for_tenant's), but its rows are
    read from the cursor as the database sends them: Django's per-row conversions (JSON tags,
    datetimes) cost several times the query at a thousand facts, and ranking parses them only
    when it builds an index.
    """
    if filters == FactFilters() and tenant.person is None:
        # (A person-bound credential's narrowing is for_tenant's: it takes the ORM's way.)
        return _current_candidates(tenant=tenant, end_user_id=end_user_id, tenant_wide=tenant_wide)
    facts = fact_list_for_tenant(tenant=tenant, filters=filters)
    if tenant_wide:
        owner = Q(end_user__isnull=True)
        facts = facts.filter(owner if end_user_id is None else owner | Q(end_user_id=end_user_id))
    elif end_user_id is not None:
        facts = facts.filter(end_user_id=end_user_id)
    embedder = get_embedder()
    if embedder is not None:
        # Only a vector of the current model counts: after a model change the facts rank
        # lexically until they are embedded again.
        facts = facts.alias(
            current_vector=FilteredRelation(
                "vector", condition=Q(vector__model=embedder.model_name)
            )
        ).annotate(vector_written_at=F("current_vector__created_at"))
    else:
        facts = facts.annotate(vector_written_at=Value(None, output_field=DateTimeField()))
    query = (
        facts.order_by("-created_at", "-pk")
        .values_list("pk", "end_user_id", "content", "tags", "created_at", "vector_written_at")[
            : MAX_CANDIDATES + 1
        ]
        .query
    )
    sql, params = query.get_compiler(using=facts.db).as_sql()
    with connections[facts.db].cursor() as cursor:
        compiled_timestamps(cursor)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return candidates_from_rows(rows)


# fact_candidates without filters (the person's current facts: the context's, and most searches'),
# written once as SQL: the ORM built this statement anew per call, at several times its
# database time. The same rows in the same order as the ORM's statement; {vector} and {owner}
# are fixed fragments (below).
_CURRENT_CANDIDATES_SQL = """
SELECT f."id", f."end_user_id", f."content", f."tags", f."created_at",
       {vector} AS "vector_written_at"
FROM "facts_app_fact" AS f{join}
WHERE f."tenant_id" = %s AND f."superseded_by_id" IS NULL
  AND (f."valid_until" IS NULL OR f."valid_until" > %s) AND {owner}
ORDER BY f."created_at" DESC, f."id" DESC
LIMIT {{limit}}
"""
_OWNER_SQL = {
    # (tenant_wide, a person given): the owner condition
    (False, False): "TRUE",
    (False, True): 'f."end_user_id" = %s',
    (True, False): 'f."end_user_id" IS NULL',
    (True, True): '(f."end_user_id" IS NULL OR f."end_user_id" = %s)',
}
_VECTOR_JOIN = (
    '\nLEFT OUTER JOIN "facts_app_factvector" AS v ON (f."id" = v."fact_id" AND v."model" = %s)'
)
_CURRENT_CANDIDATES = {
    (embedded, *owner): _CURRENT_CANDIDATES_SQL.format(
        vector='v."created_at"' if embedded else "NULL",
        join=_VECTOR_JOIN if embedded else "",
        owner=condition,
    )
    for embedded in (False, True)
    for owner, condition in _OWNER_SQL.items()
}


def _current_candidates(
    *, tenant: Tenant, end_user_id: int | None, tenant_wide: bool
) -> list[FactCandidate] | None:
    """fact_candidates(filters=FactFilters()) in a statement built once."""
    connection = connections[router.db_for_read(Fact)]
    sql, params = current_candidates_query(
        connection=connection, tenant_id=tenant.pk, end_user_id=end_user_id, tenant_wide=tenant_wide
    )
    with connection.cursor() as cursor:
        compiled_timestamps(cursor)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return candidates_from_rows(rows)


def current_candidates_query(
    *, connection: BaseDatabaseWrapper, tenant_id: int, end_user_id: int | None, tenant_wide: bool
) -> tuple[str, list[Any]]:
    """The statement of fact_candidates(filters=FactFilters()) for a tenant not bound to a
    person, and its parameters: the context reads it with its other reads
    (memoryhub.context.selectors). Its rows, read raw: candidates_from_rows."""
    embedder = get_embedder()
    person = end_user_id is not None
    # The limit written in, as the context's message read writes its own (a prepared statement's
    # generic plan would not know it).
    sql = _CURRENT_CANDIDATES[(embedder is not None, tenant_wide, person)].format(
        limit=int(MAX_CANDIDATES) + 1
    )
    params: list[Any] = [] if embedder is None else [embedder.model_name]
    params += [tenant_id, connection.ops.adapt_datetimefield_value(timezone.now())]
    params += [end_user_id] if person else []
    return sql, params


def candidates_from_rows(rows: Iterable[Sequence[Any]]) -> list[FactCandidate] | None:
    """The candidates of rows read raw as fact_candidates reads them (id, person, content, tags,
    created_at, vector_written_at), in their order; None when there are more than
    MAX_CANDIDATES (the caller then searches in the database)."""
    candidates = [FactCandidate._make(row) for row in rows]
    return None if len(candidates) > MAX_CANDIDATES else candidates


# _current_candidates for a person named by their id string: the person's row joined with their
# current facts, so that the search learns whether the person exists (no row: a 404), their pk
# and their facts in one statement instead of a lookup and then the facts. The person's row
# comes once even without a fact (the outer join's NULLs); the facts are those
# _CURRENT_CANDIDATES reads for the person's pk, in the same order.
_PERSON_CANDIDATES_SQL = """
SELECT u."id", u."external_id", f."id", f."end_user_id", f."content", f."tags", f."created_at",
       {vector}
FROM "accounts_enduser" AS u
LEFT OUTER JOIN "facts_app_fact" AS f ON (
  f."tenant_id" = %s AND f."end_user_id" = u."id" AND f."superseded_by_id" IS NULL
  AND (f."valid_until" IS NULL OR f."valid_until" > %s)
){join}
WHERE u."tenant_id" = %s AND u."external_id" = %s
ORDER BY f."created_at" DESC, f."id" DESC
LIMIT %s
"""
_PERSON_CANDIDATES = {
    embedded: _PERSON_CANDIDATES_SQL.format(
        vector='v."created_at"' if embedded else "NULL",
        join=_VECTOR_JOIN if embedded else "",
    )
    for embedded in (False, True)
}


@dataclass(frozen=True)
class PersonCandidates:
    end_user: EndUser  # only its pk, tenant and external_id loaded (the rest on access)
    candidates: list[FactCandidate] | None  # None: more than MAX_CANDIDATES


def _person_candidates(*, tenant: Tenant, external_id: str) -> PersonCandidates | None:
    """The person of the tenant with this id (None: no such person, as end_user_get_for_tenant's
    ResourceNotFound) and fact_candidates(filters=FactFilters(), end_user_id=<their pk>), in one
    statement. For a tenant not bound to a person (for_tenant is then the tenant's column)."""
    if not end_user_id_is_storable(external_id):
        return None
    connection = connections[router.db_for_read(Fact)]
    embedder = get_embedder()
    params: list[Any] = [tenant.pk, connection.ops.adapt_datetimefield_value(timezone.now())]
    params += [] if embedder is None else [embedder.model_name]
    params += [tenant.pk, external_id, MAX_CANDIDATES + 1]
    with connection.cursor() as cursor:
        compiled_timestamps(cursor)
        cursor.execute(_PERSON_CANDIDATES[embedder is not None], params)
        rows = cursor.fetchall()
    if not rows:
        return None
    end_user = EndUser.from_db(
        connection.alias, ["id", "tenant_id", "external_id"], [rows[0][0], tenant.pk, rows[0][1]]
    )
    if len(rows) > MAX_CANDIDATES:
        return PersonCandidates(end_user=end_user, candidates=None)
    candidates = [FactCandidate._make(row[2:]) for row in rows if row[2] is not None]
    return PersonCandidates(end_user=end_user, candidates=candidates)


def _filters_key(filters: FactFilters) -> FactFilters:
    # The person is named by id in the cache key; the rest of the filters chose the candidates.
    return dataclasses.replace(filters, user_id=None)


def fact_search_result(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    top_k: int = 10,
    mode: Mode = "hybrid",
    ranker: Ranker = FACT_RANKER,
    end_user: EndUser | None = None,
) -> FactSearchResult:
    """The `top_k` facts most relevant to `query`, best first, and the mode that ran.

    With a person (`filters.user_id`) the database chooses the candidates and the hybrid
    search of memoryhub.core.recall ranks them (facts_app.recall), in `mode`. Without one (the
    whole tenant, possibly millions of facts) it is the database's full-text search, lexical;
    a semantic search then is refused (InvalidInput on `mode`). So is a person with more than
    MAX_CANDIDATES matching facts, or a query whose words the engine cannot read (another
    script). Raises EmptySearchQuery for a query with no searchable word.

    `end_user`: the person `filters.user_id` names, when the caller has looked them up already
    (the API does, for its 404): their facts are then read by id, without a join on end users,
    and the hits come with it as their `end_user`.
    """
    candidates: list[FactCandidate] | None = None
    if filters.user_id is not None and (mode == "semantic" or recall_supported(query)):
        if end_user is not None:
            # The person is known by id: no join on end users to find their facts.
            candidates = fact_candidates(
                tenant=tenant,
                filters=dataclasses.replace(filters, user_id=None),
                end_user_id=end_user.pk,
            )
        else:
            candidates = fact_candidates(tenant=tenant, filters=filters)
    return _search_over(
        tenant=tenant,
        query=query,
        filters=filters,
        top_k=top_k,
        mode=mode,
        ranker=ranker,
        candidates=candidates,
        end_user=end_user,
    )


def fact_search_result_for_person(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    top_k: int = 10,
    mode: Mode = "hybrid",
) -> FactSearchResult:
    """`fact_search_result` for the person `filters.user_id` names, who must exist:
    ResourceNotFound otherwise (before anything else is checked), as end_user_get_for_tenant
    then fact_search_result(end_user=...) answer, with the same hits.

    The common search (no other filter, a tenant not bound to a person, a query the engine
    reads) learns whether the person exists, their pk and their facts in one statement; any
    other takes the lookup and then fact_search_result."""
    user_id = filters.user_id
    if user_id is None:
        raise ValueError("fact_search_result_for_person needs filters.user_id.")
    if (
        tenant.person is None
        and filters == FactFilters(user_id=user_id)
        and (mode == "semantic" or recall_supported(query))
    ):
        person = _person_candidates(tenant=tenant, external_id=user_id)
        if person is None:
            raise ResourceNotFound("No such user.")
        return _search_over(
            tenant=tenant,
            query=query,
            filters=filters,
            top_k=top_k,
            mode=mode,
            ranker=FACT_RANKER,
            candidates=person.candidates,
            end_user=person.end_user,
        )
    end_user = end_user_get_for_tenant(tenant=tenant, external_id=user_id)
    return fact_search_result(
        tenant=tenant, query=query, filters=filters, top_k=top_k, mode=mode, end_user=end_user
    )


def _search_over(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    top_k: int,
    mode: Mode,
    ranker: Ranker,
    candidates: list[FactCandidate] | None,
    end_user: EndUser | None,
) -> FactSearchResult:
    """The engine's ranking of the person's candidates; without them (no person, too many
    facts, a query the engine cannot read), the database's full-text search."""
    if candidates is None:
        return _database_search(
            tenant=tenant, query=query, filters=filters, top_k=top_k, mode=mode, ranker=ranker
        )
    return _ranked(
        tenant=tenant,
        query=query,
        filters=filters,
        mode=mode,
        top_k=top_k,
        candidates=candidates,
        end_user=end_user,
    )


def _database_search(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    top_k: int,
    mode: Mode,
    ranker: Ranker = FACT_RANKER,
) -> FactSearchResult:
    """The database's full-text search over the filtered facts (lexical)."""
    if mode == "semantic" and filters.user_id is None:
        raise InvalidInput(
            field="mode",
            message="Semantic search reads one person's facts: give user_id.",
            code="person_required",
        )
    candidates_qs = fact_list_for_tenant(tenant=tenant, filters=filters)
    scored = ranker.rank(query=query, candidates=candidates_qs, limit=top_k)
    by_id = (
        Fact.objects.for_tenant(tenant)
        .select_related("end_user")
        .in_bulk([item.id for item in scored])
    )
    return FactSearchResult(
        mode="lexical",
        hits=[
            ScoredFact(fact=by_id[item.id], score=item.score, lexical_score=item.score)
            for item in scored
            if item.id in by_id
        ],
    )


def _facts_by_id(*, tenant: Tenant, ids: list[int]) -> dict[int, Fact]:
    """`Fact.objects.for_tenant(tenant).in_bulk(ids)`. A tenant not bound to a person (for_tenant
    is then the tenant's column alone) reads them with a statement of its own and builds the
    models as the ORM's reads do (each field's database converters, then `Model.from_db`):
    building and compiling a queryset, even a raw one, cost more than the database's time for
    a search's ten hits."""
    if tenant.person is not None or not ids:
        return dict(Fact.objects.for_tenant(tenant).in_bulk(ids))
    connection = connections[router.db_for_read(Fact)]
    select, names, converters = _fact_reader(connection)
    sql = f"{select} IN ({', '.join(['%s'] * len(ids))})"
    with connection.cursor() as cursor:
        compiled_timestamps(cursor)
        cursor.execute(sql, [tenant.pk, *ids])
        rows = cursor.fetchall()
    facts: dict[int, Fact] = {}
    for row in rows:
        values = row_converted(row=row, converters=converters, connection=connection)
        fact = Fact.from_db(connection.alias, names, values)
        facts[fact.pk] = fact
    return facts


_FACT_READER = "memoryhub_fact_reader"


def _fact_reader(
    connection: BaseDatabaseWrapper,
) -> tuple[str, list[str], ColumnConverters]:
    """The hits statement (up to its id list), the fields' attnames in column order and, per
    column that has any, the converters the ORM applies (the backend's, then the field's), as
    the compiler finds them: worked out once per connection."""
    reader = getattr(connection, _FACT_READER, None)
    if reader is None:
        quote = connection.ops.quote_name
        fields = Fact._meta.concrete_fields
        columns = ", ".join(quote(field.column) for field in fields)
        select = (
            f"SELECT {columns} FROM {quote(Fact._meta.db_table)} "  # noqa: S608 (model metadata)
            f"WHERE {quote('tenant_id')} = %s AND {quote('id')}"
        )
        converters = column_converters(
            connection=connection, columns=[field.get_col(Fact._meta.db_table) for field in fields]
        )
        reader = (select, [field.attname for field in fields], converters)
        setattr(connection, _FACT_READER, reader)
    return cast(tuple[str, list[str], ColumnConverters], reader)


def _ranked(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    mode: Mode,
    top_k: int,
    candidates: list[FactCandidate],
    end_user: EndUser | None = None,
) -> FactSearchResult:
    found = candidates_rank(
        tenant_id=tenant.pk,
        filters_key=_filters_key(filters),
        candidates=candidates,
        query=query,
        mode=mode,
        top_k=top_k,
    )
    ids = [ranked.candidate.id for ranked in found.hits]
    if end_user is None:
        by_id = Fact.objects.for_tenant(tenant).select_related("end_user").in_bulk(ids)
    else:
        # Every hit is the person's (the candidates were read by their id): no join.
        by_id = _facts_by_id(tenant=tenant, ids=ids)
        for fact in by_id.values():
            fact.end_user = end_user
    return FactSearchResult(
        mode=found.mode,
        hits=[
            ScoredFact(
                fact=by_id[ranked.candidate.id],
                score=ranked.hit.score,
                lexical_score=ranked.hit.lexical_score,
                dense_score=ranked.hit.dense_score,
                signals=ranked.hit.signals,
            )
            for ranked in found.hits
            if ranked.candidate.id in by_id
        ],
    )


def fact_search(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    top_k: int = 10,
    mode: Mode = "hybrid",
    ranker: Ranker = FACT_RANKER,
) -> list[ScoredFact]:
    """The hits of `fact_search_result`. Raises EmptySearchQuery."""
    return fact_search_result(
        tenant=tenant, query=query, filters=filters, top_k=top_k, mode=mode, ranker=ranker
    ).hits


@dataclass(frozen=True)
class FactHit:
    id: int
    content: str
    score: float


def fact_recall_for_person(
    *, tenant: Tenant, end_user_id: int, query: str, top_k: int = 10
) -> list[FactHit]:
    """The `top_k` current facts of one person most relevant to `query`, best first: what
    `fact_search` finds with `FactFilters(user_id=<that person's id>)`, as id, content and
    score only, in one query once the person's index is cached (the context reads this before
    nearly every model call a bot makes). Raises EmptySearchQuery."""
    if recall_supported(query):
        candidates = fact_candidates(tenant=tenant, filters=FactFilters(), end_user_id=end_user_id)
        if candidates is not None:
            if not candidates:
                # Nothing left of the person (all deleted, or erased): nothing to keep either.
                index_discard(
                    tenant_id=tenant.pk, end_user_id=end_user_id, filters_key=FactFilters()
                )
            found = candidates_rank(
                tenant_id=tenant.pk,
                filters_key=FactFilters(),
                candidates=candidates,
                query=query,
                top_k=top_k,
            )
            return [
                FactHit(
                    id=ranked.candidate.id, content=ranked.candidate.content, score=ranked.hit.score
                )
                for ranked in found.hits
            ]
    return fact_search_for_person(
        tenant_id=tenant.pk, end_user_id=end_user_id, query=query, top_k=top_k
    )


def fact_search_for_person(
    *,
    tenant_id: int,
    end_user_id: int | None,
    query: str,
    top_k: int = 10,
    ranker: FullTextRanker = FACT_RANKER,
) -> list[FactHit]:
    """The `top_k` current facts of one person (None: the tenant-wide facts, of no person) most
    relevant to `query`, best first: what `fact_search` finds with `FactFilters(user_id=<that
    person's id>)`, as id, content and score only. Raises EmptySearchQuery.

    One query, written as SQL around the ranker's match and score: this runs before nearly
    every model call a bot makes, where `fact_search` builds its statement through the ORM
    (several times the database's time) and then loads the hits by id in a second query.
    The person is named by id, which spares the join on end users.
    """
    connection = connections[router.db_for_read(Fact)]
    rank = ranker.sql(query=query, model=Fact, connection=connection)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    owner = "IS NULL" if end_user_id is None else "= %s"
    owner_params = [] if end_user_id is None else [end_user_id]
    # What fact_list_for_tenant filters by default (not superseded, not expired), then the
    # ranker's match, in FullTextRanker.rank's order.
    sql = f"""
        SELECT "facts_app_fact"."id", {rank.score} AS "score", "facts_app_fact"."content"
        FROM "facts_app_fact"
        WHERE "facts_app_fact"."tenant_id" = %s AND "facts_app_fact"."end_user_id" {owner}
          AND "facts_app_fact"."superseded_by_id" IS NULL
          AND ("facts_app_fact"."valid_until" IS NULL OR "facts_app_fact"."valid_until" > %s)
          AND {rank.match}
        ORDER BY "score" DESC, "facts_app_fact"."id" DESC
        LIMIT %s
    """  # noqa: S608 (the fragments are the ranker's fixed SQL; user text goes in as parameters)
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [*rank.score_params, tenant_id, *owner_params, now, *rank.match_params, top_k]
        )
        rows = cursor.fetchall()
    return [
        FactHit(id=fact_id, content=content, score=float(score or 0))
        for fact_id, score, content in rows
    ]


@dataclass(frozen=True)
class ContextFacts:
    personal: list[FactHit]
    tenant_wide: list[FactHit]


def fact_recall_for_context(
    *,
    tenant: Tenant,
    end_user_id: int | None,
    query: str,
    top_k: int = 10,
    candidates_read: bool = False,
    candidates: list[FactCandidate] | None = None,
) -> ContextFacts:
    """The `top_k` current facts of the person (none without one) and the `top_k` tenant-wide
    ones (of no person) most relevant to `query`, each best first, ranked apart as
    `fact_recall_for_person` ranks a person's: their scores come from different indexes and do
    not compare. One query for both once their indexes are cached, none when the caller has
    read them already (`candidates_read`: `candidates` is what current_candidates_query's rows
    gave, person and tenant-wide). Raises EmptySearchQuery."""
    owners: list[int | None] = [None] if end_user_id is None else [end_user_id, None]
    if recall_supported(query):
        if not candidates_read:
            candidates = fact_candidates(
                tenant=tenant, filters=FactFilters(), end_user_id=end_user_id, tenant_wide=True
            )
        if candidates is not None:
            hits: dict[int | None, list[FactHit]] = {}
            for owner in owners:
                mine = [candidate for candidate in candidates if candidate.end_user_id == owner]
                if not mine:
                    # Nothing left of the owner (all deleted, or erased): nothing to keep either.
                    index_discard(tenant_id=tenant.pk, end_user_id=owner, filters_key=FactFilters())
                    hits[owner] = []
                    continue
                found = candidates_rank(
                    tenant_id=tenant.pk,
                    filters_key=FactFilters(),
                    candidates=mine,
                    query=query,
                    top_k=top_k,
                )
                hits[owner] = [
                    FactHit(
                        id=ranked.candidate.id,
                        content=ranked.candidate.content,
                        score=ranked.hit.score,
                    )
                    for ranked in found.hits
                ]
            return ContextFacts(
                personal=[] if end_user_id is None else hits[end_user_id], tenant_wide=hits[None]
            )
    # Too many candidates (or a query the engine cannot read): the database ranks each owner's.
    found_by_owner = {
        owner: fact_search_for_person(
            tenant_id=tenant.pk, end_user_id=owner, query=query, top_k=top_k
        )
        for owner in owners
    }
    return ContextFacts(
        personal=[] if end_user_id is None else found_by_owner[end_user_id],
        tenant_wide=found_by_owner[None],
    )
