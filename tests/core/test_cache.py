"""The Redis cache backend (memoryhub.core.cache): Django's, its redis-py client built once per
connection pool instead of per call. It still does what Django's does, from many threads at once
and in a forked child (a Celery prefork worker, a gunicorn worker). Needs REDIS_URL (the
PostgreSQL + Redis run of `.ci/run`); the embedded default caches in local memory."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import caches

from memoryhub.core.cache import SharedClientRedisCache

pytestmark = pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs REDIS_URL")


_USED: list[str] = []  # the keys a test used, deleted after it


@pytest.fixture
def cache() -> Iterator[Any]:
    backend = caches["default"]
    yield backend
    backend.delete_many(_USED)
    _USED.clear()


def key() -> str:
    name = f"test-cache:{uuid.uuid4().hex}"
    _USED.append(name)
    return name


def test_the_settings_use_it_with_redis(cache: Any) -> None:
    assert isinstance(cache, SharedClientRedisCache)


def test_one_client_serves_every_call(cache: Any) -> None:
    client = cache._cache.get_client()
    assert cache._cache.get_client(write=True) is client
    one, other = key(), key()

    cache.set(one, {"a": 1}, timeout=30)
    assert cache.add(other, 5, timeout=30)
    assert not cache.add(other, 6, timeout=30)
    assert cache.incr(other, 2) == 7
    assert cache.get_many([one, other]) == {one: {"a": 1}, other: 7}
    assert cache.touch(one, timeout=60)
    cache.delete_many([one, other])
    assert cache.get(one, "gone") == "gone"
    assert cache._cache.get_client() is client


def test_threads_share_it(cache: Any) -> None:
    counter = key()
    cache.set(counter, 0, timeout=30)

    def count() -> None:
        for _ in range(50):
            cache.incr(counter)

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert cache.get(counter) == 400


def test_a_forked_child_uses_connections_of_its_own(cache: Any) -> None:
    shared = key()
    cache.set(shared, "before the fork", timeout=30)  # the parent holds a pooled connection

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it reads, then leave without pytest's teardown
        try:
            value = cache.get(shared)
            cache.set(shared, "from the child", timeout=30)
            os.write(write, str(value).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_read = pipe.read()
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert child_read == "before the fork"
    assert cache.get(shared) == "from the child"
