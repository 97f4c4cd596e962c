"""Deterministic worlds for the candidate-source tests of every SQL store (SPEC §1.8.2, §1.8.3,
§1.9, §2.2, §2.3, §3.16, P-1..P-6, B-33, Appendix E-1), and the checks made on them.

For each of the seven sources, `RUNS` Runs of its selected shape whose times take only the
values 0, 1 and 2 (observed at 1, process started at 2: equal, before and after both), so keys
tie on every time column and only the ids break the ties; the ids mix case, `-` and `_`, so
code-point order (the oracle's) and a linguistic collation disagree on them. Then the same
shape with one term made false (`SPOILERS`: owner, kind, intent, status, latest Attempt,
executor, binding, lease), so that a statement that drops or weakens any exclusion returns a
Run the oracle does not. The checks compare the store with `kernel.selection` on them: full
pages of 64 with `has_more`, walks at 64 and 1, every tied cursor, the whole result of every
source, and B-33's pristine rule decided by each fact alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kernel import Attempt, Lease, Page, Run, RunAggregate, RunRetryPolicy, selection
from kernel.specs.states import (
    AttemptStatus,
    CancelReason,
    LeaseStatus,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
)
from runners.sources import Sources
from tests.support.source_checks import KeysetSources, oracle_keys, tied_cursors, walk
from tests.support.source_worlds import BINDING_FACTS_VALUES, DIGEST

#: Id heads in an order that code points and `en-US` disagree on (`-` `0` `B` `Z` `_` `a` `z`
#: against `_` `-` `0` `a` `B` `z` `Z`).
HEADS = ("a", "B", "_", "z", "Z", "-", "0")
RUNS = 100  # with the spoiled ones, more than a page of 64 is selected by every source


def run_of(i: int, status: RunStatus, **changes: Any) -> Run:
    """Runtime ordinary Run `i` of a deterministic world; Run ids and Attempt ids of the same
    `i` sort differently, so the tie-breaking id column is the one that decides."""
    run = Run(
        f"{HEADS[i % 7]}{i // 7}", "p", "t", 1, "shell", RunKind.ORDINARY, RunOwner.RUNTIME,
        status, 3, 0, i % 2, 40,
    )  # fmt: skip
    return dataclasses.replace(run, **changes)


def attempt_of(run: Run, i: int, status: AttemptStatus, **changes: Any) -> Attempt:
    """Attempt 1 of `run`, created at 0 or 1, with an id whose head differs from the Run's."""
    attempt_id = f"{HEADS[(3 * i) % 7]}-{run.run_id}"
    return dataclasses.replace(
        Attempt(attempt_id, run.run_id, 1, status, "shell", i % 2), **changes
    )


def lease_of(attempt: Attempt, status: LeaseStatus, expires: int) -> Lease:
    """Lease generation 1 of `attempt` (a released one with no reason unless set after)."""
    released = status is not LeaseStatus.LEASED
    return Lease(
        attempt.attempt_id, attempt.run_id, 1, status, 2, "w1", "w1-s1", 1, DIGEST, 0, 0,
        expires, 1, 2 if released else None, None,
    )  # fmt: skip


#: The Worker binding facts of a remote Attempt (not pristine, B-33).
_BOUND = {"worker_id": "w1", "worker_session_id": "w1-s1", "worker_generation": 1}


def lost_retry_world(i: int) -> RunAggregate:
    """§1.8.2: `lost` Runs (finished 0, 1 or never) and `retry_wait` Runs due at 0, 1 or 2."""
    if i % 2:
        run = run_of(i, RunStatus.LOST)
        finished = (None, 0, 1)[i % 3]
        return RunAggregate(run, (attempt_of(run, i, AttemptStatus.LOST, finished_at_ms=finished),))
    run = run_of(i, RunStatus.RETRY_WAIT)
    policy = RunRetryPolicy(run.run_id, 3, True, Safety.IDEMPOTENT, 5, 20, 2, 0, 1, i % 3)
    return RunAggregate(run, (attempt_of(run, i, AttemptStatus.LOST),), policy)


def recovery_world(i: int) -> RunAggregate:
    """§2.3: bound Attempts with no `leased` lease, or one expiring at 0, 1 or 2."""
    status = (RunStatus.DISPATCHING, RunStatus.RUNNING, RunStatus.LOST)[i % 3]
    run = run_of(i, status)
    attempt = attempt_of(
        run, i, AttemptStatus.RUNNING if i % 2 else AttemptStatus.CLAIMED, **_BOUND
    )
    leases = () if i % 4 == 0 else (lease_of(attempt, LeaseStatus.LEASED, i % 3),)
    return RunAggregate(run, (attempt,), None, leases)


def expiry_world(i: int) -> RunAggregate:
    """§3.16: `leased` leases expiring at 0, 1 or 2, with released ones beside them."""
    run = run_of(i, RunStatus.RUNNING)
    attempt = attempt_of(run, i, AttemptStatus.RUNNING, **_BOUND)
    status = LeaseStatus.RELEASED if i % 5 == 0 else LeaseStatus.LEASED
    return RunAggregate(run, (attempt,), None, (lease_of(attempt, status, (0, 1, 1, 2)[i % 4]),))


def startup_world(i: int) -> RunAggregate:
    """§2.2: local (digest-holding) started Attempts; every fifth is remote."""
    run = run_of(i, RunStatus.RUNNING if i % 2 else RunStatus.DISPATCHING)
    status = AttemptStatus.RUNNING if i % 2 else AttemptStatus.STARTING
    digest = None if i % 5 == 0 else DIGEST
    return RunAggregate(run, (attempt_of(run, i, status, callback_token_sha256=digest),))


def orphans_world(i: int) -> RunAggregate:
    """§2.2 (B-30): `created` Runs created at 0, 1 or 2."""
    return RunAggregate(run_of(i, RunStatus.CREATED, created_at_ms=i % 3))


def convergence_world(i: int) -> RunAggregate:
    """§1.9 and E-1: Runs with an intent at 0 or 1 (every fifth has none): `queued`,
    `created`, `lost` or `retry_wait` (with a `lost` Attempt), `dispatching` with a `claimed`
    Attempt, or `running` with a started remote Attempt whose current lease T9 released
    (`lease_expired`)."""
    statuses = (
        RunStatus.QUEUED,
        RunStatus.CREATED,
        RunStatus.DISPATCHING,
        RunStatus.RUNNING,
        RunStatus.LOST,
        RunStatus.RETRY_WAIT,
    )
    status = statuses[i % len(statuses)]  # SPOILED_RUNS is a multiple: each spoiler meets all
    run = run_of(
        i,
        status,
        cancel_requested_at_ms=None if i % 5 == 0 else i % 2,
        cancel_reason=None if i % 5 == 0 else CancelReason.USER,
    )
    if status is RunStatus.DISPATCHING:
        return RunAggregate(run, (attempt_of(run, i, AttemptStatus.CLAIMED),))
    if status is RunStatus.RUNNING:
        attempt = attempt_of(run, i, AttemptStatus.RUNNING, lease_generation=1, **_BOUND)
        revoked = dataclasses.replace(
            lease_of(attempt, LeaseStatus.RELEASED, 0), release_reason=ReleaseReason.LEASE_EXPIRED
        )
        return RunAggregate(run, (attempt,), None, (revoked,))
    if status in (RunStatus.LOST, RunStatus.RETRY_WAIT):
        return RunAggregate(run, (attempt_of(run, i, AttemptStatus.LOST),))
    return RunAggregate(run)


def dispatch_world(i: int) -> RunAggregate:
    """§1.8.3 (D-13): `queued` Runs queued at 0, 1 or never (created at 0 or 1), whose
    `claimed` Attempt was created at 0 or 1; every ninth is of another executor type."""
    run = run_of(i, RunStatus.QUEUED, queued_at_ms=(None, 0, 1)[i % 3])
    executor = "shell" if i % 9 == 0 else "local"
    return RunAggregate(run, (attempt_of(run, i, AttemptStatus.CLAIMED, executor_type=executor),))


#: Each source's deterministic world, observed at 1 and started at 2 (the times in the worlds
#: are 0, 1 and 2: equal, before and after both).
WORLDS: dict[str, Callable[[int], RunAggregate]] = {
    "lost_retry": lost_retry_world,
    "runtime_recovery": recovery_world,
    "lease_expiry": expiry_world,
    "local_startup": startup_world,
    "orphaned_created": orphans_world,
    "cancel_convergence": convergence_world,
    "local_dispatch": dispatch_world,
}
OBSERVED, STARTED = 1, 2

#: One term of a selected shape made false, the rest kept: every exclusion of every source
#: (§1.8.2 intent, owner, kind, latest Attempt; §1.8.3 executor type; §2.3 pristine, ...)
#: decides some Run of every world, so a statement that drops one disagrees with the oracle.
SPOILERS = (
    "legacy",
    "workflow",
    "intent",
    "terminal",
    "newer_attempt",
    "attempt_succeeded",
    "remote",
    "unbound",
    "no_lease",
    "released_other",
    "stale_generation",
)
SPOILED_RUNS = 12  # each spoiler spoils 12 consecutive Runs: every variant of every world


def spoil(agg: RunAggregate, how: str) -> RunAggregate:
    """`agg` with the spoiler `how` applied."""
    run, attempts, leases = agg.run, list(agg.attempts), list(agg.leases)
    if how == "legacy":
        run = dataclasses.replace(run, owner=RunOwner.LEGACY)
    elif how == "workflow":
        run = dataclasses.replace(run, kind=RunKind.WORKFLOW)
    elif how == "intent":
        run = dataclasses.replace(run, cancel_requested_at_ms=0, cancel_reason=CancelReason.USER)
    elif how == "terminal":
        run = dataclasses.replace(run, status=RunStatus.SUCCEEDED)
    elif how == "newer_attempt" and attempts:  # the selected Attempt is no longer the latest
        latest = attempts[-1]
        newer = dataclasses.replace(
            latest, attempt_id=f"n{latest.attempt_id}", number=2, status=AttemptStatus.FAILED
        )
        attempts.append(newer)
    elif how == "attempt_succeeded" and attempts:
        attempts[-1] = dataclasses.replace(attempts[-1], status=AttemptStatus.SUCCEEDED)
    elif how == "remote" and attempts:  # no callback digest (not local), another executor
        attempts[-1] = dataclasses.replace(
            attempts[-1], callback_token_sha256=None, executor_type="shell"
        )
    elif how == "unbound" and attempts:  # claimed, no binding fact: pristine without a lease
        attempts[-1] = dataclasses.replace(
            attempts[-1],
            status=AttemptStatus.CLAIMED,
            worker_id=None,
            worker_session_id=None,
            worker_generation=None,
            callback_token_sha256=None,
        )
        leases = []
    elif how == "no_lease":
        leases = []
    elif how == "released_other" and leases:  # released for another reason than T9's
        leases = [
            dataclasses.replace(
                x,
                status=LeaseStatus.RELEASED,
                released_at_ms=2,
                release_reason=ReleaseReason.CANCELLED,
            )
            for x in leases
        ]
    elif how == "stale_generation" and attempts and leases:  # the lease row is not current
        attempts[-1] = dataclasses.replace(attempts[-1], lease_generation=2)
    return RunAggregate(run, tuple(attempts), agg.policy, tuple(leases))


def shaped(name: str) -> list[RunAggregate]:
    """`RUNS` Runs of the source's selected shape."""
    return [WORLDS[name](i) for i in range(RUNS)]


def spoiled(name: str) -> list[RunAggregate]:
    """Each spoiler applied to `SPOILED_RUNS` Runs of the source's shape (the variants of a
    world cycle with periods 2 to 5, so each spoiler meets every variant)."""
    out: list[RunAggregate] = []
    for n, how in enumerate(SPOILERS):
        first = RUNS + n * SPOILED_RUNS
        for i in range(first, first + SPOILED_RUNS):
            agg = WORLDS[name](i)
            if (changed := spoil(agg, how)) != agg:  # a spoiler that changes nothing is left out
                out.append(changed)
    return out


def unpaged(
    store: Sources, aggregates: Sequence[RunAggregate], name: str, size: int
) -> tuple[Page[Any], Page[Any]]:
    """The store's and the oracle's page of `size` of source `name`, one without a cursor."""
    if name == "lost_retry":
        return (
            store.lost_retry_candidates(OBSERVED, size),
            selection.lost_retry_candidates(aggregates, OBSERVED, size),
        )
    if name == "runtime_recovery":
        return (
            store.runtime_recovery_candidates(OBSERVED, size),
            selection.runtime_recovery_candidates(aggregates, OBSERVED, size),
        )
    assert name == "cancel_convergence"
    return (
        store.cancel_convergence_candidates(size),
        selection.cancel_convergence_candidates(aggregates, size),
    )


def check_full_pages(store: Sources, aggregates: Sequence[RunAggregate], name: str) -> None:
    """P-2: a page of 64 from more than 64 candidates says `has_more`, a page of 1 says it
    until the last; P-3: from every key and every cursor tied with a key on all columns but
    one, the next pages are the oracle's. `aggregates` (persisted in `store`) are
    `shaped(name) + spoiled(name)`."""
    keyset = KeysetSources(store, aggregates, OBSERVED, STARTED, "local").all
    if name not in keyset(1):
        got, want = unpaged(store, aggregates, name, 64)
        assert len(want.items) == 64  # the world is big enough for a full page and more
        assert want.has_more
        assert got == want
        got, want = unpaged(store, aggregates, name, 1)
        assert want.has_more
        assert got == want
        return
    full, single = keyset(64)[name], keyset(1)[name]
    keys = oracle_keys(full)
    assert len(keys) > 64  # a full page and more
    assert len({k[:-1] for k in keys}) < len(keys) / 4  # most keys tie on all but the id
    assert walk(full, None) == -(-len(keys) // 64)  # pages of 64, the last one short
    assert walk(single, None) == len(keys)
    for key in keys[::3]:  # a third of them: the page of 1 above starts after every key
        for after in (key, *tied_cursors(key)):
            got, want = full(after)
            assert got == want, f"after {after!r}"


def exclusion_world(name: str) -> list[RunAggregate]:
    """A few Runs of the source's shape and every spoiled one."""
    return shaped(name)[:8] + spoiled(name)


def check_whole_result(store: Sources, aggregates: Sequence[RunAggregate], name: str) -> None:
    """The whole result of source `name` is the oracle's: every page of a keyset source, the
    one page of 64 of another (which must then say no `has_more`)."""
    keyset = KeysetSources(store, aggregates, OBSERVED, STARTED, "local").all(64)
    if name in keyset:
        walk(keyset[name], None)
        return
    got, want = unpaged(store, aggregates, name, 64)
    assert not want.has_more  # the whole result is compared
    assert got == want


#: The facts that each make a `claimed` Attempt not pristine (B-33), and none.
PRISTINE_CASES: tuple[str | None, ...] = (None, *sorted(BINDING_FACTS_VALUES), "lease_row")


def pristine_world(fact: str | None) -> list[RunAggregate]:
    """A `dispatching` Run whose `claimed` Attempt `a1` has `fact` alone (a binding, offer,
    start or callback fact, or a released lease row), or nothing."""
    run = run_of(1, RunStatus.DISPATCHING)
    attempt = Attempt("a1", run.run_id, 1, AttemptStatus.CLAIMED, "shell", 1)
    leases: tuple[Lease, ...] = ()
    if fact == "lease_row":  # a released row: no binding fact on the Attempt, no `leased` row
        leases = (lease_of(attempt, LeaseStatus.RELEASED, 0),)
    elif fact is not None:
        attempt = dataclasses.replace(attempt, **{fact: BINDING_FACTS_VALUES[fact]})
    return [RunAggregate(run, (attempt,), None, leases)]


def check_pristine(store: Sources, aggregates: Sequence[RunAggregate], fact: str | None) -> None:
    """§2.3 / B-33: the Attempt of `pristine_world(fact)` is a recovery candidate unless it is
    pristine (no fact at all), in SQL as in the oracle."""
    page = store.runtime_recovery_candidates(10, 16)
    assert page == selection.runtime_recovery_candidates(aggregates, 10, 16)
    assert [c.attempt_id for c in page.items] == ([] if fact is None else ["a1"])
