"""Reading Prometheus's text format in tests."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample named `name` (a full sample name: `..._total`, `..._bucket`, `..._count`)."""
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def value(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples named `name` whose labels include `labels`; None when none is."""
    found = [v for got, v in samples(text, name) if labels.items() <= got.items()]
    return sum(found) if found else None
