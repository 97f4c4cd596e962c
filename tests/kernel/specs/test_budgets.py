"""CAD-11 and CAD-12 (budget part): `kernel.specs.budgets` equals SPEC §6.3 and its hard limits.

The expected values below are transcribed again, by hand, from the §6.3 table (one entry per row,
cells in the column order edge, standalone, cluster, worker), so a change to either the SPEC or the
code shows up as a mismatch here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.specs.budgets import (
    BUDGETS,
    HARD_LIMITS,
    REFUSED,
    ApprovedActionBudget,
    BudgetError,
    IntRange,
    NoDefault,
    Paging,
    PagingLimit,
    ProfileBudget,
    Refused,
    budget_for,
    check_in_range,
    check_initial_delay_ms,
    check_interval_ms,
    check_page_size,
    check_paging,
    check_stop_timeout_ms,
)
from kernel.specs.codes import Code
from kernel.specs.limits import LEASE_DURATION_DEFAULT_MS
from kernel.specs.states import Profile

S = 1_000  # one second in ms
MIN = 60 * S
H = 60 * MIN
DAY = 24 * H
KIB = 1024
PROFILES = (Profile.EDGE, Profile.STANDALONE, Profile.CLUSTER, Profile.WORKER)

# --------------------------------------------------------------------------------------------
# §6.3, transcribed row by row: "component | parameter": (edge, standalone, cluster, worker).
# None is "-"; "a x b" is (page size, pages); "a; b" is a tuple (a, b).
# --------------------------------------------------------------------------------------------
EXPECTED_ROWS: dict[str, tuple[object, object, object, object]] = {
    "Local execution control | cadence": (5 * S, 1 * S, None, None),
    "Local execution control | lost retry per cycle (one page)": (2, 16, None, None),
    "Local execution control | slow-cycle cleanup period": (
        (12, 60 * S),
        (60, 60 * S),
        None,
        None,
    ),
    "Lost retry source/scanner | page": (16, 16, 16, None),
    "Dedicated lost-retry lifecycle | cadence x page": ((30 * S, 8), (5 * S, 32), None, None),
    "Cluster runtime recovery | page per cycle": (None, None, 16, None),
    "Cluster lost retry | page per cycle": (None, None, 16, None),
    # [decision D-6] Not a §6.3 row: §1.9's cluster cancellation-convergence page (default 16).
    "Cluster cancellation convergence | page per cycle": (None, None, 16, None),
    "Cluster dispatch | grants per cycle": (None, None, 16, None),  # decision WS-6
    "Local startup recovery | page; total per startup": ((16, 1024), (16, 1024), None, None),
    "Dispatch lease expiry scanner | page per call": (16, 16, 16, None),
    "Local claimed dispatcher | activations per call; scan": (
        (1, (8, 1)),
        (1, (8, 1)),
        None,
        None,
    ),
    "Local scheduler | cadence": (5 * S, 1 * S, None, None),
    "Local scheduler: cancellation convergence | page size x pages": ((4, 1), (32, 4), None, None),
    # [decision TK-13] Not a §6.3 row: the trigger-schedule phase of O-3 (issue 15).
    "Local scheduler: trigger schedule | page size x pages": ((4, 1), (16, 4), None, None),
    "Local scheduler: frontier | page size x pages": ((1, 1), (16, 4), None, None),
    "Local scheduler: Task Attempt admission | page size x pages": ((1, 1), (16, 4), None, None),
    "Local scheduler: dispatch | activations per cycle": (1, 4, None, None),
    "Cluster scheduler | cadence": (None, None, 1 * S, None),
    # Not a §6.3 row: the trigger-schedule step of the cluster cycle (O-5 phase 3, issue 17).
    "Cluster scheduler: trigger schedule | page size x pages": (None, None, (16, 4), None),
    "Cluster scheduler: Workflow frontier | page size x pages": (None, None, (16, 4), None),
    "Cluster scheduler: Task Attempt admission | page size x pages": (None, None, (16, 4), None),
    "Approved Action | cadence": (30 * S, 2 * S, "refused", "refused"),
    "Approved Action: recovery | page size x pages": ((8, 1), (16, 2), None, None),
    "Approved Action: dispatch | page size x pages": ((8, 1), (32, 4), None, None),
    "Approved Action | items per cycle (max)": (16, 160, None, None),
    "Approved Action | stop timeout; initial delay": ((5 * S, 0), (5 * S, 0), None, None),
    "Other lifecycles | stop timeout": (5 * S, 5 * S, 5 * S, 5 * S),
    "Offer journal | capacity": (64, 64, None, 64),
    "Offer journal | record size": (192 * KIB, 192 * KIB, None, 192 * KIB),
    "Offer journal | list page": (64, 64, None, 64),
    "Journal ownership | stale window; refresh": (
        (30 * S, 15 * S), (30 * S, 15 * S), None, (30 * S, 15 * S),
    ),
    "Startup auditor | page size x pages": ((16, 4), (64, 16), None, (64, 16)),
    "Startup recovery supervisor | actions": (64, 64, None, 64),
    "Receipt publish grace | wait": (100, 100, None, 100),
    "Terminal retention | page; deletes per call": ((16, 8), (16, 8), None, (16, 8)),
    "Terminal retention | retention": ("set explicitly", "set explicitly", None, "set explicitly"),
    "Running/failure ACK | version-mismatch attempts": (3, 3, None, 3),
    "Run dispatch lease | duration": (60 * S, 60 * S, 60 * S, None),  # Appendix E-2
    "Retry policy | max_attempts; backoff": (None, None, None, None),
    "Identities | length": (36, 36, 36, 36),
}  # fmt: skip

# The "Hard limit" column, transcribed (None: "-" or no number stated).
EXPECTED_HARD: dict[str, object] = {
    "page_size": (1, 64),  # P-1
    "cadence_ms": (250, 24 * H),  # L-9, also "250 ms..24 h" for Approved Action
    "stop_timeout_ms": (1, 60 * S),  # "60 s", and > 0 (B-05)
    "execution_control_lost_retry_per_cycle_max": 64,
    "lost_retry_page_size_max": 64,
    "cluster_runtime_recovery_page_size_max": 64,
    "cluster_lost_retry_page_size_max": 64,
    "cluster_cancellation_convergence_page_size_max": 64,
    "cluster_dispatch_grants_max": 64,  # decision WS-6
    "startup_recovery_page_size_max": 64,
    "startup_recovery_total_max": 1024,
    "lease_expiry_scanner_page_size_max": 64,
    "claimed_dispatcher_scan": (64, 16),
    "scheduler_phase": (64, None),  # "64 per page"
    "approved_action_phase": (64, 64),
    "journal_capacity_max": 1024,
    "journal_record_size_max_bytes": 192 * KIB,
    "journal_list_page_max": 64,
    "journal_stale_window_ms": (5 * S, 5 * MIN),
    "journal_refresh_divisor": 2,  # "window/2"
    "startup_auditor": (64, 16),
    "startup_auditor_records_max": 1024,
    "recovery_supervisor_actions_max": 1024,
    "receipt_publish_grace_max_ms": 5 * S,
    "terminal_retention_page_size_max": 64,
    "terminal_retention_deletes_max": 64,
    "terminal_retention_ms": (1 * MIN, 30 * DAY),
    "ack_version_mismatch_attempts_max": None,  # "small, bounded"
    "lease_duration_ms": (5 * S, 10 * MIN),
    "max_attempts": (1, 16),
    "backoff_ms": (0, 24 * H),
    "identity_length_max": 36,
}


def _cell(value: object) -> object:
    """Flatten the code's value types into the transcription's plain tuples."""
    if value is None or isinstance(value, int | str):
        return value
    if isinstance(value, NoDefault):
        return value.value
    if isinstance(value, Refused):
        return "refused"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(_cell(getattr(value, f.name)) for f in dataclasses.fields(value))
    raise AssertionError(f"unexpected cell type {type(value).__name__}")


def _rows(b: ProfileBudget) -> dict[str, object]:
    """The budget of one profile as the §6.3 rows (the inverse of the module's grouping)."""
    aa = b.approved_action
    aa_budget = aa if isinstance(aa, ApprovedActionBudget) else None
    retention = b.terminal_retention
    return {
        "Local execution control | cadence": b.execution_control_cadence_ms,
        "Local execution control | lost retry per cycle (one page)": (
            b.execution_control_lost_retry_per_cycle
        ),
        "Local execution control | slow-cycle cleanup period": _cell(
            b.execution_control_slow_cleanup
        ),
        "Lost retry source/scanner | page": b.lost_retry_page_size,
        "Dedicated lost-retry lifecycle | cadence x page": _cell(b.superseded_lost_retry_lifecycle),
        "Cluster runtime recovery | page per cycle": b.cluster_runtime_recovery_page_size,
        "Cluster lost retry | page per cycle": b.cluster_lost_retry_page_size,
        "Cluster cancellation convergence | page per cycle": (
            b.cluster_cancellation_convergence_page_size
        ),
        "Cluster dispatch | grants per cycle": b.cluster_dispatch_grants,
        "Local startup recovery | page; total per startup": _cell(b.startup_recovery),
        "Dispatch lease expiry scanner | page per call": b.lease_expiry_scanner_page_size,
        "Local claimed dispatcher | activations per call; scan": _cell(b.claimed_dispatcher),
        "Local scheduler | cadence": b.scheduler_cadence_ms,
        "Local scheduler: cancellation convergence | page size x pages": _cell(
            b.scheduler_cancellation
        ),
        "Local scheduler: trigger schedule | page size x pages": _cell(
            b.scheduler_trigger_schedule
        ),
        "Local scheduler: frontier | page size x pages": _cell(b.scheduler_frontier),
        "Local scheduler: Task Attempt admission | page size x pages": _cell(
            b.scheduler_task_admission
        ),
        "Local scheduler: dispatch | activations per cycle": b.scheduler_dispatch_activations,
        "Cluster scheduler | cadence": b.cluster_scheduler_cadence_ms,
        "Cluster scheduler: trigger schedule | page size x pages": _cell(
            b.cluster_trigger_schedule
        ),
        "Cluster scheduler: Workflow frontier | page size x pages": _cell(
            b.cluster_workflow_frontier
        ),
        "Cluster scheduler: Task Attempt admission | page size x pages": _cell(
            b.cluster_task_admission
        ),
        "Approved Action | cadence": "refused" if aa_budget is None else aa_budget.cadence_ms,
        "Approved Action: recovery | page size x pages": (
            None if aa_budget is None else _cell(aa_budget.recovery)
        ),
        "Approved Action: dispatch | page size x pages": (
            None if aa_budget is None else _cell(aa_budget.dispatch)
        ),
        "Approved Action | items per cycle (max)": (
            None if aa_budget is None else aa_budget.max_items_per_cycle
        ),
        "Approved Action | stop timeout; initial delay": (
            None if aa_budget is None else (aa_budget.stop_timeout_ms, aa_budget.initial_delay_ms)
        ),
        "Other lifecycles | stop timeout": b.lifecycle_stop_timeout_ms,
        "Offer journal | capacity": b.journal_capacity,
        "Offer journal | record size": b.journal_record_size_bytes,
        "Offer journal | list page": b.journal_list_page_max,
        "Journal ownership | stale window; refresh": _cell(b.journal_ownership),
        "Startup auditor | page size x pages": _cell(b.startup_auditor),
        "Startup recovery supervisor | actions": b.recovery_supervisor_actions,
        "Receipt publish grace | wait": b.receipt_publish_grace_ms,
        "Terminal retention | page; deletes per call": (
            None if retention is None else (retention.page_size, retention.deletes_per_call)
        ),
        "Terminal retention | retention": None if retention is None else _cell(retention.retention),
        "Running/failure ACK | version-mismatch attempts": b.ack_version_mismatch_attempts,
        "Run dispatch lease | duration": b.lease_duration_ms,
        # Every cell of this row is "-": the values are hard limits only (checked below).
        "Retry policy | max_attempts; backoff": None,
        "Identities | length": b.identity_length,
    }


# Fields of ProfileBudget that `_rows` reads; a new field must be added to the transcription.
_READ_FIELDS = {
    "profile",
    "execution_control_cadence_ms",
    "execution_control_lost_retry_per_cycle",
    "execution_control_slow_cleanup",
    "lost_retry_page_size",
    "superseded_lost_retry_lifecycle",
    "cluster_runtime_recovery_page_size",
    "cluster_lost_retry_page_size",
    "cluster_cancellation_convergence_page_size",
    "cluster_dispatch_grants",
    "startup_recovery",
    "lease_expiry_scanner_page_size",
    "claimed_dispatcher",
    "scheduler_cadence_ms",
    "scheduler_cancellation",
    "scheduler_trigger_schedule",
    "scheduler_frontier",
    "scheduler_task_admission",
    "scheduler_dispatch_activations",
    "cluster_scheduler_cadence_ms",
    "cluster_trigger_schedule",
    "cluster_workflow_frontier",
    "cluster_task_admission",
    "approved_action",
    "lifecycle_stop_timeout_ms",
    "journal_capacity",
    "journal_record_size_bytes",
    "journal_list_page_max",
    "journal_ownership",
    "startup_auditor",
    "recovery_supervisor_actions",
    "receipt_publish_grace_ms",
    "terminal_retention",
    "ack_version_mismatch_attempts",
    "lease_duration_ms",
    "identity_length",
}


# --------------------------------------------------------------------------------------------
# CAD-11: the data equals §6.3
# --------------------------------------------------------------------------------------------


@pytest.mark.spec("CAD-11")
def test_table_has_exactly_the_four_profiles() -> None:
    assert tuple(BUDGETS) == PROFILES
    assert set(BUDGETS) == set(Profile)
    for profile in PROFILES:
        assert BUDGETS[profile].profile is profile
        assert budget_for(profile) is BUDGETS[profile]
        assert budget_for(cast(Profile, profile.value)) is BUDGETS[profile]


@pytest.mark.spec("CAD-11")
def test_every_field_is_transcribed() -> None:
    assert {f.name for f in dataclasses.fields(ProfileBudget)} == _READ_FIELDS


@pytest.mark.spec("CAD-11")
@pytest.mark.parametrize("column", range(4), ids=[p.value for p in PROFILES])
def test_profile_column_equals_spec_cell_by_cell(column: int) -> None:
    actual = _rows(BUDGETS[PROFILES[column]])
    assert actual.keys() == EXPECTED_ROWS.keys()
    for row, cells in EXPECTED_ROWS.items():
        assert actual[row] == cells[column], f"§6.3 row {row!r}, column {PROFILES[column]}"


@pytest.mark.spec("CAD-11")
def test_hard_limit_column_equals_spec() -> None:
    actual = {f.name: _cell(getattr(HARD_LIMITS, f.name)) for f in dataclasses.fields(HARD_LIMITS)}
    assert actual == EXPECTED_HARD


@pytest.mark.spec("CAD-11")
def test_refused_profiles_carry_profile_not_supported() -> None:
    for profile in (Profile.CLUSTER, Profile.WORKER):
        assert BUDGETS[profile].approved_action is REFUSED
        assert REFUSED.code is Code.PROFILE_NOT_SUPPORTED
    for profile in (Profile.EDGE, Profile.STANDALONE):
        assert isinstance(BUDGETS[profile].approved_action, ApprovedActionBudget)


@pytest.mark.spec("CAD-11")
def test_table_is_immutable() -> None:
    with pytest.raises(TypeError):
        cast(Any, BUDGETS)[Profile.EDGE] = BUDGETS[Profile.STANDALONE]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cast(Any, BUDGETS[Profile.EDGE]).lease_duration_ms = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        cast(Any, HARD_LIMITS).page_size = IntRange(1, 1000)


def _within(value: int, limit: IntRange) -> None:
    assert limit.minimum <= value <= limit.maximum, (value, limit)
    assert value in limit


def _paging_within(paging: Paging, limit: PagingLimit) -> None:
    assert 1 <= paging.page_size <= limit.page_size_max, (paging, limit)
    assert paging.pages >= 1, paging
    if limit.pages_max is not None:
        assert paging.pages <= limit.pages_max, (paging, limit)


@pytest.mark.spec("CAD-11")
@pytest.mark.parametrize("profile", PROFILES, ids=[p.value for p in PROFILES])
def test_every_value_satisfies_its_hard_limit(profile: Profile) -> None:
    b = BUDGETS[profile]
    hard = HARD_LIMITS
    for cadence in (b.execution_control_cadence_ms, b.scheduler_cadence_ms):
        if cadence is not None:
            _within(cadence, hard.cadence_ms)
    if b.cluster_scheduler_cadence_ms is not None:
        _within(b.cluster_scheduler_cadence_ms, hard.cadence_ms)
    if b.execution_control_lost_retry_per_cycle is not None:
        _within(
            b.execution_control_lost_retry_per_cycle,
            IntRange(1, hard.execution_control_lost_retry_per_cycle_max),
        )
    if b.execution_control_slow_cleanup is not None:
        assert b.execution_control_cadence_ms is not None
        assert b.execution_control_slow_cleanup.every_nth_cycle >= 1
        # "every 12th cycle (60 s)": the period is the cycle count at the profile cadence.
        assert (
            b.execution_control_slow_cleanup.every_nth_cycle * b.execution_control_cadence_ms
            == b.execution_control_slow_cleanup.period_ms
        )
    page_caps = (
        (b.lost_retry_page_size, hard.lost_retry_page_size_max),
        (b.cluster_runtime_recovery_page_size, hard.cluster_runtime_recovery_page_size_max),
        (b.cluster_lost_retry_page_size, hard.cluster_lost_retry_page_size_max),
        (
            b.cluster_cancellation_convergence_page_size,
            hard.cluster_cancellation_convergence_page_size_max,
        ),
        (b.cluster_dispatch_grants, hard.cluster_dispatch_grants_max),
        (b.lease_expiry_scanner_page_size, hard.lease_expiry_scanner_page_size_max),
        (b.journal_list_page_max, hard.journal_list_page_max),
    )
    for page, cap in page_caps:
        if page is not None:
            _within(page, IntRange(1, cap))
            _within(page, hard.page_size)
    if b.startup_recovery is not None:
        _within(b.startup_recovery.page_size, IntRange(1, hard.startup_recovery_page_size_max))
        _within(b.startup_recovery.total_per_startup, IntRange(1, hard.startup_recovery_total_max))
    if b.claimed_dispatcher is not None:
        assert b.claimed_dispatcher.activations_per_call >= 1
        _paging_within(b.claimed_dispatcher.scan, hard.claimed_dispatcher_scan)
    for phase in (
        b.scheduler_cancellation,
        b.scheduler_trigger_schedule,
        b.cluster_trigger_schedule,
        b.cluster_workflow_frontier,
        b.cluster_task_admission,
        b.scheduler_frontier,
        b.scheduler_task_admission,
    ):
        if phase is not None:
            _paging_within(phase, hard.scheduler_phase)
    if b.scheduler_dispatch_activations is not None:
        assert b.scheduler_dispatch_activations >= 1
    aa = b.approved_action
    if isinstance(aa, ApprovedActionBudget):
        _within(aa.cadence_ms, hard.cadence_ms)
        _paging_within(aa.recovery, hard.approved_action_phase)
        _paging_within(aa.dispatch, hard.approved_action_phase)
        _within(aa.stop_timeout_ms, hard.stop_timeout_ms)
        _within(aa.initial_delay_ms, IntRange(0, aa.cadence_ms))
    _within(b.lifecycle_stop_timeout_ms, hard.stop_timeout_ms)
    if b.journal_capacity is not None:
        _within(b.journal_capacity, IntRange(1, hard.journal_capacity_max))
    if b.journal_record_size_bytes is not None:
        _within(b.journal_record_size_bytes, IntRange(1, hard.journal_record_size_max_bytes))
    if b.journal_ownership is not None:
        _within(b.journal_ownership.stale_window_ms, hard.journal_stale_window_ms)
        assert (
            b.journal_ownership.refresh_ms * hard.journal_refresh_divisor
            == b.journal_ownership.stale_window_ms
        )
    if b.startup_auditor is not None:
        _paging_within(b.startup_auditor, hard.startup_auditor)
    if b.recovery_supervisor_actions is not None:
        _within(b.recovery_supervisor_actions, IntRange(1, hard.recovery_supervisor_actions_max))
    if b.receipt_publish_grace_ms is not None:
        _within(b.receipt_publish_grace_ms, IntRange(0, hard.receipt_publish_grace_max_ms))
    if b.terminal_retention is not None:
        _within(b.terminal_retention.page_size, IntRange(1, hard.terminal_retention_page_size_max))
        _within(
            b.terminal_retention.deletes_per_call, IntRange(1, hard.terminal_retention_deletes_max)
        )
        assert b.terminal_retention.retention is NoDefault.SET_EXPLICITLY
    if b.ack_version_mismatch_attempts is not None:
        assert hard.ack_version_mismatch_attempts_max is None  # "small, bounded"
        assert 1 <= b.ack_version_mismatch_attempts <= 3
    if b.lease_duration_ms is not None:
        _within(b.lease_duration_ms, hard.lease_duration_ms)
    _within(b.identity_length, IntRange(1, hard.identity_length_max))


@pytest.mark.spec("CAD-11")
@pytest.mark.parametrize("profile", PROFILES, ids=[p.value for p in PROFILES])
def test_table_values_pass_the_validation_helpers(profile: Profile) -> None:
    b = BUDGETS[profile]
    for phase in (
        b.scheduler_cancellation,
        b.scheduler_trigger_schedule,
        b.cluster_trigger_schedule,
        b.cluster_workflow_frontier,
        b.cluster_task_admission,
        b.scheduler_frontier,
        b.scheduler_task_admission,
    ):
        if phase is not None:
            assert check_paging(phase.page_size, phase.pages, field="p", hard_pages=None) == phase
    aa = b.approved_action
    if isinstance(aa, ApprovedActionBudget):
        assert check_interval_ms(aa.cadence_ms) == aa.cadence_ms
        assert check_stop_timeout_ms(aa.stop_timeout_ms) == aa.stop_timeout_ms
        assert check_initial_delay_ms(aa.initial_delay_ms, interval_ms=aa.cadence_ms) == 0
        for paging in (aa.recovery, aa.dispatch):
            assert check_paging(paging.page_size, paging.pages, field="p", hard_pages=64) == paging
    if b.startup_auditor is not None:
        auditor = b.startup_auditor
        assert check_paging(auditor.page_size, auditor.pages, field="a", hard_pages=16) == auditor
    assert check_stop_timeout_ms(b.lifecycle_stop_timeout_ms) == b.lifecycle_stop_timeout_ms


# --------------------------------------------------------------------------------------------
# CAD-11: the validation helpers reject configuration outside the hard limits (P-1, L-9)
# --------------------------------------------------------------------------------------------

WIDE = st.integers(min_value=-(2**63), max_value=2**63)


@pytest.mark.spec("CAD-11")
@given(value=WIDE | st.integers(min_value=-5, max_value=70))
def test_check_page_size_accepts_exactly_1_to_64(value: int) -> None:
    if 1 <= value <= 64:
        assert check_page_size(value, field="retention.page_size") == value
    else:
        with pytest.raises(BudgetError) as info:
            check_page_size(value, field="retention.page_size")
        assert info.value.field == "retention.page_size"
        assert isinstance(info.value, ValueError)


@pytest.mark.spec("CAD-11")
@given(
    page_size=WIDE | st.integers(min_value=-2, max_value=66),
    pages=WIDE | st.integers(min_value=-2, max_value=66),
    hard_pages=st.none() | st.integers(min_value=1, max_value=64),
)
def test_check_paging_accepts_exactly_the_hard_box(
    page_size: int, pages: int, hard_pages: int | None
) -> None:
    size_ok = 1 <= page_size <= 64
    pages_ok = pages >= 1 and (hard_pages is None or pages <= hard_pages)
    if size_ok and pages_ok:
        paging = check_paging(page_size, pages, field="recovery", hard_pages=hard_pages)
        assert paging == Paging(page_size, pages)
    else:
        with pytest.raises(BudgetError) as info:
            check_paging(page_size, pages, field="recovery", hard_pages=hard_pages)
        expected = "recovery.page_size" if not size_ok else "recovery.pages"
        assert info.value.field == expected


@pytest.mark.spec("CAD-11")
@given(value=WIDE | st.integers(min_value=0, max_value=300) | st.just(86_400_001))
def test_check_interval_accepts_250ms_to_24h(value: int) -> None:
    if 250 <= value <= 86_400_000:
        assert check_interval_ms(value) == value
    else:
        with pytest.raises(BudgetError) as info:
            check_interval_ms(value, field="cadence_ms")
        assert info.value.field == "cadence_ms"


@pytest.mark.spec("CAD-11")
@given(value=WIDE | st.integers(min_value=-2, max_value=60_002))
def test_check_stop_timeout_accepts_0_exclusive_to_60s(value: int) -> None:
    if 0 < value <= 60_000:
        assert check_stop_timeout_ms(value) == value
    else:
        with pytest.raises(BudgetError) as info:
            check_stop_timeout_ms(value)
        assert info.value.field == "stop_timeout_ms"


@pytest.mark.spec("CAD-11")
@given(
    interval=st.integers(min_value=250, max_value=86_400_000),
    value=WIDE | st.integers(min_value=-2, max_value=2_000),
)
def test_check_initial_delay_accepts_0_to_interval(interval: int, value: int) -> None:
    if 0 <= value <= interval:
        assert check_initial_delay_ms(value, interval_ms=interval) == value
    else:
        with pytest.raises(BudgetError) as info:
            check_initial_delay_ms(value, interval_ms=interval)
        assert info.value.field == "initial_delay_ms"


@pytest.mark.spec("CAD-11")
@given(
    value=st.booleans()
    | st.floats(allow_nan=True)
    | st.text(max_size=3)
    | st.none()
    | st.decimals(allow_nan=False, allow_infinity=False)
)
def test_helpers_reject_non_integers(value: object) -> None:
    """§5.5: non-integer and NaN values fail closed (bool is not an integer here)."""
    as_int = cast(int, value)
    for check in (
        lambda: check_page_size(as_int, field="f"),
        lambda: check_paging(as_int, 1, field="f", hard_pages=1),
        lambda: check_paging(1, as_int, field="f", hard_pages=1),
        lambda: check_interval_ms(as_int, field="f"),
        lambda: check_stop_timeout_ms(as_int, field="f"),
        lambda: check_initial_delay_ms(as_int, interval_ms=1_000, field="f"),
        lambda: check_in_range(as_int, IntRange(0, 10), field="f"),
    ):
        with pytest.raises(BudgetError) as info:
            check()
        assert info.value.field.startswith("f")


@pytest.mark.spec("CAD-11")
def test_budget_error_message_names_field_and_range() -> None:
    with pytest.raises(BudgetError, match=r"^stop_timeout_ms: 60001 is outside 1\.\.60000$"):
        check_stop_timeout_ms(60_001)


# --------------------------------------------------------------------------------------------
# CAD-12 (budget part): per-call products never exceed the hard products
# --------------------------------------------------------------------------------------------


@pytest.mark.spec("CAD-12")
@pytest.mark.parametrize("profile", PROFILES, ids=[p.value for p in PROFILES])
def test_per_call_products_within_hard_products(profile: Profile) -> None:
    b = BUDGETS[profile]
    hard = HARD_LIMITS
    bounded: list[tuple[Paging | None, PagingLimit]] = [
        (None if b.claimed_dispatcher is None else b.claimed_dispatcher.scan,
         hard.claimed_dispatcher_scan),
        (b.startup_auditor, hard.startup_auditor),
    ]  # fmt: skip
    aa = b.approved_action
    if isinstance(aa, ApprovedActionBudget):
        bounded += [
            (aa.recovery, hard.approved_action_phase),
            (aa.dispatch, hard.approved_action_phase),
        ]
        # §5.4: "max items per cycle" is the sum of both phases' products.
        assert aa.max_items_per_cycle == aa.recovery.max_items + aa.dispatch.max_items
    for paging, limit in bounded:
        if paging is not None:
            hard_product = limit.max_items
            assert hard_product is not None
            assert paging.max_items <= hard_product
    for phase in (
        b.scheduler_cancellation,
        b.scheduler_trigger_schedule,
        b.cluster_trigger_schedule,
        b.cluster_workflow_frontier,
        b.cluster_task_admission,
        b.scheduler_frontier,
        b.scheduler_task_admission,
    ):
        if phase is not None:
            assert phase.page_size <= hard.scheduler_phase.page_size_max
            assert hard.scheduler_phase.max_items is None  # only "64 per page" is stated
    if b.startup_auditor is not None:
        assert b.startup_auditor.max_items <= hard.startup_auditor_records_max
        # U-2: a budget smaller than the journal capacity is rejected.
        assert b.journal_capacity is not None
        assert b.startup_auditor.max_items >= b.journal_capacity
    if b.execution_control_lost_retry_per_cycle is not None:
        # "lost retry per cycle (one page)": one page, so at most one hard page.
        assert b.execution_control_lost_retry_per_cycle <= hard.lost_retry_page_size_max
    if b.startup_recovery is not None:
        assert b.startup_recovery.page_size <= b.startup_recovery.total_per_startup


@pytest.mark.spec("CAD-12")
@given(
    page_size=st.integers(min_value=-3, max_value=70),
    pages=st.integers(min_value=-3, max_value=70),
    hard_pages=st.integers(min_value=1, max_value=64),
)
def test_accepted_paging_never_exceeds_the_hard_product(
    page_size: int, pages: int, hard_pages: int
) -> None:
    try:
        paging = check_paging(page_size, pages, field="phase", hard_pages=hard_pages)
    except BudgetError:
        return
    assert 1 <= paging.max_items <= 64 * hard_pages


@pytest.mark.spec("E-2")
def test_lease_default_is_at_least_twice_every_default_stale_window() -> None:
    """E-2: a Worker restarted at once must get its journal back well within its Run lease."""
    windows = [
        b.journal_ownership.stale_window_ms
        for b in BUDGETS.values()
        if b.journal_ownership is not None
    ]
    leases = [b.lease_duration_ms for b in BUDGETS.values() if b.lease_duration_ms is not None]
    assert windows
    assert leases
    assert LEASE_DURATION_DEFAULT_MS == 60_000
    assert all(lease >= 2 * max(windows) for lease in leases)
