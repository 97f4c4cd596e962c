"""Recovery evidence (SPEC §2.1): exactly one value per candidate, produced outside the kernel
(receipt read first, then process identity, O-8) and passed in. The kernel never probes."""

from __future__ import annotations

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
