"""`GET /metrics`: Prometheus's text format, for a scraper holding the token or in an allowed
network; a 404 for everyone else, and for everyone while neither setting is made (off by
default: the series name tenants and describe their traffic)."""

from __future__ import annotations

import functools
import hmac
import ipaddress
import os
from collections.abc import Iterator

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

from memoryhub.core.ratelimit import client_address
from memoryhub.metrics.collectors import BrokerCollector, DatabaseCollector

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple[IpNetwork, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _in_allowed_network(request: HttpRequest) -> bool:
    address = client_address(request)
    if not address:
        return False
    ip = ipaddress.ip_address(address)
    return any(ip in network for network in _networks(tuple(settings.METRICS_ALLOWED_NETWORKS)))


def _has_token(request: HttpRequest) -> bool:
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), str(settings.METRICS_TOKEN).encode()
    )


class _ThisProcess:
    """The default registry's series, when each process is its own (no multiprocess dir)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def registry_for_scrape() -> CollectorRegistry:
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Every process's counters and histograms, summed from their files.
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector())
    registry.register(BrokerCollector())
    return registry


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token: str = settings.METRICS_TOKEN
    networks: list[str] = settings.METRICS_ALLOWED_NETWORKS
    if not token and not networks:
        raise Http404("Metrics are off.")
    if networks and not _in_allowed_network(request):
        raise Http404("Not found.")
    if token and not _has_token(request):
        response = HttpResponse("A bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry_for_scrape()), content_type=CONTENT_TYPE_LATEST)
