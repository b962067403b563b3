"""Reads of facts, including full-text search."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connections, router
from django.db.models import Q, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from facts_app.models import Fact
from memoryhub.accounts.models import Tenant
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.jsonfilters import filter_json_list_contains_all
from memoryhub.core.search import FullTextRanker, Ranker

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


def fact_search(
    *,
    tenant: Tenant,
    query: str,
    filters: FactFilters,
    top_k: int = 10,
    ranker: Ranker = FACT_RANKER,
) -> list[ScoredFact]:
    """The `top_k` facts most relevant to `query`, best first. Raises EmptySearchQuery."""
    candidates = fact_list_for_tenant(tenant=tenant, filters=filters)
    scored = ranker.rank(query=query, candidates=candidates, limit=top_k)
    by_id = (
        Fact.objects.for_tenant(tenant)
        .select_related("end_user")
        .in_bulk([item.id for item in scored])
    )
    return [
        ScoredFact(fact=by_id[item.id], score=item.score) for item in scored if item.id in by_id
    ]


@dataclass(frozen=True)
class FactHit:
    id: int
    content: str
    score: float


def fact_search_for_person(
    *,
    tenant_id: int,
    end_user_id: int,
    query: str,
    top_k: int = 10,
    ranker: FullTextRanker = FACT_RANKER,
) -> list[FactHit]:
    """The `top_k` current facts of one person most relevant to `query`, best first: what
    `fact_search` finds with `FactFilters(user_id=<that person's id>)`, as id, content and
    score only. Raises EmptySearchQuery.

    One query, written as SQL around the ranker's match and score: this runs before nearly
    every model call a bot makes, where `fact_search` builds its statement through the ORM
    (several times the database's time) and then loads the hits by id in a second query.
    The person is named by id, which spares the join on end users.
    """
    connection = connections[router.db_for_read(Fact)]
    rank = ranker.sql(query=query, model=Fact, connection=connection)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    # What fact_list_for_tenant filters by default (not superseded, not expired), then the
    # ranker's match, in FullTextRanker.rank's order.
    sql = f"""
        SELECT "facts_app_fact"."id", {rank.score} AS "score", "facts_app_fact"."content"
        FROM "facts_app_fact"
        WHERE "facts_app_fact"."tenant_id" = %s AND "facts_app_fact"."end_user_id" = %s
          AND "facts_app_fact"."superseded_by_id" IS NULL
          AND ("facts_app_fact"."valid_until" IS NULL OR "facts_app_fact"."valid_until" > %s)
          AND {rank.match}
        ORDER BY "score" DESC, "facts_app_fact"."id" DESC
        LIMIT %s
    """  # noqa: S608 (the fragments are the ranker's fixed SQL; user text goes in as parameters)
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [*rank.score_params, tenant_id, end_user_id, now, *rank.match_params, top_k]
        )
        rows = cursor.fetchall()
    return [
        FactHit(id=fact_id, content=content, score=float(score or 0))
        for fact_id, score, content in rows
    ]
