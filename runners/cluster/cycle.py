"""The cluster scheduler cycle coordinator (SPEC §6.2 O-5, ADR-0232 §4; CAD-06, CAD-07, REC-13).

`ClusterCycle.run_once()` calls the five phases in the order of `kernel.specs.cycles`
(`CLUSTER_CYCLE`). A phase that raises ends the cycle there: after a failed runtime recovery
or lost retry (`RUNTIME_RECOVERY_UNAVAILABLE`, `LOST_RETRY_UNAVAILABLE`) nothing is scheduled,
no frontier advances and no Task Attempt is admitted in that cycle; the next cadence starts
over. The result names the phases that ran and the stable code of the failure, never the
exception text (S-1).

The coordinator owns no timer, pool, connection, cursor or per-Run state (CAD-07): it holds
its phase callables and, only while a cycle runs, the in-flight cycle that an overlapping
`run_once()` joins (re-entry is coalesced: one execution, one shared result). The cadence
belongs to the lifecycle that drives it; the database belongs to the phases' runtime.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kernel.specs import CLUSTER_CYCLE, CLUSTER_GATING, ClusterPhase
from runners.cluster.runtime import ClusterRuntime
from runners.passes import EvidencePort

#: The code of a failure that carries none of its own.
PHASE_FAILED = "PHASE_FAILED"

Phase = Callable[[], object]


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did: the phases that completed, in order, with what each returned, and
    the phase that failed (if any) with its stable code."""

    completed: tuple[tuple[ClusterPhase, object], ...]
    failed: ClusterPhase | None = None
    code: str | None = None

    @property
    def phases(self) -> tuple[ClusterPhase, ...]:
        return tuple(phase for phase, _ in self.completed)

    @property
    def scheduled(self) -> bool:
        """Whether any scheduling phase (3-5) ran."""
        return any(phase not in CLUSTER_GATING for phase in self.phases)


@dataclass(slots=True)
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    result: CycleResult | None = None


class ClusterCycle:
    """O-5 over five phase callables; `run_once()` is safe to call from overlapping callers."""

    __slots__ = ("_flight", "_guard", "_phases")

    def __init__(self, phases: Mapping[ClusterPhase, Phase]) -> None:
        missing = [p.value for p in CLUSTER_CYCLE if p not in phases]
        extra = [str(p) for p in phases if p not in CLUSTER_CYCLE]
        if missing or extra:
            raise ValueError(f"cluster cycle phases: missing {missing}, unknown {extra}")
        self._phases: Mapping[ClusterPhase, Phase] = MappingProxyType(dict(phases))
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
        completed: list[tuple[ClusterPhase, object]] = []
        for phase in CLUSTER_CYCLE:
            try:
                completed.append((phase, self._phases[phase]()))
            except Exception as exc:  # fail closed: the cycle ends here, the cadence retries
                code = getattr(exc, "code", None)
                return CycleResult(tuple(completed), phase, str(code) if code else PHASE_FAILED)
        return CycleResult(tuple(completed))


def cluster_cycle(
    runtime: ClusterRuntime,
    *,
    evidence: EvidencePort,
    new_attempt_id: Callable[[str], str],
    trigger_schedule: Phase,
    workflow_frontier: Phase,
    task_admission: Phase,
    page_limit: int = 16,
) -> ClusterCycle:
    """The cluster bootstrap's cycle: one runtime recovery page and one lost-retry page of the
    runtime (database time, fail closed), then the scheduler's own three phases."""
    return ClusterCycle(
        {
            ClusterPhase.RUNTIME_RECOVERY: lambda: runtime.runtime_recovery_page(
                page_limit, evidence
            ),
            ClusterPhase.LOST_RETRY: lambda: runtime.lost_retry_page(page_limit, new_attempt_id),
            ClusterPhase.TRIGGER_SCHEDULE: trigger_schedule,
            ClusterPhase.WORKFLOW_FRONTIER: workflow_frontier,
            ClusterPhase.TASK_ADMISSION: task_admission,
        }
    )
