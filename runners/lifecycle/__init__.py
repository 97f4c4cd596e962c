"""The cadence lifecycle core every timer-driven lifecycle is built on (SPEC §6.1, L-1..L-9;
CAD-04, CAD-13): the kernel's `CADENCE_TABLE` decides, `CadenceLifecycle` performs, and a
`Scheduler` (one daemon thread, or a stepped clock in tests) supplies time."""

from __future__ import annotations

from runners.lifecycle.cadence import (
    CadenceLifecycle,
    CycleContext,
    CycleFailed,
    CycleReport,
    CycleResult,
    CycleSucceeded,
    LifecycleIncident,
    StopResult,
)
from runners.lifecycle.scheduling import DaemonScheduler, Scheduler, SteppedScheduler

__all__ = [
    "CadenceLifecycle",
    "CycleContext",
    "CycleFailed",
    "CycleReport",
    "CycleResult",
    "CycleSucceeded",
    "DaemonScheduler",
    "LifecycleIncident",
    "Scheduler",
    "SteppedScheduler",
    "StopResult",
]
