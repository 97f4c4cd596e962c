"""The cadence lifecycle as data: the L-rules of SPEC §0 (L-1..L-9) for every timer-driven
lifecycle (§6.1; CAD-04, CAD-13).

Read it like h11's `_state.py`: `CADENCE_TABLE` (a `Table`) is the whole legal surface of a
cadence lifecycle, and `CADENCE_EFFECTS` says, for each row, what the runner does on that edge, in
order. The runner (`runners/lifecycle/`) asks `cadence_step` before every change and performs the
effects it names; it holds no rule of its own. A pair that is not a row is refused with a stable
code and changes nothing, so a late timer tick after `stop()`, a tick while a cycle is in flight,
or a `run_once()` after stop can never start a cycle.

States
- `inert`: constructed, nothing scheduled (L-1). `run_once()` may drive a cycle by hand (the local
  application runs its first execution-control cycle this way before the scheduler starts, O-1).
- `manual`: a `run_once()` cycle in flight on an inert lifecycle.
- `waiting`: started; exactly one timer pending (L-2).
- `running`: started; exactly one cycle in flight and no timer (L-2, L-4).
- `stopping`: `stop()` was called while a cycle was in flight; no timer, no new cycle (L-6).
- `stopped`: terminal. A lifecycle is single-use [decision LC-1].

Why the rows say what they say
- L-4: the next timer is armed only when a cycle settles (`settled` in `running`), `interval`
  later, whether the cycle succeeded or failed (L-8: no hot retry).
- L-5: `run_once` in `manual`/`running` joins the in-flight cycle; it never starts a second one.
  `run_once` in `waiting` cancels the pending timer and runs now; the timer is re-armed when the
  cycle settles, so there is still one timer at most.
- L-6: `stop` closes the timer at once (while a cycle runs no timer is pending, so a stop then
  closes it when the cycle settles or the wait times out). With a cycle in flight it waits at
  most the stop timeout (`settled`, or `timed_out`: a cycle that settles later changes nothing);
  a second `stop` shares the first one's result.
- L-1: `start` on a started lifecycle is a no-op (a self-loop with no effect).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kernel.specs.budgets import (
    check_initial_delay_ms,
    check_interval_ms,
    check_stop_timeout_ms,
)
from kernel.specs.table import Table

__all__ = [
    "CADENCE_EFFECTS",
    "CADENCE_TABLE",
    "CYCLE_STATES",
    "CadenceCode",
    "CadenceConfig",
    "CadenceEffect",
    "CadenceRefused",
    "CadenceState",
    "CadenceStep",
    "CadenceTrigger",
    "cadence_config",
    "cadence_step",
]


class CadenceState(enum.StrEnum):
    """Where a cadence lifecycle is (L-1, L-2, L-6)."""

    INERT = "inert"
    MANUAL = "manual"
    WAITING = "waiting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class CadenceTrigger(enum.StrEnum):
    """What happened to it."""

    START = "start"  # start()
    TICK = "tick"  # the pending timer fired
    RUN_ONCE = "run_once"  # run_once()
    SETTLED = "settled"  # the in-flight cycle returned or raised
    STOP = "stop"  # stop()
    TIMED_OUT = "timed_out"  # stop() waited its stop timeout and the cycle is still in flight


class CadenceEffect(enum.StrEnum):
    """What the runner does on an edge, in the order a row lists them."""

    ARM_INITIAL = "arm_initial"  # arm the one timer, `initial_delay` from now
    ARM_NEXT = "arm_next"  # arm the one timer, `interval` from now (L-4)
    CANCEL_TIMER = "cancel_timer"  # cancel the pending timer; it may be armed again (L-2)
    CLOSE_TIMER = "close_timer"  # cancel it for good: nothing is armed again, its thread ends (L-6)
    BEGIN_CYCLE = "begin_cycle"  # start one cycle; callers wait for its one result (L-5)
    JOIN_CYCLE = "join_cycle"  # wait for the in-flight cycle's result (L-5)
    AWAIT_DRAIN = "await_drain"  # wait at most `stop_timeout` for the in-flight cycle (L-6)
    SHARE_STOP = "share_stop"  # wait for, and return, the first stop()'s result (L-6)


class CadenceCode(enum.StrEnum):
    """Why a call changed nothing (a stable code, never an exception text)."""

    STOPPED = "LIFECYCLE_STOPPED"  # start/run_once after stop(): single-use [decision LC-1]
    NOT_WAITING = "LIFECYCLE_TICK_NOT_PENDING"  # a tick with no pending timer (a stale timer)
    NO_CYCLE = "LIFECYCLE_NO_CYCLE_IN_FLIGHT"  # settled/timed_out with nothing in flight


# fmt: off
CADENCE_TABLE: Final = Table.of("Cadence lifecycle", CadenceState, CadenceTrigger, {
    CadenceState.INERT: {
        CadenceTrigger.START:     CadenceState.WAITING,
        CadenceTrigger.RUN_ONCE:  CadenceState.MANUAL,
        CadenceTrigger.STOP:      CadenceState.STOPPED,
    },
    CadenceState.MANUAL: {
        CadenceTrigger.START:     CadenceState.RUNNING,  # the timer is armed when it settles
        CadenceTrigger.RUN_ONCE:  CadenceState.MANUAL,
        CadenceTrigger.SETTLED:   CadenceState.INERT,
        CadenceTrigger.STOP:      CadenceState.STOPPING,
    },
    CadenceState.WAITING: {
        CadenceTrigger.START:     CadenceState.WAITING,
        CadenceTrigger.TICK:      CadenceState.RUNNING,
        CadenceTrigger.RUN_ONCE:  CadenceState.RUNNING,
        CadenceTrigger.STOP:      CadenceState.STOPPED,
    },
    CadenceState.RUNNING: {
        CadenceTrigger.START:     CadenceState.RUNNING,
        CadenceTrigger.RUN_ONCE:  CadenceState.RUNNING,
        CadenceTrigger.SETTLED:   CadenceState.WAITING,
        CadenceTrigger.STOP:      CadenceState.STOPPING,
    },
    CadenceState.STOPPING: {
        CadenceTrigger.STOP:      CadenceState.STOPPING,
        CadenceTrigger.SETTLED:   CadenceState.STOPPED,  # drained
        CadenceTrigger.TIMED_OUT: CadenceState.STOPPED,
    },
    CadenceState.STOPPED: {
        CadenceTrigger.STOP:      CadenceState.STOPPED,
    },
})

# run_once() while a timer is pending: one timer at most, re-armed when the cycle settles (L-2).
_RUN_NOW: Final = (CadenceEffect.CANCEL_TIMER, CadenceEffect.BEGIN_CYCLE)

#: The effects of each row, in order; a row absent here has none (a no-op self-loop).
CADENCE_EFFECTS: Final[Mapping[tuple[CadenceState, CadenceTrigger], tuple[CadenceEffect, ...]]] = (
    MappingProxyType({
        (CadenceState.INERT,    CadenceTrigger.START):     (CadenceEffect.ARM_INITIAL,),
        (CadenceState.INERT,    CadenceTrigger.RUN_ONCE):  (CadenceEffect.BEGIN_CYCLE,),
        (CadenceState.INERT,    CadenceTrigger.STOP):      (CadenceEffect.CLOSE_TIMER,),
        (CadenceState.MANUAL,   CadenceTrigger.RUN_ONCE):  (CadenceEffect.JOIN_CYCLE,),
        (CadenceState.MANUAL,   CadenceTrigger.STOP):      (CadenceEffect.AWAIT_DRAIN,),
        (CadenceState.WAITING,  CadenceTrigger.TICK):      (CadenceEffect.BEGIN_CYCLE,),
        (CadenceState.WAITING,  CadenceTrigger.RUN_ONCE):  _RUN_NOW,
        (CadenceState.WAITING,  CadenceTrigger.STOP):      (CadenceEffect.CLOSE_TIMER,),
        (CadenceState.RUNNING,  CadenceTrigger.RUN_ONCE):  (CadenceEffect.JOIN_CYCLE,),
        (CadenceState.RUNNING,  CadenceTrigger.SETTLED):   (CadenceEffect.ARM_NEXT,),
        (CadenceState.RUNNING,  CadenceTrigger.STOP):      (CadenceEffect.AWAIT_DRAIN,),
        (CadenceState.STOPPING, CadenceTrigger.SETTLED):   (CadenceEffect.CLOSE_TIMER,),
        (CadenceState.STOPPING, CadenceTrigger.TIMED_OUT): (CadenceEffect.CLOSE_TIMER,),
        (CadenceState.STOPPING, CadenceTrigger.STOP):      (CadenceEffect.SHARE_STOP,),
        (CadenceState.STOPPED,  CadenceTrigger.STOP):      (CadenceEffect.SHARE_STOP,),
    })
)
# fmt: on

#: The states in which exactly one cycle is in flight (L-2).
CYCLE_STATES: Final = frozenset({CadenceState.MANUAL, CadenceState.RUNNING, CadenceState.STOPPING})

_REFUSAL_BY_TRIGGER: Final = MappingProxyType(
    {
        CadenceTrigger.START: CadenceCode.STOPPED,
        CadenceTrigger.RUN_ONCE: CadenceCode.STOPPED,
        CadenceTrigger.TICK: CadenceCode.NOT_WAITING,
        CadenceTrigger.SETTLED: CadenceCode.NO_CYCLE,
        CadenceTrigger.TIMED_OUT: CadenceCode.NO_CYCLE,
    }
)


@dataclass(frozen=True, slots=True)
class CadenceStep:
    """A legal edge: the state afterwards and what to do, in order."""

    target: CadenceState
    effects: tuple[CadenceEffect, ...]


@dataclass(frozen=True, slots=True)
class CadenceRefused:
    """A missing pair: nothing changes."""

    code: CadenceCode


def cadence_step(state: CadenceState, trigger: CadenceTrigger) -> CadenceStep | CadenceRefused:
    """The one decision of a cadence lifecycle (total: every pair answers; L-1..L-6)."""
    target = CADENCE_TABLE.successor(state, trigger)
    if target is None:
        # `stop` is a row in every state, so only the other triggers are ever refused.
        return CadenceRefused(_REFUSAL_BY_TRIGGER[trigger])
    return CadenceStep(target, CADENCE_EFFECTS.get((state, trigger), ()))


@dataclass(frozen=True, slots=True)
class CadenceConfig:
    """A lifecycle's timing, checked against L-9 (build it with `cadence_config`)."""

    interval_ms: int
    stop_timeout_ms: int
    initial_delay_ms: int


def cadence_config(
    interval_ms: int, *, stop_timeout_ms: int, initial_delay_ms: int = 0
) -> CadenceConfig:
    """L-9 and decision B-05: interval 250 ms..24 h, 0 < stop timeout <= 60 s, 0 <= initial
    delay <= interval; anything else raises `BudgetError` naming the field."""
    interval = check_interval_ms(interval_ms)
    return CadenceConfig(
        interval_ms=interval,
        stop_timeout_ms=check_stop_timeout_ms(stop_timeout_ms),
        initial_delay_ms=check_initial_delay_ms(initial_delay_ms, interval_ms=interval),
    )
