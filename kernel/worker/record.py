"""The Worker's offer and its journal record (SPEC §3.2, §3.3), as frozen values.

An `Offer` is what the control plane delivers: the candidate Attempt, the target Worker, the
lease snapshot (with the lease token, which the Worker must present, so it is a `Secret`) and the
ExecutionSpec (never in a `repr`, S-1). A `JournalRecord` is one durable revision of the journal
entry for an offer. `record_violations` states the §3.3 field-presence rules (`FIELD_RULES`) and
the record's own invariants; every revision the journal transitions produce has none (I-J4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kernel.entities import Lease
from kernel.identity import Secret, is_sha256_hex
from kernel.identity import offer_id as derive_offer_id
from kernel.specs.codes import Code
from kernel.specs.journal import (
    FIELD_RULES,
    JOURNAL_SCHEMA_VERSION,
    DeliveryKind,
    JournalState,
    RecoveryReason,
)
from kernel.specs.states import LeaseStatus


@dataclass(frozen=True, slots=True)
class OfferCandidate:
    """§3.2: the Attempt the offer is for."""

    run_id: str
    attempt_id: str
    project_id: str
    task_id: str
    task_revision: int
    executor_type: str


@dataclass(frozen=True, slots=True)
class OfferWorker:
    """§3.2: the target Worker runtime."""

    worker_id: str
    session_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class OfferLease:
    """§3.2: the lease snapshot. `lease_token` is the Worker's authority (a `Secret`)."""

    run_id: str
    attempt_id: str
    lease_generation: int
    version: int
    status: LeaseStatus
    worker_id: str
    worker_session_id: str
    worker_generation: int
    lease_token: Secret
    expires_at_ms: int

    def same_authority(self, other: OfferLease) -> bool:
        """§3.2 authority: worker id, session, generation, lease generation and token (and the
        Attempt they are for). `Secret` equality is constant-time."""
        return (
            self.run_id == other.run_id
            and self.attempt_id == other.attempt_id
            and self.lease_generation == other.lease_generation
            and self.worker_id == other.worker_id
            and self.worker_session_id == other.worker_session_id
            and self.worker_generation == other.worker_generation
            and self.lease_token == other.lease_token
        )


@dataclass(frozen=True, slots=True)
class LeaseAck:
    """The control plane's answer to a Worker command (T2..T6): the kernel's code and, when the
    lease is still the Worker's (`leased` under the same authority), its current version and
    expiry."""

    code: Code
    version: int | None = None
    expires_at_ms: int | None = None

    def lease_after(self, lease: OfferLease) -> OfferLease:
        """`lease` with the version and expiry the control plane returned (same token)."""
        if self.version is None or self.expires_at_ms is None:
            return lease
        return replace(lease, version=self.version, expires_at_ms=self.expires_at_ms)


def lease_answer(code: Code, lease: Lease | None) -> LeaseAck:
    """The answer a control plane gives a Worker command (§3.5 "the returned lease"): the
    kernel's code, and the lease's version and expiry only while it is still `leased` (after a
    release or a completion there is no lease left to hold, so no version is reported)."""
    if lease is None or lease.status is not LeaseStatus.LEASED:
        return LeaseAck(code)
    return LeaseAck(code, lease.version, lease.expires_at_ms)


@dataclass(frozen=True, slots=True)
class Offer:
    """§3.2: one validated offer. `execution_spec` is kept out of `repr` (S-1)."""

    offer_id: str
    execution_spec_digest: str
    delivery_kind: DeliveryKind
    candidate: OfferCandidate
    worker: OfferWorker
    lease: OfferLease
    execution_spec: Mapping[str, object] = field(repr=False)

    def derived_offer_id(self) -> str:
        """§0.4: the offer id of the lease authority (D-2 compares it with `offer_id`)."""
        lease = self.lease
        return derive_offer_id(
            lease.attempt_id,
            lease.lease_generation,
            lease.worker_id,
            lease.worker_session_id,
            lease.worker_generation,
        )


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """§3.3: one durable revision. Optional fields are `None` where §3.3 says absent."""

    revision: int
    state: JournalState
    offer: Offer
    accepted_at_ms: int
    updated_at_ms: int
    executor_started_at_ms: int | None = None
    log_artifact_id: str | None = None
    executor_handle: str | None = None
    callback_sequence: int | None = None
    callback_token_sha256: str | None = None
    completion_acknowledged_at_ms: int | None = None
    recovery_reason: RecoveryReason | None = None
    start_failure_code: str | None = None
    schema_version: int = JOURNAL_SCHEMA_VERSION

    @property
    def offer_id(self) -> str:
        return self.offer.offer_id

    @property
    def has_callback_pair(self) -> bool:
        return self.callback_sequence is not None and self.callback_token_sha256 is not None


def _present(record: JournalRecord, name: str) -> bool:
    if name == "callback_pair":
        return record.callback_sequence is not None or record.callback_token_sha256 is not None
    return getattr(record, name) is not None


def record_violations(record: JournalRecord) -> tuple[str, ...]:
    """Every §3.3 rule `record` breaks, as stable one-line names (empty: the record is well
    formed). Values never appear in the names (S-1)."""
    found: list[str] = []
    if record.schema_version != JOURNAL_SCHEMA_VERSION:
        found.append("schema_version")
    if record.revision < 0:
        found.append("revision")
    if record.updated_at_ms < record.accepted_at_ms:
        found.append("updated_at_ms<accepted_at_ms")
    state = record.state
    for name, rule in FIELD_RULES.items():
        present = _present(record, name)
        if state in rule.required and not present:
            found.append(f"{name}:required_in_{state}")
        if present and state not in rule.allowed:
            found.append(f"{name}:forbidden_in_{state}")
    if (record.callback_sequence is None) != (record.callback_token_sha256 is None):
        found.append("callback_pair:both_or_neither")
    if record.callback_sequence is not None and record.callback_sequence < 1:
        found.append("callback_sequence<1")
    if record.callback_token_sha256 is not None and not is_sha256_hex(record.callback_token_sha256):
        found.append("callback_token_sha256:not_hex64")
    if (
        record.completion_acknowledged_at_ms is not None
        and record.completion_acknowledged_at_ms != record.updated_at_ms
    ):
        found.append("completion_acknowledged_at_ms!=updated_at_ms")
    lease = record.offer.lease
    if lease.status is not LeaseStatus.LEASED:
        found.append("offer.lease.status")
    if record.offer.offer_id != record.offer.derived_offer_id():
        found.append("offer_id:not_derived")
    return tuple(found)
