"""The Approved Action paging algorithm and cycle rules, pure (SPEC §5.3, §5.2, Appendix D-4;
AA-03, AA-04, AA-05, AA-06, AA-07).

`phase_step` is checked against an independent reading of §5.3 (`_oracle`, written from the
SPEC text, not from the implementation) over random page sequences: truncation, missing,
equal, backwards and advancing cursors, and every budget shape.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.approved_action.pages import (
    ActionCursor,
    DispatchCounters,
    DispatchPage,
    RecoveryCounters,
    RecoveryPage,
    strictly_after,
)
from kernel.approved_action.paging import (
    CYCLE_PHASES,
    ContinuePhase,
    CycleVerdict,
    PhaseBudget,
    PhaseEnded,
    PhaseState,
    PhaseSummary,
    ResumeCursors,
    StopReason,
    after_recovery,
    phase_start,
    phase_step,
    resume_cursor,
    resume_cursors,
)
from kernel.specs.budgets import BudgetError
from kernel.specs.codes import Code

RECOVERY_FIELDS = (
    "scanned",
    "claimed",
    "verified_succeeded",
    "verified_failed",
    "deferred",
    "manual_required",
    "execution_active",
    "already_resolved",
    "unavailable",
)
DISPATCH_FIELDS = (
    "scanned",
    "claimed",
    "started",
    "succeeded",
    "failed",
    "blocked",
    "retrying",
    "deferred",
    "recovery_required",
    "already_terminal",
    "unavailable",
)

cursors = (
    st.builds(ActionCursor, st.integers(0, 5), st.sampled_from(["a", "b", "c", "d"])) | st.none()
)
recovery_counters = st.builds(RecoveryCounters, *[st.integers(0, 9) for _ in RECOVERY_FIELDS])
recovery_pages = st.builds(RecoveryPage, recovery_counters, st.booleans(), cursors)
budgets = st.builds(PhaseBudget, st.integers(1, 64), st.integers(1, 6))


def _run_phase(
    budget: PhaseBudget, resume: ActionCursor | None, pages: list[RecoveryPage]
) -> tuple[PhaseEnded[RecoveryCounters], int]:
    """Drive `phase_step` as a runner does; how many pages it consumed."""
    state = phase_start(resume, RecoveryCounters.zero())
    for used, page in enumerate(pages, start=1):
        step = phase_step(budget, state, page)
        if isinstance(step, PhaseEnded):
            return step, used
        assert isinstance(step, ContinuePhase)
        assert step.cursor == page.next_cursor  # the next page starts after this one's cursor
        state = step.state
    raise AssertionError("the phase did not end within the pages given")


def _key(cursor: ActionCursor) -> tuple[int, str]:
    return (cursor.at_ms, cursor.action_id)


def _oracle(
    budget: PhaseBudget, resume: ActionCursor | None, pages: list[RecoveryPage]
) -> tuple[int, str, bool, ActionCursor | None]:
    """§5.3 read literally: (pages fetched, stop reason, remaining, returned next cursor)."""
    current = resume
    for number, page in enumerate(pages, start=1):
        if not page.truncated:
            return number, "complete", False, None
        nxt = page.next_cursor
        if nxt is None or (current is not None and _key(nxt) <= _key(current)):
            return number, "cursor_stalled", True, None
        if number == budget.max_pages:
            return number, "page_limit", True, nxt
        current = nxt
    raise AssertionError("unreachable: at most max_pages pages")


# -- AA-03 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-03")
@given(st.integers(-70, 140), st.integers(-70, 140))
def test_aa03_phase_budget_accepts_exactly_1_to_64_pages_of_1_to_64(size: int, pages: int) -> None:
    valid = 1 <= size <= 64 and 1 <= pages <= 64
    if valid:
        budget = PhaseBudget(size, pages)
        assert (budget.page_size, budget.max_pages) == (size, pages)
        assert budget.max_items == size * pages
    else:
        with pytest.raises(BudgetError):
            PhaseBudget(size, pages)


@pytest.mark.spec("AA-03")
@pytest.mark.parametrize(
    ("size", "pages", "field"),
    [
        (0, 1, "phase.page_size"),
        (65, 1, "phase.page_size"),
        (1, 0, "phase.pages"),
        (1, 65, "phase.pages"),
        (True, 1, "phase.page_size"),
        (1, True, "phase.pages"),
        (8.0, 1, "phase.page_size"),
        (math.nan, 1, "phase.page_size"),
        (1, math.nan, "phase.pages"),
        ("8", 1, "phase.page_size"),
    ],
)
def test_aa03_non_integers_bools_nan_and_out_of_range_fail_closed(
    size: Any, pages: Any, field: str
) -> None:
    with pytest.raises(BudgetError) as caught:
        PhaseBudget(size, pages)
    assert caught.value.field == field


# -- AA-04, AA-05: the phase algorithm -----------------------------------------------------------
@pytest.mark.spec("AA-04", "AA-05")
@given(budgets, cursors, st.lists(recovery_pages, min_size=6, max_size=6))
def test_aa04_phase_step_follows_section_5_3(
    budget: PhaseBudget, resume: ActionCursor | None, pages: list[RecoveryPage]
) -> None:
    ended, used = _run_phase(budget, resume, pages)
    expected_pages, reason, remaining, cursor = _oracle(budget, resume, pages)
    summary = ended.summary
    assert used == expected_pages == summary.pages
    assert used <= budget.max_pages  # P-4: never more than max_pages pages
    assert summary.stop_reason == reason
    assert summary.remaining is remaining
    assert ended.next_cursor == cursor
    total = RecoveryCounters.zero()
    for page in pages[:used]:
        total = total + page.counters
    assert summary.counters == total  # §5.3 step 1: the summed counters of the pages fetched


@pytest.mark.spec("AA-04")
def test_aa04_an_advancing_cursor_leads_to_the_next_page() -> None:
    budget = PhaseBudget(8, 3)
    first = RecoveryPage(RecoveryCounters.zero(), True, ActionCursor(10, "a"))
    step = phase_step(budget, phase_start(None, RecoveryCounters.zero()), first)
    assert isinstance(step, ContinuePhase)
    assert step.cursor == ActionCursor(10, "a")
    second = RecoveryPage(RecoveryCounters.zero(), True, ActionCursor(10, "b"))  # same ms, id after
    step2 = phase_step(budget, step.state, second)
    assert isinstance(step2, ContinuePhase)
    assert step2.state.pages == 2


@pytest.mark.spec("AA-04")
@pytest.mark.parametrize(
    "next_cursor",
    [None, ActionCursor(10, "a"), ActionCursor(9, "z")],
    ids=["missing", "equal", "backwards"],
)
def test_aa04_a_missing_or_non_advancing_cursor_stops_with_cursor_stalled(
    next_cursor: ActionCursor | None,
) -> None:
    state = PhaseState(ActionCursor(10, "a"), 1, RecoveryCounters.zero())
    page = RecoveryPage(RecoveryCounters.zero(), True, next_cursor)
    step = phase_step(PhaseBudget(8, 4), state, page)
    assert isinstance(step, PhaseEnded)
    assert step.summary.stop_reason is StopReason.CURSOR_STALLED
    assert step.summary.remaining is True
    assert step.summary.pages == 2
    assert step.next_cursor is None


@pytest.mark.spec("AA-05")
def test_aa05_max_pages_stops_with_page_limit_and_the_next_cursor() -> None:
    budget = PhaseBudget(2, 2)
    state = phase_start(None, DispatchCounters.zero())
    counters = DispatchCounters(2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0)
    step = phase_step(budget, state, DispatchPage(counters, True, ActionCursor(1, "a")))
    assert isinstance(step, ContinuePhase)
    end = phase_step(budget, step.state, DispatchPage(counters, True, ActionCursor(2, "b")))
    assert isinstance(end, PhaseEnded)
    assert end.summary == PhaseSummary(2, counters + counters, StopReason.PAGE_LIMIT, True)
    assert end.next_cursor == ActionCursor(2, "b")
    with pytest.raises(ValueError, match="already ended"):  # no page past max_pages (P-4)
        phase_step(
            budget, PhaseState(ActionCursor(2, "b"), 2, counters), DispatchPage(counters, False)
        )


def test_a_page_of_the_other_phase_is_refused() -> None:
    state = phase_start(None, RecoveryCounters.zero())
    page = DispatchPage(DispatchCounters.zero(), False, None)
    with pytest.raises(ValueError, match="other phase"):
        phase_step(PhaseBudget(1, 1), state, page)  # type: ignore[misc]


# -- AA-05, AA-06: resume cursors ------------------------------------------------------------------
def _ended(reason: StopReason, cursor: ActionCursor | None) -> PhaseEnded[Any]:
    remaining = reason is not StopReason.COMPLETE
    return PhaseEnded(PhaseSummary(1, RecoveryCounters.zero(), reason, remaining), cursor)


@pytest.mark.spec("AA-05")
def test_aa05_page_limit_stores_the_cursor_complete_and_stalled_clear_it() -> None:
    before = ResumeCursors(ActionCursor(1, "r"), ActionCursor(1, "d"))
    limit = _ended(StopReason.PAGE_LIMIT, ActionCursor(7, "x"))
    assert resume_cursor(limit) == ActionCursor(7, "x")
    assert resume_cursor(_ended(StopReason.COMPLETE, None)) is None
    assert resume_cursor(_ended(StopReason.CURSOR_STALLED, None)) is None
    after = resume_cursors(before, limit, _ended(StopReason.COMPLETE, None), cycle_ok=True)
    assert after == ResumeCursors(ActionCursor(7, "x"), None)
    stalled_dispatch = _ended(StopReason.CURSOR_STALLED, None)
    cleared = resume_cursors(
        before, _ended(StopReason.COMPLETE, None), stalled_dispatch, cycle_ok=True
    )
    assert cleared == ResumeCursors(None, None)


@pytest.mark.spec("AA-06")
@given(cursors, cursors)
def test_aa06_a_failed_cycle_keeps_both_cursors_exactly(
    recovery: ActionCursor | None, dispatch: ActionCursor | None
) -> None:
    before = ResumeCursors(recovery, dispatch)
    limit = _ended(StopReason.PAGE_LIMIT, ActionCursor(9, "z"))
    for rec, disp in [(None, None), (limit, None), (limit, limit)]:
        assert resume_cursors(before, rec, disp, cycle_ok=False) is before
    with pytest.raises(ValueError, match="both phases"):
        resume_cursors(before, limit, None, cycle_ok=True)


# -- D-4 -----------------------------------------------------------------------------------------
@pytest.mark.spec("AA-01")
def test_d4_a_stalled_recovery_fails_the_cycle_the_other_reasons_run_dispatch() -> None:
    assert CYCLE_PHASES == ("recovery", "dispatch")
    zero = RecoveryCounters.zero()
    stalled = PhaseSummary(1, zero, StopReason.CURSOR_STALLED, True)
    assert after_recovery(stalled) is CycleVerdict.FAIL_CYCLE
    assert after_recovery(PhaseSummary(1, zero, StopReason.COMPLETE, False)) is (
        CycleVerdict.RUN_DISPATCH
    )
    assert after_recovery(PhaseSummary(2, zero, StopReason.PAGE_LIMIT, True)) is (
        CycleVerdict.RUN_DISPATCH
    )


# -- AA-07: summary shape ------------------------------------------------------------------------
@pytest.mark.spec("AA-07")
def test_aa07_a_summary_holds_only_numbers_a_stop_reason_and_remaining() -> None:
    assert [f.name for f in dataclasses.fields(PhaseSummary)] == [
        "pages",
        "counters",
        "stop_reason",
        "remaining",
    ]
    assert [f.name for f in dataclasses.fields(RecoveryCounters)] == list(RECOVERY_FIELDS)
    assert [f.name for f in dataclasses.fields(DispatchCounters)] == list(DISPATCH_FIELDS)
    assert {s.value for s in StopReason} == {Code.COMPLETE, Code.PAGE_LIMIT, Code.CURSOR_STALLED}


@pytest.mark.spec("AA-07")
@given(budgets, cursors, st.lists(recovery_pages, min_size=6, max_size=6))
def test_aa07_every_summary_value_is_a_number_a_code_or_a_flag(
    budget: PhaseBudget, resume: ActionCursor | None, pages: list[RecoveryPage]
) -> None:
    ended, _ = _run_phase(budget, resume, pages)
    flat = ended.summary.as_dict()
    assert set(flat) == {"pages", "stop_reason", "remaining", *RECOVERY_FIELDS}
    for name, value in flat.items():
        if name == "stop_reason":
            assert type(value) is str
            assert value in {s.value for s in StopReason}
        elif name == "remaining":
            assert type(value) is bool
        else:
            assert type(value) is int
            assert value >= 0
    assert "ActionCursor" not in repr(ended.summary)  # the cursor travels beside, never inside


@pytest.mark.spec("AA-07")
@pytest.mark.parametrize("bad", [True, -1, 1.0, math.nan, "1", [1], None])
def test_aa07_counters_refuse_anything_but_non_negative_ints(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"RecoveryCounters\.claimed"):
        RecoveryCounters(0, bad, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match=r"DispatchCounters\.unavailable"):
        DispatchCounters(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, bad)


@pytest.mark.spec("AA-07")
def test_aa07_a_summary_refuses_inconsistent_or_non_numeric_fields() -> None:
    zero = RecoveryCounters.zero()
    with pytest.raises(ValueError, match="remaining"):
        PhaseSummary(1, zero, StopReason.COMPLETE, True)
    with pytest.raises(ValueError, match="remaining"):
        PhaseSummary(1, zero, StopReason.PAGE_LIMIT, False)
    with pytest.raises(ValueError, match="pages"):
        PhaseSummary(0, zero, StopReason.COMPLETE, False)
    with pytest.raises(ValueError, match="stop_reason"):
        PhaseSummary(1, zero, "complete", False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="counters"):
        PhaseSummary(1, {"scanned": 1}, StopReason.COMPLETE, False)  # type: ignore[type-var]


# -- the values ------------------------------------------------------------------------------------
@given(recovery_counters, recovery_counters)
def test_counters_add_field_by_field_and_zero_is_neutral(
    a: RecoveryCounters, b: RecoveryCounters
) -> None:
    assert a + b == b + a == a.plus(b)
    assert a + RecoveryCounters.zero() == a
    assert (a + b).as_dict() == {k: a.as_dict()[k] + b.as_dict()[k] for k in RECOVERY_FIELDS}
    with pytest.raises(TypeError):
        a.plus(DispatchCounters.zero())  # type: ignore[arg-type]


@given(cursors, cursors)
def test_cursor_order_is_the_keyset_order(a: ActionCursor | None, b: ActionCursor | None) -> None:
    expected = a is not None and (b is None or _key(a) > _key(b))
    assert strictly_after(a, b) is expected


@pytest.mark.parametrize(("at", "action"), [(-1, "a"), (True, "a"), (1.0, "a"), (1, ""), (1, 3)])
def test_cursor_refuses_bad_keys(at: Any, action: Any) -> None:
    with pytest.raises(ValueError, match="ActionCursor"):
        ActionCursor(at, action)


def test_a_page_refuses_wrong_field_types() -> None:
    with pytest.raises(ValueError, match="truncated"):
        RecoveryPage(RecoveryCounters.zero(), 1, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="counters"):
        RecoveryPage(DispatchCounters.zero(), False, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="next_cursor"):
        DispatchPage(DispatchCounters.zero(), True, (1, "a"))  # type: ignore[arg-type]
