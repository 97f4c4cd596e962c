"""Recovery resolutions (SPEC §2.1-§2.5; REC-03, REC-04, REC-10, REC-11, REC-12, I-R1..I-R4).

Recovery turns uncertain ownership into facts from evidence, which is an input: `not_running`
writes `lost` (with the lease release of §2.4), `completed` applies the completion, `live` and
`unknown` write nothing, and no recovery step ever creates an Attempt or touches a retry policy.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Actor,
    Applied,
    AttemptStatus,
    CancelReason,
    Code,
    CompletedEvidence,
    CompletionOutcome,
    ConvergeCancel,
    FailOrphanedCreated,
    InsertAttempt,
    InsertLease,
    InsertPolicy,
    LeaseStatus,
    LiveEvidence,
    LostRetryStep,
    NotRunningEvidence,
    Profile,
    Raced,
    RecoverLocalStartup,
    RecoverRuntime,
    Rejected,
    ReleaseReason,
    RenewLease,
    Replayed,
    RunAggregate,
    RunStatus,
    UnknownEvidence,
    UnknownReason,
    UpdateAttempt,
    UpdateLease,
    UpdatePolicy,
    apply,
    converge_cancel,
    expire_with_lease,
    fail_orphaned_created,
    lost_retry_step,
    recover_local_startup,
    recover_runtime,
)
from kernel.commands import Command
from kernel.evidence import Evidence
from kernel.selection import orphaned_created_candidates, runtime_recovery_candidates
from kernel.specs.states import LIVE_ATTEMPT_STATUSES
from tests.support.recovery_fixtures import (
    SAFE_POLICY,
    T0,
    WORKER,
    admit,
    create_cmd,
    expire_cmd,
    expires_at,
    fence,
    grant_cmd,
    latest,
    local_running,
    local_starting,
    ok,
    remote_started,
    request_cancel,
)
from tests.support.sim import RUN_ID, Sim, advance_clock, draw_command

STEPS = 25
gaps = st.sampled_from([0, 1, 7, 1_000, 60_000])
durations = st.sampled_from([5_000, 30_000, 600_000])
untrusted: st.SearchStrategy[Evidence | None] = st.one_of(
    st.none(),
    st.just(LiveEvidence()),
    st.builds(UnknownEvidence, reason=st.sampled_from(UnknownReason)),
)
intents = st.one_of(st.none(), st.sampled_from(CancelReason))

_REASONS = tuple(UnknownReason)
_STARTED = (AttemptStatus.STARTING, AttemptStatus.RUNNING)


def _event_shape(outcome: Applied) -> list[tuple[str, str | None, Actor]]:
    return [(e.type, e.attempt_id, e.actor) for e in outcome.events]


def _selected(agg: RunAggregate, now: int) -> bool:
    page = runtime_recovery_candidates([agg], now, 16)
    return any(c.run_id == agg.run.run_id for c in page.items)


# -- probes over random walks ---------------------------------------------------------------------
def _evidences(agg: RunAggregate, turn: int) -> list[Evidence]:
    """Every kind of evidence; `unknown` with one reason per turn, `completed` with the
    Attempt's own callback sequence and the next one."""
    sequence = latest(agg).callback_sequence if agg.attempts else 0
    outcome = list(CompletionOutcome)[turn % len(CompletionOutcome)]
    return [
        NotRunningEvidence(),
        LiveEvidence(),
        UnknownEvidence(_REASONS[turn % len(_REASONS)]),
        CompletedEvidence(outcome, sequence, exit_code=turn % 3),
        CompletedEvidence(outcome, sequence + 1, exit_code=None),
    ]


def _recovery_probes(agg: RunAggregate, turn: int) -> list[Command]:
    """Every recovery command for the latest Attempt and the one before it, and the
    orphaned-created step with a process start just before, at and after the Run's creation."""
    attempt_ids = [a.attempt_id for a in agg.attempts[-2:]] or ["a1"]
    probes: list[Command] = []
    for attempt_id in attempt_ids:
        for evidence in _evidences(agg, turn):
            probes.append(
                RecoverLocalStartup(run_id=RUN_ID, attempt_id=attempt_id, evidence=evidence)
            )
            probes.append(RecoverRuntime(run_id=RUN_ID, attempt_id=attempt_id, evidence=evidence))
        probes.append(RecoverRuntime(run_id=RUN_ID, attempt_id=attempt_id, evidence=None))
    created = agg.run.created_at_ms
    probes.extend(
        FailOrphanedCreated(run_id=RUN_ID, process_started_at_ms=created + d) for d in (-1, 0, 1)
    )
    return probes


def _walk(data: st.DataObject) -> list[tuple[RunAggregate, int, int]]:
    """The states a random simulator walk passes through, with their times."""
    sim = Sim()
    states: list[tuple[RunAggregate, int, int]] = []
    for turn in range(STEPS):
        advance_clock(data, sim)
        command = draw_command(data, sim)
        if command is not None:
            sim.step(command)
        if sim.agg is not None:
            states.append((sim.agg, sim.now, turn))
    return states


def _check_recovery_effects(before: RunAggregate, outcome: Applied, now: int) -> None:
    after = outcome.aggregate
    # REC-10 / I-R3: no Attempt, lease or policy row is inserted, no policy row is changed.
    for effect in outcome.effects:
        assert not isinstance(effect, InsertAttempt | InsertPolicy | UpdatePolicy | InsertLease)
    assert [a.attempt_id for a in after.attempts] == [a.attempt_id for a in before.attempts]
    assert after.policy == before.policy
    # I-R1: only an Attempt in claimed|starting|running is changed.
    for effect in outcome.effects:
        if isinstance(effect, UpdateAttempt):
            assert effect.expected_status in LIVE_ATTEMPT_STATUSES
    # I-R2 / V-6: a lost Attempt keeps no leased lease and finished at the observation time.
    for attempt in after.attempts:
        if attempt.status is AttemptStatus.LOST and before.attempt(attempt.attempt_id) != attempt:
            assert after.leased_lease(attempt.attempt_id) is None
            assert attempt.finished_at_ms == now


@pytest.mark.slow  # about 4 s
@pytest.mark.spec("REC-10", "REC-11")
@given(st.data())
def test_recovery_never_creates_attempts_and_is_idempotent(data: st.DataObject) -> None:
    """REC-10 (I-R3): in every state of a random walk, every applied recovery step (local
    startup, runtime, orphaned created; every kind of evidence) inserts no Attempt and no lease,
    and neither inserts nor changes a retry policy; it changes only `claimed|starting|running`
    Attempts (I-R1) and leaves no `leased` lease on an Attempt it made `lost` (I-R2).
    REC-11: re-running the same recovery step on its own output, now or later, is not applied,
    and neither is any other recovery step with any evidence."""
    for agg, now, turn in _walk(data):
        for probe in _recovery_probes(agg, turn):
            outcome = apply(agg, probe, now)
            if not isinstance(outcome, Applied):
                continue
            _check_recovery_effects(agg, outcome, now)
            after = outcome.aggregate
            for later in (now, now + 1, now + 10**6):
                assert not isinstance(apply(after, probe, later), Applied), probe
            for again in _recovery_probes(after, turn + 1):
                assert not isinstance(apply(after, again, now + 1), Applied), again


@pytest.mark.spec("REC-03", "REC-08")
@given(st.data())
def test_untrusted_evidence_never_writes(data: st.DataObject) -> None:
    """I-R4 / REC-03: in every state of a random walk, `unknown` (any reason) and `live`
    evidence never lead to a write for local startup recovery, nor for runtime recovery of an
    Attempt past the start barrier (an expired `claimed` one is released as T7 whatever the
    evidence, B-36); runtime recovery without evidence writes nothing for a started Attempt,
    and such a started runtime candidate is still selected afterwards."""
    for agg, now, turn in _walk(data):
        attempt_id = latest(agg).attempt_id if agg.attempts else "a1"
        reasons = (_REASONS[turn % len(_REASONS)], _REASONS[(turn + 3) % len(_REASONS)])
        evidences: list[Evidence] = [LiveEvidence(), *(UnknownEvidence(r) for r in reasons)]
        started = bool(agg.attempts) and latest(agg).status in _STARTED
        for evidence in evidences:
            local = RecoverLocalStartup(run_id=RUN_ID, attempt_id=attempt_id, evidence=evidence)
            runtime = RecoverRuntime(run_id=RUN_ID, attempt_id=attempt_id, evidence=evidence)
            assert not isinstance(recover_local_startup(agg, local, now), Applied)
            outcome = recover_runtime(agg, runtime, now)
            if started:
                assert not isinstance(outcome, Applied)
            elif isinstance(outcome, Applied):
                assert outcome.code is Code.RELEASED  # B-36: the T7 release, nothing lost
                assert latest(outcome.aggregate).status is AttemptStatus.CLAIMED
        if started and _selected(agg, now):
            bare = RecoverRuntime(run_id=RUN_ID, attempt_id=attempt_id, evidence=None)
            assert recover_runtime(agg, bare, now) == Replayed(Code.EVIDENCE_REQUIRED)
            assert _selected(agg, now + 1)


# -- REC-03, LEASE-12 -----------------------------------------------------------------------------
@pytest.mark.spec("REC-03", "LEASE-12")
@given(
    running=st.booleans(),
    duration=durations,
    gap=gaps,
    evidence=untrusted,
    intent=intents,
    cycles=st.integers(1, 3),
)
def test_expired_started_attempt_without_trusted_evidence_stays_and_is_reselected(
    *,
    running: bool,
    duration: int,
    gap: int,
    evidence: Evidence | None,
    intent: CancelReason | None,
    cycles: int,
) -> None:
    """REC-03: on cluster, an expired `starting`/`running` Attempt with no evidence, `unknown`
    evidence or `live` evidence is left unchanged (no write; `unknown` reports its reason) and
    the runtime source selects it again in the next cycles. LEASE-12: the lease timeout alone
    (`expire_with_lease` on cluster) never makes it `lost`."""
    agg = remote_started("run-1", "a1", T0, running=running, duration_ms=duration)
    if intent is not None:
        agg = request_cancel(agg, T0 + 1, intent)
    now = expires_at(agg) + gap
    assert _selected(agg, now)
    command = RecoverRuntime(run_id="run-1", attempt_id="a1", evidence=evidence)
    for cycle in range(cycles):
        at = now + cycle * 1_000
        outcome = recover_runtime(agg, command, at)
        assert not isinstance(outcome, Applied)
        if evidence is None:
            assert outcome == Replayed(Code.EVIDENCE_REQUIRED)
        elif isinstance(evidence, UnknownEvidence):
            assert outcome == Rejected(Code(evidence.reason.value))
        assert _selected(agg, at + 1)
        expired = expire_with_lease(agg, expire_cmd(agg, Profile.CLUSTER), at)
        if isinstance(expired, Applied):  # T9 under an intent only revokes the lease
            assert intent is not None
            assert latest(expired.aggregate).status is latest(agg).status
            assert expired.aggregate.run.status is agg.run.status
        else:
            assert expired == Replayed(Code.EVIDENCE_REQUIRED)


# -- REC-04 ---------------------------------------------------------------------------------------
@pytest.mark.spec("REC-04", "LEASE-11")
@given(st.booleans(), durations, gaps, intents, st.booleans())
def test_not_running_makes_lost_and_releases_the_lease_in_one_fact(
    running: bool, duration: int, gap: int, intent: CancelReason | None, renewed: bool
) -> None:
    """REC-04 (§2.4): `not_running` on an expired leased Attempt writes Attempt and Run `lost`
    together with the lease row of the Attempt's generation `released` (`lease_expired`,
    version + 1, `released_at_ms` set); the Attempt mirrors the new lease version, no `leased`
    row remains, `finished_at_ms` is the observation time (V-6), the Run version moves by one
    and the Events are `run.lost` then `attempt.lost` by the reconciler."""
    agg = remote_started("run-1", "a1", T0, running=running, duration_ms=duration)
    if renewed:  # the lease version moved on before the expiry
        renew = RenewLease(
            run_id="run-1",
            attempt_id="a1",
            fence=fence(agg),
            worker=WORKER,
            lease_duration_ms=duration,
        )
        agg = ok(apply(agg, renew, T0 + 1))
    if intent is not None:
        agg = request_cancel(agg, T0 + 2, intent)
    before_lease = agg.current_lease(latest(agg))
    assert before_lease is not None
    now = expires_at(agg) + gap
    command = RecoverRuntime(run_id="run-1", attempt_id="a1", evidence=NotRunningEvidence())
    outcome = recover_runtime(agg, command, now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.LOST
    after = outcome.aggregate
    attempt = latest(after)
    lease = after.lease("a1", before_lease.lease_generation)
    assert lease is not None
    assert lease.status is LeaseStatus.RELEASED
    assert lease.release_reason is ReleaseReason.LEASE_EXPIRED
    assert lease.version == before_lease.version + 1
    assert lease.released_at_ms == now
    assert attempt.lease_version == lease.version
    assert [x for x in after.leases if x.status is LeaseStatus.LEASED] == []
    assert attempt.status is AttemptStatus.LOST
    assert after.run.status is RunStatus.LOST
    assert attempt.finished_at_ms == now
    assert after.run.version == agg.run.version + 1
    lease_updates = [e for e in outcome.effects if isinstance(e, UpdateLease)]
    assert [(u.expected_version, u.expected_status) for u in lease_updates] == [
        (before_lease.version, LeaseStatus.LEASED)
    ]
    assert _event_shape(outcome) == [
        ("run.lost", None, Actor.RECONCILER),
        ("attempt.lost", "a1", Actor.RECONCILER),
    ]
    assert not _selected(after, now + 1)


# -- REC-12 ---------------------------------------------------------------------------------------
@pytest.mark.spec("REC-12", "REC-11")
@given(st.integers(T0, T0 + 10_000), st.integers(-3, 3), gaps)
def test_orphaned_created_run_fails_only_when_created_before_the_process(
    created_at: int, offset: int, gap: int
) -> None:
    """REC-12 (B-30): a `created` Run created before this process started becomes `failed`
    with `RUN_ORPHANED_CREATED` (one `run.failed` Event by the reconciler, no Attempt); one
    created at or after the process start is `Raced`. The cluster source never selects or
    fails a `created` Run. Re-running the step on its output is `Raced` (REC-11)."""
    agg = ok(apply(None, create_cmd("run-1"), created_at))
    process_started = created_at + offset
    now = created_at + gap
    command = FailOrphanedCreated(run_id="run-1", process_started_at_ms=process_started)
    outcome = fail_orphaned_created(agg, command, now)
    selected = orphaned_created_candidates([agg], process_started, 16).items
    if created_at < process_started:
        assert isinstance(outcome, Applied)
        after = outcome.aggregate
        assert after.run.status is RunStatus.FAILED
        assert after.run.error_code == Code.RUN_ORPHANED_CREATED.value
        assert after.run.finished_at_ms == now
        assert after.attempts == ()
        assert [(e.type, e.actor, e.code) for e in outcome.events] == [
            ("run.failed", Actor.RECONCILER, "RUN_ORPHANED_CREATED")
        ]
        assert [c.run_id for c in selected] == ["run-1"]
        assert fail_orphaned_created(after, command, now) == Raced(Code.NOT_ELIGIBLE)
        assert fail_orphaned_created(after, command, now + 10**6) == Raced(Code.NOT_ELIGIBLE)
    else:
        assert outcome == Raced(Code.NOT_ELIGIBLE)
        assert selected == ()
    for at in (now, now + 10**6):
        assert not _selected(agg, at)
        for evidence in (None, NotRunningEvidence(), LiveEvidence()):
            runtime = RecoverRuntime(run_id="run-1", attempt_id="a1", evidence=evidence)
            assert not isinstance(recover_runtime(agg, runtime, at), Applied)


# -- local startup recovery ---------------------------------------------------------------------
@pytest.mark.spec("RETRY-11", "RUN-03")
@given(st.booleans(), intents, gaps)
def test_local_startup_not_running_makes_lost_even_with_an_intent(
    running: bool, intent: CancelReason | None, gap: int
) -> None:
    """§2.2: `not_running` evidence makes a started local Attempt and its Run `lost`
    (`run.lost`, `attempt.lost`, actor reconciler, `finished_at_ms` = observation time) whether
    or not a cancellation intent exists; the intent is kept, so lost retry refuses the Run and
    cancellation convergence finishes it (`timed_out` for a `timeout` intent), with no new
    Attempt (RETRY-11). Without an intent the Run is handed to lost retry."""
    agg = (
        local_running("run-1", "a1", T0, policy=SAFE_POLICY)
        if running
        else local_starting("run-1", "a1", T0, policy=SAFE_POLICY)
    )
    if intent is not None:
        agg = request_cancel(agg, T0 + 1, intent)
    now = agg.run.updated_at_ms + gap
    command = RecoverLocalStartup(run_id="run-1", attempt_id="a1", evidence=NotRunningEvidence())
    outcome = recover_local_startup(agg, command, now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.LOST
    after = outcome.aggregate
    assert after.run.status is RunStatus.LOST
    assert latest(after).status is AttemptStatus.LOST
    assert latest(after).finished_at_ms == now
    assert after.run.cancel_requested_at_ms == agg.run.cancel_requested_at_ms
    assert after.run.cancel_reason == agg.run.cancel_reason
    assert _event_shape(outcome) == [
        ("run.lost", None, Actor.RECONCILER),
        ("attempt.lost", "a1", Actor.RECONCILER),
    ]
    retry = lost_retry_step(after, LostRetryStep(run_id="run-1", new_attempt_id="a2"), now)
    if intent is None:
        assert isinstance(retry, Applied)
        assert retry.code is Code.SCHEDULED
        return
    assert retry == Raced(Code.NOT_ELIGIBLE)
    converged = converge_cancel(after, ConvergeCancel(run_id="run-1"), now)
    assert isinstance(converged, Applied)
    final = RunStatus.TIMED_OUT if intent is CancelReason.TIMEOUT else RunStatus.CANCELLED
    assert converged.aggregate.run.status is final
    assert [a.attempt_id for a in converged.aggregate.attempts] == ["a1"]


@pytest.mark.spec("REC-08", "RUN-08")
@given(st.sampled_from(CompletionOutcome), st.one_of(st.none(), st.integers(0, 2)))
def test_local_startup_completed_evidence_applies_the_completion(
    outcome: CompletionOutcome, exit_code: int | None
) -> None:
    """§2.1: `completed` evidence (a valid receipt bound to the activation's callback
    sequence) makes Attempt and Run terminal with the receipt outcome and exit code; a receipt
    with another callback sequence is a conflict and writes nothing; afterwards recovery no
    longer selects the Attempt."""
    agg = local_running("run-1", "a1", T0)
    sequence = latest(agg).callback_sequence
    good = CompletedEvidence(outcome, sequence, exit_code)
    now = T0 + 100
    applied = recover_local_startup(
        agg, RecoverLocalStartup(run_id="run-1", attempt_id="a1", evidence=good), now
    )
    assert isinstance(applied, Applied)
    after = applied.aggregate
    assert latest(after).status.value == outcome.value
    assert after.run.status.value == outcome.value
    assert latest(after).exit_code == exit_code
    assert latest(after).finished_at_ms == now
    for other in (sequence + 1, sequence - 1):
        bad = CompletedEvidence(outcome, other, exit_code)
        conflict = recover_local_startup(
            agg, RecoverLocalStartup(run_id="run-1", attempt_id="a1", evidence=bad), now
        )
        assert conflict == Rejected(Code.RECEIPT_CONFLICT)
    again = RecoverLocalStartup(run_id="run-1", attempt_id="a1", evidence=NotRunningEvidence())
    assert recover_local_startup(after, again, now + 1) == Raced(Code.NOT_ELIGIBLE)


@pytest.mark.spec("REC-08")
@given(st.booleans(), st.integers(-2, 2), st.sampled_from(CompletionOutcome))
def test_completed_evidence_carries_the_handle_fact_as_l3(
    from_running: bool, offset: int, outcome: CompletionOutcome
) -> None:
    """§1.7 L3 via §2.1 ("startup recovery applies it for `completed` evidence"): the receipt's
    start time must equal a recorded `started_at_ms` (otherwise a receipt conflict, nothing
    written); applied to a `starting` Attempt it is stored as `started_at_ms`, the handle fact,
    on the Attempt and the Run; a start time before the Attempt's creation is a conflict."""
    agg = (
        local_running("run-1", "a1", T0, started_at_ms=T0 + 5)
        if from_running
        else local_starting("run-1", "a1", T0)
    )
    attempt = latest(agg)
    started = T0 + 5 + offset
    evidence = CompletedEvidence(outcome, attempt.callback_sequence, 0, started_at_ms=started)
    command = RecoverLocalStartup(run_id="run-1", attempt_id="a1", evidence=evidence)
    result = recover_local_startup(agg, command, T0 + 100)
    if from_running and started != attempt.started_at_ms:
        assert result == Rejected(Code.RECEIPT_CONFLICT)
        return
    assert isinstance(result, Applied)
    after = result.aggregate
    assert latest(after).started_at_ms == started
    assert after.run.started_at_ms == started
    assert latest(after).status.value == outcome.value
    early = CompletedEvidence(outcome, attempt.callback_sequence, 0, started_at_ms=T0 - 1)
    conflict = recover_local_startup(
        agg, RecoverLocalStartup(run_id="run-1", attempt_id="a1", evidence=early), T0 + 100
    )
    assert conflict == Rejected(Code.RECEIPT_CONFLICT)


# -- B-36 -----------------------------------------------------------------------------------------
@pytest.mark.spec("REC-11", "REC-01")
@given(durations, gaps, st.sampled_from([None, NotRunningEvidence(), LiveEvidence()]))
def test_expired_claimed_attempt_is_released_not_lost(
    duration: int, gap: int, evidence: Evidence | None
) -> None:
    """B-36: the runtime source selects an expired non-pristine `claimed` Attempt and recovery
    releases it as T7 (lease `released(lease_expired)`, Run back to `queued`, the Attempt
    still `claimed`, never `lost`, whatever the evidence); the result is not selected again and
    re-running recovery on it is `Raced` (REC-11)."""
    agg = admit("run-1", "a1", T0, executor="shell")
    agg = ok(apply(agg, grant_cmd(agg, duration), T0))
    now = expires_at(agg) + gap
    assert _selected(agg, now)
    command = RecoverRuntime(run_id="run-1", attempt_id="a1", evidence=evidence)
    outcome = recover_runtime(agg, command, now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.RELEASED
    after = outcome.aggregate
    assert after.run.status is RunStatus.QUEUED
    assert latest(after).status is AttemptStatus.CLAIMED
    lease = after.lease("a1", 1)
    assert lease is not None
    assert lease.status is LeaseStatus.RELEASED
    assert lease.release_reason is ReleaseReason.LEASE_EXPIRED
    assert not _selected(after, now + 1)
    assert recover_runtime(after, command, now + 1) == Raced(Code.NOT_ELIGIBLE)
