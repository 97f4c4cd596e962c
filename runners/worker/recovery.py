"""Receipt-first recovery wired to the ports (SPEC §3.11-§3.13; INBOX-29..INBOX-38).

- `Reconciler.reconcile(record, observed_at_ms, runtime, view)`: evidence only. It walks the
  kernel's step machine (`kernel.worker.reconciler`): read the receipt, inspect only when
  there is none, re-read after `exited` and once more after the publish grace. Its ports are a
  receipt reader that authenticates (`ReceiptEvidence`) and the persisted-execution inspector:
  it has no start, stop, ACK or remove port.
- `Coordinator`: the irreversible order for one record (`kernel.worker.coordinator`): submit
  the completion with the journal's own fences, CAS-write `completion_acknowledged`, and only
  then delete the receipt; running-ACK recovery for `started` + `current` + `running` + no
  receipt. Concurrent recovery of one offer in one process is coalesced.
- `StartupSupervisor.run(audit, observed_at_ms)`: one complete audit, the kernel's plan
  (`kernel.worker.supervisor`), serially, one low-sensitivity code per failing item; the
  other items still run.

Every result carries ids, states, evidence, codes, sequences, times and exit codes only (S-1).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kernel.entities import WorkerSession
from kernel.outcomes import Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.worker.auditor import AuditResult
from kernel.worker.coordinator import (
    CompletionSubmission,
    DeleteReceipt,
    Finish,
    after_journal_write,
    after_receipt_delete,
    after_running_ack,
    after_submission,
    plan_completion,
    running_ack_eligible,
)
from kernel.worker.journal import JournalEvent, LaunchOutcomeUnknown, journal_step
from kernel.worker.reconciler import (
    CompletionObserved,
    ControlPlaneView,
    Done,
    InboxEvidence,
    Inspect,
    Inspection,
    ReadReceipt,
    ReceiptCheck,
    ReceiptFacts,
    RunningObserved,
    Submission,
    UnknownInboxReason,
    UnknownObserved,
    WaitGrace,
    after_grace,
    after_inspection,
    after_receipt,
    authority,
    completion_submission,
    first_step,
)
from kernel.worker.record import JournalRecord
from kernel.worker.supervisor import RecoveryAction, overall, plan_recovery
from runners.worker.in_flight import InFlight
from runners.worker.journal.port import JournalError, JournalStore
from runners.worker.ports import ControlPlaneClient, ControlPlaneUnavailable, Inspector

#: §3.11 step 4 [decision: default 100 ms], at most 5 s.
DEFAULT_GRACE_MS = 100
MAX_GRACE_MS = 5_000


class ReceiptPort(Protocol):
    def check(self, record: JournalRecord) -> tuple[ReceiptCheck, ReceiptFacts | None]:
        """Read the receipt of the record's Attempt and authenticate it (RV-1..RV-5)."""
        ...

    def delete(self, attempt_id: str) -> bool:
        """Delete idempotently (missing is success); `False` when the deletion failed."""
        ...


# -- the Reconciler --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Reconciliation:
    """§3.11 result for one record (S-1)."""

    offer_id: str
    attempt_id: str
    state: JournalState
    revision: int
    evidence: InboxEvidence
    authority: Code
    submission: Submission | None
    receipt: ReceiptCheck
    inspection: Inspection | None
    receipt_reads: int
    probes: int


class Reconciler:
    """§3.11: receipt first; the inspector only when there is no receipt."""

    def __init__(
        self,
        receipts: ReceiptPort,
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
    ) -> Reconciliation:
        step = first_step()
        receipt = ReceiptCheck.ABSENT
        inspection: Inspection | None = None
        reads = probes = 0
        while not isinstance(step, Done):
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
                    inspection = Inspection(self._inspector.inspect(step.executor_handle))
                except Exception:  # probe error: explicit unknown, never `exited`
                    inspection = Inspection.PROBE_FAILED
                step = after_inspection(inspection)
            elif isinstance(step, WaitGrace):
                self._sleep(self._grace_ms / 1000)
                step = after_grace()
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


# -- the Coordinator -------------------------------------------------------------------------------
class CoordinatorOutcome(enum.StrEnum):
    """§3.12 results plus the running-ACK recovery's [decision: names]."""

    COMPLETED = "completed"
    COMPLETED_CLEANUP_PENDING = "completed_cleanup_pending"
    SUBMISSION_REJECTED = "submission_rejected"
    JOURNAL_WRITE_FAILED = "journal_write_failed"
    BLOCKED = "blocked"
    RACED = "raced"
    RUNNING_ACKNOWLEDGED = "running_acknowledged"
    CONTROL_PLANE_TERMINAL = "control_plane_terminal"
    WAITING_FOR_AUTHORITY = "waiting_for_authority"
    STILL_RUNNING = "still_running"  # running evidence, already acknowledged: nothing to do yet
    NOTHING_TO_DO = "nothing_to_do"


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
        return self.outcome in (CoordinatorOutcome.COMPLETED, CoordinatorOutcome.NOTHING_TO_DO)


class Coordinator:
    """§3.12 under the journal ownership the caller holds."""

    def __init__(
        self,
        journal: JournalStore,
        client: ControlPlaneClient,
        receipts: ReceiptPort,
        clock: Callable[[], int],
    ) -> None:
        self._journal = journal
        self._client = client
        self._receipts = receipts
        self._clock = clock
        self._inflight: InFlight[str, CoordinatorResult] = InFlight()

    def __repr__(self) -> str:
        return "Coordinator()"

    def recover(self, seen: JournalRecord, reconciliation: Reconciliation) -> CoordinatorResult:
        """Coalesced per offer: a concurrent call joins the one in flight (WR-5)."""
        return self._inflight.run(seen.offer_id, None, lambda: self._recover(seen, reconciliation))

    def _recover(self, seen: JournalRecord, rec: Reconciliation) -> CoordinatorResult:
        key = seen.offer_id
        try:
            now = self._journal.read(key)
        except JournalError as exc:
            return CoordinatorResult(key, CoordinatorOutcome.JOURNAL_WRITE_FAILED, exc.code)
        if isinstance(rec.evidence, CompletionObserved):
            return self._complete(seen, now, rec)
        if (
            now is not None
            and now.revision == seen.revision
            and isinstance(rec.evidence, RunningObserved)
            and running_ack_eligible(
                now, rec.receipt, rec.inspection or Inspection.PROBE_FAILED, rec.authority
            )
        ):
            return self._running_ack(now)
        if now is None or now.revision != seen.revision:
            return CoordinatorResult(key, CoordinatorOutcome.RACED)
        if isinstance(rec.evidence, RunningObserved) and now.state is not JournalState.STARTED:
            return CoordinatorResult(key, CoordinatorOutcome.STILL_RUNNING, None, now.state)
        unknown = rec.evidence.reason if isinstance(rec.evidence, UnknownObserved) else None
        return CoordinatorResult(key, CoordinatorOutcome.BLOCKED, None, now.state, unknown=unknown)

    def _complete(
        self, seen: JournalRecord, now: JournalRecord | None, rec: Reconciliation
    ) -> CoordinatorResult:
        key = seen.offer_id
        planned = plan_completion(seen, now, rec.evidence, rec.submission)
        if isinstance(planned, Finish):
            return CoordinatorResult(key, CoordinatorOutcome(planned.result.value), planned.code)
        assert now is not None
        try:
            answer = self._client.complete(planned)
        except ControlPlaneUnavailable:
            return CoordinatorResult(
                key, CoordinatorOutcome.SUBMISSION_REJECTED, Code.CONTROL_PLANE_UNAVAILABLE
            )
        after = after_submission(answer.code, planned)
        if isinstance(after, Finish):
            return CoordinatorResult(key, CoordinatorOutcome(after.result.value), after.code)
        written = self._write(now, after.event)
        final = after_journal_write(written is not None, planned.attempt_id)
        if isinstance(final, Finish):
            return CoordinatorResult(key, CoordinatorOutcome(final.result.value), final.code)
        return self._cleanup(key, final, planned)

    def _cleanup(
        self, key: str, delete: DeleteReceipt, planned: CompletionSubmission
    ) -> CoordinatorResult:
        try:
            ok = self._receipts.delete(delete.attempt_id)
        except Exception:
            ok = False
        done = after_receipt_delete(ok)
        return CoordinatorResult(
            key,
            CoordinatorOutcome(done.result.value),
            None,
            JournalState.COMPLETION_ACKNOWLEDGED,
            planned.callback_sequence,
            planned.exit_code,
        )

    def _running_ack(self, record: JournalRecord) -> CoordinatorResult:
        key = record.offer_id
        handle, started = record.executor_handle, record.executor_started_at_ms
        assert handle is not None  # §3.3: required in `started`
        assert started is not None
        try:
            answer = self._client.acknowledge_running(record.offer.lease, handle, started)
        except ControlPlaneUnavailable:
            return CoordinatorResult(
                key, CoordinatorOutcome.WAITING_FOR_AUTHORITY, Code.CONTROL_PLANE_UNAVAILABLE
            )
        write = after_running_ack(answer.code)
        if write is None:  # a version mismatch: wait for new authority, no retry loop
            return CoordinatorResult(
                key, CoordinatorOutcome.WAITING_FOR_AUTHORITY, answer.code, record.state
            )
        written = self._write(record, write.event)
        if written is None:
            return CoordinatorResult(key, CoordinatorOutcome.JOURNAL_WRITE_FAILED)
        outcome = (
            CoordinatorOutcome.RUNNING_ACKNOWLEDGED
            if written.state is JournalState.RUNNING_ACKNOWLEDGED
            else CoordinatorOutcome.CONTROL_PLANE_TERMINAL
        )
        return CoordinatorResult(key, outcome, answer.code, written.state)

    def _write(self, record: JournalRecord, event: JournalEvent) -> JournalRecord | None:
        return write_step(self._journal, record, event, self._clock())


def write_step(
    journal: JournalStore, record: JournalRecord, event: JournalEvent, clock_ms: int
) -> JournalRecord | None:
    """One §3.6 step with the revision CAS; `None` when it was refused or the write failed
    (the record is then whatever is durable: re-read before assuming anything)."""
    step = journal_step(record, event, max(clock_ms, record.updated_at_ms))
    if isinstance(step, Replayed):
        return record
    if isinstance(step, Rejected) or step.record is None:
        return None
    try:
        journal.replace(step.record, record.revision)
    except JournalError:
        return None
    return step.record


# -- the startup supervisor ------------------------------------------------------------------------
#: Item outcomes after which the record needs no further startup action.
SETTLED_OUTCOMES = frozenset({"cleaned", "completed", "nothing_to_do"})


@dataclass(frozen=True, slots=True)
class SupervisorItem:
    offer_id: str
    action: RecoveryAction
    outcome: str
    code: Code | None = None

    @property
    def settled(self) -> bool:
        return self.outcome in SETTLED_OUTCOMES


@dataclass(frozen=True, slots=True)
class SupervisorResult:
    """§3.13: `status` is `ready` or `reconciliation_required`; `refused` carries
    `RECOVERY_ACTION_BUDGET_EXHAUSTED` when the plan was over budget (nothing was done)."""

    status: Code
    items: tuple[SupervisorItem, ...] = ()
    refused: Code | None = None


CleanReceipt = Callable[[str], tuple[bool, Code | None]]


class StartupSupervisor:
    """§3.13 (module docstring). `clean_receipt(offer_id) -> (settled, code)` is the
    `settled_completion` action (idempotent receipt cleanup of a `completion_acknowledged`
    record only, CAD-15)."""

    def __init__(
        self,
        journal: JournalStore,
        reconciler: Reconciler,
        coordinator: Coordinator,
        clean_receipt: CleanReceipt,
        *,
        runtime: Callable[[], WorkerSession],
        clock: Callable[[], int],
        budget: int = 64,
        view: Callable[[JournalRecord], ControlPlaneView | None] | None = None,
    ) -> None:
        self._journal = journal
        self._reconciler = reconciler
        self._coordinator = coordinator
        self._clean_receipt = clean_receipt
        self._runtime = runtime
        self._clock = clock
        self._budget = budget
        self._view = view

    def __repr__(self) -> str:
        return f"StartupSupervisor(budget={self._budget})"

    def run(self, audit: AuditResult, observed_at_ms: int | None = None) -> SupervisorResult:
        plan = plan_recovery(audit, self._budget)
        if isinstance(plan, Rejected):
            return SupervisorResult(Code.RECONCILIATION_REQUIRED, (), plan.code)
        now = self._clock() if observed_at_ms is None else observed_at_ms
        items: list[SupervisorItem] = []
        for planned in plan:
            offer_id = planned.entry.offer_id
            try:
                if planned.action is RecoveryAction.CLEAN_RECEIPT:
                    settled, code = self._clean_receipt(offer_id)
                    items.append(
                        SupervisorItem(
                            offer_id, planned.action, "cleaned" if settled else "failed", code
                        )
                    )
                    continue
                result = self.reconcile_one(offer_id, now)
                items.append(
                    SupervisorItem(offer_id, planned.action, result.outcome.value, result.code)
                )
            except Exception:  # one failing item never stops the batch; no exception text
                items.append(SupervisorItem(offer_id, planned.action, "failed", Code.BLOCKED))
        return SupervisorResult(overall([item.settled for item in items]), tuple(items))

    def reconcile_one(self, offer_id: str, observed_at_ms: int) -> CoordinatorResult:
        """Reconciler then Coordinator for one record. A record found in `launching` (no
        operation of this process is in flight at startup) is first written
        `recovery_required(launch_outcome_unknown)` (§3.7, INBOX-05); the Executor is never
        called."""
        try:
            record = self._journal.read(offer_id)
        except JournalError as exc:
            return CoordinatorResult(offer_id, CoordinatorOutcome.BLOCKED, exc.code)
        if record is None:
            return CoordinatorResult(offer_id, CoordinatorOutcome.RACED)
        if record.state is JournalState.LAUNCHING:
            written = write_step(self._journal, record, LaunchOutcomeUnknown(), observed_at_ms)
            if written is None:
                return CoordinatorResult(offer_id, CoordinatorOutcome.JOURNAL_WRITE_FAILED)
            record = written
        if record.state in (
            JournalState.COMPLETION_ACKNOWLEDGED,
            JournalState.START_FAILURE_ACKNOWLEDGED,
        ):
            return CoordinatorResult(offer_id, CoordinatorOutcome.NOTHING_TO_DO)
        view = None if self._view is None else self._view(record)
        reconciliation = self._reconciler.reconcile(record, observed_at_ms, self._runtime(), view)
        return self._coordinator.recover(record, reconciliation)
