"""Admission (SPEC §1.6, A-1..A-5; RETRY-01, RETRY-02) and the `created` phase (B-07)."""

from __future__ import annotations

from kernel.commands import AdmitRun, CreateRun
from kernel.contracts import transition
from kernel.entities import Attempt, Run, RunAggregate, RunRetryPolicy
from kernel.outcomes import Outcome, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import Actor, AttemptStatus, RunStatus
from kernel.transitions.retry_policy import admission_policy_code
from kernel.transitions.transaction import Tx


def _same_identity(existing: RunAggregate, command: AdmitRun | CreateRun) -> bool:
    """An exact admission replay names the same Run identity and, for `admit_run`, the same
    first Attempt; anything else under a taken Run id is a conflict."""
    run = existing.run
    first = existing.attempts[0].attempt_id if existing.attempts else None
    return (
        run.project_id == command.project_id
        and run.task_id == command.task_id
        and run.task_revision == command.task_revision
        and run.executor_type == command.executor_type
        and run.kind is command.kind
        and run.owner is command.owner
        and (not isinstance(command, AdmitRun) or first == command.attempt_id)
    )


def _new_run(command: AdmitRun | CreateRun, status: RunStatus, now: int) -> Run:
    """The Run row an admission writes: version 1, no Events yet (the transaction appends them)."""
    return Run(
        run_id=command.run_id,
        project_id=command.project_id,
        task_id=command.task_id,
        task_revision=command.task_revision,
        executor_type=command.executor_type,
        kind=command.kind,
        owner=command.owner,
        status=status,
        version=1,
        event_seq=0,
        created_at_ms=now,
        updated_at_ms=now,
        queued_at_ms=now if status is RunStatus.QUEUED else None,
    )


@transition
def admit_run(aggregate: RunAggregate | None, command: AdmitRun, observed_at_ms: int) -> Outcome:
    """A-2..A-5: validate the provider's policy before anything is written, then write Run
    (`queued`), Attempt 1 (`claimed`, pristine), the policy (version 1, no cursor) and the
    Events `run.queued`, `attempt.claimed` in one transaction. A-1 (a policy member in the Run
    command) is refused by strict decoding in `kernel.codec`, before this function."""
    if aggregate is not None:
        # The Run id is taken: the same admission again is an exact replay, anything else a
        # conflict. Nothing is written either way.
        if _same_identity(aggregate, command):
            return Replayed(Code.EXISTING)
        return Rejected(Code.RUN_ID_CONFLICT)
    policy_def = command.provider_policy
    if policy_def is not None:
        refused = admission_policy_code(policy_def)
        if refused is not None:
            return Rejected(refused)  # A-3, A-4 (B-15): nothing is written
    now = observed_at_ms
    run = _new_run(command, RunStatus.QUEUED, now)
    tx = Tx.create(run, command.name, now)
    tx.insert_attempt(
        Attempt(
            attempt_id=command.attempt_id,
            run_id=command.run_id,
            number=1,
            status=AttemptStatus.CLAIMED,
            executor_type=command.executor_type,
            created_at_ms=now,
        )
    )
    if policy_def is not None:
        tx.insert_policy(
            RunRetryPolicy(
                run_id=command.run_id,
                max_attempts=policy_def.max_attempts,
                retry_on_lost=policy_def.retry_on_lost,
                safety=policy_def.safety,
                backoff_base_ms=policy_def.backoff_base_ms,
                backoff_max_ms=policy_def.backoff_max_ms,
                version=1,
                created_at_ms=now,
                updated_at_ms=now,
            )
        )
    tx.event("run.queued", command.actor)
    tx.event("attempt.claimed", command.actor, command.attempt_id)
    return tx.commit(Code.ADMITTED)


@transition
def create_run(aggregate: RunAggregate | None, command: CreateRun, observed_at_ms: int) -> Outcome:
    """The first phase of a two-phase admission: a `created` Run, no Attempt (B-07)."""
    if aggregate is not None:
        if _same_identity(aggregate, command) and aggregate.run.status is RunStatus.CREATED:
            return Replayed(Code.EXISTING)
        return Rejected(Code.RUN_ID_CONFLICT)
    run = _new_run(command, RunStatus.CREATED, observed_at_ms)
    tx = Tx.create(run, command.name, observed_at_ms)
    tx.event("run.created", Actor.TRIGGER)
    return tx.commit(Code.ADMITTED)
