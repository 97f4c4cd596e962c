"""The edge runner's candidate sources against their oracle, `kernel.selection`.

For random aggregates persisted into a real SQLite file (any rows the schema admits, not only
states the kernel reaches, so the SQL must agree with the oracle everywhere), each of the seven
SQL sources returns exactly the oracle's page: the same items in the same order, the same keys
and cursor, the same `has_more`, for random limits 1..64 and random or walked cursors. The
backdoor projection of the same file equals `conformance.run.projection.project`. And
`EXPLAIN QUERY PLAN` shows every source query searching an index, never scanning a table.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.run.projection import project
from kernel import (
    Attempt,
    Event,
    Lease,
    Run,
    RunAggregate,
    selection,
)
from kernel.selection import Page, PageError
from kernel.specs.states import (
    AttemptStatus,
    LeaseStatus,
    RunKind,
    RunOwner,
    RunStatus,
)
from runners.edge.named_sql import SOURCES
from runners.edge.store import EdgeStore
from tests.support.edge_worlds import persist_world
from tests.support.source_worlds import (
    BINDING_FACTS,
    BINDING_FACTS_VALUES,
    DIGEST,
    EXECUTORS,
    TIMES,
    world,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeStore]:
    edge = EdgeStore(tmp_path_factory.mktemp("edge-sources") / "sources.sqlite3")
    yield edge
    edge.close()


def walk(source: Callable[[Any], tuple[Page[Any], Page[Any]]], start: Any) -> None:
    """Page from `start`, following cursors until the oracle says there is no more: every page
    of the SQL source equals the oracle's."""
    after = start
    for _ in range(100):
        got, want = source(after)
        assert got == want
        if not want.has_more:
            return
        after = want.cursor
    raise AssertionError("the oracle kept saying has_more")


KEY_PARTS = st.tuples(TIMES, TIMES, st.text("abcrxyz-019", max_size=6))


@pytest.mark.slow  # about 4 s
@pytest.mark.spec("RETRY-07", "RETRY-12", "RETRY-15", "REC-07")
@settings(max_examples=2 * settings().max_examples)  # twice the profile's: cheap examples
@given(
    data=world(),
    observed=TIMES,
    limit=st.integers(1, 3) | st.integers(1, 64),
    started=TIMES,
    executor=st.sampled_from(EXECUTORS),
    probe=KEY_PARTS,
    pick=st.integers(0, 200),
)
def test_each_sql_source_returns_exactly_the_oracle_page(
    store: EdgeStore,
    *,
    data: tuple[list[RunAggregate], dict[str, list[Event]]],
    observed: int,
    limit: int,
    started: int,
    executor: str,
    probe: tuple[int, int, str],
    pick: int,
) -> None:
    aggregates, events = data
    persist_world(store, aggregates, events)
    assert store.project() == project(aggregates, events)

    def start_from(keys: list[Any], synthetic: Any) -> Any:
        """No cursor, a key the oracle returns, or a key nobody has."""
        choice = pick % 3
        if choice == 1 and keys:
            return keys[pick % len(keys)]
        return None if choice == 0 else synthetic

    def keys_of(page: Page[Any]) -> list[Any]:
        return [c.key for c in page.items]

    # Every time a row changes eligibility at (due, expiry), one before, and the drawn time.
    boundaries = {observed}
    for agg in aggregates:
        if agg.policy is not None and agg.policy.next_attempt_at_ms is not None:
            boundaries |= {agg.policy.next_attempt_at_ms - 1, agg.policy.next_attempt_at_ms}
        boundaries |= {x.expires_at_ms for x in agg.leases} | {
            x.expires_at_ms - 1 for x in agg.leases
        }
    for at in sorted(boundaries):
        assert store.lost_retry_candidates(at, limit) == selection.lost_retry_candidates(
            aggregates, at, limit
        )
        assert store.runtime_recovery_candidates(
            at, limit
        ) == selection.runtime_recovery_candidates(aggregates, at, limit)
        assert store.lease_expiry_candidates(at, limit) == selection.lease_expiry_candidates(
            aggregates, at, limit
        )
    for at in {started} | {agg.run.created_at_ms + d for agg in aggregates for d in (0, 1)}:
        assert store.orphaned_created_candidates(
            at, limit
        ) == selection.orphaned_created_candidates(aggregates, at, limit)

    for size in (limit, 1):  # a page of 1 makes `has_more` and every cursor count
        assert store.lost_retry_candidates(observed, size) == selection.lost_retry_candidates(
            aggregates, observed, size
        )
        assert store.runtime_recovery_candidates(
            observed, size
        ) == selection.runtime_recovery_candidates(aggregates, observed, size)
        assert store.cancel_convergence_candidates(size) == selection.cancel_convergence_candidates(
            aggregates, size
        )

        def expiry(after: Any, size: int = size) -> tuple[Page[Any], Page[Any]]:
            return (
                store.lease_expiry_candidates(observed, size, after),
                selection.lease_expiry_candidates(aggregates, observed, size, after),
            )

        def startup(after: Any, size: int = size) -> tuple[Page[Any], Page[Any]]:
            return (
                store.local_startup_candidates(size, after),
                selection.local_startup_candidates(aggregates, size, after),
            )

        def orphans(after: Any, size: int = size) -> tuple[Page[Any], Page[Any]]:
            return (
                store.orphaned_created_candidates(started, size, after),
                selection.orphaned_created_candidates(aggregates, started, size, after),
            )

        def dispatch(after: Any, size: int = size) -> tuple[Page[Any], Page[Any]]:
            return (
                store.local_dispatch_candidates(executor, size, after),
                selection.local_dispatch_candidates(aggregates, executor, size, after),
            )

        for source, synthetic in (
            (expiry, (probe[0], probe[2])),
            (startup, (probe[2],)),
            (orphans, (probe[0], probe[2])),
            (dispatch, probe),
        ):
            walk(source, start_from(keys_of(_all(source)), synthetic))


def _all(source: Callable[[Any], tuple[Page[Any], Page[Any]]]) -> Page[Any]:
    """The oracle's whole ordered result, by walking it."""
    items: list[Any] = []
    after = None
    while True:
        page = source(after)[1]
        items.extend(page.items)
        if not page.has_more:
            return Page(tuple(items), False)
        after = page.cursor


@pytest.mark.parametrize("fact", [None, *BINDING_FACTS])
def test_pristine_is_decided_by_every_fact_alone(store: EdgeStore, fact: str | None) -> None:
    """§2.3 / B-33: a `claimed` Attempt with no lease row is pristine (never a recovery
    candidate) only when no binding, offer, start or callback fact is set; each one alone
    makes it a candidate, in SQL as in the oracle."""
    run = Run(
        "r1", "p", "t", 1, "shell", RunKind.ORDINARY, RunOwner.RUNTIME, RunStatus.DISPATCHING,
        2, 0, 1, 1,
    )  # fmt: skip
    attempt = Attempt("a1", "r1", 1, AttemptStatus.CLAIMED, "shell", 1)
    if fact is not None:
        attempt = dataclasses.replace(attempt, **{fact: BINDING_FACTS_VALUES[fact]})
    aggregates = [RunAggregate(run, (attempt,))]
    persist_world(store, aggregates, {})
    page = store.runtime_recovery_candidates(10, 16)
    assert page == selection.runtime_recovery_candidates(aggregates, 10, 16)
    assert [c.attempt_id for c in page.items] == ([] if fact is None else ["a1"])


@pytest.mark.parametrize("limit", [0, 65, -1])
def test_a_limit_outside_1_to_64_is_refused_like_the_oracle(store: EdgeStore, limit: int) -> None:
    with pytest.raises(PageError):
        store.lost_retry_candidates(0, limit)
    with pytest.raises(PageError):
        store.local_dispatch_candidates("local", limit)


# -- query plans ---------------------------------------------------------------------------
PLAN_PARAMS = {
    "observed_at_ms": 5,
    "limit": 16,
    "after_expires_at_ms": 1,
    "after_attempt_id": "a",
    "process_started_at_ms": 9,
    "after_created_at_ms": 1,
    "after_run_id": "r",
    "local_executor_type": "local",
    "after_queued_at_ms": 1,
    "after_k0": 1,  # the Workflow sources' keyset (runners.sql_sources)
    "after_step_run_id": "s",
    "after_version": 1,
}
_SCAN = re.compile(r"^SCAN (?P<what>\S+)(?P<rest>.*)$")
_INDEXED = re.compile(r"USING (COVERING |INTEGER PRIMARY KEY|PRIMARY KEY|INDEX)")


def plan(conn: sqlite3.Connection, statement: str) -> list[str]:
    explain = "EXPLAIN QUERY PLAN " + statement  # a fixed prefix on a fixed statement
    return [str(row[3]) for row in conn.execute(explain, PLAN_PARAMS)]


def full_scans(lines: list[str]) -> list[str]:
    """`SCAN <table>` without an index; scanning a subquery's own rows is not a table scan, nor
    is `json_each` over one row's `depends_on` array (a virtual table of that one value)."""
    out = []
    for line in lines:
        scan = _SCAN.match(line)
        virtual = scan is not None and "VIRTUAL TABLE" in scan["rest"]
        if (
            scan
            and not virtual
            and not scan["what"].startswith("(")
            and not _INDEXED.search(scan["rest"])
        ):
            out.append(line)
    return out


def _populate(store: EdgeStore, runs: int) -> None:
    statuses = list(RunStatus)
    aggregates: list[RunAggregate] = []
    for i in range(runs):
        run_id = f"run-{i:05d}"
        status = statuses[i % len(statuses)] if i % 10 == 0 else RunStatus.SUCCEEDED
        run = Run(
            run_id, "p", "t", 1, "local", RunKind.ORDINARY, RunOwner.RUNTIME, status, 1, 0, i, i
        )
        attempt = Attempt(
            f"att-{i:05d}",
            run_id,
            1,
            AttemptStatus.SUCCEEDED if status is RunStatus.SUCCEEDED else AttemptStatus.LOST,
            "local",
            i,
        )
        lease = Lease(
            attempt.attempt_id,
            run_id,
            1,
            LeaseStatus.COMPLETED,
            2,
            "w1",
            "w1-s1",
            1,
            DIGEST,
            i,
            i,
            i + 30_000,
            i,
        )
        aggregates.append(RunAggregate(run, (attempt,), None, (lease,)))
    persist_world(store, aggregates, {})


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_source_query_searches_an_index_and_scans_no_table(
    tmp_path: Path, name: str, analyzed: bool
) -> None:
    store = EdgeStore(tmp_path / "plans.sqlite3")
    try:
        _populate(store, 2_000)
        with store.authority.reading() as conn:
            if analyzed:
                conn.execute("ANALYZE")
            lines = plan(conn, SOURCES[name])
    finally:
        store.close()
    assert any(_INDEXED.search(line) for line in lines), lines
    assert full_scans(lines) == [], lines


def test_the_plan_check_flags_a_full_scan(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "scan.sqlite3")
    try:
        with store.authority.reading() as conn:
            lines = plan(conn, "SELECT run_id FROM runs WHERE project_id = :after_run_id;")
    finally:
        store.close()
    assert full_scans(lines) == ["SCAN runs"]
