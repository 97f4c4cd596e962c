"""Delivery validation and the conflict rule (SPEC §3.8: D-1..D-9, C-1), before any write.

`decide_delivery` is total and pure: given one delivered offer, the record the journal holds for
its `offer_id` (or `None`), the bound Worker runtime's current session (whose status says
whether it is draining), how many records the journal holds and its capacity, and the
observation time, it returns what the receiver does next:

- `Accept(offer)`: a new offer, every check passed: publish `accepted` (`DeliveryAccepted`).
- `Merge(event)`: a known offer with the same authority and a higher lease version: replace the
  stored lease (`LeaseVersionAdvanced`), then continue with the record's state (§3.7).
- `Continue(action)`: a known offer with the same authority and an equal or lower version:
  write nothing, continue with the record's state (§3.7 `REPLAY`).
- `Rejected(code)`: refused; nothing is written and nothing starts (INBOX-09, INBOX-11).

The checks run in the order of §3.8, so a delivery failing several reports the first. The
record size (F-2, D-9) is the adapter's check: only it knows the serialized bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import icontract

from kernel.entities import Run, WorkerSession
from kernel.identity import (
    IdentityError,
    execution_spec_digest,
    is_other_id,
    is_portable_id,
    is_sha256_hex,
)
from kernel.outcomes import Rejected
from kernel.specs.codes import Code
from kernel.specs.journal import FINAL_STATES, REPLAY, DeliveryKind, JournalState, ReplayAction
from kernel.specs.states import LeaseStatus, WorkerSessionStatus
from kernel.worker.journal import LeaseVersionAdvanced
from kernel.worker.record import JournalRecord, Offer

#: D-4 [decision]: the ExecutionSpec names the Attempt it is for with these keys.
SPEC_IDENTITY_KEYS = ("run_id", "attempt_id", "project_id", "task_id", "task_revision")


def offer_execution_spec(
    run: Run, attempt_id: str, document: Mapping[str, object]
) -> dict[str, object]:
    """The ExecutionSpec a control plane offers for `attempt_id` of `run` (§3.2): the task's
    document (argv, cwd, env, ...) with the identity D-4 checks it against — the Run, Attempt,
    Project, Task and Task revision — so an offer whose spec drifted is refused."""
    identity = (run.run_id, attempt_id, run.project_id, run.task_id, run.task_revision)
    return {**document, **dict(zip(SPEC_IDENTITY_KEYS, identity, strict=True))}


@dataclass(frozen=True, slots=True)
class Accept:
    offer: Offer


@dataclass(frozen=True, slots=True)
class Merge:
    event: LeaseVersionAdvanced
    action: ReplayAction


@dataclass(frozen=True, slots=True)
class Continue:
    action: ReplayAction


DeliveryDecision = Accept | Merge | Continue | Rejected

#: A higher lease version is merged into any non-final record (§3.6); a final one keeps its own.
_MERGEABLE = frozenset(s for s in JournalState if s not in FINAL_STATES)


def _int(value: object, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def _well_formed(offer: Offer) -> bool:
    """D-1: shapes and ranges; portable Run/Attempt ids; a `leased` lease snapshot."""
    c, w, lease = offer.candidate, offer.worker, offer.lease
    return (
        is_sha256_hex(offer.offer_id)
        and is_sha256_hex(offer.execution_spec_digest)
        and isinstance(offer.delivery_kind, DeliveryKind)
        and all(is_portable_id(x) for x in (c.run_id, c.attempt_id, lease.run_id, lease.attempt_id))
        and all(
            isinstance(x, str) and is_other_id(x)
            for x in (c.project_id, c.task_id, c.executor_type)
        )
        and all(
            isinstance(x, str) and is_other_id(x)
            for x in (w.worker_id, w.session_id, lease.worker_id, lease.worker_session_id)
        )
        and _int(c.task_revision, 1)
        and _int(w.generation, 0)
        and _int(lease.worker_generation, 0)
        and _int(lease.lease_generation, 1)
        and _int(lease.version, 1)
        and _int(lease.expires_at_ms, 0)
        and lease.status is LeaseStatus.LEASED
        and isinstance(offer.execution_spec, Mapping)
    )


def _identity_agrees(offer: Offer) -> bool:
    """D-4: candidate, lease and ExecutionSpec name the same Run, Attempt, Project, Task and
    Task revision."""
    c, lease, spec = offer.candidate, offer.lease, offer.execution_spec
    expected = (c.run_id, c.attempt_id, c.project_id, c.task_id, c.task_revision)
    named = tuple(spec.get(key) for key in SPEC_IDENTITY_KEYS)
    return (lease.run_id, lease.attempt_id) == (c.run_id, c.attempt_id) and named == expected


def _same_offer(offer: Offer, record: JournalRecord) -> bool:
    """C-1: the same candidate, the same authority (worker id, session, generation, lease
    generation, lease token) and the same digest. The lease version may differ."""
    stored = record.offer
    return (
        offer.candidate == stored.candidate
        and offer.worker == stored.worker
        and offer.execution_spec_digest == stored.execution_spec_digest
        and offer.lease.same_authority(stored.lease)
    )


@icontract.require(lambda observed_at_ms: type(observed_at_ms) is int and observed_at_ms >= 0)
@icontract.require(lambda records_held, capacity: records_held >= 0 and capacity >= 1)
@icontract.ensure(
    lambda existing, result: not isinstance(result, Accept) or existing is None,
    "only an unknown offer is ever published as new",
)
def decide_delivery(
    offer: Offer,
    existing: JournalRecord | None,
    runtime: WorkerSession,
    *,
    records_held: int,
    capacity: int,
    observed_at_ms: int,
) -> DeliveryDecision:
    """§3.8 D-1..D-9 and C-1, in order, before any journal write."""
    if not _well_formed(offer):
        return Rejected(Code.OFFER_INVALID)  # D-1
    if offer.offer_id != offer.derived_offer_id():
        return Rejected(Code.OFFER_ID_MISMATCH)  # D-2
    try:
        digest = execution_spec_digest(offer.execution_spec)
    except IdentityError:
        return Rejected(Code.OFFER_INVALID)  # not canonical JSON: malformed (D-1)
    if digest != offer.execution_spec_digest:
        return Rejected(Code.OFFER_DIGEST_MISMATCH)  # D-3
    if not _identity_agrees(offer):
        return Rejected(Code.OFFER_IDENTITY_DRIFT)  # D-4
    lease, worker = offer.lease, offer.worker
    bound = (runtime.worker_id, runtime.session_id, runtime.generation)
    if (worker.worker_id, worker.session_id, worker.generation) != bound or (
        lease.worker_id,
        lease.worker_session_id,
        lease.worker_generation,
    ) != bound:
        return Rejected(Code.WORKER_SESSION_MISMATCH)  # D-5
    if runtime.status is WorkerSessionStatus.OFFLINE:
        return Rejected(Code.WORKER_OFFLINE)  # D-6
    if runtime.session_expires_at_ms <= observed_at_ms:
        return Rejected(Code.WORKER_SESSION_EXPIRED)  # D-6
    if lease.expires_at_ms <= observed_at_ms:
        return Rejected(Code.RUN_LEASE_EXPIRED)  # D-7 (expired at its expiry instant, T7)
    if existing is not None and not _same_offer(offer, existing):
        return Rejected(Code.OFFER_CONFLICT)  # C-1: no write, no side effect
    draining = runtime.status is WorkerSessionStatus.DRAINING
    if draining and (offer.delivery_kind is DeliveryKind.NEW_CLAIM or existing is None):
        return Rejected(Code.WORKER_DRAINING)  # D-8
    if existing is None:
        if records_held >= capacity:
            return Rejected(Code.JOURNAL_FULL)  # D-9 / F-7: nothing is ever evicted
        return Accept(offer)
    action = REPLAY[existing.state]
    if lease.version > existing.offer.lease.version and existing.state in _MERGEABLE:
        return Merge(LeaseVersionAdvanced(lease, offer.delivery_kind), action)
    return Continue(action)
