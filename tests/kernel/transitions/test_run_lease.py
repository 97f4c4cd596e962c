"""Dispatch lease transitions T1..T10 and the fencing properties LEASE-01..LEASE-12 (SPEC §1.7,
§1.10, §1.12, B-16..B-21) plus the redaction rule S-1 for lease tokens.

Every state is reached through kernel transitions (`tests.support.sim.Sim`, wrapped by
`tests.support.lease_fixtures.LeaseFlow`); nothing is built by hand. Row tests pin one table row
each: outcome kind and code, the new Run/Attempt/lease rows, the Events appended and the effects
with the guards a runner re-checks. The LEASE tests are Hypothesis properties.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import (
    Actor,
    Applied,
    AttemptStatus,
    CancelReason,
    Code,
    CompleteWithLease,
    CompletionOutcome,
    ExpireWithLease,
    GrantLease,
    InsertLease,
    Lease,
    LeaseStatus,
    NotRunningEvidence,
    Outcome,
    Profile,
    RecoverRuntime,
    Rejected,
    ReleaseReason,
    Replayed,
    RunAggregate,
    RunStatus,
    Secret,
    UpdateAttempt,
    UpdateLease,
    WorkerSessionStatus,
    apply,
    apply_effects,
    offer_id,
)
from kernel.commands import Command
from kernel.contracts import step_violations
from tests.support.lease_fixtures import (
    FENCE_FIELDS,
    FENCED_KINDS,
    FOREIGN_TOKEN,
    FencedCommand,
    FencedKind,
    FenceField,
    LeaseFlow,
    advance_lease_clock,
    effect_shape,
    replace_fence,
    walk_values,
)
from tests.support.sim import RUN_ID, Sim, lease_token, safe_policies

STARTED = (AttemptStatus.STARTING, AttemptStatus.RUNNING)
LOCAL_PROFILES = (Profile.EDGE, Profile.STANDALONE)
CONTROL_PLANE_PROFILES = (Profile.EDGE, Profile.STANDALONE, Profile.CLUSTER)
WALK_STEPS = 40
WALK_EXAMPLES = 50

# B-16: the code of each fence field, in check order.
FIELD_CODE: dict[FenceField, Code] = {
    "worker_id": Code.LEASE_WORKER_MISMATCH,
    "worker_session_id": Code.LEASE_WORKER_SESSION_MISMATCH,
    "worker_generation": Code.LEASE_WORKER_GENERATION_MISMATCH,
    "lease_generation": Code.LEASE_GENERATION_MISMATCH,
    "lease_token": Code.LEASE_TOKEN_MISMATCH,
    "expected_version": Code.LEASE_VERSION_MISMATCH,
}
B16_ORDER: tuple[str, ...] = (*FENCE_FIELDS, "lease_expired", "worker_unavailable")
B16_CODE: dict[str, Code] = {
    **{str(field): code for field, code in FIELD_CODE.items()},
    "lease_expired": Code.LEASE_EXPIRED,
    "worker_unavailable": Code.WORKER_UNAVAILABLE,
}
# The Attempt state in which each fenced command would otherwise apply (T2, T3, T4, T5, T6).
APPLIES_FROM: dict[FencedKind, tuple[AttemptStatus, ...]] = {
    "starting": (AttemptStatus.CLAIMED,),
    "renew": STARTED,
    "running": (AttemptStatus.STARTING,),
    "fail_start": (AttemptStatus.STARTING,),
    "complete": STARTED,
}
EXIT_CODES: dict[CompletionOutcome, int | None] = {
    CompletionOutcome.SUCCEEDED: 0,
    CompletionOutcome.FAILED: 3,
    CompletionOutcome.CANCELLED: None,
    CompletionOutcome.TIMED_OUT: 137,
}


# -- helpers --------------------------------------------------------------------------------------
def only_lease(agg: RunAggregate) -> Lease:
    assert len(agg.leases) == 1
    return agg.leases[0]


def event_rows(out: Applied) -> list[tuple[str, Actor, int, str | None, str | None]]:
    return [(e.type, e.actor, e.seq, e.attempt_id, e.code) for e in out.events]


def assert_committed(before: RunAggregate, out: Applied, now: int) -> None:
    """The step contract (V-1..V-4, I-5, effects reproduce the aggregate) and Event identity."""
    assert step_violations(before, out, now) == []
    assert apply_effects(before, out.effects) == out.aggregate
    for event in out.events:
        assert event.at_ms == now
        assert event.run_id == RUN_ID
        assert event.event_id == f"evt:{RUN_ID}:{event.seq}"


def assert_no_write(flow: LeaseFlow, before: RunAggregate, outcome: Outcome) -> None:
    assert not isinstance(outcome, Applied)
    assert flow.sim.agg is before
    assert flow.sim.events[-1].seq == before.run.event_seq


def other_worker(worker_id: str) -> str:
    return "w2" if worker_id == "w1" else "w1"


def mismatched_value(data: st.DataObject, flow: LeaseFlow, field: FenceField) -> object:
    """A value of `field` that differs from the current lease's (and, for the identity fields,
    from every older generation of the same Worker too)."""
    lease = flow.lease
    if field == "worker_id":
        return data.draw(st.sampled_from(["w-foreign", other_worker(lease.worker_id)]))
    if field == "worker_session_id":
        return data.draw(
            st.sampled_from(
                [
                    f"{lease.worker_session_id}-old",
                    f"{lease.worker_id}-s{lease.worker_generation + 1}",
                ]
            )
        )
    if field == "worker_generation":
        return data.draw(st.integers(0, 6).filter(lambda g: g != lease.worker_generation))
    if field == "lease_generation":
        return data.draw(st.integers(1, lease.lease_generation - 1))
    if field == "lease_token":
        stale = [lease_token(lease.attempt_id, g) for g in range(1, lease.lease_generation)]
        return data.draw(
            st.sampled_from(
                [FOREIGN_TOKEN, lease_token(lease.attempt_id, lease.lease_generation + 1), *stale]
            )
        )
    return data.draw(st.integers(1, lease.version + 3).filter(lambda v: v != lease.version))


def reach_drawn(
    data: st.DataObject,
    statuses: tuple[AttemptStatus, ...],
    *,
    min_prior_expiries: int = 0,
) -> LeaseFlow:
    """A Run whose latest Attempt is in one of `statuses` under a live lease, after 0..2
    expired grants to the same Worker and (once started) 0..2 renewals."""
    flow = LeaseFlow()
    status = data.draw(st.sampled_from(statuses))
    flow.reach(
        status,
        worker_id=data.draw(st.sampled_from(["w1", "w2"])),
        prior_expiries=data.draw(st.integers(min_prior_expiries, 2)),
        gap_ms=data.draw(st.sampled_from([0, 1, 1_000])),
    )
    if status in STARTED:
        for _ in range(data.draw(st.integers(0, 2))):
            flow.tick(1_000)
            flow.must(flow.renew_command())
    return flow


def lease_walk(
    data: st.DataObject, *, granted: bool = False
) -> Iterator[tuple[Sim, RunAggregate | None, Command, Outcome]]:
    """A random walk that starts from an admitted remote Run (safe retry policy or none),
    optionally granted first, then follows `LeaseFlow.draw_step`; yields after every kernel
    step."""
    flow = LeaseFlow()
    flow.admit(data.draw(st.one_of(st.none(), safe_policies())))
    sim = flow.sim
    if granted:
        admitted = sim.agg
        grant = flow.grant_command(data.draw(st.sampled_from(["w1", "w2"])))
        yield sim, admitted, grant, sim.step(grant)
    for _ in range(WALK_STEPS):
        advance_lease_clock(data, sim)
        command = flow.draw_step(data)
        if command is None:
            continue
        before = sim.agg
        outcome = sim.step(command)
        yield sim, before, command, outcome


# -- T1..T10 row by row ---------------------------------------------------------------------------
@pytest.mark.spec("LEASE-01", "LEASE-11", "RUN-03")
def test_t1_grant_lease_dispatches_a_claimed_attempt() -> None:
    """T1: queued / claimed / no lease -> dispatching / claimed / new `leased` lease with
    generation 1 and version 1; the Attempt gets the Worker binding, the offer id and the lease
    mirror; one `run.dispatching` Event by the scheduler; the raw token is stored as a digest."""
    flow = LeaseFlow()
    flow.admit()
    before = flow.agg
    now = flow.tick(5)
    out = flow.must(flow.grant_command("w2", 45_000))

    assert out.code is Code.GRANTED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus.DISPATCHING
    assert (run.version, run.event_seq, run.updated_at_ms) == (2, 3, now)
    assert attempt.status is AttemptStatus.CLAIMED
    assert (attempt.worker_id, attempt.worker_session_id, attempt.worker_generation) == (
        "w2",
        "w2-s1",
        1,
    )
    assert attempt.offer_id == offer_id("a1", 1, "w2", "w2-s1", 1)
    assert (attempt.lease_generation, attempt.lease_version) == (1, 1)
    assert lease == Lease(
        attempt_id="a1",
        run_id=RUN_ID,
        lease_generation=1,
        status=LeaseStatus.LEASED,
        version=1,
        worker_id="w2",
        worker_session_id="w2-s1",
        worker_generation=1,
        token_digest=lease_token("a1", 1).digest(),
        acquired_at_ms=now,
        renewed_at_ms=now,
        expires_at_ms=now + 45_000,
        updated_at_ms=now,
    )
    assert event_rows(out) == [("run.dispatching", Actor.SCHEDULER, 3, None, None)]
    assert effect_shape(out.effects) == [
        ("UpdateRun", 1),
        ("UpdateAttempt", (AttemptStatus.CLAIMED, None)),
        ("InsertLease", 1),
        ("AppendEvent", 3),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("LEASE-01", "LEASE-11", "RUN-03")
def test_t2_acknowledge_starting_moves_claimed_to_starting() -> None:
    """T2: dispatching / claimed / leased -> dispatching / starting / lease version+1 (mirrored
    on the Attempt); one `attempt.starting` Event by the Worker; expiry is not extended."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.CLAIMED)
    before, lease0 = flow.agg, flow.lease
    now = flow.tick(700)
    out = flow.must(flow.starting_command())

    assert out.code is Code.APPLIED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus.DISPATCHING
    assert (run.version, run.event_seq) == (before.run.version + 1, 4)
    assert attempt.status is AttemptStatus.STARTING
    assert attempt.lease_version == 2
    assert lease == dataclasses.replace(lease0, version=2, updated_at_ms=now)
    assert event_rows(out) == [("attempt.starting", Actor.WORKER, 4, "a1", None)]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (AttemptStatus.CLAIMED, 1)),
        ("UpdateLease", (1, LeaseStatus.LEASED)),
        ("AppendEvent", 4),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("RUN-03")
def test_t2r_repeated_starting_ack_is_already_applied_without_version() -> None:
    """T2r (B-17): with the Attempt already `starting` under a leased lease, the same starting
    ACK (stale expected version) or one carrying the current version is
    `Replayed(already_applied)` and writes nothing."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.CLAIMED)
    first = flow.starting_command()
    flow.tick(10)
    flow.must(first)
    before = flow.agg
    for command in (first, flow.starting_command()):
        flow.tick(10)
        outcome = flow.step(command)
        assert outcome == Replayed(Code.ALREADY_APPLIED)
        assert_no_write(flow, before, outcome)


@pytest.mark.spec("RUN-03", "LEASE-09")
@pytest.mark.parametrize(
    ("moved_to", "expected"),
    [
        ("running", Replayed(Code.ALREADY_RUNNING)),
        ("completed", Replayed(Code.ALREADY_TERMINAL)),
        ("start_failed", Rejected(Code.LEASE_NOT_LEASED)),
        ("lost", Rejected(Code.LEASE_NOT_LEASED)),
    ],
)
def test_t2x_starting_ack_after_the_attempt_moved_on(moved_to: str, expected: Outcome) -> None:
    """T2x: a starting ACK whose token and Worker fence match, on an Attempt that is already
    `running` or terminal under a completed lease, is `Replayed(already_running)` /
    `Replayed(already_terminal)`. If the lease was `released` (start failure, lost) the old
    authority is revoked and the ACK is `Rejected(LEASE_NOT_LEASED)` (decision; LEASE-09)."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.CLAIMED)
    ack = flow.starting_command()
    flow.tick(10)
    flow.must(ack)
    flow.tick(10)
    if moved_to in ("running", "completed", "lost"):
        flow.must(flow.running_command())
    if moved_to == "completed":
        flow.must(flow.complete_command())
    elif moved_to == "start_failed":
        flow.must(flow.fail_start_command())
    elif moved_to == "lost":
        flow.sim.now = flow.lease.expires_at_ms
        flow.must(flow.expire_command(Profile.EDGE))
    before = flow.agg
    for command in (ack, flow.starting_command()):
        flow.tick(10)
        outcome = flow.step(command)
        assert outcome == expected
        assert_no_write(flow, before, outcome)


@pytest.mark.spec("LEASE-01", "LEASE-11")
@pytest.mark.parametrize("status", STARTED)
def test_t3_renew_extends_the_lease_only(status: AttemptStatus) -> None:
    """T3: renew of a `starting`/`running` Attempt's live lease sets `renewed_at = now`,
    `expires_at = now + duration`, lease version+1 and the Attempt mirror; Run, statuses and
    Events are unchanged, and there is no Run update (V-1: renew-only, D-7)."""
    flow = LeaseFlow()
    flow.reach(status)
    before, lease0, attempt0 = flow.agg, flow.lease, flow.attempt
    now = flow.tick(10_000)
    out = flow.must(flow.renew_command(duration_ms=60_000))

    assert out.code is Code.APPLIED
    assert out.aggregate.run == before.run
    attempt, lease = out.aggregate.attempts[0], only_lease(out.aggregate)
    assert attempt == dataclasses.replace(attempt0, lease_version=lease0.version + 1)
    assert lease == dataclasses.replace(
        lease0,
        version=lease0.version + 1,
        renewed_at_ms=now,
        expires_at_ms=now + 60_000,
        updated_at_ms=now,
    )
    assert out.events == ()
    assert effect_shape(out.effects) == [
        ("UpdateAttempt", (status, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("LEASE-01", "LEASE-11", "RUN-03")
def test_t4_acknowledge_running_records_the_handle_fact() -> None:
    """T4: dispatching / starting / leased -> running / running / lease version+1; the Attempt
    records the handle and `started_at_ms` (the handle fact, which the Run takes too); Events
    `run.running` then `attempt.running` by the Worker."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.STARTING)
    before, lease0 = flow.agg, flow.lease
    now = flow.tick(2_000)
    started = now - 1_500
    out = flow.must(flow.running_command(handle="pid:77", started_at_ms=started))

    assert out.code is Code.APPLIED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus.RUNNING
    assert (run.version, run.started_at_ms) == (before.run.version + 1, started)
    assert attempt.status is AttemptStatus.RUNNING
    assert (attempt.executor_handle, attempt.started_at_ms) == ("pid:77", started)
    assert attempt.lease_version == lease0.version + 1
    assert lease == dataclasses.replace(lease0, version=lease0.version + 1, updated_at_ms=now)
    seq = before.run.event_seq
    assert event_rows(out) == [
        ("run.running", Actor.WORKER, seq + 1, None, None),
        ("attempt.running", Actor.WORKER, seq + 2, "a1", None),
    ]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (AttemptStatus.STARTING, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
        ("AppendEvent", seq + 1),
        ("AppendEvent", seq + 2),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("RUN-03")
def test_t4r_repeated_running_ack_is_a_replay() -> None:
    """T4r: on running / running the same running ACK (fence except version, same handle) is
    `Replayed(already_applied)`; a different handle is refused (`HANDLE_CONFLICT`); once the
    Attempt is terminal (completed lease) the ACK is `Replayed(already_terminal)`. No writes."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.STARTING)
    first = flow.running_command()
    flow.tick(10)
    flow.must(first)
    before = flow.agg
    cases: list[tuple[Command, Outcome]] = [
        (first, Replayed(Code.ALREADY_APPLIED)),
        (flow.running_command(started_at_ms=first.started_at_ms), Replayed(Code.ALREADY_APPLIED)),
        (flow.running_command(handle="pid:other"), Rejected(Code.HANDLE_CONFLICT)),
    ]
    for command, expected in cases:
        flow.tick(10)
        outcome = flow.step(command)
        assert outcome == expected
        assert_no_write(flow, before, outcome)
    flow.must(flow.complete_command())
    after_completion = flow.agg
    outcome = flow.step(first)
    assert outcome == Replayed(Code.ALREADY_TERMINAL)
    assert_no_write(flow, after_completion, outcome)


@pytest.mark.spec("LEASE-01", "RUN-03")
def test_t5_fail_start_fails_the_run_and_releases_the_lease() -> None:
    """T5 (B-18): dispatching / starting / leased -> failed / failed / `released(start_failed)`,
    version+1; Run `error_code = START_FAILED`; Events `run.failed` then `attempt.failed` by the
    Worker. The identical command after success is `Replayed(already_applied)` (also later);
    the same fence with another failure code is not a replay."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.STARTING)
    before, lease0 = flow.agg, flow.lease
    now = flow.tick(1_234)
    command = flow.fail_start_command(failure_code="EXEC_NOT_FOUND")
    out = flow.must(command)

    assert out.code is Code.APPLIED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus.FAILED
    assert (run.error_code, run.finished_at_ms, run.version) == (
        "START_FAILED",
        now,
        before.run.version + 1,
    )
    assert attempt.status is AttemptStatus.FAILED
    assert (attempt.error_code, attempt.finished_at_ms) == ("EXEC_NOT_FOUND", now)
    assert attempt.lease_version == lease0.version + 1
    assert lease == dataclasses.replace(
        lease0,
        status=LeaseStatus.RELEASED,
        version=lease0.version + 1,
        released_at_ms=now,
        release_reason=ReleaseReason.START_FAILED,
        updated_at_ms=now,
    )
    seq = before.run.event_seq
    assert event_rows(out) == [
        ("run.failed", Actor.WORKER, seq + 1, None, "START_FAILED"),
        ("attempt.failed", Actor.WORKER, seq + 2, "a1", "EXEC_NOT_FOUND"),
    ]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (AttemptStatus.STARTING, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
        ("AppendEvent", seq + 1),
        ("AppendEvent", seq + 2),
    ]
    assert_committed(before, out, now)

    failed = flow.agg
    for at in (now, now + 50_000):
        replay = flow.step(command, at)
        assert replay == Replayed(Code.ALREADY_APPLIED)
        assert_no_write(flow, failed, replay)
    other = dataclasses.replace(command, failure_code="OTHER")
    refused = flow.step(other)
    assert refused == Rejected(Code.LEASE_NOT_LEASED)
    assert_no_write(flow, failed, refused)


@pytest.mark.spec("LEASE-01", "RUN-03")
@pytest.mark.parametrize("outcome", list(CompletionOutcome))
@pytest.mark.parametrize("status", STARTED)
def test_t6_completion_takes_the_outcome(status: AttemptStatus, outcome: CompletionOutcome) -> None:
    """T6: dispatching or running / starting or running / leased -> outcome / outcome /
    `completed`, version+1; the Attempt stores callback sequence, outcome, exit code and
    `finished_at_ms`; Events `run.<outcome>` then `attempt.<outcome>` by the Worker;
    `Applied(completed)`."""
    flow = LeaseFlow()
    flow.reach(status)
    before, lease0, attempt0 = flow.agg, flow.lease, flow.attempt
    now = flow.tick(3_000)
    exit_code = EXIT_CODES[outcome]
    out = flow.must(
        flow.complete_command(callback_sequence=2, outcome=outcome, exit_code=exit_code)
    )

    assert out.code is Code.COMPLETED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus(outcome.value)
    assert (run.finished_at_ms, run.version) == (now, before.run.version + 1)
    # §1.2: a failed Run carries a stable error code (docs/decisions.md R-19).
    error = "EXECUTION_FAILED" if outcome is CompletionOutcome.FAILED else None
    assert run.error_code == error
    assert attempt == dataclasses.replace(
        attempt0,
        status=AttemptStatus(outcome.value),
        callback_sequence=2,
        exit_code=exit_code,
        finished_at_ms=now,
        lease_version=lease0.version + 1,
        error_code=error,
    )
    assert lease == dataclasses.replace(
        lease0,
        status=LeaseStatus.COMPLETED,
        version=lease0.version + 1,
        completed_at_ms=now,
        updated_at_ms=now,
    )
    seq = before.run.event_seq
    assert event_rows(out) == [
        (f"run.{outcome}", Actor.WORKER, seq + 1, None, None),
        (f"attempt.{outcome}", Actor.WORKER, seq + 2, "a1", None),
    ]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (status, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
        ("AppendEvent", seq + 1),
        ("AppendEvent", seq + 2),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("LEASE-03", "RUN-03")
def test_t6r_identical_completion_replay_is_already_terminal() -> None:
    """T6r: terminal / terminal / completed, exact replay rule: the identical completion is
    `Replayed(already_terminal)` at the same time and later, and writes nothing."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.RUNNING)
    flow.tick(500)
    command = flow.complete_command(
        callback_sequence=1, outcome=CompletionOutcome.FAILED, exit_code=9
    )
    flow.must(command)
    before = flow.agg
    for at in (flow.now, flow.now + 1, flow.now + 10**6):
        outcome = flow.step(command, at)
        assert outcome == Replayed(Code.ALREADY_TERMINAL)
        assert_no_write(flow, before, outcome)


@pytest.mark.spec("LEASE-06")
@pytest.mark.parametrize("profile", CONTROL_PLANE_PROFILES)
def test_t7_expiry_of_a_claimed_attempt_requeues_it(profile: Profile) -> None:
    """T7 (B-19): dispatching / claimed / leased, expired at exactly `expires_at_ms` ->
    queued / claimed / `released(lease_expired)`, version+1; the Worker binding and offer id are
    cleared (the lease generation and mirror stay); `run.queued` by the reconciler;
    `Applied(released)`. Any profile."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.CLAIMED)
    before, lease0, attempt0 = flow.agg, flow.lease, flow.attempt
    now = flow.sim.now = lease0.expires_at_ms
    out = flow.must(flow.expire_command(profile))

    assert out.code is Code.RELEASED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus.QUEUED
    assert (run.queued_at_ms, run.version) == (now, before.run.version + 1)
    assert attempt == dataclasses.replace(
        attempt0,
        worker_id=None,
        worker_session_id=None,
        worker_generation=None,
        offer_id=None,
        lease_version=2,
    )
    assert attempt.status is AttemptStatus.CLAIMED
    assert attempt.lease_generation == 1
    assert lease == dataclasses.replace(
        lease0,
        status=LeaseStatus.RELEASED,
        version=2,
        released_at_ms=now,
        release_reason=ReleaseReason.LEASE_EXPIRED,
        updated_at_ms=now,
    )
    seq = before.run.event_seq
    assert event_rows(out) == [("run.queued", Actor.RECONCILER, seq + 1, None, None)]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (AttemptStatus.CLAIMED, 1)),
        ("UpdateLease", (1, LeaseStatus.LEASED)),
        ("AppendEvent", seq + 1),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("LEASE-07")
@pytest.mark.parametrize("profile", LOCAL_PROFILES)
@pytest.mark.parametrize("status", STARTED)
def test_t8_local_expiry_of_a_started_attempt_is_lost(
    status: AttemptStatus, profile: Profile
) -> None:
    """T8 (E-1, V-6, B-20): on edge/standalone, an expired `starting`/`running` Attempt without
    intent -> Run `lost`, Attempt `lost` (`finished_at_ms = observed`, `LEASE_EXPIRED`), lease
    `released(lease_expired)` version+1, Events `run.lost` then `attempt.lost` by the reconciler,
    all in one `Applied(lost)`."""
    flow = LeaseFlow()
    flow.reach(status)
    before, lease0, attempt0 = flow.agg, flow.lease, flow.attempt
    now = flow.sim.now = lease0.expires_at_ms
    out = flow.must(flow.expire_command(profile))

    assert out.code is Code.LOST
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run.status is RunStatus.LOST
    assert run.version == before.run.version + 1
    assert attempt == dataclasses.replace(
        attempt0,
        status=AttemptStatus.LOST,
        finished_at_ms=now,
        error_code="LEASE_EXPIRED",
        lease_version=lease0.version + 1,
    )
    assert lease == dataclasses.replace(
        lease0,
        status=LeaseStatus.RELEASED,
        version=lease0.version + 1,
        released_at_ms=now,
        release_reason=ReleaseReason.LEASE_EXPIRED,
        updated_at_ms=now,
    )
    seq = before.run.event_seq
    assert event_rows(out) == [
        ("run.lost", Actor.RECONCILER, seq + 1, None, None),
        ("attempt.lost", Actor.RECONCILER, seq + 2, "a1", "LEASE_EXPIRED"),
    ]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (status, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
        ("AppendEvent", seq + 1),
        ("AppendEvent", seq + 2),
    ]
    assert_committed(before, out, now)


@pytest.mark.spec("LEASE-07")
@pytest.mark.parametrize("profile", CONTROL_PLANE_PROFILES)
@pytest.mark.parametrize("status", STARTED)
def test_t9_expiry_under_cancel_intent_only_revokes(
    status: AttemptStatus, profile: Profile
) -> None:
    """T9: with a cancellation intent, expiry of a `starting`/`running` Attempt's lease only
    releases it (`lease_expired`, version+1): Run and Attempt keep their statuses (Run version+1
    by V-1, Attempt lease mirror), no Event; `Applied(released)`."""
    flow = LeaseFlow()
    flow.reach(status)
    flow.tick(100)
    flow.request_cancel(CancelReason.TIMEOUT)
    before, lease0, attempt0 = flow.agg, flow.lease, flow.attempt
    now = flow.sim.now = lease0.expires_at_ms + 1
    out = flow.must(flow.expire_command(profile))

    assert out.code is Code.RELEASED
    run, attempt, lease = out.aggregate.run, out.aggregate.attempts[0], only_lease(out.aggregate)
    assert run == dataclasses.replace(before.run, version=before.run.version + 1, updated_at_ms=now)
    assert attempt == dataclasses.replace(attempt0, lease_version=lease0.version + 1)
    assert lease == dataclasses.replace(
        lease0,
        status=LeaseStatus.RELEASED,
        version=lease0.version + 1,
        released_at_ms=now,
        release_reason=ReleaseReason.LEASE_EXPIRED,
        updated_at_ms=now,
    )
    assert out.events == ()
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (status, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
    ]
    assert_committed(before, out, now)


def _t10_state(case: str) -> tuple[LeaseFlow, ExpireWithLease, int, Code]:
    flow = LeaseFlow()
    if case == "live":
        flow.reach(AttemptStatus.RUNNING)
        return flow, flow.expire_command(), flow.lease.expires_at_ms - 1, Code.NOT_EXPIRED
    if case == "completed":
        flow.reach(AttemptStatus.RUNNING)
        flow.must(flow.complete_command())
    elif case == "start_failed":
        flow.reach(AttemptStatus.STARTING)
        flow.must(flow.fail_start_command())
    elif case == "lost":
        flow.reach(AttemptStatus.STARTING)
        flow.sim.now = flow.lease.expires_at_ms
        flow.must(flow.expire_command(Profile.STANDALONE))
    else:  # "old_generation": released by T7 and superseded by generation 2
        flow.reach(AttemptStatus.CLAIMED, prior_expiries=1)
        return flow, flow.expire_command(lease_generation=1), flow.now + 10**6, Code.ALREADY_FINAL
    return flow, flow.expire_command(), flow.lease.expires_at_ms + 10**6, Code.ALREADY_FINAL


@pytest.mark.spec("LEASE-05")
@pytest.mark.parametrize("profile", CONTROL_PLANE_PROFILES)
@pytest.mark.parametrize("case", ["live", "completed", "start_failed", "lost", "old_generation"])
def test_t10_expiry_of_live_or_final_lease_writes_nothing(case: str, profile: Profile) -> None:
    """T10: `expire_with_lease` on a live lease is `Replayed(not_expired)`; on a `completed` or
    `released` lease, or a generation that is not current, `Replayed(already_final)`; no write."""
    flow, command, at, code = _t10_state(case)
    before = flow.agg
    outcome = flow.step(dataclasses.replace(command, profile=profile), at)
    assert outcome == Replayed(code)
    assert_no_write(flow, before, outcome)


# -- LEASE-01 / LEASE-11: versions and mirrors over random walks ----------------------------------
@pytest.mark.spec("LEASE-01")
@settings(max_examples=WALK_EXAMPLES)
@given(st.data())
def test_lease_01_every_lease_mutation_adds_one_and_final_rows_freeze(data: st.DataObject) -> None:
    """LEASE-01 (V-2, B-11, I-5): in every committed step each new lease row starts at version 1
    (`leased`), each changed row moved from `leased` by exactly +1 with an `UpdateLease` effect
    guarded by the previous version and status, and a `completed`/`released` row, once seen, is
    never modified again; steps that do not apply change no lease."""
    final: dict[tuple[str, int], Lease] = {}
    for sim, before, _command, outcome in lease_walk(data):
        assert sim.agg is not None
        if not isinstance(outcome, Applied):
            assert sim.agg is before
            continue
        assert before is not None
        old = {(x.attempt_id, x.lease_generation): x for x in before.leases}
        new = {(x.attempt_id, x.lease_generation): x for x in outcome.aggregate.leases}
        updates = {
            (e.row.attempt_id, e.row.lease_generation): e
            for e in outcome.effects
            if isinstance(e, UpdateLease)
        }
        inserts = {
            (e.row.attempt_id, e.row.lease_generation): e
            for e in outcome.effects
            if isinstance(e, InsertLease)
        }
        assert set(old) <= set(new)
        for key, lease in new.items():
            if key not in old:
                assert key in inserts
                assert (lease.version, lease.status) == (1, LeaseStatus.LEASED)
                continue
            previous = old[key]
            if lease == previous:
                assert key not in updates
                continue
            assert previous.status is LeaseStatus.LEASED
            assert lease.version == previous.version + 1
            assert (updates[key].expected_version, updates[key].expected_status) == (
                previous.version,
                LeaseStatus.LEASED,
            )
        for key, lease in new.items():
            if key in final:
                assert lease == final[key]
            elif lease.status is not LeaseStatus.LEASED:
                final[key] = lease


@pytest.mark.spec("LEASE-11")
@settings(max_examples=WALK_EXAMPLES)
@given(st.data())
def test_lease_11_attempt_lease_version_mirrors_the_current_lease(data: st.DataObject) -> None:
    """LEASE-11 (I-6, V-2): after every committed step each Attempt with a lease generation has
    `lease_version` equal to the version of row `(attempt, lease_generation)`, which is its
    newest generation; an Attempt never granted a lease has neither field; and a step that
    changes a current lease row writes the Attempt mirror in the same outcome."""
    for sim, _before, _command, outcome in lease_walk(data):
        if not isinstance(outcome, Applied):
            continue
        agg = outcome.aggregate
        assert sim.agg is agg
        for attempt in agg.attempts:
            rows = list(agg.leases_of(attempt.attempt_id))
            if attempt.lease_generation is None:
                assert attempt.lease_version is None
                assert rows == []
                continue
            current = agg.lease(attempt.attempt_id, attempt.lease_generation)
            assert current is not None
            assert attempt.lease_version == current.version
            assert attempt.lease_generation == max(x.lease_generation for x in rows)
        mirrored = {
            e.row.attempt_id: e.row.lease_version
            for e in outcome.effects
            if isinstance(e, UpdateAttempt)
        }
        for effect in outcome.effects:
            if isinstance(effect, UpdateLease | InsertLease):
                row = effect.row
                attempt_now = agg.attempt(row.attempt_id)
                assert attempt_now is not None
                if attempt_now.lease_generation == row.lease_generation:
                    assert mirrored[row.attempt_id] == row.version


# -- LEASE-02: fencing ----------------------------------------------------------------------------
@pytest.mark.spec("LEASE-02")
@pytest.mark.parametrize("field", FENCE_FIELDS)
@pytest.mark.parametrize("kind", FENCED_KINDS)
@settings(max_examples=8)
@given(data=st.data())
def test_lease_02_one_mismatched_fence_field_is_rejected_with_its_code(
    kind: FencedKind, field: FenceField, data: st.DataObject
) -> None:
    """LEASE-02 (B-16): for a live lease and a command that would apply with the current fence,
    changing exactly one fence field (worker id, session, worker generation, lease generation,
    token, expected version) is `Rejected` with that field's code and writes nothing. A stale
    lease generation names an older generation granted to the same Worker session."""
    flow = reach_drawn(
        data, APPLIES_FROM[kind], min_prior_expiries=1 if field == "lease_generation" else 0
    )
    now = flow.tick(data.draw(st.integers(0, 5_000)))
    assert now < flow.lease.expires_at_ms
    worker = flow.session(flow.lease.worker_id)
    good = flow.fenced_command(kind, flow.fence(), worker)
    assert isinstance(apply(flow.agg, good, now), Applied)

    before = flow.agg
    bad_fence = flow.fence(**{field: mismatched_value(data, flow, field)})
    outcome = flow.step(flow.fenced_command(kind, bad_fence, worker))
    assert outcome == Rejected(FIELD_CODE[field])
    assert_no_write(flow, before, outcome)


@pytest.mark.spec("LEASE-02")
@pytest.mark.parametrize("first", B16_ORDER[:-1])
@settings(max_examples=12)
@given(data=st.data())
def test_lease_02_several_mismatched_fields_report_the_first_in_b16_order(
    first: str, data: st.DataObject
) -> None:
    """LEASE-02 with B-16's order: with two (or more) failing checks the code is that of the
    check made first: worker id, session, worker generation, lease generation, token, version,
    then the liveness checks `LEASE_EXPIRED` (at or after `expires_at_ms`) and
    `WORKER_UNAVAILABLE` (offline, replaced or expired session). Nothing is written."""
    kind = data.draw(st.sampled_from(FENCED_KINDS))
    # `first` fails, and so do one or more of the checks made after it.
    later = data.draw(
        st.lists(st.sampled_from(B16_ORDER[B16_ORDER.index(first) + 1 :]), min_size=1, unique=True)
    )
    chosen = [first, *later]
    flow = reach_drawn(
        data, APPLIES_FROM[kind], min_prior_expiries=1 if "lease_generation" in chosen else 0
    )
    lease = flow.lease
    at = flow.now
    if "lease_expired" in chosen:
        at = lease.expires_at_ms + data.draw(st.integers(0, 10_000))
    worker = flow.session(lease.worker_id)
    if "worker_unavailable" in chosen:
        worker = data.draw(
            st.sampled_from(
                [
                    dataclasses.replace(worker, status=WorkerSessionStatus.OFFLINE),
                    dataclasses.replace(worker, session_expires_at_ms=at),
                    dataclasses.replace(
                        worker, session_id=f"{worker.session_id}-new", generation=2
                    ),
                ]
            )
        )
    changes = {
        field: mismatched_value(data, flow, field) for field in FENCE_FIELDS if field in chosen
    }
    before = flow.agg
    outcome = flow.step(flow.fenced_command(kind, flow.fence(**changes), worker), at)
    assert outcome == Rejected(B16_CODE[first])
    assert_no_write(flow, before, outcome)


@pytest.mark.spec("LEASE-02")
@pytest.mark.parametrize("kind", FENCED_KINDS)
def test_lease_02_fence_fields_are_compared_with_the_row_the_fence_names(
    kind: FencedKind,
) -> None:
    """B-16 order, literally: the row is looked up by the fence's `(attempt, lease_generation)`
    first, so a generation with no row, or an unknown Attempt, is `LEASE_MISSING`; a command for
    another Run is `LEASE_RUN_MISMATCH`; and a stale generation that belonged to another Worker
    fails on the worker id of that row (`LEASE_WORKER_MISMATCH`) before the generation check.
    Nothing is written either way."""
    flow = LeaseFlow()
    flow.admit()
    flow.grant("w2")
    flow.expire_claim()
    flow.tick(1_000)
    flow.grant("w1")
    if APPLIES_FROM[kind][0] is not AttemptStatus.CLAIMED:
        flow.tick(10)
        flow.must(flow.starting_command())
    worker = flow.session("w1")
    before = flow.agg
    for generation, code in ((3, Code.LEASE_MISSING), (1, Code.LEASE_WORKER_MISMATCH)):
        outcome = flow.step(
            flow.fenced_command(kind, flow.fence(lease_generation=generation), worker)
        )
        assert outcome == Rejected(code)
        assert_no_write(flow, before, outcome)
    command = flow.fenced_command(kind, flow.fence(), worker)
    for changed, code in (
        (dataclasses.replace(command, run_id="run-2"), Code.LEASE_RUN_MISMATCH),
        (dataclasses.replace(command, attempt_id="a9"), Code.LEASE_MISSING),
    ):
        outcome = flow.step(changed)
        assert outcome == Rejected(code)
        assert_no_write(flow, before, outcome)


# -- LEASE-03 / LEASE-04: completion --------------------------------------------------------------
WORKER_AFTERWARDS = ("same", "offline", "draining", "replaced", "session_expired")


def _completed(data: st.DataObject) -> tuple[LeaseFlow, CompleteWithLease]:
    flow = reach_drawn(data, STARTED)
    flow.tick(data.draw(st.integers(0, 20_000)))
    outcome = data.draw(st.sampled_from(CompletionOutcome))
    command = flow.complete_command(
        callback_sequence=data.draw(st.integers(1, 3)),
        outcome=outcome,
        exit_code=data.draw(st.sampled_from([None, 0, 1, 137])),
    )
    flow.must(command)
    return flow, command


def _worker_afterwards(
    data: st.DataObject, flow: LeaseFlow, command: CompleteWithLease, change: str
) -> int:
    """Change the Worker registry after the completion committed (`change` is one of
    `WORKER_AFTERWARDS`); return a replay time, often earlier than the completion."""
    worker_id = command.fence.worker_id
    if change == "offline":
        flow.sim.set_worker_status(worker_id, WorkerSessionStatus.OFFLINE)
    elif change == "draining":
        flow.sim.set_worker_status(worker_id, WorkerSessionStatus.DRAINING)
    elif change == "replaced":
        flow.sim.restart_worker(worker_id)
    completed_at = flow.lease.updated_at_ms
    at = completed_at + data.draw(st.integers(-60_000, 2 * 10**6))
    if change == "session_expired":
        flow.sim.sessions[worker_id] = dataclasses.replace(
            flow.session(worker_id), session_expires_at_ms=max(0, at - 1)
        )
    return max(0, at)


@pytest.mark.spec("LEASE-03")
@pytest.mark.parametrize("worker_change", WORKER_AFTERWARDS)
@settings(max_examples=15)
@given(data=st.data())
def test_lease_03_identical_completion_replay_converges(
    worker_change: str, data: st.DataObject
) -> None:
    """LEASE-03 (T6r): after a completion commits, the identical request is
    `Replayed(already_terminal)` even when the Worker is now offline, draining, replaced or its
    session expired, and even when the replay's observation time is earlier; nothing is
    written."""
    flow, command = _completed(data)
    at = _worker_afterwards(data, flow, command, worker_change)
    replay = dataclasses.replace(command, worker=flow.session(command.fence.worker_id))
    before = flow.agg
    outcome = flow.step(replay, at)
    assert outcome == Replayed(Code.ALREADY_TERMINAL)
    assert_no_write(flow, before, outcome)


CHANGES = ("callback_sequence", "outcome", "exit_code", *FENCE_FIELDS)


@pytest.mark.spec("LEASE-03")
@pytest.mark.parametrize("change", CHANGES)
@settings(max_examples=12)
@given(data=st.data())
def test_lease_03_changed_completion_replay_is_rejected(change: str, data: st.DataObject) -> None:
    """LEASE-03: a replay that changes the callback sequence, outcome or exit code is
    `Rejected(COMPLETION_CONFLICT)`; one that changes a fence field follows the normal fence
    check (that field's code; a generation without a row is `LEASE_MISSING`); a changed expected
    version is not an exact replay and fails on the completed lease (`LEASE_NOT_LEASED`). Also
    with the Worker offline/replaced and at an earlier time. Nothing is written."""
    flow, command = _completed(data)
    at = _worker_afterwards(data, flow, command, data.draw(st.sampled_from(WORKER_AFTERWARDS)))
    lease = flow.lease
    fence = command.fence
    changed: CompleteWithLease
    if change == "callback_sequence":
        seq = data.draw(st.integers(1, 5).filter(lambda s: s != command.callback_sequence))
        changed, code = (
            dataclasses.replace(command, callback_sequence=seq),
            Code.COMPLETION_CONFLICT,
        )
    elif change == "outcome":
        other = data.draw(st.sampled_from([o for o in CompletionOutcome if o != command.outcome]))
        changed, code = dataclasses.replace(command, outcome=other), Code.COMPLETION_CONFLICT
    elif change == "exit_code":
        exit_code = data.draw(
            st.sampled_from([None, 0, 1, 2, 137]).filter(lambda c: c != command.exit_code)
        )
        changed, code = dataclasses.replace(command, exit_code=exit_code), Code.COMPLETION_CONFLICT
    elif change == "expected_version":
        version = data.draw(
            st.integers(1, lease.version + 3).filter(lambda v: v != fence.expected_version)
        )
        changed = dataclasses.replace(
            command, fence=dataclasses.replace(fence, expected_version=version)
        )
        code = Code.LEASE_NOT_LEASED
    elif change == "lease_generation":
        generation = data.draw(
            st.integers(1, lease.lease_generation + 1).filter(lambda g: g != lease.lease_generation)
        )
        changed = dataclasses.replace(
            command, fence=dataclasses.replace(fence, lease_generation=generation)
        )
        code = (
            Code.LEASE_MISSING
            if generation > lease.lease_generation
            else Code.LEASE_GENERATION_MISMATCH
        )
    else:
        field: FenceField = change  # type: ignore[assignment]
        changed = dataclasses.replace(
            command, fence=replace_fence(fence, **{field: mismatched_value(data, flow, field)})
        )
        code = FIELD_CODE[field]
    changed = dataclasses.replace(changed, worker=flow.session(fence.worker_id))
    before = flow.agg
    outcome = flow.step(changed, at)
    assert outcome == Rejected(code)
    assert_no_write(flow, before, outcome)


FIRST_COMPLETION_REFUSALS = (
    "offline",
    "replaced",
    "replaced_with_new_fence",
    "session_expired",
    "lease_expired",
    "lease_expired_and_offline",
)


@pytest.mark.spec("LEASE-04")
@pytest.mark.parametrize("condition", FIRST_COMPLETION_REFUSALS)
@settings(max_examples=15)
@given(data=st.data())
def test_lease_04_first_completion_needs_a_live_worker_and_lease(
    condition: str, data: st.DataObject
) -> None:
    """LEASE-04 (B-16): a first completion is rejected when the Worker is offline
    (`WORKER_UNAVAILABLE`), its session was replaced (`WORKER_UNAVAILABLE` with the old fence,
    the session mismatch with the new one) or expired (`WORKER_UNAVAILABLE`), or the lease
    expired (`LEASE_EXPIRED`, checked before the Worker). The same completion with a live Worker
    before expiry applies; a refusal writes nothing."""
    flow = reach_drawn(data, STARTED)
    worker_id = flow.lease.worker_id
    live_session = flow.session(worker_id)
    expires = flow.lease.expires_at_ms
    if condition.startswith("lease_expired"):
        at = expires + data.draw(st.integers(0, 100_000))
    else:
        at = data.draw(st.integers(flow.now, expires - 1))
    command = flow.complete_command(worker=live_session)
    if not condition.startswith("lease_expired"):
        assert isinstance(apply(flow.agg, command, at), Applied)
    code = Code.WORKER_UNAVAILABLE
    if condition in ("offline", "lease_expired_and_offline"):
        flow.sim.set_worker_status(worker_id, WorkerSessionStatus.OFFLINE)
    elif condition == "replaced":
        flow.sim.restart_worker(worker_id)
    elif condition == "replaced_with_new_fence":
        flow.sim.restart_worker(worker_id)
        new = flow.session(worker_id)
        command = dataclasses.replace(
            command,
            fence=flow.fence(worker_session_id=new.session_id, worker_generation=new.generation),
        )
        code = Code.LEASE_WORKER_SESSION_MISMATCH
    elif condition == "session_expired":
        flow.sim.sessions[worker_id] = dataclasses.replace(
            live_session, session_expires_at_ms=at - data.draw(st.integers(0, 1_000))
        )
    if condition.startswith("lease_expired"):
        code = Code.LEASE_EXPIRED
    command = dataclasses.replace(command, worker=flow.session(worker_id))
    before = flow.agg
    outcome = flow.step(command, at)
    assert outcome == Rejected(code)
    assert_no_write(flow, before, outcome)


@pytest.mark.spec("LEASE-04")
def test_lease_04_boundaries_expiry_instant_and_draining_session() -> None:
    """LEASE-04 boundaries: the lease is live while `expires_at_ms > observed_at_ms`, so a first
    completion at `expires_at - 1` applies and one at `expires_at` is `LEASE_EXPIRED`; a Worker
    session that is `draining` may still finish its lease (B-16)."""
    flow = LeaseFlow()
    flow.reach(AttemptStatus.RUNNING)
    expires = flow.lease.expires_at_ms
    command = flow.complete_command()
    assert apply(flow.agg, command, expires) == Rejected(Code.LEASE_EXPIRED)
    assert isinstance(apply(flow.agg, command, expires - 1), Applied)
    flow.sim.set_worker_status("w1", WorkerSessionStatus.DRAINING)
    draining = dataclasses.replace(command, worker=flow.session("w1"))
    out = flow.must(draining, expires - 1)
    assert out.aggregate.run.status is RunStatus.SUCCEEDED


# -- LEASE-05 .. LEASE-07, LEASE-09: expiry -------------------------------------------------------
@pytest.mark.spec("LEASE-05")
@settings(max_examples=WALK_EXAMPLES)
@given(st.data())
def test_lease_05_expiry_writes_nothing_on_live_completed_or_released_leases(
    data: st.DataObject,
) -> None:
    """LEASE-05 (T10): at every point of a random walk, `expire_with_lease` on any lease row
    that is live at the observation time is `Replayed(not_expired)`, and on any `completed` or
    `released` row (or a generation that is not current) `Replayed(already_final)`, on every
    control-plane profile, with no write."""
    for sim, _before, _command, _outcome in lease_walk(data):
        agg = sim.agg
        assert agg is not None
        for lease in agg.leases:
            attempt = agg.attempt(lease.attempt_id)
            assert attempt is not None
            if lease.status is LeaseStatus.LEASED:
                assert attempt.lease_generation == lease.lease_generation
                probes = {lease.expires_at_ms - 1, min(sim.now, lease.expires_at_ms - 1)}
                expected = Replayed(Code.NOT_EXPIRED)
            else:
                probes = {sim.now, lease.expires_at_ms + 10**6}
                expected = Replayed(Code.ALREADY_FINAL)
            for profile in CONTROL_PLANE_PROFILES:
                command = ExpireWithLease(
                    run_id=RUN_ID,
                    attempt_id=lease.attempt_id,
                    lease_generation=lease.lease_generation,
                    profile=profile,
                )
                for at in probes:
                    assert apply(agg, command, max(0, at)) == expected


@pytest.mark.spec("LEASE-06")
@settings(max_examples=40)
@given(st.data())
def test_lease_06_expired_claim_is_released_and_regranted_on_the_next_generation(
    data: st.DataObject,
) -> None:
    """LEASE-06 (T7, B-19): each expiry of a `claimed` Attempt's lease releases that lease
    (`lease_expired`, version 1 -> 2), leaves the Attempt `claimed` with its Worker binding and
    offer cleared and the Run `queued`; the next grant (any Worker) creates generation + 1 at
    version 1 and leaves the released rows unchanged."""
    flow = LeaseFlow()
    flow.admit()
    rounds = data.draw(st.integers(1, 3))
    for generation in range(1, rounds + 1):
        flow.tick(data.draw(st.integers(0, 5_000)))
        worker_id = data.draw(st.sampled_from(["w1", "w2"]))
        flow.grant(worker_id, data.draw(st.sampled_from([5_000, 30_000, 600_000])))
        assert (flow.lease.lease_generation, flow.lease.version) == (generation, 1)
        assert (flow.attempt.lease_generation, flow.attempt.lease_version) == (generation, 1)
        released_before = [x for x in flow.agg.leases if x.lease_generation < generation]
        now = flow.sim.now = flow.lease.expires_at_ms + data.draw(st.integers(0, 50_000))
        profile = data.draw(st.sampled_from(CONTROL_PLANE_PROFILES))
        out = flow.must(flow.expire_command(profile))
        assert out.code is Code.RELEASED
        lease, attempt, run = flow.lease, flow.attempt, flow.agg.run
        assert (lease.status, lease.release_reason) == (
            LeaseStatus.RELEASED,
            ReleaseReason.LEASE_EXPIRED,
        )
        assert (lease.version, lease.released_at_ms) == (2, now)
        assert attempt.status is AttemptStatus.CLAIMED
        assert (attempt.worker_id, attempt.worker_session_id, attempt.worker_generation) == (
            None,
            None,
            None,
        )
        assert attempt.offer_id is None
        assert (attempt.lease_generation, attempt.lease_version) == (generation, 2)
        assert (run.status, run.queued_at_ms) == (RunStatus.QUEUED, now)
        assert event_rows(out) == [("run.queued", Actor.RECONCILER, run.event_seq, None, None)]
        assert [x for x in flow.agg.leases if x.lease_generation < generation] == released_before
    flow.tick(1)
    regrant = flow.grant(data.draw(st.sampled_from(["w1", "w2"])))
    assert regrant.code is Code.GRANTED
    assert (flow.lease.lease_generation, flow.lease.version) == (rounds + 1, 1)
    assert flow.lease.status is LeaseStatus.LEASED
    assert (flow.attempt.lease_generation, flow.attempt.lease_version) == (rounds + 1, 1)


@pytest.mark.spec("LEASE-07")
@settings(max_examples=40)
@given(st.data())
def test_lease_07_local_expiry_commits_lost_and_release_in_one_outcome(
    data: st.DataObject,
) -> None:
    """LEASE-07 (T8, E-1 edge/standalone): expiry of a `starting`/`running` Attempt without
    intent is one `Applied(lost)` holding Attempt `lost` (`finished_at_ms` = observation,
    `LEASE_EXPIRED`), Run `lost`, Events `run.lost` then `attempt.lost` (reconciler) and the
    lease `released(lease_expired)` at version+1, each persisted by its effect."""
    flow = reach_drawn(data, STARTED)
    status, lease0, before = flow.attempt.status, flow.lease, flow.agg
    now = flow.sim.now = lease0.expires_at_ms + data.draw(st.integers(0, 100_000))
    out = flow.must(flow.expire_command(data.draw(st.sampled_from(LOCAL_PROFILES))))
    assert out.code is Code.LOST
    agg = out.aggregate
    attempt, lease = flow.attempt, flow.lease
    assert agg.run.status is RunStatus.LOST
    assert (attempt.status, attempt.finished_at_ms, attempt.error_code) == (
        AttemptStatus.LOST,
        now,
        "LEASE_EXPIRED",
    )
    assert (lease.status, lease.release_reason, lease.version, lease.released_at_ms) == (
        LeaseStatus.RELEASED,
        ReleaseReason.LEASE_EXPIRED,
        lease0.version + 1,
        now,
    )
    assert agg.leased_lease(attempt.attempt_id) is None
    seq = before.run.event_seq
    assert event_rows(out) == [
        ("run.lost", Actor.RECONCILER, seq + 1, None, None),
        ("attempt.lost", Actor.RECONCILER, seq + 2, attempt.attempt_id, "LEASE_EXPIRED"),
    ]
    assert effect_shape(out.effects) == [
        ("UpdateRun", before.run.version),
        ("UpdateAttempt", (status, lease0.version)),
        ("UpdateLease", (lease0.version, LeaseStatus.LEASED)),
        ("AppendEvent", seq + 1),
        ("AppendEvent", seq + 2),
    ]
    assert apply_effects(before, out.effects) == agg


@pytest.mark.spec("LEASE-07")
@settings(max_examples=40)
@given(st.data())
def test_lease_07_expiry_with_cancel_intent_only_releases_the_lease(data: st.DataObject) -> None:
    """LEASE-07 (T9): with a cancellation intent (any reason), expiry of a `starting`/`running`
    Attempt's lease releases only the lease (`lease_expired`, version+1); Run and Attempt are
    unchanged except the Run version/update time and the Attempt's lease mirror; no Event."""
    flow = reach_drawn(data, STARTED)
    flow.tick(data.draw(st.integers(0, 20_000)))
    flow.request_cancel(data.draw(st.sampled_from(CancelReason)))
    lease0, before = flow.lease, flow.agg
    at = max(lease0.expires_at_ms, before.run.updated_at_ms) + data.draw(st.integers(0, 9_000))
    flow.sim.now = at
    out = flow.must(flow.expire_command(data.draw(st.sampled_from(CONTROL_PLANE_PROFILES))))
    assert out.code is Code.RELEASED
    old_attempt = before.latest_attempt
    assert old_attempt is not None
    assert flow.agg.run == dataclasses.replace(
        before.run, version=before.run.version + 1, updated_at_ms=at
    )
    assert flow.attempt == dataclasses.replace(old_attempt, lease_version=lease0.version + 1)
    assert (flow.lease.status, flow.lease.release_reason, flow.lease.version) == (
        LeaseStatus.RELEASED,
        ReleaseReason.LEASE_EXPIRED,
        lease0.version + 1,
    )
    assert out.events == ()


LOSS_ROUTES = ("expire_edge", "expire_standalone", "cluster_recovery_not_running")


@pytest.mark.spec("LEASE-09")
@settings(max_examples=40)
@given(st.data())
def test_lease_09_old_worker_is_fenced_out_after_lost_and_release(data: st.DataObject) -> None:
    """LEASE-09, kernel side (ADR-0232 §2): once an Attempt is `lost` and its lease released
    (T8 on edge/standalone, or cluster runtime recovery with not-running evidence), the old
    Worker's renew, starting ACK, running ACK and completion are all `Rejected` by the fence
    (`LEASE_NOT_LEASED`) whatever expected version they carry, at any later time, and write
    nothing."""
    flow = reach_drawn(data, STARTED)
    old_fence = flow.fence()
    old_handle_ack = flow.running_command(old_fence)
    route = data.draw(st.sampled_from(LOSS_ROUTES))
    flow.sim.now = flow.lease.expires_at_ms + data.draw(st.integers(0, 10_000))
    if route == "cluster_recovery_not_running":
        flow.must(
            RecoverRuntime(
                run_id=RUN_ID, attempt_id=flow.attempt.attempt_id, evidence=NotRunningEvidence()
            )
        )
    else:
        profile = Profile.EDGE if route == "expire_edge" else Profile.STANDALONE
        flow.must(flow.expire_command(profile))
    assert flow.attempt.status is AttemptStatus.LOST
    assert flow.lease.status is LeaseStatus.RELEASED
    before = flow.agg
    worker = flow.session(old_fence.worker_id)
    version = data.draw(st.sampled_from([old_fence.expected_version, flow.lease.version]))
    fence = dataclasses.replace(old_fence, expected_version=version)
    at = flow.now + data.draw(st.integers(0, 10**6))
    commands: list[Command] = [
        flow.renew_command(fence, worker),
        flow.starting_command(fence, worker),
        flow.running_command(fence, worker, started_at_ms=old_handle_ack.started_at_ms),
        flow.complete_command(fence, worker),
    ]
    for command in commands:
        outcome = flow.step(command, at)
        assert outcome == Rejected(Code.LEASE_NOT_LEASED)
        assert_no_write(flow, before, outcome)


# -- LEASE-12: E-1 on cluster ---------------------------------------------------------------------
@pytest.mark.spec("LEASE-12")
@settings(max_examples=WALK_EXAMPLES)
@given(st.data())
def test_lease_12_cluster_expiry_never_makes_a_started_attempt_lost(data: st.DataObject) -> None:
    """LEASE-12 (E-1, B-21): over random walks with every profile, no `expire_with_lease` on
    cluster makes an Attempt `lost`; and at every point, for an expired leased
    `starting`/`running` Attempt without intent, cluster answers `Replayed(evidence_required)`
    (no write) where edge and standalone commit T8 (`Applied(lost)`)."""
    for sim, before, command, outcome in lease_walk(data):
        if isinstance(command, ExpireWithLease) and command.profile is Profile.CLUSTER:
            assert before is not None
            assert not (isinstance(outcome, Applied) and outcome.code is Code.LOST)
            if isinstance(outcome, Applied):
                assert outcome.aggregate.run.status is not RunStatus.LOST
                assert all(
                    a.status is not AttemptStatus.LOST or before.attempt(a.attempt_id) == a
                    for a in outcome.aggregate.attempts
                )
        agg = sim.agg
        assert agg is not None
        attempt = agg.latest_attempt
        lease = agg.current_lease(attempt) if attempt is not None else None
        if (
            attempt is None
            or lease is None
            or lease.status is not LeaseStatus.LEASED
            or attempt.status not in STARTED
            or agg.run.has_cancel_intent
        ):
            continue
        at = max(sim.now, lease.expires_at_ms, agg.run.updated_at_ms)
        probe = ExpireWithLease(
            run_id=RUN_ID,
            attempt_id=attempt.attempt_id,
            lease_generation=lease.lease_generation,
            profile=Profile.CLUSTER,
        )
        assert apply(agg, probe, at) == Replayed(Code.EVIDENCE_REQUIRED)
        for profile in LOCAL_PROFILES:
            local = apply(agg, dataclasses.replace(probe, profile=profile), at)
            assert isinstance(local, Applied)
            assert local.code is Code.LOST


@pytest.mark.spec("LEASE-12")
@pytest.mark.parametrize("status", STARTED)
def test_lease_12_cluster_expiry_of_a_started_attempt_requires_evidence(
    status: AttemptStatus,
) -> None:
    """E-1 on cluster (B-21): an expired leased `starting`/`running` Attempt without intent,
    which edge/standalone would make `lost` (T8), is `Replayed(evidence_required)` on cluster
    at and after the expiry instant; nothing is written and the lease stays `leased`."""
    flow = LeaseFlow()
    flow.reach(status)
    before = flow.agg
    for at in (flow.lease.expires_at_ms, flow.lease.expires_at_ms + 10**6):
        outcome = flow.step(flow.expire_command(Profile.CLUSTER), at)
        assert outcome == Replayed(Code.EVIDENCE_REQUIRED)
        assert_no_write(flow, before, outcome)
    assert flow.lease.status is LeaseStatus.LEASED
    assert flow.attempt.status is status


# -- S-1: redaction of the lease token ------------------------------------------------------------
def _raw_tokens(command: Command) -> list[str]:
    if isinstance(command, GrantLease):
        return [command.lease_token.reveal()]
    if isinstance(command, FencedCommand):
        return [command.fence.lease_token.reveal()]
    return []


@pytest.mark.spec("S-1")
@settings(max_examples=WALK_EXAMPLES)
@given(st.data())
def test_s1_raw_lease_token_never_appears_in_outcomes_rows_effects_or_events(
    data: st.DataObject,
) -> None:
    """S-1 / I-9: no raw lease token presented to the kernel appears in the `repr()`/`str()` of
    any outcome (aggregate, effects, Events) or of the command itself; no produced value is or
    holds a `Secret` or a string containing a token; a granted lease keeps only the digest."""
    raw: set[str] = set()
    for sim, _before, command, outcome in lease_walk(data, granted=True):
        raw.update(_raw_tokens(command))
        assert raw  # the walk starts with a grant
        text = repr(outcome) + str(outcome) + repr(command) + str(command)
        text += repr(sim.agg) + repr(sim.events)
        for token in raw:
            assert token not in text
        for value in walk_values(outcome):
            assert not isinstance(value, Secret)
            if isinstance(value, str):
                assert not any(token in value for token in raw)
        if isinstance(outcome, Applied) and isinstance(command, GrantLease):
            inserted = [e.row for e in outcome.effects if isinstance(e, InsertLease)]
            assert [x.token_digest for x in inserted] == [command.lease_token.digest()]
