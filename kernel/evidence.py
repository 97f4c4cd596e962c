"""Recovery evidence (SPEC §2.1): exactly one value per candidate, produced outside the kernel
(receipt read first, then process identity, O-8) and passed in. The kernel never probes."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from kernel.specs.states import CompletionOutcome, EvidenceKind, UnknownReason


@dataclass(frozen=True, slots=True)
class CompletedEvidence:
    """A valid, authenticated completion receipt (validated against the Attempt by the reader)."""

    kind: ClassVar[EvidenceKind] = EvidenceKind.COMPLETED
    outcome: CompletionOutcome
    callback_sequence: int
    exit_code: int | None = None
    # The receipt's start time (the handle fact); it must equal a recorded start time and is
    # recorded from it for an Attempt still `starting` (as L3).
    started_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LiveEvidence:
    """Two consecutive inspections saw the exact persisted identity running (ADR-0229 §3)."""

    kind: ClassVar[EvidenceKind] = EvidenceKind.LIVE


@dataclass(frozen=True, slots=True)
class NotRunningEvidence:
    """A trusted report that the persisted identity no longer runs, and no receipt after it."""

    kind: ClassVar[EvidenceKind] = EvidenceKind.NOT_RUNNING


@dataclass(frozen=True, slots=True)
class UnknownEvidence:
    """Anything else: never leads to a write, a signal or a spawn (I-R4)."""

    kind: ClassVar[EvidenceKind] = EvidenceKind.UNKNOWN
    reason: UnknownReason


Evidence = CompletedEvidence | LiveEvidence | NotRunningEvidence | UnknownEvidence


class ReceiptState(enum.StrEnum):
    """What reading the completion receipt for an Attempt found (§2.1 step 1)."""

    ABSENT = "absent"
    VALID = "valid"
    CONFLICT = "conflict"  # exists but fails validation against the persisted Attempt facts
    READ_FAILED = "read_failed"


@dataclass(frozen=True, slots=True)
class ReceiptRead:
    state: ReceiptState
    completed: CompletedEvidence | None = None  # set iff `state` is VALID


class Inspection(enum.StrEnum):
    """One inspection of the exact persisted process identity (§2.1 step 2)."""

    RUNNING = "running"  # running, with the identity equal to the persisted one
    NOT_RUNNING = "not_running"  # a trusted report that the identity no longer runs
    HANDLE_MISSING = "handle_missing"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNSUPPORTED = "unsupported"
    PROBE_FAILED = "probe_failed"


def _from_receipt(read: ReceiptRead) -> Evidence | None:
    if read.state is ReceiptState.VALID and read.completed is not None:
        return read.completed
    if read.state is ReceiptState.CONFLICT:
        return UnknownEvidence(UnknownReason.RECEIPT_CONFLICT)
    if read.state is ReceiptState.READ_FAILED or read.state is ReceiptState.VALID:
        return UnknownEvidence(UnknownReason.RECEIPT_READ_FAILED)
    return None


def collect_evidence(
    read_receipt: Callable[[], ReceiptRead], inspect: Callable[[], Inspection]
) -> Evidence:
    """Obtain exactly one Evidence value in the order of §2.1 (O-8, REC-08): the receipt first;
    a valid one means no inspection; a conflicting or unreadable one is `unknown` and stops
    before any probe. Only without a receipt is the identity inspected: two consecutive
    `running` inspections are `live`; `not_running` re-reads the receipt once (B-29: the caller's
    `read_receipt` applies the publish grace) and a receipt found then wins.

    The kernel performs no I/O: the two callables are the caller's ports. A port that raises
    fails closed as `unknown(receipt_read_failed)` or `unknown(probe_failed)`, never as a fact."""
    first_read = _from_receipt(_read(read_receipt))
    if first_read is not None:
        return first_read
    first = _inspect(inspect)
    if first is Inspection.RUNNING:
        second = _inspect(inspect)
        if second is Inspection.RUNNING:
            return LiveEvidence()
        return UnknownEvidence(UnknownReason.INCONSISTENT_INSPECTIONS)
    if first is Inspection.NOT_RUNNING:
        late = _from_receipt(_read(read_receipt))
        return late if late is not None else NotRunningEvidence()
    return UnknownEvidence(UnknownReason(first.value))


def _read(read_receipt: Callable[[], ReceiptRead]) -> ReceiptRead:
    try:
        return read_receipt()
    except Exception:  # any port failure is an unreadable receipt (fail closed, §2.1)
        return ReceiptRead(ReceiptState.READ_FAILED)


def _inspect(inspect: Callable[[], Inspection]) -> Inspection:
    try:
        return inspect()
    except Exception:  # any probe failure is `probe_failed`, never `not_running`
        return Inspection.PROBE_FAILED
