"""PostgreSQL for the cluster runner's tests (issue 5): one server, one schema per test.

The DSN comes from one environment variable, `QL3_PG_DSN` (README; `.ci/run` exports
`postgresql://postgres@127.0.0.1:5432/test` after making sure the server is up). When it is not
set at all, the tests use a server that answers at that default DSN, or else start a throwaway
local server for the session from the `pgserver` wheel (`conformance.run.local_server`; issue 5
item 6: the README's test command works on a machine without PostgreSQL), and say which in the
output. When `QL3_PG_DSN` is set but unreachable, under `CI=true` the test that needs it
**fails**, never skips; elsewhere it is skipped with the reason, and a skipped test never counts
as passing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import psycopg
import pytest
from psycopg import sql

from conformance.run.local_server import DEFAULT_DSN, NoPostgresError, ensure_dsn
from runners.cluster.store import ClusterStore

_ANNOUNCED = pytest.StashKey[list[str]]()


def dsn() -> str:
    return os.environ.get("QL3_PG_DSN") or DEFAULT_DSN


def _announce(config: pytest.Config, message: str) -> None:
    """Write `message` to the terminal now (past output capturing) and again in the summary."""
    config.stash.setdefault(_ANNOUNCED, []).append(message)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    with ExitStack() as stack:
        if capture is not None:
            stack.enter_context(capture.global_and_fixture_disabled())
        reporter.ensure_newline()
        reporter.write_line(f"cluster tests: {message}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for message in terminalreporter.config.stash.get(_ANNOUNCED, []):
        terminalreporter.write_line(f"cluster tests: {message}")


@pytest.fixture(scope="session")
def pg_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """The server's DSN, checked once per session (a throwaway server lives for the session)."""
    under_ci = os.environ.get("CI") == "true"
    with ExitStack() as stack:
        try:
            target = stack.enter_context(
                ensure_dsn(None, announce=lambda message: _announce(request.config, message))
            )
        except NoPostgresError as exc:
            if under_ci:
                pytest.fail(f"{exc}; under CI=true the cluster tests need a real server")
            pytest.skip(str(exc))
        try:
            with psycopg.connect(target, connect_timeout=5, autocommit=True) as conn:
                conn.execute("SELECT 1").fetchone()
        except psycopg.OperationalError as exc:
            why = f"PostgreSQL at $QL3_PG_DSN is unreachable ({type(exc).__name__})"
            if under_ci:
                pytest.fail(f"{why}: under CI=true the cluster tests need a real server")
            pytest.skip(f"{why}; set QL3_PG_DSN or start the server")
        yield target


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


@pytest.fixture
def cluster_on_schema(
    pg_dsn: str, pg_schema: tuple[psycopg.Connection[tuple[object, ...]], str]
) -> Iterator[tuple[str, str, ClusterStore]]:
    """The DSN, a fresh schema of its own and a `ClusterStore` on it (the Worker host tests:
    processes and hosts open their own stores on the same schema)."""
    _, schema = pg_schema
    store = ClusterStore(pg_dsn, schema)
    try:
        yield pg_dsn, schema, store
    finally:
        store.close()
