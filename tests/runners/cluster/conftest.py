"""PostgreSQL for the cluster runner's tests (issue 5): one server, one schema per test.

The DSN comes from one environment variable, `QL3_PG_DSN` (README; `.ci/run` exports
`postgresql://postgres@127.0.0.1:5432/test` after making sure the server is up). Under `CI=true`
an unreachable server **fails** the test that needs it, never skips it; elsewhere the test is
skipped with the reason, and a skipped test never counts as passing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def dsn() -> str:
    return os.environ.get("QL3_PG_DSN") or DEFAULT_DSN


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The server's DSN, checked once per session."""
    target = dsn()
    try:
        with psycopg.connect(target, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.OperationalError as exc:
        why = f"PostgreSQL at $QL3_PG_DSN is unreachable ({type(exc).__name__})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}: under CI=true the cluster tests need a real server")
        pytest.skip(f"{why}; set QL3_PG_DSN or start the server")
    return target


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[tuple[psycopg.Connection[tuple[object, ...]], str]]:
    """A connection whose `search_path` is a fresh schema of its own, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        try:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
            yield conn, name
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
