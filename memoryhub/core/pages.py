"""The page kit every page view uses: one spelling each for "is this an htmx partial request",
"a missing row is a 404", "how deletion counts read" and "the links around a page of rows"
(rendered by templates/core/pagination.html)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page
from django.http import Http404, HttpRequest

from memoryhub.core.errors import ResourceNotFound


def htmx_partial(request: HttpRequest, *, target: str | None = None) -> bool:
    """True when htmx asked for a fragment (not a boosted whole-page load); with `target`, only
    when it asked for that element."""
    htmx: Any = getattr(request, "htmx", None)
    if not htmx or getattr(htmx, "boosted", False):
        return False
    return target is None or htmx.target == target


@contextmanager
def not_found_as_404(message: str = "Not found.") -> Iterator[None]:
    """Turn a selector's ResourceNotFound (a missing or another tenant's id) into a page 404."""
    try:
        yield
    except ResourceNotFound:
        raise Http404(message) from None


def kind_label(kind: str) -> str:
    """A deletion-count kind as people read it: "state_entries" -> "state entries"."""
    return kind.replace("_", " ")


class CountRow(tuple[str, int]):
    """One row of a confirmation's counts: unpacks as (label, count), and also answers `.kind`,
    `.label`, `.count` (and row["kind"] …, as templates and callers read it)."""

    kind: str

    def __new__(cls, *, kind: str, count: int) -> CountRow:
        row = super().__new__(cls, (kind_label(kind), count))
        row.kind = kind
        return row

    @property
    def label(self) -> str:
        return self[0]

    @property
    def count(self) -> int:  # type: ignore[override]  # the row's number, not tuple.count
        return self[1]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return getattr(self, key)
        return super().__getitem__(key)


def count_rows(counts: dict[str, int]) -> list[CountRow]:
    """Deletion counts as rows for a confirmation, in the order given."""
    return [CountRow(kind=kind, count=count) for kind, count in counts.items()]


def counts_text(counts: dict[str, int]) -> str:
    """Deletion counts as one phrase: "3 messages, 1 state entries"."""
    return ", ".join(f"{count} {kind_label(kind)}" for kind, count in counts.items())


@dataclass(frozen=True)
class Pager:
    """A page of rows and the links around it: plain links (they work without JavaScript),
    which htmx also follows into the element `target` (an id; none: whole-page links)."""

    page: Page[Any]
    param: str
    target: str
    swap: str
    label: str
    previous_url: str | None
    next_url: str | None


def pager_for(
    request: HttpRequest,
    page: Page[Any],
    *,
    label: str,
    param: str = "page",
    target: str = "",
    swap: str = "outerHTML",
) -> Pager:
    """The pager for `page`, its links keeping the request's other query parameters."""

    def url(number: int) -> str:
        query = request.GET.copy()
        query[param] = str(number)
        return f"?{query.urlencode()}"

    return Pager(
        page=page,
        param=param,
        target=target,
        swap=swap,
        label=label,
        previous_url=url(page.previous_page_number()) if page.has_previous() else None,
        next_url=url(page.next_page_number()) if page.has_next() else None,
    )
