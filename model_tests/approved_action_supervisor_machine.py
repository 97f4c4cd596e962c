"""A Hypothesis model of the Approved Action supervisor and its lifecycle (SPEC §5, Appendix D-4,
§0.4 L-rules; AA-01, AA-02, AA-04..AA-07, AA-10..AA-13).

The system under model is the real `ApprovedActionRuntimeLifecycle` around the real
`ApprovedActionRuntimeSupervisor`, on a `SteppedScheduler` (a fake clock: nothing cycles unless a
rule advances it or calls `run_once`). Around it, two fault-injecting fake ports (`FakeRecovery`,
`FakeDispatch`) over in-memory due indexes: each call answers the keyset page strictly after the
cursor (P-2, P-3), optionally resolving what it returned, unless a queued fault says otherwise:
raise (`PortFailure`, whose text holds a fake secret), stall the cursor (missing, equal or
backwards next cursor on a truncated page), be slow (move the fake clock past several
intervals), or block until released (the `hang_then_stop` rule, on a thread of its own). The
metrics (`on_cycle`) and diagnostics (`report`) callbacks can be made to raise.

Rules: add due items, toggle resolution, queue a fault, start, advance the clock, `run_once`,
stop, break or mend the callbacks, hang a cycle and stop it, restart (a new supervisor and
lifecycle: cursors start empty).

Invariants, after every step; a `ModelViolation` message starts with its SPEC id. For every
cycle settled since the last check, its port calls are replayed through an independent reading
of §5.2/§5.3/D-4 (`_expect_phase`, written from the SPEC text):
- AA-01: every recovery call precedes every dispatch call; a recovery port that raised or a
  stalled recovery cursor (D-4) means 0 dispatch calls and a failed cycle;
- AA-02: no port call began while the other port had one in flight;
- AA-04/P-4: each call asks for the phase's page size; a phase fetches the next page exactly when
  the last one was truncated with a strictly advancing cursor and pages are left, never more
  than `max_pages`;
- AA-05/AA-06: the first call of a phase starts at the expected resume cursor; after a successful
  cycle the supervisor's cursors are `page_limit` -> next cursor, else cleared; after a failed
  one both are exactly as before;
- AA-07: a successful cycle's summaries equal the expected pages, summed counters, stop reason
  and `remaining`, and hold nothing else; a failed cycle is reported by type name only, and the
  ports' secret text appears in no report, incident or log;
- AA-10/L-1, L-2: no timer before `start()`; a timer is pending exactly while `scheduled`;
  nothing armed and nothing cycling after `stop()`;
- AA-11/L-4, AA-13/L-7, L-8: after every timer cycle (slow, failed, or with a raising callback)
  the next timer is armed exactly `interval` after the cycle settled;
- AA-12/L-6: a `stop()` during a hung cycle returns after exactly the stop timeout on the fake
  clock, not drained, with no timer left.

Running it: `ApprovedActionSupervisorMachine.TestCase` with `aa_settings()`; the knob
`SUPERVISOR` replaces the supervisor class (the planted-bug test uses it).
"""

from __future__ import annotations

import collections
import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final, cast

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kernel.approved_action.pages import (
    ActionCursor,
    DispatchCounters,
    DispatchPage,
    Phase,
    RecoveryCounters,
    RecoveryPage,
)
from kernel.approved_action.paging import CycleSummary, PhaseBudget, ResumeCursors, StopReason
from kernel.approved_action.policy import (
    ApprovedActionConfig,
    ApprovedActionState,
    approved_action_config,
)
from kernel.specs import CadenceCode, CadenceRefused, CadenceState
from model_tests.harness import STATS, ModelViolation, require
from model_tests.machines import Budget, budget_settings
from runners.approved_action import (
    ApprovedActionRuntimeLifecycle,
    ApprovedActionRuntimeSupervisor,
)
from runners.lifecycle import (
    CycleFailed,
    CycleReport,
    CycleSucceeded,
    LifecycleIncident,
    SteppedScheduler,
    StopResult,
)

__all__ = [
    "AA_BUDGETS",
    "GUARD_S",
    "NAME",
    "REACHED",
    "SECRET",
    "ApprovedActionSupervisorMachine",
    "Call",
    "CallLog",
    "FakeDispatch",
    "FakeRecovery",
    "Fault",
    "ModelViolation",
    "PortFailure",
    "aa_settings",
]

NAME: Final = "approved_action"
GUARD_S: Final = 30.0  # a generous bound for any wait on another thread (a failure guard only)
SECRET: Final = "token=s3cr3t-approved-action"  # noqa: S105  (a fake, to find leaks)

AA_BUDGETS: Final[Mapping[str, Budget]] = {
    # ci: deterministic (derandomized); pure in-memory ports, about 2-4 s.
    "ci": Budget(100, 40),
    "dev": Budget(100, 40),
    "deep": Budget(2_000, 80),
}


#: What the machine runs of this process reached (the budget test requires each to be > 0).
REACHED: collections.Counter[str] = collections.Counter()


def aa_settings(profile: str | None = None) -> settings:
    """The active Hypothesis profile's settings with this machine's budget."""
    name = profile if profile is not None else settings.get_current_profile_name()
    return budget_settings(AA_BUDGETS.get(name, AA_BUDGETS["ci"]), profile)


class PortFailure(RuntimeError):
    """What a fake port raises; its text holds a fake secret that nothing may report (S-1)."""


class Fault(enum.StrEnum):
    """What a fake port does on one call instead of (or before) answering its due index."""

    RAISE = "raise"
    STALL_MISSING = "stall_missing"  # truncated, no next cursor
    STALL_SAME = "stall_same"  # truncated, next cursor == the cursor it was given
    STALL_BACK = "stall_back"  # truncated, next cursor before the cursor it was given
    SLOW = "slow"  # moves the fake clock past several intervals, then answers
    BLOCK = "block"  # waits until released, then answers


@dataclass(frozen=True, slots=True)
class Call:
    """One port call: which cycle made it, what it asked, what it answered (None: raised)."""

    index: int
    phase: Phase
    cycle: tuple[int, int]  # (incarnation, lifecycle cycle ordinal)
    cursor: ActionCursor | None
    page_size: int
    page: RecoveryPage | DispatchPage | None
    overlapped: bool  # the other port had a call in flight when this one began


class CallLog:
    """Every call of both ports, in order, and which port is in flight (AA-02)."""

    def __init__(self, cycle_of: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        self.calls: list[Call] = []
        self.in_flight: set[Phase] = set()
        self.lock = threading.Lock()
        self.cycle_of = cycle_of

    def of(self, cycle: tuple[int, int], phase: Phase) -> list[Call]:
        return [c for c in self.calls if c.cycle == cycle and c.phase is phase]


class _FakePort:
    """A due index answered one keyset page at a time, with queued faults."""

    PHASE: ClassVar[Phase]

    def __init__(self, log: CallLog, advance: Callable[[int], None] | None = None) -> None:
        self.log = log
        self.advance = advance
        self.slow_ms = 0
        self.due: list[ActionCursor] = []
        self.resolve = False  # does a call resolve (remove) the items it returned?
        self.faults: collections.deque[Fault | RecoveryPage | DispatchPage] = collections.deque()
        self.entered = threading.Event()
        self.release = threading.Event()

    def add_due(self, *items: ActionCursor) -> None:
        self.due = sorted(set(self.due) | set(items))

    def _call(self, cursor: ActionCursor | None, page_size: int) -> RecoveryPage | DispatchPage:
        with self.log.lock:
            overlapped = bool(self.log.in_flight)
            self.log.in_flight.add(self.PHASE)
            cycle = self.log.cycle_of()
        page: RecoveryPage | DispatchPage | None = None
        try:
            fault = self.faults.popleft() if self.faults else None
            if isinstance(fault, RecoveryPage | DispatchPage):
                page = fault
            elif fault is Fault.RAISE:
                raise PortFailure(f"{self.PHASE} port down ({SECRET})")
            else:
                if fault is Fault.BLOCK:
                    self.entered.set()
                    if not self.release.wait(GUARD_S):
                        raise AssertionError("the model never released a blocked port")
                elif fault is Fault.SLOW and self.advance is not None:
                    REACHED["slow_call"] += 1
                    self.advance(self.slow_ms)
                page = self._page(cursor, page_size, fault)
            return page
        finally:
            with self.log.lock:
                self.log.in_flight.discard(self.PHASE)
                self.log.calls.append(
                    Call(
                        len(self.log.calls), self.PHASE, cycle, cursor, page_size, page, overlapped
                    )
                )

    def _page(
        self, cursor: ActionCursor | None, page_size: int, fault: Fault | None
    ) -> RecoveryPage | DispatchPage:
        after = [k for k in self.due if cursor is None or k > cursor]
        taken = after[:page_size]
        truncated = len(after) > page_size
        next_cursor = taken[-1] if taken else None
        if fault is Fault.STALL_MISSING:
            truncated, next_cursor = True, None
        elif fault is Fault.STALL_SAME:
            truncated, next_cursor = True, cursor
        elif fault is Fault.STALL_BACK:
            truncated = True
            next_cursor = (
                None
                if cursor is None or cursor.at_ms == 0
                else ActionCursor(cursor.at_ms - 1, cursor.action_id)
            )
        if self.resolve:
            self.due = [k for k in self.due if k not in taken]
        return self._make(len(taken), truncated, next_cursor)

    def _make(
        self, n: int, truncated: bool, next_cursor: ActionCursor | None
    ) -> RecoveryPage | DispatchPage:
        raise NotImplementedError


class FakeRecovery(_FakePort):
    PHASE = Phase.RECOVERY

    def reconcile_batch(self, cursor: ActionCursor | None, page_size: int) -> RecoveryPage:
        # No type check here: a wrong answer must reach the supervisor (it refuses it).
        return cast(RecoveryPage, self._call(cursor, page_size))

    def _make(self, n: int, truncated: bool, next_cursor: ActionCursor | None) -> RecoveryPage:
        counters = RecoveryCounters(n, n, n, 0, 0, 0, 0, 0, 0)
        return RecoveryPage(counters, truncated, next_cursor)


class FakeDispatch(_FakePort):
    PHASE = Phase.DISPATCH

    def dispatch_batch(self, cursor: ActionCursor | None, page_size: int) -> DispatchPage:
        return cast(DispatchPage, self._call(cursor, page_size))

    def _make(self, n: int, truncated: bool, next_cursor: ActionCursor | None) -> DispatchPage:
        counters = DispatchCounters(n, n, n, n, 0, 0, 0, 0, 0, 0, 0)
        return DispatchPage(counters, truncated, next_cursor)


# -- the independent reading of §5.3 and D-4 ----------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Expected:
    """One phase replayed from its calls: `raised`, or how it ended."""

    raised: bool
    pages: int = 0
    counters: Any = None
    reason: str = ""
    next_cursor: ActionCursor | None = None


def _expect_phase(
    label: str, budget: PhaseBudget, resume: ActionCursor | None, calls: list[Call]
) -> _Expected:
    current = resume
    total: Any = None
    for i, call in enumerate(calls):
        require(
            call.cursor == current,
            "AA-05",
            f"{label} page {i + 1} started at {call.cursor}, expected {current}",
        )
        require(call.page_size == budget.page_size, "AA-04", f"{label} asked {call.page_size}")
        last = i == len(calls) - 1
        if call.page is None:
            require(last, "AA-01", f"{label} went on after its port raised")
            return _Expected(raised=True)
        page = call.page
        total = page.counters if total is None else total + page.counters
        nxt = page.next_cursor
        reason = ""
        if not page.truncated:
            reason = "complete"
        elif nxt is None or (
            current is not None
            and (nxt.at_ms, nxt.action_id)
            <= (
                current.at_ms,
                current.action_id,
            )
        ):
            reason = "cursor_stalled"
        elif i + 1 == budget.max_pages:
            reason = "page_limit"
        if reason:
            require(last, "AA-04", f"{label} fetched a page after it stopped ({reason})")
            return _Expected(False, i + 1, total, reason, nxt if reason == "page_limit" else None)
        require(not last, "AA-04", f"{label} stopped after page {i + 1} with pages left")
        current = nxt
    raise ModelViolation(f"AA-01: {label} made no call at all")


def _entered_or_ended(entered: threading.Event, thread: threading.Thread) -> bool:
    """Wait (bounded by `GUARD_S`) until the port was entered or the cycle's thread ended."""
    for _ in range(int(GUARD_S * 100)):
        if entered.wait(0.01):
            return True
        if not thread.is_alive():
            thread.join()
            return entered.is_set()
    raise AssertionError(f"waited {GUARD_S} s for a cycle to reach a blocked port")


@dataclass(frozen=True, slots=True)
class _Settled:
    """What `on_cycle` saw when a cycle settled (recorded before any injected raise)."""

    incarnation: int
    report: CycleReport[CycleSummary]
    cursors: ResumeCursors
    state: CadenceState
    now_ms: int
    pending_ms: int | None


class ApprovedActionSupervisorMachine(RuleBasedStateMachine):
    """The supervisor and lifecycle under random port faults, clock steps and lifecycle calls."""

    SUPERVISOR: ClassVar[type[ApprovedActionRuntimeSupervisor]] = ApprovedActionRuntimeSupervisor

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.counts = STATS.of(NAME)
        self.counts.instances += 1
        self.incarnation = 0
        self.settled: list[_Settled] = []
        self.incidents: list[LifecycleIncident] = []
        self.checked = 0
        self.expected: dict[int, ResumeCursors] = {}
        self.break_on_cycle = False
        self.break_report = False
        self.stopped_cycles: int | None = None
        self.log = CallLog(self._cycle_of)
        self.scheduler = SteppedScheduler()
        self.recovery = FakeRecovery(self.log, self._advance)
        self.dispatch = FakeDispatch(self.log, self._advance)
        self._serial = 0

    @classmethod
    def configured(cls, **knobs: object) -> type[ApprovedActionSupervisorMachine]:
        unknown = sorted(k for k in knobs if not k.isupper() or not hasattr(cls, k))
        if unknown:
            raise TypeError(f"{cls.__name__} has no knob(s) {unknown}")
        return type(f"{cls.__name__}Configured", (cls,), dict(knobs))

    # -- building --------------------------------------------------------------------------------
    @initialize(
        interval=st.sampled_from([250, 1_000, 2_000]),
        stop_timeout=st.sampled_from([1, 500, 5_000]),
        delay=st.sampled_from([0, 250]),
        recovery=st.tuples(st.integers(1, 3), st.integers(1, 3)),
        dispatch=st.tuples(st.integers(1, 3), st.integers(1, 3)),
        due=st.integers(0, 6),
    )
    def setup(
        self,
        *,
        interval: int,
        stop_timeout: int,
        delay: int,
        recovery: tuple[int, int],
        dispatch: tuple[int, int],
        due: int,
    ) -> None:
        self.config: ApprovedActionConfig = approved_action_config(
            interval, stop_timeout, delay, PhaseBudget(*recovery), PhaseBudget(*dispatch)
        )
        self.recovery.slow_ms = self.dispatch.slow_ms = 3 * interval
        for port in (self.recovery, self.dispatch):
            self._add(port, due, 1)
        self._build()
        self.ready = True

    def _build(self) -> None:
        self.incarnation += 1
        self.expected[self.incarnation] = ResumeCursors()  # cursors start empty (§5.3)
        self.scheduler = SteppedScheduler()
        self.supervisor = self.SUPERVISOR(self.recovery, self.dispatch, self.config)
        self.lifecycle = ApprovedActionRuntimeLifecycle(
            self.supervisor,
            self.config,
            scheduler=self.scheduler,
            on_cycle=self._on_cycle,
            report=self._report,
        )
        self.stopped_cycles = None
        self.stop_result: StopResult | None = None
        # AA-10 / L-1: constructed, nothing armed, nothing cycling.
        require(self.scheduler.armed == [], "AA-10", "a timer was armed at construction")
        require(self.lifecycle.state is ApprovedActionState.INERT, "AA-10", "not inert")

    def _cycle_of(self) -> tuple[int, int]:
        return (self.incarnation, self.lifecycle.cycles)

    def _advance(self, ms: int) -> None:
        self.scheduler.now_ms += ms  # a slow cycle: the fake clock moves while it runs

    def _add(self, port: _FakePort, n: int, spread: int) -> None:
        items = []
        for _ in range(n):
            self._serial += 1
            items.append(ActionCursor(self._serial % max(spread, 1), f"a{self._serial:04d}"))
        port.add_due(*items)

    def _on_cycle(self, report: CycleReport[CycleSummary]) -> None:
        self.settled.append(
            _Settled(
                self.incarnation,
                report,
                self.supervisor.cursors,
                self.lifecycle.cadence_state,
                self.scheduler.now_ms,
                self.scheduler.pending_ms,
            )
        )
        if self.break_on_cycle:
            REACHED["on_cycle_raised"] += 1
            raise ValueError(f"metrics sink down ({SECRET})")

    def _report(self, incident: LifecycleIncident) -> None:
        self.incidents.append(incident)
        if self.break_report:
            raise OSError(f"diagnostics sink down ({SECRET})")

    def _port(self, phase: Phase) -> _FakePort:
        return self.recovery if phase is Phase.RECOVERY else self.dispatch

    @property
    def stopped(self) -> bool:
        return self.lifecycle.cadence_state is CadenceState.STOPPED

    # -- rules -----------------------------------------------------------------------------------
    @rule(phase=st.sampled_from(Phase), n=st.integers(1, 8), spread=st.integers(1, 4))
    def add_due(self, phase: Phase, n: int, spread: int) -> None:
        self._add(self._port(phase), n, spread)
        self.counts.steps += 1

    @rule(phase=st.sampled_from(Phase), resolve=st.booleans())
    def set_resolution(self, phase: Phase, resolve: bool) -> None:
        self._port(phase).resolve = resolve
        self.counts.steps += 1

    @rule(
        phase=st.sampled_from(Phase),
        fault=st.sampled_from(
            [Fault.RAISE, Fault.STALL_MISSING, Fault.STALL_SAME, Fault.STALL_BACK, Fault.SLOW]
        ),
    )
    def inject(self, phase: Phase, fault: Fault) -> None:
        port = self._port(phase)
        if len(port.faults) < 3:
            port.faults.append(fault)
        self.counts.steps += 1

    @rule(fault=st.sampled_from([Fault.RAISE, Fault.STALL_SAME]))
    def dispatch_fails_next(self, fault: Fault) -> None:
        """A dispatch fault queued alone (the dispatch phase is reached less often than recovery,
        so its faults get a rule of their own)."""
        if not self.dispatch.faults:
            self.dispatch.faults.append(fault)
        self.counts.steps += 1

    @rule()
    def start(self) -> None:
        state, armed = self.lifecycle.cadence_state, list(self.scheduler.armed)
        result = self.lifecycle.start()
        if state is CadenceState.STOPPED:
            require(result == CadenceRefused(CadenceCode.STOPPED), "AA-10", "start after stop")
            require(self.scheduler.armed == armed, "AA-10", "start after stop armed a timer")
        elif state is CadenceState.INERT:
            require(result is None, "AA-10", f"start refused: {result}")
            require(
                self.scheduler.armed == [*armed, self.config.cadence.initial_delay_ms],
                "AA-10",
                "the first start() did not arm exactly one timer",
            )
        else:  # a repeated start() is a no-op: still one timer (L-1)
            require(result is None, "AA-10", f"start refused: {result}")
            require(self.scheduler.armed == armed, "AA-10", "a second start() armed a timer")
        self.counts.steps += 1

    @rule(step=st.sampled_from(["one", "almost", "interval", "long"]))
    def advance(self, step: str) -> None:
        interval = self.config.cadence.interval_ms
        ms = {"one": 1, "almost": interval - 1, "interval": interval, "long": 3 * interval}[step]
        self.scheduler.advance(ms)
        self.counts.steps += 1

    @rule()
    def run_once(self) -> None:
        before = self.lifecycle.cycles
        result = self.lifecycle.run_once()
        if self.stopped:
            require(result == CadenceRefused(CadenceCode.STOPPED), "L-6", "run_once after stop")
            require(self.lifecycle.cycles == before, "L-6", "a cycle began after stop")
        else:
            require(isinstance(result, CycleSucceeded | CycleFailed), "L-5", f"{result}")
            require(self.lifecycle.cycles == before + 1, "L-5", "run_once began no cycle")
        self.counts.steps += 1

    @rule()
    def stop(self) -> None:
        first = self.stop_result
        result = self.lifecycle.stop()
        if first is None:
            require(result.drained, "AA-12", "nothing was in flight, yet stop did not drain")
            self.stop_result = result
        else:  # L-6: later calls share the first call's result
            require(result is first, "L-6", "a later stop returned another result")
        require(self.lifecycle.stop() is result, "L-6", "a second stop returned another result")
        self.stopped_cycles = self.lifecycle.cycles
        self.counts.steps += 1

    @rule(on_cycle=st.booleans(), report=st.booleans())
    def callbacks(self, on_cycle: bool, report: bool) -> None:
        self.break_on_cycle, self.break_report = on_cycle, report
        self.counts.steps += 1

    @precondition(lambda self: not self.stopped)
    @rule(phase=st.sampled_from(Phase))
    def hang_then_stop(self, phase: Phase) -> None:
        """AA-12: a cycle hangs in a port; `stop()` waits exactly the stop timeout and gives up."""
        port = self._port(phase)
        port.entered.clear()
        port.release.clear()
        port.faults.appendleft(Fault.BLOCK)
        results: list[object] = []
        thread = threading.Thread(
            target=lambda: results.append(self.lifecycle.run_once()), daemon=True
        )
        thread.start()
        try:
            if not _entered_or_ended(port.entered, thread):
                # The cycle ended before it reached that port (recovery failed or stalled).
                if port.faults and port.faults[0] is Fault.BLOCK:
                    port.faults.popleft()
                return
            require(self.lifecycle.state is ApprovedActionState.CYCLING, "AA-12", "a hung cycle")
            require(self.scheduler.pending_ms is None, "AA-11", "a timer pending mid-cycle")
            stopped_at = self.scheduler.now_ms
            result = self.lifecycle.stop()
            self.stop_result = result
            require(not result.drained, "AA-12", "stop said drained while the cycle hangs")
            require(
                self.scheduler.now_ms - stopped_at == self.config.cadence.stop_timeout_ms,
                "AA-12",
                "stop did not wait exactly the stop timeout",
            )
            require(self.scheduler.pending_ms is None, "AA-12", "a timer survived stop")
            require(self.scheduler.closed, "AA-12", "the timer was not closed")
            require(self.stopped, "AA-12", "not stopped after the stop timeout")
        finally:
            port.release.set()
            thread.join(GUARD_S)
        require(not thread.is_alive(), "AA-12", "the released cycle never settled")
        REACHED[f"hung_{phase}_stopped"] += 1
        require(len(results) == 1, "L-5", "the hung run_once returned nothing")
        self.stopped_cycles = self.lifecycle.cycles
        self.counts.steps += 1

    @rule()
    def restart(self) -> None:
        self.lifecycle.stop()  # the old lifecycle and its timer end; its cursors are lost
        self._build()
        self.counts.steps += 1

    # -- invariants ------------------------------------------------------------------------------
    @invariant()
    def cycles_follow_the_spec(self) -> None:
        if not self.ready:
            return
        self.counts.invariant_checks += 1
        while self.checked < len(self.settled):
            self._check_cycle(self.settled[self.checked])
            self.checked += 1
        for call in self.log.calls:
            require(not call.overlapped, "AA-02", f"call {call.index} overlapped the other phase")

    @invariant()
    def lifecycle_follows_the_l_rules(self) -> None:
        if not self.ready:
            return
        self.counts.invariant_checks += 1
        state = self.lifecycle.cadence_state
        pending = self.scheduler.pending_ms
        require(
            state not in (CadenceState.MANUAL, CadenceState.RUNNING, CadenceState.STOPPING),
            "L-2",
            f"a cycle in flight between steps ({state})",
        )
        require(
            (pending is not None) == (state is CadenceState.WAITING),
            "L-2",
            f"state {state} with pending timer {pending}",
        )
        if state is CadenceState.INERT:
            require(self.scheduler.armed == [], "AA-10", "a timer armed before start()")
        if state is CadenceState.STOPPED:
            require(self.scheduler.closed, "L-6", "stopped with the timer not closed")
            require(
                self.lifecycle.cycles == self.stopped_cycles,
                "L-6",
                "a cycle began after stop()",
            )
        delays = set(self.scheduler.armed)
        allowed = {self.config.cadence.interval_ms, self.config.cadence.initial_delay_ms}
        require(delays <= allowed, "L-4", f"armed delays {sorted(delays)}")
        text = repr(self.settled) + repr(self.incidents) + repr(self.supervisor.last_failure)
        require(SECRET not in text, "S-1", "a port's or callback's text reached a report")
        for incident in self.incidents:
            require(
                incident.kind in {"cycle_failed", "callback_failed"},
                "L-7",
                f"incident {incident.kind}",
            )

    def _check_cycle(self, seen: _Settled) -> None:
        result = seen.report.result
        cycle = (seen.incarnation, result.ordinal)
        label = f"cycle {cycle}"
        before = self.expected[seen.incarnation]
        rec_calls = self.log.of(cycle, Phase.RECOVERY)
        disp_calls = self.log.of(cycle, Phase.DISPATCH)
        if rec_calls and disp_calls:
            require(
                rec_calls[-1].index < disp_calls[0].index,
                "AA-01",
                f"{label}: a dispatch call before a recovery call",
            )
        rec = _expect_phase(f"{label} recovery", self.config.recovery, before.recovery, rec_calls)
        failed_as: str | None = None
        if rec.raised:
            failed_as = "PortFailure"
        elif rec.reason == "cursor_stalled":
            failed_as = "ApprovedActionCycleFailed"  # D-4
        if failed_as is not None:
            REACHED["recovery_raised" if rec.raised else "recovery_stalled_failed_cycle"] += 1
            require(disp_calls == [], "AA-01", f"{label}: dispatcher called after recovery failed")
            self._expect_failed(seen, label, failed_as, before)
            return
        disp = _expect_phase(f"{label} dispatch", self.config.dispatch, before.dispatch, disp_calls)
        if disp.raised:
            REACHED["dispatch_raised"] += 1
            self._expect_failed(seen, label, "PortFailure", before)
            return
        REACHED[f"recovery_{rec.reason}"] += 1
        REACHED[f"dispatch_{disp.reason}"] += 1
        if before.recovery is not None or before.dispatch is not None:
            REACHED["resumed_from_page_limit"] += 1  # a cursor only page_limit stores
        require(isinstance(result, CycleSucceeded), "AA-01", f"{label}: {result}, expected success")
        assert isinstance(result, CycleSucceeded)
        summary = result.value
        require(type(summary) is CycleSummary, "AA-07", f"{label}: {type(summary).__name__}")
        for name, got, want in (
            ("recovery", summary.recovery, rec),
            ("dispatch", summary.dispatch, disp),
        ):
            require(
                [f.name for f in fields(got)] == ["pages", "counters", "stop_reason", "remaining"],
                "AA-07",
                f"{label}: {name} summary fields",
            )
            require(
                (got.pages, got.counters, got.stop_reason, got.remaining)
                == (want.pages, want.counters, StopReason(want.reason), want.reason != "complete"),
                "AA-07",
                f"{label}: {name} summary {got} expected {want}",
            )
        after = ResumeCursors(rec.next_cursor, disp.next_cursor)
        require(
            seen.cursors == after,
            "AA-05",
            f"{label}: cursors {seen.cursors}, expected {after}",
        )
        self.expected[seen.incarnation] = after
        self._expect_rearmed(seen, label)

    def _expect_failed(self, seen: _Settled, label: str, error: str, before: ResumeCursors) -> None:
        result = seen.report.result
        require(
            result == CycleFailed(result.ordinal, error),
            "AA-06",
            f"{label}: {result}, expected a failure {error}",
        )
        require(seen.cursors == before, "AA-06", f"{label}: cursors moved on a failed cycle")
        self._expect_rearmed(seen, label)

    def _expect_rearmed(self, seen: _Settled, label: str) -> None:
        """AA-11/L-4, L-8, AA-13: a started lifecycle's next timer is `interval` after the
        cycle settled, whatever the cycle did."""
        if seen.state is CadenceState.WAITING:
            require(
                seen.pending_ms == seen.now_ms + self.config.cadence.interval_ms,
                "AA-11",
                f"{label}: next timer at {seen.pending_ms}, settled at {seen.now_ms}",
            )
        else:
            require(seen.pending_ms is None, "AA-11", f"{label}: a timer while {seen.state}")

    def teardown(self) -> None:
        if not self.ready:
            return
        self.recovery.release.set()
        self.dispatch.release.set()
        self.lifecycle.stop()
