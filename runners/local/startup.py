"""Local startup recovery (SPEC §2.2, §2.1; D-11, D-1, O-1; CAD-01, REC-07, REC-12).

Runs once, before the first execution-control cycle, on the application's one connection:
1. count the candidates (at most `total + 1`, pages of 64) before any write; more than the
   per-startup total refuses startup with `STARTUP_RECOVERY_BUDGET_EXHAUSTED` and nothing written
   (D-11, the kernel's `startup_budget_exhausted`);
2. resolve each candidate (a local Attempt `starting`/`running`) in its own transaction with
   exactly one Evidence value, collected in the kernel's order (`collect_evidence`: the receipt
   first, authenticated by the kernel's `local_receipt_read`; then two inspections of the exact
   identity the kernel's `launch_identity` names: the recorded handle, else the launcher's
   journaled identity, else none, a trusted not-running report: LR-9); a `live` one is adopted
   by the launcher, which watches it for its receipt (the kernel's `watched_after_startup`); an
   `unknown` one is left as it is and reported (fail closed; the next startup re-examines it);
3. fail the orphaned `created` Runs from before this process started (B-30).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kernel import (
    Attempt,
    Code,
    Evidence,
    FailOrphanedCreated,
    Inspection,
    ReceiptRead,
    ReceiptState,
    RecoverLocalStartup,
    collect_evidence,
    launch_identity,
    local_receipt_read,
    startup_budget_exhausted,
    watched_after_startup,
)
from kernel.specs import HARD_LIMITS, StartupRecoveryBudget
from runners.edge.store import EdgeStore
from runners.engine import execute
from runners.local.launcher import LocalLauncher
from runners.worker.posix.executor import InspectionResult
from runners.worker.posix.receipts import ReceiptStoreError

__all__ = ["StartupRecoveryExhausted", "StartupReport", "local_startup_recovery"]

#: The inspector's answers in the kernel's words (§2.1 step 2); a probe error raises and is
#: `probe_failed` (collect_evidence).
_INSPECTION: Final = {
    InspectionResult.RUNNING: Inspection.RUNNING,
    InspectionResult.EXITED: Inspection.NOT_RUNNING,
    InspectionResult.INVALID: Inspection.HANDLE_MISSING,
    InspectionResult.IDENTITY_MISMATCH: Inspection.IDENTITY_MISMATCH,
    InspectionResult.UNSUPPORTED: Inspection.UNSUPPORTED,
}


class StartupRecoveryExhausted(Exception):
    """D-11: more candidates than one startup may resolve; nothing was written."""

    code = Code.STARTUP_RECOVERY_BUDGET_EXHAUSTED

    def __init__(self, counted: int) -> None:
        super().__init__(f"{self.code}: more than {counted - 1} startup candidates")
        self.counted = counted


@dataclass(frozen=True, slots=True)
class StartupReport:
    """`(attempt_id, outcome kind, code)` per resolved candidate, the Attempts watched from now
    on (live, or awaiting their receipt), and the orphaned `created` Runs failed."""

    resolved: tuple[tuple[str, str, str], ...]
    adopted: tuple[str, ...]
    orphaned: int

    @property
    def unresolved(self) -> int:
        """Candidates left as they were (unknown evidence, or raced): reported, not written."""
        return sum(1 for _a, kind, _c in self.resolved if kind in ("rejected", "raced"))


def _count(store: EdgeStore, total: int) -> int:
    counted = 0
    after: tuple[str] | None = None
    page_size = HARD_LIMITS.page_size.maximum
    while True:  # at most (total + 1) / 64 + 1 reads: it stops once past the total
        page = store.local_startup_candidates(page_size, after)
        counted += len(page.items)
        if startup_budget_exhausted(counted, total) or not page.has_more:
            return counted
        after = page.cursor


def launch_evidence(launcher: LocalLauncher, attempt: Attempt) -> Evidence:
    """§2.1 evidence for a started local Attempt (ordinary or Task): the receipt first, then
    two inspections of the persisted identity."""

    def read() -> ReceiptRead:
        try:
            receipt = launcher.receipt(attempt.attempt_id)
        except ReceiptStoreError:
            return ReceiptRead(ReceiptState.READ_FAILED)
        return local_receipt_read(attempt, receipt)

    def inspect() -> Inspection:
        target = launch_identity(attempt, launcher.journaled_identity(attempt.attempt_id))
        if isinstance(target, Inspection):
            return target
        return _INSPECTION[launcher.inspect(target)]

    return collect_evidence(read, inspect)


def adoptable(launcher: LocalLauncher, attempt: Attempt) -> str | None:
    """The identity execution control watches an adopted (live) Attempt by."""
    handle = launch_identity(attempt, launcher.journaled_identity(attempt.attempt_id))
    return handle if isinstance(handle, str) else None


def local_startup_recovery(
    store: EdgeStore,
    launcher: LocalLauncher,
    budget: StartupRecoveryBudget,
    clock: Callable[[], int],
    process_started_at_ms: int,
) -> StartupReport:
    """§2.2 once (module docstring). :raises StartupRecoveryExhausted: D-11, before any write."""
    counted = _count(store, budget.total_per_startup)
    if startup_budget_exhausted(counted, budget.total_per_startup):
        raise StartupRecoveryExhausted(counted)
    resolved: list[tuple[str, str, str]] = []
    live: list[str] = []
    after: tuple[str] | None = None
    for _ in range(-(-max(counted, 1) // budget.page_size)):  # the pages the count found
        page = store.local_startup_candidates(budget.page_size, after)
        for candidate in page.items:
            assert candidate.attempt_id is not None
            with store.transaction() as tx:
                aggregate = tx.load_run(candidate.run_id)
            attempt = None if aggregate is None else aggregate.attempt(candidate.attempt_id)
            if attempt is None:
                continue  # gone since the page was read: nothing to resolve
            command = RecoverLocalStartup(
                candidate.run_id, candidate.attempt_id, launch_evidence(launcher, attempt)
            )
            outcome = execute(store, command, clock())
            resolved.append((candidate.attempt_id, outcome.kind.value, outcome.code.value))
            if watched_after_startup(outcome):
                launcher.adopt(candidate.run_id, candidate.attempt_id, adoptable(launcher, attempt))
                live.append(candidate.attempt_id)
        if not page.has_more:
            break
        after = page.cursor
    orphaned = 0
    orphan_after: tuple[int, str] | None = None
    for _ in range(-(-budget.total_per_startup // budget.page_size)):
        orphans = store.orphaned_created_candidates(
            process_started_at_ms, budget.page_size, orphan_after
        )
        for orphan in orphans.items:
            execute(store, FailOrphanedCreated(orphan.run_id, process_started_at_ms), clock())
            orphaned += 1
        if not orphans.has_more:
            break
        orphan_after = orphans.cursor
    return StartupReport(tuple(resolved), tuple(live), orphaned)
