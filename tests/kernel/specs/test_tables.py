"""The literal transition tables are the whole legal surface (ARCHITECTURE rule 2).

A breadth-first exploration from nothing, through the kernel only, tries a fixed command menu in
every reachable state (depth 6, two clock steps). From it: every edge of every table is
exercised; every applied change is an edge; every (status, command) pair absent from the Run
table was tried and refused with the state unchanged; and every explored state satisfies the
invariants (an exhaustive small-scope check).
"""

from __future__ import annotations

import dataclasses

import pytest

from kernel import (
    AdmitRun,
    Applied,
    AttemptStatus,
    LostRetryStep,
    RunAggregate,
    RunStatus,
    admit_run,
    check_invariants,
    lost_retry_step,
)
from kernel.outcomes import Rejected
from kernel.specs.codes import Code
from kernel.specs.tables import (
    ATTEMPT_TRANSITIONS,
    LEASE_TRANSITIONS,
    RUN_INITIAL,
    RUN_TRANSITIONS,
)
from kernel.transitions.transaction import Tx
from tests.support.explore import Exploration, enumerate_commands, explore

DEPTH = 6

Edge = tuple[str, str, str]


@pytest.fixture(scope="module")
def exploration() -> Exploration:
    return explore(DEPTH)


def _observed(exploration: Exploration) -> tuple[set[Edge], set[Edge], set[Edge]]:
    runs: set[Edge] = set()
    attempts: set[Edge] = set()
    leases: set[Edge] = set()
    for before, command, _at, outcome in exploration.edges:
        if not isinstance(outcome, Applied) or before is None:
            continue
        after = outcome.aggregate
        runs.add((before.run.status, command.name, after.run.status))
        latest = before.latest_attempt
        if latest is not None:
            now = after.attempt(latest.attempt_id)
            assert now is not None
            attempts.add((latest.status, command.name, now.status))
        for lease in before.leases:
            changed = after.lease(lease.attempt_id, lease.lease_generation)
            assert changed is not None
            if changed != lease:
                leases.add((lease.status, command.name, changed.status))
    return runs, attempts, leases


def _edges(table: object) -> set[Edge]:
    assert isinstance(table, type(RUN_TRANSITIONS))
    return {(f, c, t) for (f, c), targets in table.items() for t in targets}


# Reachable only from stored data: a policy is immutable after admission, so a `retry_wait`
# Run always passed R1..R3 when it was scheduled. R1..R3 still apply to it (SPEC §1.8.1 clears
# the cursor "on R1..R3"), e.g. for a row written by an older version; see the directed test.
FROM_STORED_DATA = {(RunStatus.RETRY_WAIT, "lost_retry_step", RunStatus.FAILED)}


def test_every_table_edge_is_exercised(exploration: Exploration) -> None:
    """Each edge of the Run, Attempt and lease tables is taken by some reachable step, and no
    applied step takes a change that is not an edge."""
    runs, attempts, leases = _observed(exploration)
    assert _edges(RUN_TRANSITIONS) - runs == FROM_STORED_DATA
    assert runs <= _edges(RUN_TRANSITIONS)
    assert _edges(ATTEMPT_TRANSITIONS) == attempts
    assert _edges(LEASE_TRANSITIONS) == leases
    created = {
        o.aggregate.run.status
        for b, _c, _t, o in exploration.edges
        if b is None and isinstance(o, Applied)
    }
    assert created == set(RUN_INITIAL.values())


def test_retry_wait_fails_closed_on_a_stored_disabled_policy(exploration: Exploration) -> None:
    """The one edge only stored data reaches: `retry_wait` + R1 -> `failed`, cursor cleared."""
    waiting = next(
        o.aggregate
        for _b, _c, _t, o in exploration.edges
        if isinstance(o, Applied) and o.aggregate.run.status is RunStatus.RETRY_WAIT
    )
    assert waiting.policy is not None
    disabled = dataclasses.replace(waiting.policy, retry_on_lost=False)
    stored = dataclasses.replace(waiting, policy=disabled)
    command = LostRetryStep(run_id=waiting.run.run_id, new_attempt_id="a9")
    result = lost_retry_step(stored, command, waiting.run.updated_at_ms + 1)
    assert isinstance(result, Applied)
    assert result.code is Code.FAILED_DISABLED
    assert result.aggregate.run.status is RunStatus.FAILED
    assert result.aggregate.policy is not None
    assert result.aggregate.policy.next_attempt_at_ms is None


@pytest.mark.spec("RUN-05")
def test_every_pair_missing_from_the_run_table_is_refused(exploration: Exploration) -> None:
    """For every reachable Run status, every command of the menu whose (status, command) pair is
    not in the table was tried, and none was applied: the state is unchanged."""
    menu = {c.name for c in enumerate_commands(_any_state(exploration))}
    statuses = {b.run.status for b, _c, _t, _o in exploration.edges if b is not None}
    tried: set[tuple[RunStatus, str]] = set()
    for before, command, _at, outcome in exploration.edges:
        if before is None:
            continue
        pair = (before.run.status, command.name)
        if pair in RUN_TRANSITIONS:
            continue
        tried.add(pair)
        assert not isinstance(outcome, Applied), pair
    absent = {(s, name) for s in statuses for name in menu if (s, name) not in RUN_TRANSITIONS}
    assert absent <= tried | {(s, n) for s, n in absent if n in RUN_INITIAL}
    assert len(tried) > 100


def _any_state(exploration: Exploration) -> RunAggregate:
    for before, _c, _t, _o in exploration.edges:
        if before is not None and before.leases:
            return before
    raise AssertionError("no state with a lease was reached")


@pytest.mark.spec("RUN-01")
def test_exhaustive_small_scope_keeps_every_invariant(exploration: Exploration) -> None:
    """Exhaustive small scope: every state reachable within the depth (one Run, its Workers, a
    bounded clock) satisfies I-1..I-9; the count is printed for the record."""
    states = {o.aggregate for _b, _c, _t, o in exploration.edges if isinstance(o, Applied)}
    for state in states:
        assert check_invariants(state) == [], state.run.status
    print(f"exhaustive small scope: depth {DEPTH}, {len(states)} distinct aggregates")
    assert exploration.states > 1_000


def test_an_illegal_move_fails_closed() -> None:
    """The transaction builder consults the tables: a change that is not an edge for the command
    is refused as INVALID_TRANSITION, never applied."""
    admitted = admit_run(
        None,
        AdmitRun(
            run_id="r1",
            attempt_id="a1",
            project_id="p",
            task_id="t",
            task_revision=1,
            executor_type="shell",
        ),
        1_000,
    )
    assert isinstance(admitted, Applied)
    tx = Tx.begin(admitted.aggregate, "renew_lease", 2_000)
    tx.set_run(status=RunStatus.SUCCEEDED)
    assert tx.commit() == Rejected(Code.INVALID_TRANSITION)
    tx = Tx.begin(admitted.aggregate, "grant_lease", 2_000)
    tx.set_attempt("a1", status=AttemptStatus.RUNNING)
    tx.set_run(status=RunStatus.DISPATCHING)
    assert tx.commit() == Rejected(Code.INVALID_TRANSITION)
