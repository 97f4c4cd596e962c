"""The Worker's recovery Reconciler as a pure step machine (SPEC §3.11; INBOX-29..INBOX-33).

Per record the order is fixed: read the receipt; only if none exists, inspect the durable
handle; after `exited`, re-read the receipt at once and, still missing, once more after the
publish grace (0..5 s); anything else is an explicit `unknown(reason)`. The effectful parts are
ports (receipt store + authenticator, inspector); `reconcile_step(progress, observation)` says
what to ask next (`ReadReceipt`, `Inspect`, `WaitGrace`) or returns the evidence (`Concluded`). It
has no start, stop, ACK or remove step, so nothing here can spawn, signal or delete.

`authority(...)` and `completion_submission(...)` decide whether a `completion_observed` may be
submitted: only by the record's own fences while they are `current` (or for the exact-replay
case [decision §3.11]); a new session never submits for an old one. The exact-replay case needs
the control plane's own terminal facts (`TerminalFacts`, read through E-3 and turned into a
`ControlPlaneView` by `kernel.worker.control_plane_view`) to equal the receipt's: D-8 allows
only a byte-identical replay, so "the same facts" are exactly what T6r compares.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kernel.entities import WorkerSession
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.specs.states import AttemptStatus, CompletionOutcome, WorkerSessionStatus
from kernel.worker.record import JournalRecord


class ReceiptCheck(enum.StrEnum):
    """What the receipt store and its authenticator report for one read (RV-1..RV-5)."""

    ABSENT = "absent"
    VALID = "valid"
    CONFLICT = "conflict"  # RV-1, RV-2 or RV-4 failed
    UNAUTHENTICATED = "unauthenticated"  # RV-3 (no callback pair) or RV-5 (digest) failed
    AUTHENTICATOR_UNAVAILABLE = "authenticator_unavailable"
    READ_FAILED = "read_failed"


class HandleInspection(enum.StrEnum):
    """The persisted-execution inspector's answers (§3.11 step 3)."""

    RUNNING = "running"
    EXITED = "exited"
    INVALID = "invalid"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNSUPPORTED = "unsupported"
    PROBE_FAILED = "probe_failed"  # the inspector raised


class UnknownInboxReason(enum.StrEnum):
    """§3.11 `unknown(reason)` [decision: names]."""

    RECEIPT_CONFLICT = "receipt_conflict"
    RECEIPT_UNAUTHENTICATED = "receipt_unauthenticated"
    AUTHENTICATOR_UNAVAILABLE = "authenticator_unavailable"
    RECEIPT_READ_FAILED = "receipt_read_failed"
    HANDLE_MISSING = "handle_missing"
    HANDLE_INVALID = "handle_invalid"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNSUPPORTED = "unsupported"
    PROBE_FAILED = "probe_failed"
    EXITED_WITHOUT_RECEIPT = "exited_without_receipt"


@dataclass(frozen=True, slots=True)
class ReceiptFacts:
    """A valid receipt's facts (never its token)."""

    callback_sequence: int
    finished_at_ms: int
    exit_code: int | None
    outcome: CompletionOutcome


@dataclass(frozen=True, slots=True)
class CompletionObserved:
    facts: ReceiptFacts


@dataclass(frozen=True, slots=True)
class RunningObserved:
    pass


@dataclass(frozen=True, slots=True)
class UnknownObserved:
    reason: UnknownInboxReason


InboxEvidence = CompletionObserved | RunningObserved | UnknownObserved


# -- the step machine ------------------------------------------------------------------------
class Phase(enum.StrEnum):
    FIRST_READ = "first_read"
    INSPECT = "inspect"
    REREAD = "reread"  # right after `exited`
    AFTER_GRACE = "after_grace"  # once more after the publish grace


@dataclass(frozen=True, slots=True)
class ReadReceipt:
    phase: Phase


@dataclass(frozen=True, slots=True)
class Inspect:
    executor_handle: str


@dataclass(frozen=True, slots=True)
class WaitGrace:
    """Wait the configured publish grace (0..5 s, default 100 ms), then read once more."""


@dataclass(frozen=True, slots=True)
class Concluded:
    evidence: InboxEvidence


NextStep = ReadReceipt | Inspect | WaitGrace | Concluded

_RECEIPT_UNKNOWN = {
    ReceiptCheck.CONFLICT: UnknownInboxReason.RECEIPT_CONFLICT,
    ReceiptCheck.UNAUTHENTICATED: UnknownInboxReason.RECEIPT_UNAUTHENTICATED,
    ReceiptCheck.AUTHENTICATOR_UNAVAILABLE: UnknownInboxReason.AUTHENTICATOR_UNAVAILABLE,
    ReceiptCheck.READ_FAILED: UnknownInboxReason.RECEIPT_READ_FAILED,
}
_INSPECTION_UNKNOWN = {
    HandleInspection.INVALID: UnknownInboxReason.HANDLE_INVALID,
    HandleInspection.IDENTITY_MISMATCH: UnknownInboxReason.IDENTITY_MISMATCH,
    HandleInspection.UNSUPPORTED: UnknownInboxReason.UNSUPPORTED,
    HandleInspection.PROBE_FAILED: UnknownInboxReason.PROBE_FAILED,
}


def first_step() -> NextStep:
    """Step 1: read the immutable completion receipt by Attempt id."""
    return ReadReceipt(Phase.FIRST_READ)


def after_receipt(
    record: JournalRecord, phase: Phase, check: ReceiptCheck, facts: ReceiptFacts | None = None
) -> NextStep:
    """Steps 2, 4 and 5 after one receipt read. A receipt found in any read decides; a
    conflict, an unauthenticated receipt, an unavailable authenticator or a read error ends the
    record as `unknown` before any (further) probe (INBOX-29, INBOX-30, INBOX-31)."""
    if check is ReceiptCheck.VALID:
        if facts is None:
            return Concluded(UnknownObserved(UnknownInboxReason.RECEIPT_CONFLICT))
        if not record.has_callback_pair:  # RV-3, whatever the authenticator said
            return Concluded(UnknownObserved(UnknownInboxReason.RECEIPT_UNAUTHENTICATED))
        return Concluded(CompletionObserved(facts))
    if check is not ReceiptCheck.ABSENT:
        return Concluded(UnknownObserved(_RECEIPT_UNKNOWN[check]))
    if phase is Phase.FIRST_READ:
        if record.executor_handle is None:
            return Concluded(UnknownObserved(UnknownInboxReason.HANDLE_MISSING))
        return Inspect(record.executor_handle)
    if phase is Phase.REREAD:
        return WaitGrace()
    return Concluded(UnknownObserved(UnknownInboxReason.EXITED_WITHOUT_RECEIPT))


def after_inspection(inspection: HandleInspection) -> NextStep:
    """Step 3: `running` is evidence; `exited` re-reads the receipt; the rest is `unknown`.
    Never restart, signal or declare `lost` because of it (INBOX-32)."""
    if inspection is HandleInspection.RUNNING:
        return Concluded(RunningObserved())
    if inspection is HandleInspection.EXITED:
        return ReadReceipt(Phase.REREAD)
    return Concluded(UnknownObserved(_INSPECTION_UNKNOWN[inspection]))


def after_grace() -> NextStep:
    return ReadReceipt(Phase.AFTER_GRACE)


# -- authority and submission ------------------------------------------------------------------
def authority(record: JournalRecord, runtime: WorkerSession, observed_at_ms: int) -> Code:
    """§3.11, from the record's own fences, in this precedence: `session_fenced`,
    `worker_offline`, `worker_session_expired`, `run_lease_expired`, else `current`."""
    lease = record.offer.lease
    bound = (runtime.worker_id, runtime.session_id, runtime.generation)
    if (lease.worker_id, lease.worker_session_id, lease.worker_generation) != bound:
        return Code.SESSION_FENCED
    if runtime.status is WorkerSessionStatus.OFFLINE:
        return Code.WORKER_OFFLINE_AUTHORITY
    if runtime.session_expires_at_ms <= observed_at_ms:
        return Code.WORKER_SESSION_EXPIRED_AUTHORITY
    if lease.expires_at_ms <= observed_at_ms:
        return Code.RUN_LEASE_EXPIRED_AUTHORITY
    return Code.CURRENT


@dataclass(frozen=True, slots=True)
class TerminalFacts:
    """E-3: the control plane's facts of a final Attempt, as T6r compares them with a replayed
    completion: its status (the completion's outcome, or `lost`), callback sequence and exit
    code. No token, digest or handle (S-1)."""

    status: AttemptStatus
    callback_sequence: int
    exit_code: int | None


def same_completion(control: TerminalFacts, receipt: ReceiptFacts) -> bool:
    """The "same facts" of D-8/E-3: exactly what T6r (`complete_with_lease`) requires of an
    exact replay besides the fences: callback sequence, outcome and exit code."""
    return (
        control.callback_sequence == receipt.callback_sequence
        and control.status.value == receipt.outcome.value
        and control.exit_code == receipt.exit_code
    )


@dataclass(frozen=True, slots=True)
class ControlPlaneView:
    """The optional control-plane view of the record's lease (§3.11, E-3): `terminal` (the
    record's lease is over in the control plane or its Attempt is final), whether the lease is
    `completed` by exactly the record's fences at `record.lease.version + 1`, and the Attempt's
    `completion` facts when it is final. Built by `control_plane_view`."""

    terminal: bool
    completed_by_record_fences_at_next_version: bool = False
    completion: TerminalFacts | None = None


@dataclass(frozen=True, slots=True)
class Submission:
    """`ready`, or `blocked(reason)` with the authority value or `control_plane_terminal`."""

    ready: bool
    reason: Code | None = None


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """§3.11's result for one record (S-1): the evidence, the record's authority, whether a
    completion may be submitted, and what the ports answered (receipt, inspection, counts)."""

    offer_id: str
    attempt_id: str
    state: JournalState
    revision: int
    evidence: InboxEvidence
    authority: Code
    submission: Submission | None
    receipt: ReceiptCheck
    inspection: HandleInspection | None
    receipt_reads: int
    probes: int


def reads_control_plane(evidence: InboxEvidence) -> bool:
    """Whether the submission decision for `evidence` depends on the control-plane view: only a
    `completion_observed` does (§3.11), so recovery reads the control plane (E-3) for it only."""
    return isinstance(evidence, CompletionObserved)


def completion_submission(
    evidence: InboxEvidence, authority_value: Code, view: ControlPlaneView | None
) -> Submission | None:
    """§3.11 for `completion_observed` (else `None`): ready when the authority is current and
    the control plane is not known terminal; also ready for the exact-replay case, when the
    control plane's completion facts equal the receipt's (D-8, E-3: T6r would answer
    `already_terminal`); any other terminal fact blocks with `control_plane_terminal`;
    otherwise blocked by the authority (INBOX-33, INBOX-35)."""
    if not isinstance(evidence, CompletionObserved):
        return None
    if view is not None and view.completed_by_record_fences_at_next_version:
        done = view.completion
        if done is not None and same_completion(done, evidence.facts):
            return Submission(ready=True)
        return Submission(ready=False, reason=Code.CONTROL_PLANE_TERMINAL)
    if view is not None and view.terminal:
        return Submission(ready=False, reason=Code.CONTROL_PLANE_TERMINAL)
    if authority_value is not Code.CURRENT:
        return Submission(ready=False, reason=authority_value)
    return Submission(ready=True)
