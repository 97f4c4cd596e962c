"""The local application's live-stop source (`runners/edge/sql/local.sql`, section
`local_stop_candidates`, read through `runners.local.reads`) against its oracle,
`kernel.local_control.local_stop_candidates` (O-2 step 2, L4/L5).

Random worlds persisted into a real SQLite file (any rows the schema admits, not only states the
kernel reaches, `tests/support/source_worlds.py`), many of their Runs steered to the selected
shape and then, now and then, off it by exactly one term, so that every term of the predicate
decides some example. The SQL page equals the oracle's: the same items in the same order, the
same keys, the same `has_more`, for random limits 1..64 and 1. The statement searches the Run
status index and scans no table.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Attempt,
    Run,
    RunAggregate,
    local_stop_candidates,
)
from kernel.selection import PageError
from kernel.specs.states import AttemptStatus, CancelReason, RunKind, RunOwner, RunStatus
from runners.edge.store import EdgeStore
from runners.local import reads
from tests.support.edge_worlds import persist_world
from tests.support.source_worlds import DIGEST, world


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeStore]:
    edge = EdgeStore(tmp_path_factory.mktemp("local-sources") / "x.db")
    yield edge
    edge.close()


# -- the selected shape, and one term off it ---------------------------------------------------
#: Each term of O-2 step 2's predicate, and a change that makes only that term false.
TERMS = (
    "owner",
    "kind",
    "run_status",
    "intent",
    "attempt_status",
    "local",
    "handle",
    "latest",
)


def selected(agg: RunAggregate, cancel_at: int, reason: CancelReason) -> RunAggregate:
    """`agg` as a runtime ordinary `running` Run with an intent whose latest Attempt is a local
    Attempt `running` under a recorded handle (an Attempt is added if it has none)."""
    run = dataclasses.replace(
        agg.run,
        owner=RunOwner.RUNTIME,
        kind=RunKind.ORDINARY,
        status=RunStatus.RUNNING,
        cancel_requested_at_ms=cancel_at,
        cancel_reason=reason,
    )
    attempts = list(agg.attempts) or [
        Attempt(f"n-{run.run_id}-1", run.run_id, 1, AttemptStatus.RUNNING, "local", 0)
    ]
    attempts[-1] = dataclasses.replace(
        attempts[-1],
        status=AttemptStatus.RUNNING,
        callback_token_sha256=DIGEST,
        executor_handle="pid:1",
    )
    return dataclasses.replace(agg, run=run, attempts=tuple(attempts))


def off(agg: RunAggregate, term: str, status: RunStatus, attempt: AttemptStatus) -> RunAggregate:
    """`agg` (selected) with exactly `term` false; `status`/`attempt` are the replacement
    statuses for the status terms (never `running`)."""
    run = agg.run
    latest = agg.attempts[-1]
    if term == "owner":
        run = dataclasses.replace(run, owner=RunOwner.LEGACY)
    elif term == "kind":
        run = dataclasses.replace(run, kind=RunKind.WORKFLOW)
    elif term == "run_status":
        run = dataclasses.replace(run, status=status)
    elif term == "intent":
        run = dataclasses.replace(run, cancel_requested_at_ms=None, cancel_reason=None)
    elif term == "attempt_status":
        latest = dataclasses.replace(latest, status=attempt)
    elif term == "local":
        latest = dataclasses.replace(latest, callback_token_sha256=None)
    elif term == "handle":
        latest = dataclasses.replace(latest, executor_handle=None)
    else:
        assert term == "latest"  # a newer Attempt (the next number) is not running
        newer = Attempt(
            f"n-{run.run_id}-{latest.number + 1}",
            run.run_id,
            latest.number + 1,
            attempt,
            "local",
            latest.created_at_ms,
        )
        return dataclasses.replace(agg, run=run, attempts=(*agg.attempts, newer))
    return dataclasses.replace(agg, run=run, attempts=(*agg.attempts[:-1], latest))


OTHER_RUN_STATUSES = st.sampled_from([s for s in RunStatus if s is not RunStatus.RUNNING])
OTHER_ATTEMPT_STATUSES = st.sampled_from(
    [s for s in AttemptStatus if s is not AttemptStatus.RUNNING]
)


#: Few intent times, so that ties on the first key element are common.
INTENT_TIMES = st.integers(0, 3)


@st.composite
def stop_worlds(draw: st.DrawFn) -> list[RunAggregate]:
    """A source world with about half its Runs steered to the selected shape, a third of those
    then off it by one drawn term."""
    aggregates, _ = draw(world())
    out = []
    for agg in aggregates:
        if not draw(st.booleans()):
            out.append(agg)
            continue
        steered = selected(agg, draw(INTENT_TIMES), draw(st.sampled_from(CancelReason)))
        if draw(st.integers(0, 2)) == 0:
            term = draw(st.sampled_from(TERMS))
            steered = off(steered, term, draw(OTHER_RUN_STATUSES), draw(OTHER_ATTEMPT_STATUSES))
        out.append(steered)
    return out


@given(aggregates=stop_worlds(), limit=st.integers(1, 3) | st.integers(1, 64))
def test_the_sql_stop_source_returns_exactly_the_oracle_page(
    store: EdgeStore, aggregates: list[RunAggregate], limit: int
) -> None:
    persist_world(store, aggregates)
    for size in (limit, 1):  # a page of 1 makes `has_more` count
        got = reads.local_stop_candidates(store, size)
        want = local_stop_candidates(aggregates, size)
        assert got == want
    everything = reads.local_stop_candidates(store, 64)
    assert everything == local_stop_candidates(aggregates, 64)


def _one_selected() -> RunAggregate:
    run = Run(
        "r1", "p", "t", 1, "local", RunKind.ORDINARY, RunOwner.RUNTIME, RunStatus.RUNNING,
        3, 0, 1, 1,
    )  # fmt: skip
    attempt = Attempt("a1", "r1", 1, AttemptStatus.RUNNING, "local", 1)
    return selected(RunAggregate(run, (attempt,)), 7, CancelReason.USER)


@pytest.mark.parametrize("term", [None, *TERMS])
def test_each_term_decides_alone_in_sql_as_in_the_oracle(
    store: EdgeStore, term: str | None
) -> None:
    """The selected shape is returned with key `(cancel_requested_at_ms, run_id)`; each term
    made false alone drops it, in SQL as in the oracle."""
    agg = _one_selected()
    if term is not None:
        agg = off(agg, term, RunStatus.DISPATCHING, AttemptStatus.STARTING)
    persist_world(store, [agg])
    page = reads.local_stop_candidates(store, 16)
    assert page == local_stop_candidates([agg], 16)
    expected = [] if term is not None else [("r1", "a1", (7, "r1"))]
    assert [(c.run_id, c.attempt_id, c.key) for c in page.items] == expected


def test_ties_on_the_intent_time_are_ordered_by_run_id(store: EdgeStore) -> None:
    base = _one_selected()
    aggs = [
        RunAggregate(
            dataclasses.replace(base.run, run_id=run_id, cancel_requested_at_ms=at),
            (dataclasses.replace(base.attempts[0], attempt_id=attempt_id, run_id=run_id),),
        )
        # Attempt ids in the opposite order of Run ids: the tie is broken by the Run id.
        for run_id, attempt_id, at in (
            ("rb", "a1", 5),
            ("ra", "a2", 5),
            ("rc", "a0", 4),
            ("r0", "a3", 6),
        )
    ]
    persist_world(store, aggs)
    page = reads.local_stop_candidates(store, 3)
    assert [c.run_id for c in page.items] == ["rc", "ra", "rb"]
    assert page.has_more
    assert page == local_stop_candidates(aggs, 3)


@pytest.mark.parametrize("limit", [0, 65, -1])
def test_a_limit_outside_1_to_64_is_refused_like_the_oracle(store: EdgeStore, limit: int) -> None:
    with pytest.raises(PageError):
        reads.local_stop_candidates(store, limit)
    with pytest.raises(PageError):
        local_stop_candidates([], limit)


# -- query plan ----------------------------------------------------------------------------------
_SCAN = re.compile(r"^SCAN (?P<what>\S+)(?P<rest>.*)$")
_INDEXED = re.compile(r"USING (COVERING |INTEGER PRIMARY KEY|PRIMARY KEY|INDEX)")


def test_the_stop_source_searches_indexes_and_scans_no_table(tmp_path: Path) -> None:
    edge = EdgeStore(tmp_path / "plan.db")
    try:
        with edge.authority.reading() as conn:
            lines = _plan(conn, reads.LOCAL["local_stop_candidates"])
    finally:
        edge.close()
    assert any("runs_by_status" in line for line in lines), lines
    scans = [
        line
        for line in lines
        if (m := _SCAN.match(line)) and not m["what"].startswith("(") and not _INDEXED.search(line)
    ]
    assert scans == [], lines


def _plan(conn: sqlite3.Connection, statement: str) -> list[str]:
    explain = "EXPLAIN QUERY PLAN " + statement  # a fixed prefix on a fixed statement
    return [str(row[3]) for row in conn.execute(explain, {"limit": 16})]
