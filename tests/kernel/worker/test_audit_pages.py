"""The startup auditor's page rules and result (SPEC §3.10 U-2..U-5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.outcomes import Rejected
from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.specs.journal import AuditClass, JournalState, RecoveryReason
from kernel.worker.auditor import (
    AuditPage,
    AuditProgress,
    AuditResult,
    audit_page,
    audit_result,
    check_budget,
    entry,
)

BUDGET = Paging(4, 3)
IDS = [f"{i:064x}" for i in range(1, 40)]


def _entries(ids: list[str], state: JournalState = JournalState.ACCEPTED) -> tuple:  # type: ignore[type-arg]
    return tuple(entry(i, f"a-{n}", state) for n, i in enumerate(ids))


def _page(ids: list[str], has_more: bool, cursor: object = "last") -> AuditPage:
    last = ids[-1] if ids else None
    return AuditPage(_entries(ids), last if cursor == "last" else cursor, has_more)  # type: ignore[arg-type]


def _scan(pages: list[AuditPage]) -> AuditProgress | Rejected:
    progress: AuditProgress | Rejected = AuditProgress(BUDGET)
    for page in pages:
        assert isinstance(progress, AuditProgress)
        progress = audit_page(progress, page)
        if isinstance(progress, Rejected):
            return progress
    return progress


@given(st.integers(0, 12))
def test_a_well_formed_scan_is_complete_and_lists_every_record_once(n: int) -> None:
    ids = IDS[:n]
    chunks = [ids[i : i + 4] for i in range(0, n, 4)] or [[]]
    pages = [_page(c, has_more=i < len(chunks) - 1) for i, c in enumerate(chunks)]
    progress = _scan(pages)
    assert isinstance(progress, AuditProgress)
    result = audit_result(progress)
    assert isinstance(result, AuditResult)
    assert [e.offer_id for e in result.entries] == ids
    assert result.status is Code.READY
    assert result.counts[AuditClass.NO_LOCAL_EXECUTION] == n


@pytest.mark.spec("INBOX-26")
@pytest.mark.parametrize(
    ("pages", "code"),
    [
        ([_page(IDS[:4], True), _page(IDS[3:7], True)], Code.AUDIT_CURSOR_INVALID),  # repeated
        ([_page(IDS[4:8], True), _page(IDS[0:4], True)], Code.AUDIT_CURSOR_INVALID),  # regress
        ([_page(IDS[:4], True, cursor=IDS[9])], Code.AUDIT_CURSOR_INVALID),  # skipping cursor
        ([_page(IDS[:5], True)], Code.AUDIT_CURSOR_INVALID),  # oversized
        ([_page([IDS[2], IDS[1]], False)], Code.AUDIT_CURSOR_INVALID),  # not ascending
        ([_page([], True, cursor=None)], Code.AUDIT_CURSOR_INVALID),  # stalled
        (
            [
                _page(IDS[0:4], True),
                _page(IDS[4:8], True),
                _page(IDS[8:12], True),
                _page(IDS[12:16], False),
            ],
            Code.AUDIT_BUDGET_EXHAUSTED,
        ),
        ([_page(IDS[:4], False), _page([], False, cursor=IDS[3])], Code.AUDIT_CURSOR_INVALID),
    ],
    ids=[
        "repeated",
        "regressing",
        "skipping",
        "oversized",
        "unordered",
        "stalled",
        "past-max-pages",
        "page-after-end",
    ],
)
def test_bad_pages_and_exhausted_budgets_fail_with_their_code(
    pages: list[AuditPage], code: Code
) -> None:
    """INBOX-26: each broken page shape and an exhausted budget fail with its code."""
    assert _scan(pages) == Rejected(code)


@pytest.mark.spec("INBOX-26")
def test_an_incomplete_scan_is_never_reported_as_complete() -> None:
    progress = _scan([_page(IDS[:4], True), _page(IDS[4:8], True), _page(IDS[8:12], True)])
    assert isinstance(progress, AuditProgress)
    assert not progress.complete
    assert audit_result(progress) == Rejected(Code.AUDIT_BUDGET_EXHAUSTED)


@pytest.mark.spec("INBOX-25")
def test_the_result_classifies_states_and_says_whether_reconciliation_is_needed() -> None:
    """INBOX-25 / U-5: `ready` unless an entry needs launch or execution reconciliation; the
    result holds ids, states, reasons and classes only."""
    entries = (
        entry(IDS[0], "a0", JournalState.COMPLETION_ACKNOWLEDGED),
        entry(IDS[1], "a1", JournalState.RECOVERY_REQUIRED, RecoveryReason.LAUNCH_OUTCOME_UNKNOWN),
        entry(IDS[2], "a2", JournalState.STARTED),
    )
    progress = audit_page(AuditProgress(BUDGET), AuditPage(entries[:3], IDS[2], False))
    assert isinstance(progress, AuditProgress)
    result = audit_result(progress)
    assert isinstance(result, AuditResult)
    assert result.status is Code.RECONCILIATION_REQUIRED
    assert result.counts[AuditClass.SETTLED_COMPLETION] == 1
    assert result.counts[AuditClass.LAUNCH_RECONCILIATION] == 1
    assert result.counts[AuditClass.EXECUTION_RECONCILIATION] == 1
    settled = audit_result(AuditProgress(BUDGET, 1, entries[:1], IDS[0], complete=True))
    assert isinstance(settled, AuditResult)
    assert settled.status is Code.READY  # a settled completion does not block startup
    fields = {f for e in result.entries for f in e.__slots__}
    assert fields == {"offer_id", "attempt_id", "state", "recovery_reason", "classification"}


def test_budgets_outside_the_hard_limits_or_below_capacity_are_rejected() -> None:
    check_budget(Paging(16, 4), capacity=64)
    for bad in (Paging(65, 1), Paging(16, 17), Paging(0, 1)):
        with pytest.raises(ValueError, match="audit"):
            check_budget(bad, capacity=1)
    with pytest.raises(ValueError, match="cover the journal capacity"):
        check_budget(Paging(16, 4), capacity=65)
