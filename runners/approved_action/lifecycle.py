"""The Approved Action runtime lifecycle: one timer around the supervisor's cycle (SPEC §5.5,
§0.4 L-1..L-9; ADR-0036 §4; AA-10..AA-14).

It is the project's one lifecycle core (`runners.lifecycle.CadenceLifecycle`, whose every
decision is the kernel's `CADENCE_TABLE`) around an `ApprovedActionRuntimeSupervisor`, so it
implements L-1..L-9 exactly as every other lifecycle: inert after construction (no timer, thread
or lock taken), one timer and one cycle in flight at most, a daemon timer thread that does not
hold the process, the next timer only `interval` after the cycle settles, `stop()` cancels the
timer at once and waits at most the stop timeout, callback errors are reported and swallowed,
no hot loop after a failed cycle.

States [decision]: §5.5 names them `inert`, `scheduled`, `cycling`, `stopping`, `stopped`; the
core's `CadenceState` calls them `inert`, `waiting`, `running` (and `manual`: a `run_once()` cycle
before `start()`), `stopping`, `stopped`. `state` reports the §5.5 name (the kernel's
`STATE_OF`), `cadence_state` the core's.

Default unreachable (§5.5, D-5, AA-15): nothing in the applications imports this module; a
caller opts in by building it (`for_profile`) and calling `start()`.
"""

from __future__ import annotations

from collections.abc import Callable

from kernel.approved_action import (
    STATE_OF,
    ApprovedActionConfig,
    ApprovedActionState,
    CycleSummary,
    local_primary_resource_policy,
)
from kernel.specs import CadenceRefused, CadenceState, CadenceStep, CadenceTrigger
from runners.approved_action.supervisor import (
    ApprovedActionRuntimeSupervisor,
    DispatchPort,
    RecoveryPort,
)
from runners.lifecycle import (
    CadenceLifecycle,
    CycleReport,
    CycleResult,
    LifecycleIncident,
    Scheduler,
    StopResult,
)

__all__ = ["LIFECYCLE_NAME", "ApprovedActionRuntimeLifecycle"]

LIFECYCLE_NAME = "approved_action"

Trace = Callable[[CadenceState, CadenceTrigger, CadenceStep | CadenceRefused], None]


class ApprovedActionRuntimeLifecycle:
    """`start()`, `stop()`, `run_once()` of the lifecycle core around the supervisor."""

    def __init__(
        self,
        supervisor: ApprovedActionRuntimeSupervisor,
        config: ApprovedActionConfig,
        *,
        scheduler: Scheduler | None = None,
        on_cycle: Callable[[CycleReport[CycleSummary]], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
        trace: Trace | None = None,
    ) -> None:
        if type(config) is not ApprovedActionConfig:
            raise TypeError("config must be an ApprovedActionConfig (approved_action_config)")
        if supervisor.config != config:
            # One configuration for both: the supervisor's phase budgets and this cadence.
            raise ValueError("the supervisor was built with another configuration")
        self.supervisor = supervisor
        self.config = config
        self.core: CadenceLifecycle[CycleSummary] = CadenceLifecycle(
            LIFECYCLE_NAME,
            supervisor,
            config.cadence,
            scheduler=scheduler,
            on_cycle=on_cycle,
            report=report,
            trace=trace,
        )

    @classmethod
    def for_profile(
        cls,
        profile: str,
        recovery: RecoveryPort,
        dispatch: DispatchPort,
        *,
        scheduler: Scheduler | None = None,
        on_cycle: Callable[[CycleReport[CycleSummary]], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
        trace: Trace | None = None,
    ) -> ApprovedActionRuntimeLifecycle:
        """The §5.4 policy of `profile`, asked first: `cluster`, `worker` or an unknown name
        raise `ProfileNotSupported` before anything is built (AA-09)."""
        config = local_primary_resource_policy(profile).to_config()
        supervisor = ApprovedActionRuntimeSupervisor(recovery, dispatch, config)
        return cls(
            supervisor, config, scheduler=scheduler, on_cycle=on_cycle, report=report, trace=trace
        )

    def __repr__(self) -> str:
        return f"ApprovedActionRuntimeLifecycle(state={self.state.value})"

    @property
    def state(self) -> ApprovedActionState:
        """The §5.5 state name."""
        return STATE_OF[self.core.state]

    @property
    def cadence_state(self) -> CadenceState:
        """The lifecycle core's state."""
        return self.core.state

    @property
    def cycles(self) -> int:
        """Cycles begun so far."""
        return self.core.cycles

    def start(self) -> CadenceRefused | None:
        """L-1: arm the one timer; a second call is a no-op; refused after `stop()`."""
        return self.core.start()

    def run_once(self) -> CycleResult[CycleSummary] | CadenceRefused:
        """L-5: one cycle now, or the in-flight cycle's result."""
        return self.core.run_once()

    def stop(self) -> StopResult:
        """L-6: cancel the timer, wait at most the stop timeout; concurrent calls share one
        result."""
        return self.core.stop()
