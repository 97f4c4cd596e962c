"""Durable entities of the Run domain (SPEC §1.1) as frozen values.

Everything here is data: no method reads a clock, a database or a token. `RunAggregate` is the
unit every transition reads and returns; a runner loads it, the kernel decides, the runner persists
the effects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kernel.specs.states import (
    INTENT_FINAL_STATUS,
    Actor,
    AttemptStatus,
    CancelReason,
    LeaseStatus,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
    WorkerSessionStatus,
)

# Event payloads stay small and flat (SPEC §1.1: "small, redacted"); a tuple of pairs keeps
# them hashable and ordered so two equal Events compare equal byte for byte.
PayloadValue = str | int | bool | None
Payload = tuple[tuple[str, PayloadValue], ...]


@dataclass(frozen=True, slots=True)
class Run:
    """One Run row (SPEC §1.1). `updated_at_ms` is the observation time of the last committed
    transaction that changed the aggregate; it is the "last Event" time of V-5."""

    run_id: str
    project_id: str
    task_id: str
    task_revision: int
    executor_type: str
    kind: RunKind
    owner: RunOwner
    status: RunStatus
    version: int
    event_seq: int
    created_at_ms: int
    updated_at_ms: int
    queued_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    cancel_requested_at_ms: int | None = None
    cancel_reason: CancelReason | None = None
    error_code: str | None = None
    retry_of_run_id: str | None = None

    @property
    def has_cancel_intent(self) -> bool:
        return self.cancel_requested_at_ms is not None

    @property
    def intent_status(self) -> RunStatus | None:
        """The status this Run's cancellation intent ends it with (`INTENT_FINAL_STATUS`), or
        None without an intent."""
        if not self.has_cancel_intent or self.cancel_reason is None:
            return None
        return INTENT_FINAL_STATUS[self.cancel_reason]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One Attempt row (SPEC §1.1). Remote Attempts carry a Worker binding and lease mirror;
    local-executor Attempts carry `callback_token_sha256` from activation (L1) on."""

    attempt_id: str
    run_id: str
    number: int
    status: AttemptStatus
    executor_type: str
    created_at_ms: int
    step_run_id: str | None = None
    worker_id: str | None = None
    worker_session_id: str | None = None
    worker_generation: int | None = None
    offer_id: str | None = None
    lease_generation: int | None = None
    lease_version: int | None = None
    executor_handle: str | None = None
    started_at_ms: int | None = None
    log_artifact_id: str | None = None
    callback_sequence: int = 0
    finished_at_ms: int | None = None
    exit_code: int | None = None
    error_code: str | None = None
    callback_token_sha256: str | None = None

    @property
    def is_local(self) -> bool:
        """Activated by the local dispatcher (L1): only such Attempts hold a callback digest."""
        return self.callback_token_sha256 is not None

    @property
    def is_pristine(self) -> bool:
        """SPEC §2.3 / B-33 (part that the Attempt row decides; "no lease row of any status" is
        checked by the aggregate): `claimed`, no worker binding, no offer, no start facts."""
        return (
            self.status is AttemptStatus.CLAIMED
            and self.worker_id is None
            and self.offer_id is None
            and self.lease_generation is None
            and self.executor_handle is None
            and self.started_at_ms is None
            and self.callback_token_sha256 is None
        )


@dataclass(frozen=True, slots=True)
class RunRetryPolicy:
    """The admission-time retry policy of a Run (SPEC §1.1, ADR-0021 §5.5). Absent = no retry."""

    run_id: str
    max_attempts: int
    retry_on_lost: bool
    safety: Safety
    backoff_base_ms: int
    backoff_max_ms: int
    version: int
    created_at_ms: int
    updated_at_ms: int
    next_attempt_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """One Run dispatch lease row (SPEC §1.1, table `run_dispatch_leases`). Only the SHA-256
    digest of the lease token is stored (I-9, S-1)."""

    attempt_id: str
    run_id: str
    lease_generation: int
    status: LeaseStatus
    version: int
    worker_id: str
    worker_session_id: str
    worker_generation: int
    token_digest: str
    acquired_at_ms: int
    renewed_at_ms: int
    expires_at_ms: int
    updated_at_ms: int
    released_at_ms: int | None = None
    release_reason: ReleaseReason | None = None
    completed_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An append-only Run Event (SPEC §1.1, V-3, V-4). `event_id` is derived from the Run and
    sequence (docs/decisions.md), so the kernel needs no id input for it."""

    event_id: str
    run_id: str
    seq: int
    type: str
    actor: Actor
    dedupe_key: str
    at_ms: int
    attempt_id: str | None = None
    step_run_id: str | None = None
    code: str | None = None
    payload: Payload = ()


@dataclass(frozen=True, slots=True)
class WorkerSession:
    """The control plane's current view of one Worker (SPEC §1.1), as loaded by the caller and
    passed in with a command: the kernel never looks it up itself."""

    worker_id: str
    session_id: str
    generation: int
    status: WorkerSessionStatus
    session_expires_at_ms: int
    executor_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunAggregate:
    """A Run with all of its Attempts (ordered by number), its policy and all of its lease rows
    (ordered by attempt id, then generation). Events are not part of it: transitions only need
    `Run.event_seq` and `Run.updated_at_ms` to append correctly."""

    run: Run
    attempts: tuple[Attempt, ...] = ()
    policy: RunRetryPolicy | None = None
    leases: tuple[Lease, ...] = ()

    @property
    def latest_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def attempt(self, attempt_id: str) -> Attempt | None:
        for attempt in self.attempts:
            if attempt.attempt_id == attempt_id:
                return attempt
        return None

    def leases_of(self, attempt_id: str) -> Iterator[Lease]:
        return (lease for lease in self.leases if lease.attempt_id == attempt_id)

    def lease(self, attempt_id: str, lease_generation: int) -> Lease | None:
        for lease in self.leases:
            if lease.attempt_id == attempt_id and lease.lease_generation == lease_generation:
                return lease
        return None

    def current_lease(self, attempt: Attempt) -> Lease | None:
        """The row `(attempt_id, Attempt.lease_generation)` of I-6, if any."""
        if attempt.lease_generation is None:
            return None
        return self.lease(attempt.attempt_id, attempt.lease_generation)

    def leased_lease(self, attempt_id: str) -> Lease | None:
        for lease in self.leases_of(attempt_id):
            if lease.status is LeaseStatus.LEASED:
                return lease
        return None
