"""A reachable PostgreSQL server for the conformance tests that also replay on the cluster
runner ($QL3_PG_DSN, the default local one, or a throwaway server): skipped without one, failed
under CI=true (as tests/runners/cluster/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest

__all__ = ["reachable_dsn"]


def reachable_dsn(purpose: str) -> Iterator[str]:
    """Yield a DSN that answered `SELECT 1`; `purpose` names what needs it in the CI failure."""
    local_server = pytest.importorskip("conformance.run.local_server")
    under_ci = os.environ.get("CI") == "true"
    try:
        with local_server.ensure_dsn(None, announce=lambda _message: None) as target:
            with psycopg.connect(target, connect_timeout=5, autocommit=True) as conn:
                conn.execute("SELECT 1").fetchone()
            yield target
    except (local_server.NoPostgresError, psycopg.OperationalError) as exc:
        if under_ci:
            pytest.fail(f"{type(exc).__name__}: under CI=true, PostgreSQL is required ({purpose})")
        pytest.skip(f"no PostgreSQL server ({type(exc).__name__})")
