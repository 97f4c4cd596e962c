"""The recovery Reconciler on the real ports (SPEC §3.11; INBOX-29..INBOX-33, INBOX-38).

`Reconciler.reconcile(record, observed_at_ms, runtime, view, read_view=...)`: evidence only. It
walks the kernel's step machine (`kernel.worker.reconciler`): read the receipt, inspect only
when there is none, re-read after `exited` and once more after the publish grace; the authority
and whether a completion may be submitted are the kernel's too. Its ports are a receipt reader
that authenticates (`ReceiptEvidencePort`), the persisted-execution inspector and the optional
control-plane view (§3.11), read through `read_view` (E-3) at most once and only when the
kernel's decision depends on it (`reads_control_plane`: a `completion_observed`); a failed read
is no view (fail closed). It has no start, stop, ACK or remove port. Results carry ids, states,
evidence and codes only (S-1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

from kernel import WorkerSession
from kernel.specs import HARD_LIMITS, Profile, budget_for
from kernel.worker import (
    Concluded,
    ControlPlaneView,
    HandleInspection,
    Inspect,
    JournalRecord,
    ReadReceipt,
    ReceiptCheck,
    ReceiptFacts,
    Reconciliation,
    WaitGrace,
    after_grace,
    after_inspection,
    after_receipt,
    authority,
    completion_submission,
    first_step,
    reads_control_plane,
)
from runners.worker.ports import Inspector

__all__ = [
    "DEFAULT_GRACE_MS",
    "MAX_GRACE_MS",
    "ReadView",
    "ReceiptEvidencePort",
    "Reconciler",
    "Reconciliation",
]

#: §3.11 step 4 [decision B-52: default 100 ms], at most 5 s (the §6.3 budget table).
DEFAULT_GRACE_MS: Final = budget_for(Profile.WORKER).receipt_publish_grace_ms or 0
MAX_GRACE_MS: Final = HARD_LIMITS.receipt_publish_grace_max_ms

#: Reads the control-plane view of one record (E-3: one control-plane read). `None`: no view
#: (the read failed or the control plane knows no such lease).
ReadView = Callable[[JournalRecord], ControlPlaneView | None]


class ReceiptEvidencePort(Protocol):
    """The completion receipts as recovery reads them (`ReceiptEvidence` on POSIX)."""

    def check(self, record: JournalRecord) -> tuple[ReceiptCheck, ReceiptFacts | None]:
        """Read the receipt of the record's Attempt and authenticate it (RV-1..RV-5)."""
        ...

    def delete(self, attempt_id: str) -> bool:
        """Delete idempotently (missing is success); `False` when the deletion failed."""
        ...


class Reconciler:
    """§3.11: receipt first; the inspector only when there is no receipt."""

    def __init__(
        self,
        receipts: ReceiptEvidencePort,
        inspector: Inspector,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if type(grace_ms) is not int or not 0 <= grace_ms <= MAX_GRACE_MS:
            raise ValueError(f"receipt publish grace must be 0..{MAX_GRACE_MS} ms")
        self._receipts = receipts
        self._inspector = inspector
        self._grace_ms = grace_ms
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"Reconciler(grace_ms={self._grace_ms})"

    def reconcile(
        self,
        record: JournalRecord,
        observed_at_ms: int,
        runtime: WorkerSession,
        view: ControlPlaneView | None = None,
        *,
        read_view: ReadView | None = None,
    ) -> Reconciliation:
        """One record's pass. `view` is a view already read; otherwise `read_view` is called
        once, after the evidence, when the kernel's submission decision depends on it."""
        step = first_step()
        receipt = ReceiptCheck.ABSENT
        inspection: HandleInspection | None = None
        reads = probes = 0
        while not isinstance(step, Concluded):
            if isinstance(step, ReadReceipt):
                reads += 1
                try:
                    receipt, facts = self._receipts.check(record)
                except Exception:  # the port failed: a read error, never an absence
                    receipt, facts = ReceiptCheck.READ_FAILED, None
                step = after_receipt(record, step.phase, receipt, facts)
            elif isinstance(step, Inspect):
                probes += 1
                try:
                    inspection = HandleInspection(self._inspector.inspect(step.executor_handle))
                except Exception:  # probe error: explicit unknown, never `exited`
                    inspection = HandleInspection.PROBE_FAILED
                step = after_inspection(inspection)
            elif isinstance(step, WaitGrace):
                self._sleep(self._grace_ms / 1000)
                step = after_grace()
        if view is None and read_view is not None and reads_control_plane(step.evidence):
            try:
                view = read_view(record)
            except Exception:  # a failed read is no view: today's fail-closed behaviour
                view = None
        value = authority(record, runtime, observed_at_ms)
        return Reconciliation(
            offer_id=record.offer_id,
            attempt_id=record.offer.lease.attempt_id,
            state=record.state,
            revision=record.revision,
            evidence=step.evidence,
            authority=value,
            submission=completion_submission(step.evidence, value, view),
            receipt=receipt,
            inspection=inspection,
            receipt_reads=reads,
            probes=probes,
        )
