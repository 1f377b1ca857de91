"""A private Redis server for the store tests (one per session; each test gets its own namespace)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from redis_server import redis_server, require_redis


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = require_redis(os.environ)
    with redis_server(binary, tmp_path_factory.mktemp("redis")) as url:
        yield url
