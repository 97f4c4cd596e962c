"""The cluster scheduler cycle coordinator (SPEC §6.2 O-5, ADR-0232 §4, Appendix D-6; CAD-06,
CAD-07, REC-13, E-1).

`ClusterCycle.run_once()` calls the steps of the five phases in the order of `kernel.specs.cycles`
(`CLUSTER_CYCLE`, and `CLUSTER_PHASE_STEPS` for the steps of each phase: phase 3 runs one page of
cancellation convergence before its trigger schedule, D-6, §1.9; phase 5 ends with dispatch, the
T1 lease grants of issue 17). A step that raises ends the cycle there: after a failed runtime
recovery or lost retry (`RUNTIME_RECOVERY_UNAVAILABLE`, `LOST_RETRY_UNAVAILABLE`) nothing is
converged or scheduled, no frontier advances, no Task Attempt is admitted and no lease is
granted in that cycle; the next cadence starts over. The result names the steps that
ran and the phase, step and stable code of the failure, never the exception text (S-1).

The coordinator owns no timer, pool, connection, cursor or per-Run state (CAD-07): it holds
its step callables and, only while a cycle runs, the in-flight cycle that an overlapping
`run_once()` joins (re-entry is coalesced: one execution, one shared result). The cadence
belongs to the lifecycle that drives it; the database belongs to the steps' runtime.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kernel.specs import (
    CLUSTER_CYCLE,
    CLUSTER_GATING,
    CLUSTER_PHASE_STEPS,
    ClusterPhase,
    ClusterStep,
    Profile,
    budget_for,
    cluster_cycle_steps,
)
from runners.cluster.runtime import ClusterRuntime
from runners.passes import EvidencePort

#: The code of a failure that carries none of its own.
PHASE_FAILED = "PHASE_FAILED"

Step = Callable[[], object]
Phase = Step  # the callables of the one-step phases


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did: the steps that completed, in order, with what each returned, and
    the phase and step that failed (if any) with its stable code."""

    completed: tuple[tuple[ClusterStep, object], ...]
    failed: ClusterPhase | None = None
    code: str | None = None
    failed_step: ClusterStep | None = None

    @property
    def steps(self) -> tuple[ClusterStep, ...]:
        return tuple(step for step, _ in self.completed)

    @property
    def phases(self) -> tuple[ClusterPhase, ...]:
        """The phases every step of which completed, in cycle order."""
        done = set(self.steps)
        return tuple(
            phase
            for phase in CLUSTER_CYCLE
            if all(step in done for step in CLUSTER_PHASE_STEPS[phase])
        )

    @property
    def scheduled(self) -> bool:
        """Whether any step of a scheduling phase (3-5) ran."""
        gating = {step for phase in CLUSTER_GATING for step in CLUSTER_PHASE_STEPS[phase]}
        return any(step not in gating for step in self.steps)

    def result(self, step: ClusterStep) -> object:
        """What `step` returned in this cycle (KeyError when it did not complete)."""
        return dict(self.completed)[step]


@dataclass(slots=True)
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    result: CycleResult | None = None


class ClusterCycle:
    """O-5 over one callable per step of the kernel's table; `run_once()` is safe to call from
    overlapping callers."""

    __slots__ = ("_flight", "_guard", "_phases")

    def __init__(self, steps: Mapping[ClusterStep, Step]) -> None:
        table = [step for _, step in cluster_cycle_steps()]
        missing = [s.value for s in table if s not in steps]
        extra = [str(s) for s in steps if s not in table]
        if missing or extra:
            raise ValueError(f"cluster cycle steps: missing {missing}, unknown {extra}")
        self._phases: Mapping[ClusterStep, Step] = MappingProxyType(dict(steps))
        self._guard = threading.Lock()
        self._flight: _Flight | None = None

    def run_once(self) -> CycleResult:
        with self._guard:
            flight = self._flight
            leader = flight is None
            if flight is None:
                flight = self._flight = _Flight()
        if not leader:
            flight.done.wait()
            assert flight.result is not None
            return flight.result
        try:
            flight.result = self._cycle()
        finally:
            with self._guard:
                self._flight = None
            flight.done.set()
        return flight.result

    def _cycle(self) -> CycleResult:
        completed: list[tuple[ClusterStep, object]] = []
        for phase, step in cluster_cycle_steps():  # the kernel's order, read every cycle
            try:
                completed.append((step, self._phases[step]()))
            except Exception as exc:  # fail closed: the cycle ends here, the cadence retries
                code = getattr(exc, "code", None)
                failed_code = str(code) if code else PHASE_FAILED
                return CycleResult(tuple(completed), phase, failed_code, step)
        return CycleResult(tuple(completed))


def cluster_cycle(
    runtime: ClusterRuntime,
    *,
    evidence: EvidencePort,
    new_attempt_id: Callable[[str], str],
    trigger_schedule: Step,
    workflow_frontier: Step,
    task_admission: Step,
    dispatch: Step,
    page_limit: int = 16,
    convergence_limit: int | None = None,
) -> ClusterCycle:
    """The cluster bootstrap's cycle: one runtime recovery page and one lost-retry page of the
    runtime (database time, fail closed), one cancellation-convergence page (D-6; its size the
    cluster budget's `cluster_cancellation_convergence_page_size` unless given), then the
    scheduler's own steps: trigger schedule, frontier, Task admission and dispatch (T1)."""
    if convergence_limit is None:
        convergence_limit = budget_for(Profile.CLUSTER).cluster_cancellation_convergence_page_size
    assert convergence_limit is not None, "the cluster budget has a convergence page"
    converge_limit: int = convergence_limit
    return ClusterCycle(
        {
            ClusterStep.RUNTIME_RECOVERY: lambda: runtime.runtime_recovery_page(
                page_limit, evidence
            ),
            ClusterStep.LOST_RETRY: lambda: runtime.lost_retry_page(page_limit, new_attempt_id),
            ClusterStep.CANCELLATION_CONVERGENCE: lambda: runtime.cancel_convergence_page(
                converge_limit
            ),
            ClusterStep.TRIGGER_SCHEDULE: trigger_schedule,
            ClusterStep.WORKFLOW_FRONTIER: workflow_frontier,
            ClusterStep.TASK_ADMISSION: task_admission,
            ClusterStep.DISPATCH: dispatch,
        }
    )
