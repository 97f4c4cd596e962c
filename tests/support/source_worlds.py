"""Random Run-domain worlds for the runners' candidate-source tests (edge and cluster).

Any rows the schema admits, not only states the kernel reaches, so a runner's SQL must agree
with its oracle (`kernel.selection`) everywhere: Runs of every status, owner and kind, with and
without intent; Attempts with every binding fact alone or together; lease rows of every status
and release reason; policies; Events with small payloads. Often coherent (the latest Attempt
fits the Run status, I-2), so pages fill up and `has_more` is exercised. Ids mix case, `-` and
`_`, so code-point order (the oracle's) and a linguistic collation disagree on them; `world(
TIED_TIMES)` draws every time from 0..2, so keys tie on every time column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from kernel import (
    AppendEvent,
    Attempt,
    Effect,
    Event,
    InsertAttempt,
    InsertLease,
    InsertPolicy,
    InsertRun,
    Lease,
    Run,
    RunAggregate,
    RunRetryPolicy,
)
from kernel.entities import PayloadValue
from kernel.specs.states import (
    Actor,
    AttemptStatus,
    CancelReason,
    LeaseStatus,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
)

TIMES = st.integers(0, 30)  # a small range: ties in every key, broken by the ids
#: A tiny range: most keys tie on every time column, so only the ids break the ties.
TIED_TIMES = st.integers(0, 2)
MAYBE_TIME = st.none() | TIMES
#: Run ids and Attempt id prefixes mix lower and upper case, digits, `-` and `_`: code-point
#: order (the oracle's `str` order) differs from a linguistic collation (ICU or glibc `en_US`
#: put `a` before `Z` and `_` before `-`), so a store that sorts or compares ids without
#: code-point collation disagrees with the oracle on some world.
RUN_ID_ALPHABET = "rxyzRZ_019"
ATTEMPT_ID_PREFIXES = "abczB_"
EXECUTORS = ("local", "shell")
DIGEST = "0123456789abcdef" * 4
# Weighted toward the states the sources select, so pages fill up and `has_more` is exercised;
# every status still occurs.
SELECTED_RUN_STATUSES = [
    RunStatus.LOST,
    RunStatus.RETRY_WAIT,
    RunStatus.QUEUED,
    RunStatus.DISPATCHING,
    RunStatus.RUNNING,
    RunStatus.CREATED,
]
RUN_STATUSES = st.sampled_from(SELECTED_RUN_STATUSES * 3 + list(RunStatus))
ATTEMPT_STATUSES = st.sampled_from(
    [AttemptStatus.LOST, AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING] * 3
    + list(AttemptStatus)
)
LEASE_STATUSES = st.sampled_from([LeaseStatus.LEASED] * 3 + list(LeaseStatus))
#: `lease_expired` (T7..T9, recovery) is the reason E-1's cancellation source reads; the others
#: must not count.
RELEASE_REASONS = st.sampled_from([ReleaseReason.LEASE_EXPIRED] * 2 + list(ReleaseReason))
#: The latest Attempt statuses that fit a Run status (I-2), for coherent aggregates.
FITTING: dict[RunStatus, list[AttemptStatus]] = {
    RunStatus.CREATED: list(AttemptStatus),
    RunStatus.QUEUED: [AttemptStatus.CLAIMED],
    RunStatus.DISPATCHING: [AttemptStatus.CLAIMED, AttemptStatus.STARTING],
    RunStatus.RUNNING: [AttemptStatus.RUNNING],
    RunStatus.LOST: [AttemptStatus.LOST],
    RunStatus.RETRY_WAIT: [AttemptStatus.LOST],
    RunStatus.SUCCEEDED: [AttemptStatus.SUCCEEDED],
    RunStatus.FAILED: [AttemptStatus.FAILED, AttemptStatus.LOST],
    RunStatus.CANCELLED: [AttemptStatus.CANCELLED, AttemptStatus.CLAIMED],
    RunStatus.TIMED_OUT: [AttemptStatus.TIMED_OUT],
}


#: The Attempt facts that make a `claimed` Attempt not pristine (B-33), with a value each.
BINDING_FACTS_VALUES: dict[str, Any] = {
    "worker_id": "w1",
    "offer_id": "o" * 64,
    "lease_generation": 1,
    "executor_handle": "pid:1",
    "started_at_ms": 3,
    "callback_token_sha256": DIGEST,
}
BINDING_FACTS = sorted(BINDING_FACTS_VALUES)


@st.composite
def attempts_and_leases(
    draw: st.DrawFn, run_id: str, count: int, times: st.SearchStrategy[int] = TIMES
) -> tuple[list[Attempt], list[Lease]]:
    attempts: list[Attempt] = []
    leases: list[Lease] = []
    for number in range(1, count + 1):
        prefix = draw(st.sampled_from(ATTEMPT_ID_PREFIXES))
        attempt_id = f"{prefix}-{run_id}-{number}"
        # Binding, offer, start and callback facts: none (pristine if claimed), exactly one
        # (each term of "pristine" matters alone), or any.
        shape = draw(st.sampled_from(["bare", "one", "any"]))
        only = draw(st.sampled_from(BINDING_FACTS))
        facts: dict[str, Any] = {
            name: None
            if shape == "bare" or (shape == "one" and name != only)
            else draw(st.just(value) if shape == "one" else st.none() | st.just(value))
            for name, value in BINDING_FACTS_VALUES.items()
        }
        attempts.append(
            Attempt(
                attempt_id=attempt_id,
                run_id=run_id,
                number=number,
                status=draw(ATTEMPT_STATUSES),
                executor_type=draw(st.sampled_from(EXECUTORS)),
                created_at_ms=draw(times),
                worker_session_id=None if facts["worker_id"] is None else "w1-s1",
                worker_generation=None if facts["worker_id"] is None else 1,
                lease_version=None if facts["lease_generation"] is None else 1,
                finished_at_ms=draw(st.none() | times),
                **facts,
            )
        )
        statuses = draw(st.lists(LEASE_STATUSES, max_size=3 if shape == "any" else 0))
        if statuses.count(LeaseStatus.LEASED) > 1:  # §1.1: at most one `leased` row per Attempt
            first = statuses.index(LeaseStatus.LEASED)
            statuses = [
                LeaseStatus.RELEASED if s is LeaseStatus.LEASED and i != first else s
                for i, s in enumerate(statuses)
            ]
        for generation, status in enumerate(statuses, start=1):
            leases.append(
                Lease(
                    attempt_id=attempt_id,
                    run_id=run_id,
                    lease_generation=generation,
                    status=status,
                    version=generation,
                    worker_id="w1",
                    worker_session_id="w1-s1",
                    worker_generation=1,
                    token_digest=DIGEST,
                    acquired_at_ms=0,
                    renewed_at_ms=0,
                    expires_at_ms=draw(times),
                    updated_at_ms=1,
                    released_at_ms=None if status is LeaseStatus.LEASED else 2,
                    release_reason=draw(RELEASE_REASONS)
                    if status is LeaseStatus.RELEASED
                    else None,
                )
            )
    return attempts, leases


PAYLOAD_VALUES: st.SearchStrategy[PayloadValue] = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
)


def _with_current_lease(
    draw: st.DrawFn, attempt: Attempt, leases: list[Lease], times: st.SearchStrategy[int]
) -> tuple[Attempt, list[Lease]]:
    """`attempt` bound to a Worker with lease generation 1, whose row has a drawn status and
    release reason (mostly `released(lease_expired)`); other Attempts' rows are kept."""
    status = draw(st.sampled_from([LeaseStatus.RELEASED] * 3 + list(LeaseStatus)))
    row = Lease(
        attempt_id=attempt.attempt_id,
        run_id=attempt.run_id,
        lease_generation=1,
        status=status,
        version=2,
        worker_id="w1",
        worker_session_id="w1-s1",
        worker_generation=1,
        token_digest=DIGEST,
        acquired_at_ms=0,
        renewed_at_ms=0,
        expires_at_ms=draw(times),
        updated_at_ms=1,
        released_at_ms=None if status is LeaseStatus.LEASED else 2,
        release_reason=draw(RELEASE_REASONS) if status is LeaseStatus.RELEASED else None,
    )
    # Generation 1 is replaced; a `leased` row also replaces the Attempt's other `leased` one
    # (§1.1: at most one per Attempt).
    kept = [
        x
        for x in leases
        if x.attempt_id != attempt.attempt_id
        or (
            x.lease_generation != 1
            and not (status is LeaseStatus.LEASED and x.status is LeaseStatus.LEASED)
        )
    ]
    bound = dataclasses.replace(
        attempt,
        worker_id="w1",
        worker_session_id="w1-s1",
        worker_generation=1,
        lease_generation=1,
        lease_version=2,
    )
    return bound, [*kept, row]


@st.composite
def one_run(
    draw: st.DrawFn, times: st.SearchStrategy[int] = TIMES
) -> tuple[RunAggregate, list[Event]]:
    """One Run with its Attempts, lease rows, policy and Events, every time drawn from
    `times`."""
    maybe_time = st.none() | times
    run_id = draw(st.text(RUN_ID_ALPHABET, min_size=1, max_size=3))
    cancel_at = draw(st.none() | st.none() | times)
    status = draw(RUN_STATUSES)
    run = Run(
        run_id=run_id,
        project_id="p",
        task_id="t",
        task_revision=1,
        executor_type=draw(st.sampled_from(EXECUTORS)),
        kind=draw(st.sampled_from([RunKind.ORDINARY] * 4 + [RunKind.WORKFLOW])),
        owner=draw(st.sampled_from([RunOwner.RUNTIME] * 4 + [RunOwner.LEGACY])),
        status=status,
        version=3,
        event_seq=0,
        created_at_ms=draw(times),
        updated_at_ms=40,
        queued_at_ms=draw(maybe_time),
        cancel_requested_at_ms=cancel_at,
        cancel_reason=None if cancel_at is None else CancelReason.TIMEOUT,
    )
    attempts, leases = draw(attempts_and_leases(run_id, draw(st.integers(0, 3)), times))
    coherent = draw(st.booleans())
    if attempts and coherent:  # often coherent: the latest Attempt fits the Run
        fitting = draw(st.sampled_from(FITTING[status]))
        attempts[-1] = dataclasses.replace(attempts[-1], status=fitting)
        started = fitting in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
        if started and draw(st.sampled_from((True, True, True, False))):
            # Appendix E-1's shape: the latest remote Attempt's current lease was released (by
            # T9 when the reason is `lease_expired`), or is still held; mostly under an intent.
            attempts[-1], leases = _with_current_lease(draw, attempts[-1], leases, times)
            if run.cancel_requested_at_ms is None and draw(st.booleans()):
                at = draw(times)
                run = dataclasses.replace(
                    run, cancel_requested_at_ms=at, cancel_reason=CancelReason.TIMEOUT
                )
    policy = None
    if draw(st.booleans()) or (coherent and status is RunStatus.RETRY_WAIT):
        due = draw(times if coherent and status is RunStatus.RETRY_WAIT else maybe_time)
        policy = RunRetryPolicy(
            run_id, 3, draw(st.booleans()), Safety.IDEMPOTENT, 5, 20, 2, 0, 1, due
        )
    events = [
        Event(
            event_id=f"evt:{run_id}:{seq}",
            run_id=run_id,
            seq=seq,
            type="run.queued",
            actor=Actor.RECONCILER,
            dedupe_key=f"d:{seq}",
            at_ms=seq,
            attempt_id=None if seq == 1 else f"a-{run_id}",
            code="APPLIED" if seq == 2 else None,
            payload=tuple(draw(st.dictionaries(st.sampled_from("kqz"), PAYLOAD_VALUES)).items()),
        )
        for seq in range(1, draw(st.integers(0, 2)) + 1)
    ]
    return RunAggregate(run, tuple(attempts), policy, tuple(leases)), events


@st.composite
def world(
    draw: st.DrawFn, times: st.SearchStrategy[int] = TIMES
) -> tuple[list[RunAggregate], dict[str, list[Event]]]:
    """2 to 16 Runs with distinct ids (a list of Runs shrinks by dropping Runs), every time
    drawn from `times` (`TIED_TIMES` makes ties on every time column of every key common)."""
    runs = draw(
        st.lists(one_run(times), min_size=2, max_size=16, unique_by=lambda r: r[0].run.run_id)
    )
    return [agg for agg, _ in runs], {agg.run.run_id: events for agg, events in runs}


def world_effects(
    aggregates: Sequence[RunAggregate], events: Mapping[str, Sequence[Event]] | None = None
) -> Iterator[Effect]:
    """The insert effects that write `aggregates` (and their `events`, by Run id) through a
    runner's own statements: each Run, its Attempts, policy, leases, then its Events."""
    for agg in aggregates:
        yield InsertRun(agg.run)
        yield from (InsertAttempt(attempt) for attempt in agg.attempts)
        if agg.policy is not None:
            yield InsertPolicy(agg.policy)
        yield from (InsertLease(lease) for lease in agg.leases)
        yield from (AppendEvent(event) for event in (events or {}).get(agg.run.run_id, ()))
