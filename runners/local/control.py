"""The local execution-control cycle (SPEC §6.2 O-2, ADR-0380 §3; CAD-02, CAD-03, CAD-05,
CAD-15 on the local path; §1.7 L3/L4/L5, §1.9, Appendix E-1, D-1).

The steps a cycle runs, and their order, are the kernel's (`local_control_phases` over
`LOCAL_CONTROL_CYCLE`: lost retry is skipped while a stop drains, cleanup runs on slow cycles
only). Each step is port calls and `execute`; what a command does is the kernel's outcome, which
this module records in the cycle report and never branches on:

1. completions: every Attempt the launcher reports finished (its process ended, or, adopted, its
   receipt exists) is offered to L3 with its receipt (the kernel authenticates it); an Attempt
   whose process ended without a receipt is offered again on later cycles for the publish grace
   (B-52), then left to the next startup recovery (§2.1: only recovery may say `lost`) and
   reported;
2. cancellation and deadline control: Runs whose task deadline passed get a `timeout` intent
   (B-06); then live local executions under an intent are stopped through the recorded handle
   and the conclusive stop recorded (L4/L5); a stop that is not conclusive writes nothing and is
   tried next cycle (§1.7). Then Runs with an intent and no live execution (including E-1's
   revoked remote Attempts) converge (`converge_cancel`);
3. one lost-retry page of the profile's size (local: a failing candidate is skipped, not fatal);
4. slow cycles: one page of receipts whose Attempt is terminal with the same callback sequence is
   deleted (D-1, CAD-15; the kernel's `receipt_cleanup_allowed`), resuming after the last name;
   then one page of Attempt logs (`LOG_CLEANUP_PAGE`), each deleted when the kernel's
   `log_cleanup_allowed` says its Attempt is terminal and ended at least the log retention ago
   (CAD-02, D-1, decision LR-13), resuming after the last name the same way.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from kernel import (
    Actor,
    CancelReason,
    ConvergeCancel,
    LostRetryPageResult,
    RecordLocalStop,
    RequestCancel,
    log_cleanup_allowed,
    receipt_cleanup_allowed,
)
from kernel.specs import (
    LOG_CLEANUP_PAGE,
    LOG_RETENTION_DEFAULT_MS,
    LOG_RETENTION_MS,
    LocalControlPhase,
    ProfileBudget,
    check_in_range,
    local_control_phases,
)
from kernel.workflow import local_completion_command
from runners.edge.store import EdgeStore
from runners.engine import execute, execute_any
from runners.lifecycle import CycleContext
from runners.local.launcher import LocalLauncher
from runners.local.reads import (
    attempt_finish,
    attempt_sequence,
    attempt_step_run,
    deadline_candidates,
    local_stop_candidates,
)
from runners.passes import lost_retry_page
from runners.worker.posix.receipts import ReceiptStoreError

__all__ = ["ControlReport", "LocalExecutionControl", "new_attempt_id"]

#: One page of receipts examined by a slow cycle's cleanup (O-2 step 4).
RECEIPT_CLEANUP_PAGE: Final = 16


def new_attempt_id(_run_id: str) -> str:
    """A fresh portable Attempt id for a lost-retry requeue (ids are inputs to the kernel)."""
    return f"att-{secrets.token_hex(16)}"


@dataclass(slots=True)
class ControlReport:
    """What one cycle did: the phases it ran and, per command, `(kind, code)` of its outcome."""

    ordinal: int
    phases: tuple[LocalControlPhase, ...]
    completions: list[tuple[str, str, str]] = field(default_factory=list)
    deadlines: list[tuple[str, str, str]] = field(default_factory=list)
    stops: list[tuple[str, str, str]] = field(default_factory=list)
    convergences: list[tuple[str, str, str]] = field(default_factory=list)
    lost_retry: LostRetryPageResult | None = None
    receipts_deleted: int = 0
    logs_deleted: int = 0
    without_receipt: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class LocalExecutionControl:
    """The cycle of `LocalExecutionControlLifecycle` (O-2). Not thread-safe on its own: its
    lifecycle runs at most one cycle at a time (L-4)."""

    def __init__(
        self,
        store: EdgeStore,
        launcher: LocalLauncher,
        budget: ProfileBudget,
        clock: Callable[[], int],
        *,
        log_retention_ms: int = LOG_RETENTION_DEFAULT_MS,
    ) -> None:
        assert budget.execution_control_slow_cleanup is not None, "a local profile"
        assert budget.execution_control_lost_retry_per_cycle is not None, "a local profile"
        assert budget.scheduler_cancellation is not None, "a local profile"
        self._store = store
        self._launcher = launcher
        self._budget = budget
        self._every_nth = budget.execution_control_slow_cleanup.every_nth_cycle
        self._lost_retry_limit = budget.execution_control_lost_retry_per_cycle
        # [decision LR-5] The cancellation step's pages use the profile's cancellation paging row.
        self._cancel_paging = budget.scheduler_cancellation
        self._clock = clock
        self._first_missing: dict[str, int] = {}  # attempt -> when its receipt was first missing
        self._cleanup_after: str | None = None
        # [decision LR-13] Log cleanup: the retention the kernel's rule is asked with (1 min..365 d,
        # refused at construction like any budget), and the cursor of its pages.
        self._log_retention_ms = check_in_range(
            log_retention_ms, LOG_RETENTION_MS, field="log_retention_ms"
        )
        self._log_cleanup_after: str | None = None

    def __repr__(self) -> str:
        return f"LocalExecutionControl(profile={self._budget.profile.value})"

    def __call__(self, context: CycleContext) -> ControlReport:
        phases = local_control_phases(
            context.ordinal, draining=context.draining, every_nth_cycle=self._every_nth
        )
        report = ControlReport(context.ordinal, phases)
        steps: dict[LocalControlPhase, Callable[[ControlReport], None]] = {
            LocalControlPhase.COMPLETIONS: self._completions,
            LocalControlPhase.CANCELLATION: self._cancellation,
            LocalControlPhase.LOST_RETRY: self._lost_retry,
            LocalControlPhase.CLEANUP: self._cleanup,
        }
        for phase in phases:
            steps[phase](report)
        return report

    # -- (1) completions ---------------------------------------------------------------------------
    def _completions(self, report: ControlReport) -> None:
        grace_ms = self._budget.receipt_publish_grace_ms or 0
        for run_id, attempt_id in self._launcher.finished():
            try:
                receipt = self._launcher.receipt(attempt_id)
            except ReceiptStoreError as exc:
                report.errors.append(f"receipt {attempt_id}: {type(exc).__name__}")
                continue  # unreadable is never absent: try again next cycle
            now = self._clock()
            if receipt is None:
                first = self._first_missing.setdefault(attempt_id, now)
                if now - first >= grace_ms:
                    # [decision LR-4] Ended without a receipt: only recovery may decide `lost`.
                    self._launcher.forget(attempt_id)
                    self._first_missing.pop(attempt_id, None)
                    report.without_receipt.append(attempt_id)
                continue
            # A Task Attempt's receipt completes its StepRun, never the parent (§4.4, I-W3):
            # the kernel picks the command from the Attempt's row.
            _, step_run_id = attempt_step_run(self._store, attempt_id)
            command = local_completion_command(run_id, attempt_id, step_run_id, receipt)
            outcome = execute_any(self._store, command, self._clock)
            # Applied, replayed or refused, the kernel has answered this receipt: the Attempt is
            # settled or left for startup recovery, never offered the same receipt again.
            self._launcher.forget(attempt_id)
            self._first_missing.pop(attempt_id, None)
            report.completions.append((attempt_id, outcome.kind.value, outcome.code.value))

    # -- (2) cancellation --------------------------------------------------------------------------
    def _cancellation(self, report: ControlReport) -> None:
        for _ in range(self._cancel_paging.pages):
            now = self._clock()
            due = deadline_candidates(self._store, now, self._cancel_paging.page_size)
            for candidate in due.items:
                intent = RequestCancel(candidate.run_id, CancelReason.TIMEOUT, Actor.SYSTEM)
                outcome = execute(self._store, intent, now)
                report.deadlines.append((candidate.run_id, outcome.kind.value, outcome.code.value))
            if not due.has_more:
                break
        for _ in range(self._cancel_paging.pages):
            page = local_stop_candidates(self._store, self._cancel_paging.page_size)
            for candidate in page.items:
                assert candidate.attempt_id is not None
                with self._store.transaction() as tx:
                    aggregate = tx.load_run(candidate.run_id)
                attempt = None if aggregate is None else aggregate.attempt(candidate.attempt_id)
                if aggregate is None or attempt is None or attempt.executor_handle is None:
                    continue  # moved on since the page was read
                reason = aggregate.run.cancel_reason
                assert reason is not None  # the source selects Runs with an intent (I-2)
                result = self._launcher.stop(attempt.executor_handle, reason)
                if result is None:
                    report.errors.append(f"stop {candidate.attempt_id}: not conclusive")
                    continue  # §1.7: nothing is written; the next cycle tries again
                command = RecordLocalStop(candidate.run_id, candidate.attempt_id, result)
                outcome = execute(self._store, command, self._clock())
                report.stops.append((candidate.attempt_id, outcome.kind.value, outcome.code.value))
            if not page.has_more:
                break
        for _ in range(self._cancel_paging.pages):
            converge = self._store.cancel_convergence_candidates(self._cancel_paging.page_size)
            for candidate in converge.items:
                outcome = execute(self._store, ConvergeCancel(candidate.run_id), self._clock())
                report.convergences.append(
                    (candidate.run_id, outcome.kind.value, outcome.code.value)
                )
            if not converge.has_more:
                break

    # -- (3) lost retry ----------------------------------------------------------------------------
    def _lost_retry(self, report: ControlReport) -> None:
        result = lost_retry_page(
            self._store,
            self._store,
            self._clock(),
            self._lost_retry_limit,
            new_attempt_id,
            fail_closed=False,
        )
        report.lost_retry = result

    # -- (4) slow-cycle cleanup --------------------------------------------------------------------
    def _cleanup(self, report: ControlReport) -> None:
        names = self._launcher.receipt_ids(RECEIPT_CLEANUP_PAGE, after=self._cleanup_after)
        # The next slow cycle resumes after this page, or from the start once it was the last.
        self._cleanup_after = names[-1] if len(names) == RECEIPT_CLEANUP_PAGE else None
        for attempt_id in names:
            found = attempt_sequence(self._store, attempt_id)
            try:
                sequence = self._launcher.receipt_sequence(attempt_id)
            except ReceiptStoreError as exc:
                report.errors.append(f"receipt {attempt_id}: {type(exc).__name__}")
                continue
            if sequence is None:
                continue
            status, attempt_sequence_ = (None, None) if found is None else found
            if receipt_cleanup_allowed(status, attempt_sequence_, sequence):
                self._launcher.delete_receipt(attempt_id)
                report.receipts_deleted += 1
        self._log_cleanup(report)

    def _log_cleanup(self, report: ControlReport) -> None:
        """[decision LR-13] One page of Attempt logs; the kernel decides which may go."""
        names = self._launcher.log_ids(LOG_CLEANUP_PAGE, after=self._log_cleanup_after)
        self._log_cleanup_after = names[-1] if len(names) == LOG_CLEANUP_PAGE else None
        now = self._clock()
        for attempt_id in names:
            found = attempt_finish(self._store, attempt_id)
            status, finished_at_ms = (None, None) if found is None else found
            if not log_cleanup_allowed(status, finished_at_ms, now, self._log_retention_ms):
                continue
            try:
                self._launcher.delete_log(attempt_id)
            except (OSError, ValueError) as exc:
                report.errors.append(f"log {attempt_id}: {type(exc).__name__}")
                continue  # the next pass over the logs tries again
            report.logs_deleted += 1
