"""Recovery resolutions (SPEC §2.1-§2.4; REC-03, REC-04, REC-08, REC-10, REC-11).

Recovery turns uncertain ownership into facts from *evidence*, which is an input: the kernel
never probes. It never creates an Attempt and never changes a retry policy (I-R3); `unknown`
evidence writes nothing (I-R4). Local startup recovery (§2.2) and cluster runtime recovery
(§2.3) share one resolution authority (`resolve_started`), so there is no second state machine.
"""

from __future__ import annotations

from kernel.commands import FailOrphanedCreated, RecoverLocalStartup, RecoverRuntime
from kernel.contracts import transition
from kernel.entities import Attempt, RunAggregate
from kernel.evidence import (
    CompletedEvidence,
    Evidence,
    LiveEvidence,
    NotRunningEvidence,
    UnknownEvidence,
)
from kernel.outcomes import Outcome, Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import (
    Actor,
    AttemptStatus,
    LeaseStatus,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
)
from kernel.transitions.clock import clock_regressed
from kernel.transitions.run_lease import (
    mark_lost,
    outcome_error_code,
    release_current_lease,
    requeue_expired_claim,
)
from kernel.transitions.run_local import completion_status
from kernel.transitions.transaction import Tx

_STARTED = (AttemptStatus.STARTING, AttemptStatus.RUNNING)
# I-2 pairs a `starting` Attempt with a `dispatching` Run and a `running` one with a `running`
# Run, so naming the Run statuses selects the same Runs and lets a store drive the selection
# from its Run status index instead of an index of its own (CAD-16, docs/decisions.md E-2).
_STARTED_RUN = (RunStatus.DISPATCHING, RunStatus.RUNNING)


def is_local_startup_candidate(aggregate: RunAggregate) -> bool:
    """§2.2 selection: ordinary runtime Runs whose latest Attempt is a local-executor Attempt in
    `starting` or `running` (Workflow Runs go to §4.5); by I-2 such a Run is `dispatching` or
    `running`, which the selection states so that it reads the Run status first (CAD-16)."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    return (
        run.status in _STARTED_RUN
        and run.owner is RunOwner.RUNTIME
        and run.kind is RunKind.ORDINARY
        and latest is not None
        and latest.is_local
        and latest.status in _STARTED
    )


def is_orphaned_created(aggregate: RunAggregate, process_started_at_ms: int) -> bool:
    """§2.2 (B-30): an ordinary runtime `created` Run from before this process started. Workflow
    Runs are never selected by ordinary startup recovery (REC-07)."""
    run = aggregate.run
    return (
        run.status is RunStatus.CREATED
        and run.owner is RunOwner.RUNTIME
        and run.kind is RunKind.ORDINARY
        and run.created_at_ms < process_started_at_ms
    )


def is_pristine(aggregate: RunAggregate, attempt: Attempt) -> bool:
    """B-33: `claimed`, no Worker binding, no lease row of any status, no offer, no start."""
    return attempt.is_pristine and next(aggregate.leases_of(attempt.attempt_id), None) is None


def is_runtime_recovery_candidate(aggregate: RunAggregate, observed_at_ms: int) -> bool:
    """§2.3 selection (REC-01): runtime Runs in `dispatching|running|lost`, not Workflow, whose
    latest Attempt is `claimed|starting|running` with no `leased` lease or an expired one, and
    which is not a pristine `claimed` Attempt."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    if (
        run.owner is not RunOwner.RUNTIME
        or run.kind is not RunKind.ORDINARY
        or run.status not in (RunStatus.DISPATCHING, RunStatus.RUNNING, RunStatus.LOST)
        or latest is None
        or latest.status not in (AttemptStatus.CLAIMED, *_STARTED)
        or is_pristine(aggregate, latest)
    ):
        return False
    leased = aggregate.leased_lease(latest.attempt_id)
    return leased is None or leased.expires_at_ms <= observed_at_ms


def resolve_started(
    aggregate: RunAggregate, attempt: Attempt, evidence: Evidence, command: str, now: int
) -> Outcome:
    """§2.1 resolution for an Attempt past the start barrier."""
    if isinstance(evidence, UnknownEvidence):
        return Rejected(Code(evidence.reason.value))  # fail closed, reported (I-R4)
    if isinstance(evidence, LiveEvidence):
        return Replayed(Code.LIVE)  # adoption: the durable state already says running
    durable = [aggregate.run.updated_at_ms]
    durable.extend(x.updated_at_ms for x in aggregate.leases_of(attempt.attempt_id))
    if clock_regressed(aggregate, now, *durable):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command, now)
    if isinstance(evidence, NotRunningEvidence):
        mark_lost(tx, attempt, None)
        return tx.commit(Code.LOST)
    assert isinstance(evidence, CompletedEvidence)
    # A local receipt is bound to the activation's callback sequence; a remote completion must
    # advance it, as T6 requires.
    sequence_ok = (
        evidence.callback_sequence == attempt.callback_sequence
        if attempt.is_local
        else evidence.callback_sequence > attempt.callback_sequence
    )
    started = evidence.started_at_ms
    if attempt.started_at_ms is not None and started is not None:
        sequence_ok = sequence_ok and started == attempt.started_at_ms
    if started is not None and started < attempt.created_at_ms:
        sequence_ok = False
    if not sequence_ok:
        return Rejected(Code.RECEIPT_CONFLICT)
    # A local Attempt's receipt under an intent is read as L3 reads it (decision R-27); a remote
    # completion keeps its outcome, as T6 does.
    outcome = (
        completion_status(aggregate.run, evidence.outcome).value
        if attempt.is_local
        else evidence.outcome.value
    )
    release_current_lease(tx, attempt, ReleaseReason.LEASE_EXPIRED)
    # As L3 from `starting`: the receipt's start time is the handle fact (§4.7).
    started_at = attempt.started_at_ms if attempt.started_at_ms is not None else started
    error = outcome_error_code(outcome)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus(outcome),
        callback_sequence=evidence.callback_sequence,
        exit_code=evidence.exit_code,
        finished_at_ms=now,
        started_at_ms=started_at,
        error_code=error,
    )
    run_started = aggregate.run.started_at_ms
    tx.set_run(
        status=RunStatus(outcome),
        finished_at_ms=now,
        started_at_ms=run_started if run_started is not None else started_at,
        error_code=error,
    )
    tx.event(f"run.{outcome}", Actor.RECONCILER)
    tx.event(f"attempt.{outcome}", Actor.RECONCILER, attempt.attempt_id)
    return tx.commit(Code.COMPLETED)


@transition
def recover_local_startup(
    aggregate: RunAggregate | None, command: RecoverLocalStartup, observed_at_ms: int
) -> Outcome:
    """§2.2: `not_running` makes Attempt and Run `lost` whether or not an intent exists (lost
    retry or cancellation convergence takes it from there)."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Raced(Code.NOT_ELIGIBLE)
    latest = aggregate.latest_attempt
    if (
        not is_local_startup_candidate(aggregate)
        or latest is None
        or latest.attempt_id != command.attempt_id
    ):
        return Raced(Code.NOT_ELIGIBLE)
    return resolve_started(aggregate, latest, command.evidence, command.name, observed_at_ms)


@transition
def fail_orphaned_created(
    aggregate: RunAggregate | None, command: FailOrphanedCreated, observed_at_ms: int
) -> Outcome:
    """§2.2 (B-30, REC-12): a `created` Run from before this process started has no Attempt, so
    no execution can have happened: it fails with `RUN_ORPHANED_CREATED`."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Raced(Code.NOT_ELIGIBLE)
    run = aggregate.run
    if not is_orphaned_created(aggregate, command.process_started_at_ms):
        return Raced(Code.NOT_ELIGIBLE)
    if clock_regressed(aggregate, observed_at_ms, run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    code = Code.RUN_ORPHANED_CREATED.value
    tx.set_run(status=RunStatus.FAILED, error_code=code, finished_at_ms=observed_at_ms)
    tx.event("run.failed", Actor.RECONCILER, code=code)
    return tx.commit(Code.APPLIED)


@transition
def recover_runtime(
    aggregate: RunAggregate | None, command: RecoverRuntime, observed_at_ms: int
) -> Outcome:
    """§2.3 per-candidate resolution after the re-check under the locks: an expired
    non-pristine `claimed` Attempt is released as T7 (B-36); a started one needs trusted
    evidence; a lease timeout alone never produces `lost` (REC-03)."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Raced(Code.NOT_ELIGIBLE)
    latest = aggregate.latest_attempt
    if (
        latest is None
        or latest.attempt_id != command.attempt_id
        or not is_runtime_recovery_candidate(aggregate, observed_at_ms)
    ):
        return Raced(Code.NOT_ELIGIBLE)
    if latest.status is AttemptStatus.CLAIMED:
        leased = aggregate.leased_lease(latest.attempt_id)
        if leased is None or leased.status is not LeaseStatus.LEASED:
            return Raced(Code.NOT_ELIGIBLE)
        if clock_regressed(
            aggregate, observed_at_ms, aggregate.run.updated_at_ms, leased.updated_at_ms
        ):
            return Rejected(Code.CLOCK_REGRESSION)
        tx = Tx.begin(aggregate, command.name, observed_at_ms)
        requeue_expired_claim(tx, latest)
        return tx.commit(Code.RELEASED)
    if command.evidence is None:
        return Replayed(Code.EVIDENCE_REQUIRED)
    return resolve_started(aggregate, latest, command.evidence, command.name, observed_at_ms)
