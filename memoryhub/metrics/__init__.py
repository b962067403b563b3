"""Prometheus metrics at /metrics: the series recorded as things happen (memoryhub.core.metrics),
and the levels read from the database and the broker at scrape time."""
