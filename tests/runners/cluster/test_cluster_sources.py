"""The cluster runner's cancellation-convergence source against its oracle, `kernel.selection`
(SPEC §1.9, D-6, Appendix E-1).

For random aggregates persisted into a real PostgreSQL schema by the runner's own statements
(any rows the schema admits, `tests/support/source_worlds.py`, the same worlds the edge source
test uses), `cancel_convergence_candidates` returns exactly the oracle's page: the same Runs in
the same order, the same keys, the same `has_more`, for random limits and a limit of 1. The
worlds include started remote Attempts whose current lease was released with every reason, so
E-1's "released `lease_expired`" clause is exercised both ways.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from kernel import (
    Event,
    RunAggregate,
    selection,
)
from runners.cluster.store import ClusterStore
from tests.support.source_worlds import world, world_effects


@pytest.fixture(scope="module")
def store(pg_dsn: str) -> Iterator[ClusterStore]:
    """One schema for the module (Hypothesis runs many examples against it)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    cluster = ClusterStore(pg_dsn, name, create_schema=True)
    try:
        yield cluster
    finally:
        cluster.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def persist(
    store: ClusterStore, aggregates: list[RunAggregate], events: dict[str, list[Event]]
) -> None:
    """Replace the schema's rows with `aggregates`, written by the runner's own statements."""
    with store.transaction() as tx:
        for table in ("events", "run_dispatch_leases", "run_retry_policies", "attempts", "runs"):
            tx.connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
        for effect in world_effects(aggregates, events):
            tx.execute(effect)


@pytest.mark.slow  # a PostgreSQL round trip per example, about 5 s
@pytest.mark.spec("E-1")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=world(), limit=st.integers(1, 3) | st.integers(1, 64))
def test_the_cancel_convergence_source_returns_exactly_the_oracle_page(
    store: ClusterStore,
    data: tuple[list[RunAggregate], dict[str, list[Event]]],
    limit: int,
) -> None:
    aggregates, _events = data
    persist(store, aggregates, {})  # Events play no part in the source (and may hold a NUL)
    for size in (limit, 1):  # a page of 1 makes `has_more` count
        got = store.cancel_convergence_candidates(size)
        assert got == selection.cancel_convergence_candidates(aggregates, size)
