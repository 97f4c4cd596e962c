"""The one cadence lifecycle every timer-driven lifecycle is built on (SPEC §6.1, L-1..L-9;
CAD-04, CAD-13).

`CadenceLifecycle` runs a cycle function on a cadence. Every decision — may this start, does
this tick begin a cycle or join one, is a timer armed or cancelled, does stop wait — is the
kernel's `cadence_step` over `CADENCE_TABLE` (`kernel/specs/cadence.py`); this class only keeps
the state the kernel returns and performs the effects it names, in order. The bookkeeping effects
(arm, cancel, begin) happen under one lock, so two callers can never both begin a cycle; the
waiting ones (run the cycle, join it, await the drain) happen outside it.

What it reports: a cycle that raises is a `CycleFailed` carrying the exception's type name only
(S-1: never its text), reported to `report` and never retried early (L-8); an error in the
`on_cycle` or `report` callback is swallowed (L-7) after being reported (or logged, if `report`
itself failed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeAlias, TypeVar

from kernel.specs import (
    CadenceConfig,
    CadenceEffect,
    CadenceRefused,
    CadenceState,
    CadenceStep,
    CadenceTrigger,
    cadence_step,
)
from runners.lifecycle.scheduling import DaemonScheduler, Scheduler

__all__ = [
    "CadenceLifecycle",
    "CycleContext",
    "CycleFailed",
    "CycleReport",
    "CycleResult",
    "CycleSucceeded",
    "LifecycleIncident",
    "StopResult",
]

R = TypeVar("R")

_LOG = logging.getLogger("ql3.lifecycle")


@dataclass(frozen=True, slots=True)
class CycleSucceeded(Generic[R]):
    """The cycle returned `value`."""

    ordinal: int
    value: R


@dataclass(frozen=True, slots=True)
class CycleFailed:
    """The cycle raised; `error` is the exception's type name (S-1)."""

    ordinal: int
    error: str


CycleResult: TypeAlias = CycleSucceeded[R] | CycleFailed


@dataclass(frozen=True, slots=True)
class CycleReport(Generic[R]):
    """What `on_cycle` receives after every cycle (metrics, diagnostics)."""

    lifecycle: str
    result: CycleResult[R]
    duration_ms: int


@dataclass(frozen=True, slots=True)
class LifecycleIncident:
    """A failure the lifecycle absorbed: `cycle_failed` (L-8) or `callback_failed` (L-7)."""

    lifecycle: str
    kind: str
    error: str


@dataclass(frozen=True, slots=True)
class StopResult:
    """`drained`: no cycle is still running (L-6)."""

    drained: bool


@dataclass(frozen=True, slots=True)
class CycleContext:
    """What a cycle may ask of its lifecycle: its ordinal (1, 2, ...) and whether a stop is
    waiting for it to drain (O-2: a draining execution-control cycle skips lost retry)."""

    ordinal: int
    _draining: Callable[[], bool] = field(repr=False)

    @property
    def draining(self) -> bool:
        return self._draining()


@dataclass(slots=True)
class _Flight(Generic[R]):
    """One in-flight cycle: every caller that begins or joins it waits on `done`."""

    ordinal: int
    done: threading.Event = field(default_factory=threading.Event)
    result: CycleResult[R] | None = None


class CadenceLifecycle(Generic[R]):
    """One timer, one cycle in flight at most, stop bounded by the stop timeout (L-1..L-9).

    Constructing it starts nothing (L-1); `config` was checked against L-9 by `cadence_config`.
    `trace`, when given, sees every decision the kernel made (state before, trigger, step or
    refusal), under the lifecycle's lock: the state-table walk and diagnostics read it.
    """

    def __init__(
        self,
        name: str,
        cycle: Callable[[CycleContext], R],
        config: CadenceConfig,
        *,
        scheduler: Scheduler | None = None,
        on_cycle: Callable[[CycleReport[R]], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
        trace: Callable[[CadenceState, CadenceTrigger, CadenceStep | CadenceRefused], None]
        | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._cycle = cycle
        self._scheduler: Scheduler = DaemonScheduler(name) if scheduler is None else scheduler
        self._on_cycle = on_cycle
        self._report = report
        self._trace = trace
        self._lock = threading.Lock()
        self._state = CadenceState.INERT
        self._flight: _Flight[R] | None = None
        self._ordinal = 0
        self._stop_done = threading.Event()
        self._stop_result: StopResult | None = None

    # -- what callers see -----------------------------------------------------------------------
    @property
    def state(self) -> CadenceState:
        return self._state

    @property
    def cycles(self) -> int:
        """Cycles begun so far."""
        return self._ordinal

    def start(self) -> CadenceRefused | None:
        """Arm the timer `initial_delay` from now (L-1); a second call is a no-op; refused
        (`LIFECYCLE_STOPPED`) after `stop()`."""
        with self._lock:
            step = self._fire(CadenceTrigger.START)
        return step if isinstance(step, CadenceRefused) else None

    def run_once(self) -> CycleResult[R] | CadenceRefused:
        """Run one cycle now, or wait for the one in flight and return its result (L-5)."""
        with self._lock:
            step = self._fire(CadenceTrigger.RUN_ONCE)
            if isinstance(step, CadenceRefused):
                return step
            flight = self._flight
        assert flight is not None
        if CadenceEffect.BEGIN_CYCLE in step.effects:
            self._run(flight)
        elif CadenceEffect.JOIN_CYCLE not in step.effects:
            raise AssertionError(f"{self.name}: the kernel named no cycle for run_once")
        flight.done.wait()
        assert flight.result is not None
        return flight.result

    def stop(self) -> StopResult:
        """Cancel the timer, wait at most the stop timeout for the cycle in flight, and say
        whether it drained; concurrent and later calls share the first call's result (L-6)."""
        with self._lock:
            step = self._fire(CadenceTrigger.STOP)
            assert isinstance(step, CadenceStep)  # stop is a row in every state
            flight = self._flight
        if CadenceEffect.SHARE_STOP in step.effects:
            self._stop_done.wait()
            assert self._stop_result is not None
            return self._stop_result
        drained = True
        if CadenceEffect.AWAIT_DRAIN in step.effects:
            assert flight is not None
            if not self._scheduler.wait(flight.done, self.config.stop_timeout_ms):
                with self._lock:
                    self._fire(CadenceTrigger.TIMED_OUT)
                drained = flight.done.is_set()
        self._stop_result = StopResult(drained)
        self._stop_done.set()
        return self._stop_result

    # -- the kernel decides; this performs ------------------------------------------------------
    def _fire(self, trigger: CadenceTrigger) -> CadenceStep | CadenceRefused:
        """Ask the kernel (holding the lock), keep its state, do its bookkeeping effects."""
        source = self._state
        step = cadence_step(source, trigger)
        if self._trace is not None:
            self._trace(source, trigger, step)
        if isinstance(step, CadenceRefused):
            return step
        self._state = step.target
        for effect in step.effects:
            if effect is CadenceEffect.ARM_INITIAL:
                self._scheduler.call_later(self.config.initial_delay_ms, self._tick)
            elif effect is CadenceEffect.ARM_NEXT:
                self._scheduler.call_later(self.config.interval_ms, self._tick)
            elif effect is CadenceEffect.CANCEL_TIMER:
                self._scheduler.cancel()
            elif effect is CadenceEffect.CLOSE_TIMER:
                self._scheduler.close()
            elif effect is CadenceEffect.BEGIN_CYCLE:
                self._ordinal += 1
                self._flight = _Flight(self._ordinal)
        return step

    def _tick(self) -> None:
        with self._lock:
            step = self._fire(CadenceTrigger.TICK)
            flight = self._flight
        # A tick the kernel refuses (stopped, or a cycle already in flight) does nothing.
        if isinstance(step, CadenceStep) and CadenceEffect.BEGIN_CYCLE in step.effects:
            assert flight is not None
            self._run(flight)

    def _run(self, flight: _Flight[R]) -> None:
        started = self._scheduler.monotonic_ms()
        context = CycleContext(flight.ordinal, self._draining)
        result: CycleResult[R]
        interrupt: BaseException | None = None
        try:
            result = CycleSucceeded(flight.ordinal, self._cycle(context))
        except Exception as exc:  # L-8: reported, and the next cycle comes at the interval
            result = CycleFailed(flight.ordinal, type(exc).__name__)
            self._incident("cycle_failed", result.error)
        except BaseException as exc:  # Ctrl-C in a run_once: settle first, then let it go on
            result = CycleFailed(flight.ordinal, type(exc).__name__)
            interrupt = exc
        flight.result = result
        with self._lock:
            self._fire(CadenceTrigger.SETTLED)
        flight.done.set()
        if interrupt is not None:
            raise interrupt
        if self._on_cycle is not None:
            duration = self._scheduler.monotonic_ms() - started
            try:
                self._on_cycle(CycleReport(self.name, result, duration))
            except Exception as exc:  # L-7: never fails the cycle or moves the schedule
                self._incident("callback_failed", type(exc).__name__)

    def _draining(self) -> bool:
        # A cycle still running after stop() timed out is draining too.
        return self._state in (CadenceState.STOPPING, CadenceState.STOPPED)

    def _incident(self, kind: str, error: str) -> None:
        incident = LifecycleIncident(self.name, kind, error)
        if self._report is not None:
            try:
                self._report(incident)
                return
            except Exception as exc:  # L-7: the reporter itself failed; log both, go on
                _LOG.warning("%s: report callback failed (%s)", self.name, type(exc).__name__)
        _LOG.warning("%s: %s (%s)", self.name, incident.kind, incident.error)
