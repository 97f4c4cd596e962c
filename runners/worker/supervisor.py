"""The startup recovery supervisor on the real ports (SPEC §3.13; INBOX-37, INBOX-05).

`StartupSupervisor.run(audit, observed_at_ms)`: one complete audit, the kernel's plan
(`kernel.worker.supervisor.plan_recovery`: over budget fails closed before any side effect),
then each planned action serially, one low-sensitivity code per failing item; the other items
still run. `reconcile_one(offer_id, observed_at_ms)` is one record's pass: the kernel's
`before_reconcile` (§3.7: a `launching` record with no operation in flight becomes
`recovery_required(launch_outcome_unknown)` first; a final record has nothing to do), then the
Reconciler, then the Coordinator. The Reconciler's control-plane view (§3.11) is read through
the Coordinator's client (`Coordinator.read_view`, E-3; one read per record, only for a
`completion_observed`) unless a `view` reader is injected. It owns no timer and opens no
transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernel import Rejected, WorkerSession
from kernel.specs import Code, Profile, budget_for
from kernel.worker import (
    AuditResult,
    CleanupOutcome,
    CoordinatorOutcome,
    Found,
    MarkLaunchUnknown,
    RecoveryAction,
    Written,
    before_reconcile,
    item_settled,
    overall,
    plan_recovery,
)
from runners.worker.coordinator import Coordinator, CoordinatorResult
from runners.worker.journal.engine import JournalEngine
from runners.worker.journal.port import JournalStore
from runners.worker.reconciler import ReadView, Reconciler

__all__ = ["CleanReceipt", "StartupSupervisor", "SupervisorItem", "SupervisorResult"]

#: §3.13: actions per startup (default 64, hard 1024; the §6.3 budget table).
DEFAULT_ACTION_BUDGET = budget_for(Profile.WORKER).recovery_supervisor_actions or 1


@dataclass(frozen=True, slots=True)
class SupervisorItem:
    offer_id: str
    action: RecoveryAction
    outcome: str
    code: Code | None = None

    @property
    def settled(self) -> bool:
        return item_settled(self.outcome)


@dataclass(frozen=True, slots=True)
class SupervisorResult:
    """§3.13: `status` is `ready` or `reconciliation_required`; `refused` carries
    `RECOVERY_ACTION_BUDGET_EXHAUSTED` when the plan was over budget (nothing was done)."""

    status: Code
    items: tuple[SupervisorItem, ...] = ()
    refused: Code | None = None

    @property
    def failed_items(self) -> int:
        return sum(1 for item in self.items if not item.settled)


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
        budget: int = DEFAULT_ACTION_BUDGET,
        view: ReadView | None = None,
    ) -> None:
        self._engine = JournalEngine(journal, clock)
        self._reconciler = reconciler
        self._coordinator = coordinator
        self._clean_receipt = clean_receipt
        self._runtime = runtime
        self._clock = clock
        self._budget = budget
        # §3.11's optional view, read through the control-plane client (E-3) by default.
        self._view: ReadView = coordinator.read_view if view is None else view

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
                    outcome = CleanupOutcome.CLEANED if settled else CleanupOutcome.FAILED
                    items.append(SupervisorItem(offer_id, planned.action, outcome.value, code))
                    continue
                result = self.reconcile_one(offer_id, now)
                items.append(
                    SupervisorItem(offer_id, planned.action, result.outcome.value, result.code)
                )
            except Exception:  # one failing item never stops the batch; no exception text
                failed = CleanupOutcome.FAILED.value
                items.append(SupervisorItem(offer_id, planned.action, failed, Code.BLOCKED))
        return SupervisorResult(overall([item.settled for item in items]), tuple(items))

    def reconcile_one(self, offer_id: str, observed_at_ms: int) -> CoordinatorResult:
        """Reconciler then Coordinator for one record, after the kernel's `before_reconcile`;
        the Executor is never called."""
        found = self._engine.read(offer_id)
        if not isinstance(found, Found):
            return CoordinatorResult(offer_id, CoordinatorOutcome.BLOCKED, found.code)
        record = found.record
        if record is None:
            return CoordinatorResult(offer_id, CoordinatorOutcome.RACED)
        step = before_reconcile(record)
        if isinstance(step, MarkLaunchUnknown):
            written = self._engine.write(record, step.event, clock_ms=observed_at_ms)
            if not isinstance(written, Written):
                return CoordinatorResult(offer_id, CoordinatorOutcome.JOURNAL_WRITE_FAILED)
            record = written.record
            step = before_reconcile(record)
        if isinstance(step, CoordinatorOutcome):
            return CoordinatorResult(offer_id, step)
        reconciliation = self._reconciler.reconcile(
            record, observed_at_ms, self._runtime(), read_view=self._view
        )
        return self._coordinator.recover(record, reconciliation)
