"""Django's Redis cache backend, with one ``redis.Redis`` client per connection pool instead of one per call.

Django's ``RedisCacheClient.get_client`` builds a new ``redis.Redis`` for every cache operation (over a shared
pool). Building one registers its ~170 response callbacks and checks its arguments: about 1 ms of CPU, once per
API request that sends a token (the failed-token throttle reads its count: ``api.auth``), measured with
``benchmarks/web_profile.py``. A ``redis.Redis`` is safe to share between threads: each command takes a
connection from the pool and gives it back.
"""

from __future__ import annotations

from django.core.cache.backends import redis as django_redis


class _SharedClients(django_redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._clients.setdefault(index, self._client(connection_pool=self._get_connection_pool(write)))
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = _SharedClients
