"""The Approved Action runtime supervisor: one cycle = the recovery phase, then the dispatch phase
(SPEC §5.2, §5.3, Appendix D-4; ADR-0036 §1-§2; AA-01, AA-02, AA-04..AA-07).

It orchestrates two ports and decides nothing itself: every paging and cycle rule is the
kernel's (`kernel.approved_action`: `phase_step`, `after_recovery`, `resume_cursors`); this
class calls the ports, feeds each page to `phase_step`, and keeps the in-memory resume cursors
(never persisted: after a restart both start empty).

- AA-01: the recovery phase runs first; if a recovery port call raises, or the kernel says the
  recovery phase fails the cycle (D-4: `cursor_stalled`), the dispatch port is called 0 times.
- AA-02: the two phases never overlap: they run one after the other on the caller's thread,
  and a lock makes two callers of `run_cycle` take turns.
- AA-06: a failed cycle (a port raised, in either phase, or D-4) leaves both resume cursors as
  they were before it.
- How a failure surfaces: a port's exception propagates unchanged, so the lifecycle core reports
  it by type name only (`CycleFailed`, S-1); a D-4 failure raises `ApprovedActionCycleFailed`
  carrying the kernel's `FailedCycle` (a fixed code, no text). `last_failure` keeps the last
  `FailedCycle` (`PORT_FAILED` for a port that raised) for diagnostics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from kernel.approved_action import (
    ActionCursor,
    ApprovedActionConfig,
    CycleFailureCode,
    CycleSummary,
    CycleVerdict,
    DispatchCounters,
    DispatchPage,
    FailedCycle,
    Phase,
    PhaseBudget,
    PhaseEnded,
    PhasePage,
    PhaseState,
    RecoveryCounters,
    RecoveryPage,
    ResumeCursors,
    after_recovery,
    phase_start,
    phase_step,
    resume_cursors,
)
from runners.lifecycle import CycleContext

C = TypeVar("C", RecoveryCounters, DispatchCounters)

__all__ = [
    "ApprovedActionCycleFailed",
    "ApprovedActionRuntimeSupervisor",
    "DispatchPort",
    "RecoveryPort",
]


class RecoveryPort(Protocol):
    """The Approved Action recovery reconciler, one bounded page per call (§5.1)."""

    def reconcile_batch(self, cursor: ActionCursor | None, page_size: int) -> RecoveryPage: ...


class DispatchPort(Protocol):
    """The Approved Action dispatcher, one bounded page per call (§5.1)."""

    def dispatch_batch(self, cursor: ActionCursor | None, page_size: int) -> DispatchPage: ...


class ApprovedActionCycleFailed(RuntimeError):
    """The kernel failed the cycle (D-4: the recovery cursor stalled). `failure` holds the
    fixed code; the message is fixed text (S-1)."""

    def __init__(self, failure: FailedCycle) -> None:
        super().__init__(f"approved action cycle failed in {failure.phase}: {failure.code}")
        self.failure = failure


class ApprovedActionRuntimeSupervisor:
    """Runs one Approved Action cycle per `run_cycle()` (or per call, as a lifecycle cycle)."""

    def __init__(
        self, recovery: RecoveryPort, dispatch: DispatchPort, config: ApprovedActionConfig
    ) -> None:
        if type(config) is not ApprovedActionConfig:
            raise TypeError("config must be an ApprovedActionConfig (approved_action_config)")
        self.config = config
        self._recovery = recovery
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._cursors = ResumeCursors()
        self._phase: Phase | None = None
        self.last_failure: FailedCycle | None = None

    def __repr__(self) -> str:
        return f"ApprovedActionRuntimeSupervisor(cursors={self._cursors!r})"

    @property
    def cursors(self) -> ResumeCursors:
        """The in-memory resume cursors (§5.3)."""
        return self._cursors

    @property
    def phase(self) -> Phase | None:
        """The phase in flight, or None between cycles (diagnostics and tests)."""
        return self._phase

    def __call__(self, context: CycleContext) -> CycleSummary:
        """The lifecycle's cycle function."""
        return self.run_cycle()

    def run_cycle(self) -> CycleSummary:
        """One cycle: recovery, then dispatch (AA-01, AA-02).

        :raises ApprovedActionCycleFailed: D-4 (the recovery phase stalled).
        :raises Exception: whatever a port raised, unchanged (the cycle failed).
        """
        with self._lock:
            before = self._cursors
            try:
                recovery = self._recovery_phase(before.recovery)
                if after_recovery(recovery.summary) is CycleVerdict.FAIL_CYCLE:
                    failure = FailedCycle(
                        Phase.RECOVERY, CycleFailureCode.CURSOR_STALLED, recovery.summary
                    )
                    self.last_failure = failure
                    raise ApprovedActionCycleFailed(failure)
                dispatch = self._dispatch_phase(before.dispatch)
            except ApprovedActionCycleFailed:
                self._cursors = resume_cursors(before, None, None, cycle_ok=False)
                raise
            except BaseException:
                self.last_failure = FailedCycle(
                    self._phase or Phase.RECOVERY, CycleFailureCode.PORT_FAILED
                )
                self._cursors = resume_cursors(before, None, None, cycle_ok=False)
                raise
            finally:
                self._phase = None
            self._cursors = resume_cursors(before, recovery, dispatch, cycle_ok=True)
            self.last_failure = None
            return CycleSummary(recovery.summary, dispatch.summary)

    # -- the two phases: the kernel's step function decides when each ends --------------------
    def _recovery_phase(self, resume: ActionCursor | None) -> PhaseEnded[RecoveryCounters]:
        return self._page_through(
            Phase.RECOVERY,
            self.config.recovery,
            phase_start(resume, RecoveryCounters.zero()),
            self._recovery.reconcile_batch,
            RecoveryPage,
        )

    def _dispatch_phase(self, resume: ActionCursor | None) -> PhaseEnded[DispatchCounters]:
        return self._page_through(
            Phase.DISPATCH,
            self.config.dispatch,
            phase_start(resume, DispatchCounters.zero()),
            self._dispatch.dispatch_batch,
            DispatchPage,
        )

    def _page_through(
        self,
        phase: Phase,
        budget: PhaseBudget,
        state: PhaseState[C],
        fetch: Callable[[ActionCursor | None, int], PhasePage[C]],
        page_type: type,
    ) -> PhaseEnded[C]:
        """One phase: fetch pages until the kernel's step function ends it (at most
        `max_pages`, P-4)."""
        self._phase = phase
        for _ in range(budget.max_pages):
            page = fetch(state.cursor, budget.page_size)
            if type(page) is not page_type:
                raise TypeError(
                    f"the {phase} port returned something other than a {page_type.__name__}"
                )
            step = phase_step(budget, state, page)
            if isinstance(step, PhaseEnded):
                return step
            state = step.state
        raise AssertionError("the kernel ends every phase by its max_pages-th page")
