"""Effects: what a runner must persist for an `Applied` outcome, as data (ARCHITECTURE rule 4).

Each effect maps to exactly one named SQL statement in a runner. Every `Update*` carries the
guard the statement must re-check in its `WHERE` clause (expected version, status, lease
generation); zero rows affected means the transaction is rolled back and reported as `Raced`.
Effects are ordered in the global lock order Run -> Attempt -> policy -> lease (SPEC §1.7, D-7),
followed by the Events in append order.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.entities import Attempt, Event, Lease, Run, RunAggregate, RunRetryPolicy
from kernel.specs.states import AttemptStatus, LeaseStatus


@dataclass(frozen=True, slots=True)
class InsertRun:
    row: Run


@dataclass(frozen=True, slots=True)
class UpdateRun:
    """CAS on `Run.version` (V-1): `WHERE run_id = :run_id AND version = :expected_version`."""

    row: Run
    expected_version: int


@dataclass(frozen=True, slots=True)
class InsertAttempt:
    row: Attempt


@dataclass(frozen=True, slots=True)
class UpdateAttempt:
    """Guarded by the previous status and lease mirror; the Run CAS in the same transaction
    (or, for a renew, the lease CAS) serializes writers."""

    row: Attempt
    expected_status: AttemptStatus
    expected_lease_version: int | None


@dataclass(frozen=True, slots=True)
class InsertPolicy:
    row: RunRetryPolicy


@dataclass(frozen=True, slots=True)
class UpdatePolicy:
    """CAS on the policy's own `version` (SPEC §1.8.2)."""

    row: RunRetryPolicy
    expected_version: int


@dataclass(frozen=True, slots=True)
class InsertLease:
    row: Lease


@dataclass(frozen=True, slots=True)
class UpdateLease:
    """CAS on `lease.version` and status, keyed by `(attempt_id, lease_generation)`; the token
    digest is immutable and re-checked too (V-2)."""

    row: Lease
    expected_version: int
    expected_status: LeaseStatus


@dataclass(frozen=True, slots=True)
class AppendEvent:
    """Insert one Event; unique `(run_id, seq)` and `(run_id, dedupe_key)` back the V-3 rule."""

    event: Event


Effect = (
    InsertRun
    | UpdateRun
    | InsertAttempt
    | UpdateAttempt
    | InsertPolicy
    | UpdatePolicy
    | InsertLease
    | UpdateLease
    | AppendEvent
)


class EffectConflict(Exception):
    """An effect's guard did not hold against the state it was applied to (a runner reports
    this as `Raced`). Carries ids and versions only."""


def apply_effects(before: RunAggregate | None, effects: tuple[Effect, ...]) -> RunAggregate:
    """Apply effects to an aggregate exactly as a runner's SQL must: every update re-checks its
    guard and fails on zero matching rows. The in-memory reference store persists with this
    function, and the contracts check that it reproduces every `Applied.aggregate`."""
    run = before.run if before is not None else None
    attempts = {a.attempt_id: a for a in before.attempts} if before is not None else {}
    policy = before.policy if before is not None else None
    leases = (
        {(x.attempt_id, x.lease_generation): x for x in before.leases} if before is not None else {}
    )
    for effect in effects:
        if isinstance(effect, InsertRun):
            if run is not None:
                raise EffectConflict(f"run {effect.row.run_id} exists")
            run = effect.row
        elif isinstance(effect, UpdateRun):
            if run is None or run.run_id != effect.row.run_id:
                raise EffectConflict("run missing")
            if run.version != effect.expected_version:
                raise EffectConflict(f"run version {run.version} != {effect.expected_version}")
            run = effect.row
        elif isinstance(effect, InsertAttempt):
            if effect.row.attempt_id in attempts:
                raise EffectConflict(f"attempt {effect.row.attempt_id} exists")
            attempts[effect.row.attempt_id] = effect.row
        elif isinstance(effect, UpdateAttempt):
            current = attempts.get(effect.row.attempt_id)
            if (
                current is None
                or current.status is not effect.expected_status
                or current.lease_version != effect.expected_lease_version
            ):
                raise EffectConflict(f"attempt {effect.row.attempt_id} guard")
            attempts[effect.row.attempt_id] = effect.row
        elif isinstance(effect, InsertPolicy):
            if policy is not None:
                raise EffectConflict("policy exists")
            policy = effect.row
        elif isinstance(effect, UpdatePolicy):
            if policy is None or policy.version != effect.expected_version:
                raise EffectConflict("policy version")
            policy = effect.row
        elif isinstance(effect, InsertLease):
            key = (effect.row.attempt_id, effect.row.lease_generation)
            if key in leases:
                raise EffectConflict(f"lease {key[0]}/{key[1]} exists")
            leases[key] = effect.row
        elif isinstance(effect, UpdateLease):
            key = (effect.row.attempt_id, effect.row.lease_generation)
            current_lease = leases.get(key)
            if (
                current_lease is None
                or current_lease.version != effect.expected_version
                or current_lease.status is not effect.expected_status
                or current_lease.token_digest != effect.row.token_digest
            ):
                raise EffectConflict(f"lease {key[0]}/{key[1]} guard")
            leases[key] = effect.row
        # AppendEvent: Events live beside the aggregate, in the store's event log.
    if run is None:
        raise EffectConflict("no run")
    return RunAggregate(
        run=run,
        attempts=tuple(sorted(attempts.values(), key=lambda a: a.number)),
        policy=policy,
        leases=tuple(sorted(leases.values(), key=lambda x: (x.attempt_id, x.lease_generation))),
    )
