"""The recovery Coordinator on the real ports (SPEC §3.12; INBOX-34..INBOX-36, INBOX-38).

`Coordinator.recover(seen, reconciliation)` performs, for one record under the journal
ownership the caller holds, what the kernel (`kernel.worker.coordinator`) plans from the
Reconciler's evidence, in its irreversible order: submit the completion with the journal's own
fences, write `completion_acknowledged` through the journal engine, and only then delete the
receipt; or the running-ACK recovery (`started` + `current` + `running` + no receipt). Each
port answer goes back to the kernel, which names the next step or the outcome. Concurrent
recovery of one offer in one process is coalesced. Results carry ids, states, codes, sequences
and exit codes only (S-1).

`Coordinator.read_view(record)` is the control-plane read recovery builds the §3.11 view from
(E-3): one `read_authority` through the same client, turned into a `ControlPlaneView` by the
kernel (`control_plane_view`). With it, a record whose completion the control plane already
accepted under exactly the record's fences converges by exact replay (`already_terminal`, D-8)
after a restart as a new session or after lease expiry (INBOX-35); a failed read is no view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernel.specs import Code, JournalState
from kernel.worker import (
    SETTLED,
    AckRunning,
    CompletionSubmission,
    ControlPlaneView,
    CoordinatorOutcome,
    FinishRecovery,
    Found,
    JournalRecord,
    Reconciliation,
    UnknownInboxReason,
    Written,
    after_journal_write,
    after_receipt_delete,
    after_running_ack,
    after_submission,
    control_plane_view,
    plan_coordination,
)
from runners.worker.in_flight import InFlight
from runners.worker.journal.engine import JournalEngine
from runners.worker.journal.port import JournalStore
from runners.worker.ports import ControlPlaneClient, ControlPlaneUnavailable
from runners.worker.reconciler import ReceiptEvidencePort

__all__ = ["Coordinator", "CoordinatorOutcome", "CoordinatorResult"]


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    offer_id: str
    outcome: CoordinatorOutcome
    code: Code | None = None
    state: JournalState | None = None
    callback_sequence: int | None = None
    exit_code: int | None = None
    unknown: UnknownInboxReason | None = None  # the evidence's reason when it was `unknown`

    @property
    def settled(self) -> bool:
        """The record needs no further recovery action (it is final, or there was nothing to
        do for it)."""
        return self.outcome in SETTLED


class Coordinator:
    """§3.12 under the journal ownership the caller holds."""

    def __init__(
        self,
        journal: JournalStore,
        client: ControlPlaneClient,
        receipts: ReceiptEvidencePort,
        clock: Callable[[], int],
    ) -> None:
        self._engine = JournalEngine(journal, clock)
        self._client = client
        self._receipts = receipts
        self._inflight: InFlight[str, CoordinatorResult] = InFlight()

    def __repr__(self) -> str:
        return "Coordinator()"

    def read_view(self, record: JournalRecord) -> ControlPlaneView | None:
        """E-3: one control-plane read for `record`'s lease, as the kernel's view; `None` when
        the read failed or the control plane knows no such lease (no view: fail closed)."""
        lease = record.offer.lease
        try:
            facts = self._client.read_authority(
                lease.run_id, lease.attempt_id, lease.lease_generation
            )
        except Exception:  # ControlPlaneUnavailable or a broken port: nothing is known
            return None
        return None if facts is None else control_plane_view(record, facts)

    def recover(self, seen: JournalRecord, reconciliation: Reconciliation) -> CoordinatorResult:
        """Coalesced per offer: a concurrent call joins the one in flight (WR-5)."""
        return self._inflight.run(seen.offer_id, None, lambda: self._recover(seen, reconciliation))

    def _recover(self, seen: JournalRecord, rec: Reconciliation) -> CoordinatorResult:
        key = seen.offer_id
        found = self._engine.read(key)
        if not isinstance(found, Found):
            return CoordinatorResult(key, CoordinatorOutcome.JOURNAL_WRITE_FAILED, found.code)
        plan = plan_coordination(seen, found.record, rec)
        if isinstance(plan, FinishRecovery):
            return _result(key, plan)
        assert found.record is not None  # the kernel plans a side effect only on a record
        if isinstance(plan, AckRunning):
            return self._running_ack(found.record, plan)
        return self._complete(key, found.record, plan)

    def _complete(
        self, key: str, record: JournalRecord, planned: CompletionSubmission
    ) -> CoordinatorResult:
        try:
            answer = self._client.complete(planned)
        except ControlPlaneUnavailable:
            return CoordinatorResult(
                key, CoordinatorOutcome.SUBMISSION_REJECTED, Code.CONTROL_PLANE_UNAVAILABLE
            )
        after = after_submission(answer.code, planned)
        if isinstance(after, FinishRecovery):
            return _result(key, after)
        written = self._engine.write(record, after.event)
        delete = after_journal_write(isinstance(written, Written), planned.attempt_id)
        if isinstance(delete, FinishRecovery):
            return _result(key, delete)
        assert isinstance(written, Written)  # the kernel deletes a receipt only after the write
        try:
            ok = self._receipts.delete(delete.attempt_id)
        except Exception:
            ok = False
        done = after_receipt_delete(ok)
        return CoordinatorResult(
            key,
            done.outcome,
            None,
            written.record.state,
            planned.callback_sequence,
            planned.exit_code,
        )

    def _running_ack(self, record: JournalRecord, planned: AckRunning) -> CoordinatorResult:
        key = record.offer_id
        try:
            answer = self._client.acknowledge_running(
                planned.lease, planned.executor_handle, planned.executor_started_at_ms
            )
        except ControlPlaneUnavailable:
            return CoordinatorResult(
                key, CoordinatorOutcome.WAITING_FOR_AUTHORITY, Code.CONTROL_PLANE_UNAVAILABLE
            )
        write = after_running_ack(answer.code)
        if isinstance(write, FinishRecovery):  # wait for new authority, no retry loop
            return CoordinatorResult(key, write.outcome, write.code, record.state)
        written = self._engine.write(record, write.event)
        if not isinstance(written, Written) or write.outcome is None:
            return CoordinatorResult(key, CoordinatorOutcome.JOURNAL_WRITE_FAILED)
        return CoordinatorResult(key, write.outcome, answer.code, written.record.state)


def _result(key: str, finish: FinishRecovery) -> CoordinatorResult:
    unknown = None if finish.unknown is None else UnknownInboxReason(finish.unknown)
    return CoordinatorResult(key, finish.outcome, finish.code, finish.state, unknown=unknown)
