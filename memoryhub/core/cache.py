"""The Redis cache backend: Django's, with one redis-py client per connection pool.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache call, and
redis-py's constructor fills its table of response callbacks (~170 entries) each time. An API
request reads the cache at least twice (the key's cached verification, the failed-auth
counter), so with Redis that construction was a fifth of an append's instructions (bench/
README.md, "Eighth round"). A client holds no connection of its own (each command takes one from
the pool and gives it back) and may be shared between threads (redis-py's documentation), so
one per pool serves every call. After a fork the pool sees the new process id and drops the
connections it inherited, as it does under Django's own client.
"""

from __future__ import annotations

from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, redis.Redis] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        # Django's choice of server and its pool for it (made once per server).
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined] # not in the stubs
        client = self._clients.get(id(pool))
        if client is None:
            # Two threads may both build one here: either serves, the pool is the same.
            client = self._clients[id(pool)] = redis.Redis(connection_pool=pool)
        return client


class SharedClientRedisCache(RedisCache):
    """`django.core.cache.backends.redis.RedisCache`, its client built once per pool."""

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
