"""The Approved Action supervisor's paging and cycle rules, pure (SPEC §5.2, §5.3, Appendix D-4;
ADR-0036 §1-§2; AA-01, AA-03..AA-07).

A runner pages one phase like this, and decides nothing itself (ARCHITECTURE rule 1):

    state = phase_start(resume_cursor, RecoveryCounters.zero())
    for _ in range(budget.max_pages):
        page = port.reconcile_batch(state.cursor, budget.page_size)
        step = phase_step(budget, state, page)
        if isinstance(step, PhaseEnded):
            break
        state = step.state

`phase_step` is §5.3: add the page's counters; not truncated -> `complete`; truncated with a
missing or non-advancing cursor -> `cursor_stalled`, `remaining = true`; truncated and advanced
-> the next page, unless `max_pages` pages are done -> `page_limit` with the next cursor. It
always ends a phase by the `max_pages`-th page (P-4: no paging "until empty").

The cycle rules:
- `CYCLE_PHASES`: recovery, then dispatch (§5.2, AA-01).
- `after_recovery(summary)`: whether the dispatch phase may run. Appendix D-4 (binding; it
  overrides §5.3's "[decision: cursor_stalled ends the phase, not the cycle]" for recovery): a
  stalled recovery cursor FAILS the cycle (the dispatcher is called 0 times, both resume cursors
  kept). A recovery phase that raised fails it too (§5.2: fail-closed); so does a dispatch phase
  that raised (§5.2 decision). A stalled dispatch cursor ends only the dispatch phase.
- `resume_cursors(before, recovery, dispatch, cycle_ok=...)`: the in-memory resume cursors after
  a cycle (§5.3): unchanged after a failed cycle (both of them, AA-06); after a successful one,
  per phase: `page_limit` stores the next cursor, `complete` clears it, `cursor_stalled` clears it
  (so the next cycle restarts that phase at the due index start, AA-05).

Summaries hold numbers only (AA-07): `PhaseSummary` is `pages`, the summed counters,
`stop_reason` and `remaining`; the resume cursor travels beside it in `PhaseEnded`, never inside
it; a failed cycle is a `FailedCycle` with a fixed code, never exception text (S-1).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Generic

from kernel.approved_action.pages import (
    ActionCursor,
    C,
    DispatchCounters,
    Phase,
    PhasePage,
    RecoveryCounters,
    strictly_after,
)
from kernel.specs.budgets import HARD_LIMITS, Paging, check_paging
from kernel.specs.codes import Code

__all__ = [
    "CYCLE_PHASES",
    "ContinuePhase",
    "CycleFailureCode",
    "CycleSummary",
    "CycleVerdict",
    "FailedCycle",
    "PhaseBudget",
    "PhaseEnded",
    "PhaseState",
    "PhaseSummary",
    "ResumeCursors",
    "StopReason",
    "after_recovery",
    "phase_start",
    "phase_step",
    "resume_cursor",
    "resume_cursors",
]

#: The phases of one cycle, in order (§5.2: recovery first is the fail-closed boundary; AA-01).
CYCLE_PHASES: Final = (Phase.RECOVERY, Phase.DISPATCH)

_HARD: Final = HARD_LIMITS.approved_action_phase  # ADR-0036 §2: "64 x 64"
# The hard page count (the table states it for this row; 64 is ADR-0036 §2's number).
_PAGES_MAX: Final[int] = 64 if _HARD.pages_max is None else _HARD.pages_max


class StopReason(enum.StrEnum):
    """Why a phase stopped (§5.3); the values are the Appendix A codes."""

    COMPLETE = Code.COMPLETE.value
    PAGE_LIMIT = Code.PAGE_LIMIT.value
    CURSOR_STALLED = Code.CURSOR_STALLED.value


@dataclass(frozen=True, slots=True)
class PhaseBudget:
    """One phase's budget: `page_size` 1..64 and `max_pages` 1..64 (§5.3, §5.5; AA-03).

    Checked at construction: a non-int, a bool, NaN or an out-of-range value raises
    `BudgetError` (a `ValueError`) naming the field, so no component is ever built with it.
    """

    page_size: int
    max_pages: int

    def __post_init__(self) -> None:
        check_paging(self.page_size, self.max_pages, field="phase", hard_pages=_PAGES_MAX)

    @classmethod
    def from_paging(cls, paging: Paging) -> PhaseBudget:
        """From a §6.3 "page size x pages" cell (`kernel.specs.budgets.Paging`)."""
        return cls(paging.page_size, paging.pages)

    @property
    def max_items(self) -> int:
        """The items one phase may scan at most: `page_size * max_pages` (§5.4)."""
        return self.page_size * self.max_pages


@dataclass(frozen=True, slots=True)
class PhaseState(Generic[C]):
    """A phase in progress: the cursor the next page starts after, the pages done so far and
    the counters summed so far."""

    cursor: ActionCursor | None
    pages: int
    counters: C


def phase_start(resume: ActionCursor | None, zero: C) -> PhaseState[C]:
    """A phase before its first page, at the phase's resume cursor (None: the due index start)."""
    return PhaseState(resume, 0, zero)


@dataclass(frozen=True, slots=True)
class PhaseSummary(Generic[C]):
    """A finished phase (§5.3): only fixed numeric fields, `stop_reason` and `remaining`
    (AA-07: no lists, text, cursors or evidence). `remaining` is true exactly when the phase
    did not reach `complete`."""

    pages: int
    counters: C
    stop_reason: StopReason
    remaining: bool

    def __post_init__(self) -> None:
        if type(self.pages) is not int or not 1 <= self.pages <= _PAGES_MAX:
            raise ValueError(f"PhaseSummary.pages must be an int 1..{_PAGES_MAX}")
        if type(self.counters) not in (RecoveryCounters, DispatchCounters):
            raise ValueError("PhaseSummary.counters must be a counter set")
        if type(self.stop_reason) is not StopReason:
            raise ValueError("PhaseSummary.stop_reason must be a StopReason")
        if type(self.remaining) is not bool:
            raise ValueError("PhaseSummary.remaining must be a bool")
        if self.remaining is (self.stop_reason is StopReason.COMPLETE):
            raise ValueError("PhaseSummary.remaining is true exactly when not complete")

    def as_dict(self) -> dict[str, int | str | bool]:
        """Flat fields for metrics and reports: `pages`, `stop_reason`, `remaining` and every
        counter by name."""
        fields: dict[str, int | str | bool] = {
            "pages": self.pages,
            "stop_reason": self.stop_reason.value,
            "remaining": self.remaining,
        }
        fields.update(self.counters.as_dict())
        return fields


@dataclass(frozen=True, slots=True)
class ContinuePhase(Generic[C]):
    """§5.3 step 4: the cursor advanced and pages are left: fetch the next page after
    `state.cursor`."""

    state: PhaseState[C]

    @property
    def cursor(self) -> ActionCursor | None:
        return self.state.cursor


@dataclass(frozen=True, slots=True)
class PhaseEnded(Generic[C]):
    """The phase stopped. `next_cursor` is the cursor §5.3 returns with `page_limit` (the
    phase's resume point after a successful cycle) and None for the other stop reasons."""

    summary: PhaseSummary[C]
    next_cursor: ActionCursor | None


def phase_step(
    budget: PhaseBudget, state: PhaseState[C], page: PhasePage[C]
) -> ContinuePhase[C] | PhaseEnded[C]:
    """§5.3 for one fetched page (AA-04, AA-05).

    :raises ValueError: the phase already did `max_pages` pages (a runner that pages past the
        end is a bug, never a policy), or the page's counters are of the other phase.
    """
    if state.pages >= budget.max_pages:
        raise ValueError("the phase already ended: max_pages pages were fetched")
    if type(page.counters) is not type(state.counters):
        raise ValueError("the page's counters belong to the other phase")
    pages = state.pages + 1
    counters = state.counters.plus(page.counters)
    if not page.truncated:
        return PhaseEnded(PhaseSummary(pages, counters, StopReason.COMPLETE, False), None)
    if not strictly_after(page.next_cursor, state.cursor):
        # P-3: a cursor that does not strictly advance is an error; the phase stops here.
        return PhaseEnded(PhaseSummary(pages, counters, StopReason.CURSOR_STALLED, True), None)
    if pages >= budget.max_pages:
        return PhaseEnded(
            PhaseSummary(pages, counters, StopReason.PAGE_LIMIT, True), page.next_cursor
        )
    return ContinuePhase(PhaseState(page.next_cursor, pages, counters))


class CycleVerdict(enum.StrEnum):
    """What follows the recovery phase (§5.2, Appendix D-4)."""

    RUN_DISPATCH = "run_dispatch"
    FAIL_CYCLE = "fail_cycle"


def after_recovery(summary: PhaseSummary[RecoveryCounters]) -> CycleVerdict:
    """D-4 (binding): a `cursor_stalled` recovery phase fails the cycle (the dispatcher is
    called 0 times); `complete` and `page_limit` let the dispatch phase run (AA-01)."""
    if summary.stop_reason is StopReason.CURSOR_STALLED:
        return CycleVerdict.FAIL_CYCLE
    return CycleVerdict.RUN_DISPATCH


class CycleFailureCode(enum.StrEnum):
    """Why a cycle failed: a fixed code, never an exception's text (S-1)."""

    CURSOR_STALLED = Code.CURSOR_STALLED.value  # D-4: the recovery cursor stalled
    PORT_FAILED = "port_failed"  # the phase's port raised (§5.2; the type name is reported)


@dataclass(frozen=True, slots=True)
class FailedCycle:
    """A failed cycle: the phase that failed it and a fixed code. `recovery` is the recovery
    phase's summary when that phase ended (the D-4 case), else None. Resume cursors are kept
    (AA-06)."""

    phase: Phase
    code: CycleFailureCode
    recovery: PhaseSummary[RecoveryCounters] | None = None


@dataclass(frozen=True, slots=True)
class CycleSummary:
    """A successful cycle: both phases ran, in order, and each ended (AA-01, AA-07)."""

    recovery: PhaseSummary[RecoveryCounters]
    dispatch: PhaseSummary[DispatchCounters]


@dataclass(frozen=True, slots=True)
class ResumeCursors:
    """The supervisor's in-memory resume cursors, one per phase (§5.3; never persisted). Both
    start empty, also after a restart."""

    recovery: ActionCursor | None = None
    dispatch: ActionCursor | None = None


def resume_cursor(ended: PhaseEnded[C]) -> ActionCursor | None:
    """A phase's resume cursor after a successful cycle (§5.3): `page_limit` stores the next
    cursor; `complete` and `cursor_stalled` clear it [decision: stalled restarts at the due
    index start]."""
    if ended.summary.stop_reason is StopReason.PAGE_LIMIT:
        return ended.next_cursor
    return None


def resume_cursors(
    before: ResumeCursors,
    recovery: PhaseEnded[RecoveryCounters] | None,
    dispatch: PhaseEnded[DispatchCounters] | None,
    *,
    cycle_ok: bool,
) -> ResumeCursors:
    """The resume cursors after a cycle (§5.3; AA-05, AA-06): updated only after a successful
    cycle, which ended both phases; a failed cycle keeps both exactly as they were.

    :raises ValueError: `cycle_ok` without both phases ended.
    """
    if not cycle_ok:
        return before
    if recovery is None or dispatch is None:
        raise ValueError("a successful cycle ended both phases")
    return ResumeCursors(resume_cursor(recovery), resume_cursor(dispatch))
