"""The per-profile budget table of SPEC §6.3 as one frozen table keyed by `Profile` (CAD-11).

SPEC §0.3 requires the budgets of §6.3 to be "one table in code"; this module is that table. It
is pure data: no I/O, no clock, and nothing is validated at import time (CAD-11's test checks that
every value satisfies its hard limit; CAD-12's test checks the per-call products).

Shape
-----
- `BUDGETS[profile]` is a `ProfileBudget` with one field per row (or per group of rows of one
  component) of §6.3. `None` means the table says "-" (not applicable to that profile).
- Approved Action on `cluster` and `worker` says "refused" (§5.4, ADR-0036 §5): that is the value
  `REFUSED` (a `Refused` carrying `PROFILE_NOT_SUPPORTED`), never `None`, so "refused before any
  configuration is read" is distinguishable from "not applicable".
- Terminal retention says "set explicitly" (§3.14: no default): that is `NoDefault.SET_EXPLICITLY`.
- `HARD_LIMITS` is the "Hard limit" column: one profile-independent `HardLimits` value.
- Times are integer milliseconds (5 s = 5_000). "page size x pages" (§6.3 notation) is `Paging`.
- Values marked D in §6.3 are [decision]s (Appendix B numbers are cited in the comments).

The validation helpers (`check_page_size`, `check_paging`, `check_interval_ms`,
`check_stop_timeout_ms`, `check_initial_delay_ms`, `check_in_range`) implement P-1 and L-9 for
component constructors; they raise `BudgetError` (a `ValueError` with the offending `field`).
CAD-12 (per-call bounds) is stated by `Paging.max_items` and the hard `PagingLimit`s.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kernel.specs import limits
from kernel.specs.codes import Code
from kernel.specs.states import Profile

__all__ = [
    "BUDGETS",
    "HARD_LIMITS",
    "LOG_CLEANUP_PAGE",
    "LOG_RETENTION_DEFAULT_MS",
    "LOG_RETENTION_MS",
    "REFUSED",
    "WORKER_COMPLETION_POLL_PAGE",
    "ApprovedActionBudget",
    "BudgetError",
    "ClaimedDispatcherBudget",
    "HardLimits",
    "IntRange",
    "JournalOwnershipBudget",
    "NoDefault",
    "Paging",
    "PagingLimit",
    "ProfileBudget",
    "Refused",
    "SlowCleanupBudget",
    "StartupRecoveryBudget",
    "SupersededLifecycleBudget",
    "TerminalRetentionBudget",
    "budget_for",
    "check_in_range",
    "check_initial_delay_ms",
    "check_interval_ms",
    "check_page_size",
    "check_paging",
    "check_stop_timeout_ms",
]

# --------------------------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Paging:
    """A "page size x pages" cell of §6.3: at most `pages` pages of `page_size` items per call.

    §6.3 notation is "page size x pages" (B-60: ADR-0229 writes page size first, ADR-0036 and
    ADR-0021 write pages first; §6.3 normalises to page size x pages).
    """

    page_size: int
    pages: int

    @property
    def max_items(self) -> int:
        """The per-call item bound that CAD-12 checks: `page_size * pages`."""
        return self.page_size * self.pages


@dataclass(frozen=True, slots=True)
class IntRange:
    """An inclusive integer range `minimum..maximum` (a hard-limit cell such as "5 s..10 min")."""

    minimum: int
    maximum: int

    def __contains__(self, value: object) -> bool:
        return type(value) is int and self.minimum <= value <= self.maximum


@dataclass(frozen=True, slots=True)
class PagingLimit:
    """A hard paging cell: page size at most `page_size_max`, pages at most `pages_max`.

    `pages_max is None` where §6.3 states only a per-page cap ("64 per page", the local scheduler
    phases of ADR-0229 §1): the page count must still be >= 1 (P-4) but has no stated ceiling.
    """

    page_size_max: int
    pages_max: int | None

    @property
    def max_items(self) -> int | None:
        """The hard per-call product, or None when the page count has no stated ceiling."""
        return None if self.pages_max is None else self.page_size_max * self.pages_max


@dataclass(frozen=True, slots=True)
class Refused:
    """A profile on which the component is refused before any configuration is read.

    §6.3 "refused" (Approved Action on `cluster` and `worker`, §5.4, ADR-0036 §5); `code` is the
    stable refusal code [decision B-65].
    """

    code: Code = Code.PROFILE_NOT_SUPPORTED


REFUSED: Final = Refused()


class NoDefault(enum.Enum):
    """A cell that has no default value: the operator must set it (§3.14 retention)."""

    SET_EXPLICITLY = "set explicitly"


@dataclass(frozen=True, slots=True)
class SlowCleanupBudget:
    """Local execution control slow cycle (§6.3, ADR-0380 §3; D: B-70).

    Receipt and log cleanup run on every `every_nth_cycle`-th cycle, which is `period_ms` at the
    profile's cadence (O-2 step 4).
    """

    every_nth_cycle: int
    period_ms: int


@dataclass(frozen=True, slots=True)
class SupersededLifecycleBudget:
    """ADR-0021 §5.5's dedicated lost-retry lifecycle ("cadence x page").

    Superseded by ADR-0380 and NOT implemented (B-75); kept so the table equals §6.3 row for row.
    """

    cadence_ms: int
    page_size: int


@dataclass(frozen=True, slots=True)
class StartupRecoveryBudget:
    """Local startup recovery (§2.2, §6.3 "page; total per startup"; D: B-31, D-11)."""

    page_size: int
    total_per_startup: int


@dataclass(frozen=True, slots=True)
class ClaimedDispatcherBudget:
    """Local claimed dispatcher (§1.8.3, §6.3 "activations per call; scan", ADR-0021 §5.5)."""

    activations_per_call: int
    scan: Paging


@dataclass(frozen=True, slots=True)
class ApprovedActionBudget:
    """Approved Action resource policy on a supported profile (§5.4, §6.3 rows "Approved Action*").

    Groups the five Approved Action rows of §6.3: cadence, recovery, dispatch, items per cycle (max)
    and "stop timeout; initial delay". `max_items_per_cycle` equals
    `recovery.max_items + dispatch.max_items` (§5.4).
    """

    cadence_ms: int
    recovery: Paging
    dispatch: Paging
    max_items_per_cycle: int
    stop_timeout_ms: int
    initial_delay_ms: int


@dataclass(frozen=True, slots=True)
class JournalOwnershipBudget:
    """Journal ownership "stale window; refresh" (§3.9 W-4, ADR-0021 §4)."""

    stale_window_ms: int
    refresh_ms: int


@dataclass(frozen=True, slots=True)
class TerminalRetentionBudget:
    """Terminal retention (§3.14, ADR-0021 §5.3): rows "page; deletes per call" and "retention".

    `retention` has no default (§6.3 "set explicitly"): it must be configured, 1 min..30 days.
    """

    page_size: int
    deletes_per_call: int
    retention: NoDefault


@dataclass(frozen=True, slots=True)
class ProfileBudget:
    """One column (profile) of the §6.3 budget table (CAD-11).

    One field per row of §6.3 (rows of one component with a composite cell are one value type).
    `None` = "-" in the table. The "Retry policy" row is "-" for every profile; its only values are
    hard limits (`HARD_LIMITS.max_attempts`, `HARD_LIMITS.backoff_ms`), so it has no field here.
    """

    profile: Profile
    # Local execution control (§6.1, O-2, ADR-0380 §3).
    execution_control_cadence_ms: int | None
    execution_control_lost_retry_per_cycle: int | None
    execution_control_slow_cleanup: SlowCleanupBudget | None
    # Lost retry source/scanner page default (§1.8.2, ADR-0021 §5.5, ADR-0232 §3).
    lost_retry_page_size: int | None
    # Dedicated lost-retry lifecycle of ADR-0021 §5.5: superseded, not implemented (B-75).
    superseded_lost_retry_lifecycle: SupersededLifecycleBudget | None
    # Cluster scheduler phases (§2.3, §1.8.2).
    cluster_runtime_recovery_page_size: int | None
    cluster_lost_retry_page_size: int | None
    # [decision D-6] Cluster cancellation convergence (§1.9, Appendix D-6, E-1): one page per
    # scheduler cycle, a step of O-5 phase 3 before the trigger schedule. §6.3 has no row for it;
    # §1.9 gives the page: default 16, hard 64. None where there is no cluster scheduler.
    cluster_cancellation_convergence_page_size: int | None
    # [decision WS-6] Cluster dispatch (§1.7 T1, D-13; issue 17): lease grants per scheduler
    # cycle, one candidate page per executor type some online Worker advertises. §6.3 has no row
    # for it: default 16, hard 64 (P-1's page maximum). None where there is no cluster scheduler.
    cluster_dispatch_grants: int | None
    # Local startup recovery (§2.2).
    startup_recovery: StartupRecoveryBudget | None
    # Dispatch lease expiry scanner (§3.16; on cluster: the PostgreSQL adapter).
    lease_expiry_scanner_page_size: int | None
    # Local claimed dispatcher (§1.8.3).
    claimed_dispatcher: ClaimedDispatcherBudget | None
    # Local scheduler (§4.2, ADR-0229 §1).
    scheduler_cadence_ms: int | None
    scheduler_cancellation: Paging | None
    # [decision TK-13] The trigger-schedule phase (O-3's "schedule", issue 15): due schedules read,
    # and fires admitted, per cycle (`max_items`: 4 on edge every 5 s, 64 on standalone every 1 s).
    # §6.3 has no row for it; hard limit "64 per page" like the other local scheduler phases.
    # None where there is no local scheduler (cluster, worker).
    scheduler_trigger_schedule: Paging | None
    scheduler_frontier: Paging | None
    scheduler_task_admission: Paging | None
    scheduler_dispatch_activations: int | None
    # Cluster scheduler (O-5).
    cluster_scheduler_cadence_ms: int | None
    # [decision] The trigger-schedule step of the cluster cycle (O-5 phase 3, issue 17): due
    # schedules read, and fires admitted, per cycle; the same phase and the same 16 x 4 as
    # standalone's (TK-13) at the same 1 s cadence, hard "64 per page". None without a cluster
    # scheduler.
    cluster_trigger_schedule: Paging | None
    #: [decision WF-8] The cluster cycle's Workflow frontier and Task admission (O-5 phases 4-5):
    #: §6.3 has no cluster row; the standalone rows (16 x 4), as CR-3 did for the schedule.
    cluster_workflow_frontier: Paging | None
    cluster_task_admission: Paging | None
    # Approved Action (§5.4): a budget on edge/standalone, REFUSED on cluster/worker.
    approved_action: ApprovedActionBudget | Refused
    # "Other lifecycles | stop timeout" (every lifecycle but Approved Action).
    lifecycle_stop_timeout_ms: int
    # Offer journal (§3.9).
    journal_capacity: int | None
    journal_record_size_bytes: int | None
    journal_list_page_max: int | None
    journal_ownership: JournalOwnershipBudget | None
    # Startup auditor (§3.10 U-2), recovery supervisor (§3.13).
    startup_auditor: Paging | None
    recovery_supervisor_actions: int | None
    # Receipt publish grace (§2.1, §3.11).
    receipt_publish_grace_ms: int | None
    # Terminal retention (§3.14).
    terminal_retention: TerminalRetentionBudget | None
    # Running/failure ACK version-mismatch attempts, calls in total (B-42).
    ack_version_mismatch_attempts: int | None
    # Run dispatch lease duration default (§1.4, B-10).
    lease_duration_ms: int | None
    # Portable identity length (§0.4, ADR-0229 §4).
    identity_length: int


@dataclass(frozen=True, slots=True)
class HardLimits:
    """The "Hard limit" column of §6.3 (profile-independent), CAD-11.

    A field that is None has no hard limit in §6.3 ("-") or none stated as a number.
    """

    # P-1: every page size, every document (§0.4).
    page_size: IntRange
    # L-9: cadence interval 250 ms..24 h (also the Approved Action row "250 ms..24 h").
    cadence_ms: IntRange
    # L-9 + decision B-05: 0 < stop_timeout <= 60 s.
    stop_timeout_ms: IntRange
    execution_control_lost_retry_per_cycle_max: int
    lost_retry_page_size_max: int
    cluster_runtime_recovery_page_size_max: int
    cluster_lost_retry_page_size_max: int
    cluster_cancellation_convergence_page_size_max: int
    cluster_dispatch_grants_max: int
    startup_recovery_page_size_max: int
    startup_recovery_total_max: int
    lease_expiry_scanner_page_size_max: int
    claimed_dispatcher_scan: PagingLimit
    # "64 per page" for each local scheduler paged phase; no stated page count.
    scheduler_phase: PagingLimit
    # Approved Action recovery and dispatch: "64 x 64" (§5.3: page size 1..64, max pages 1..64).
    approved_action_phase: PagingLimit
    journal_capacity_max: int
    journal_record_size_max_bytes: int
    journal_list_page_max: int
    journal_stale_window_ms: IntRange
    # "window/2": the refresh period is the stale window divided by this.
    journal_refresh_divisor: int
    startup_auditor: PagingLimit
    startup_auditor_records_max: int
    recovery_supervisor_actions_max: int
    receipt_publish_grace_max_ms: int
    terminal_retention_page_size_max: int
    terminal_retention_deletes_max: int
    terminal_retention_ms: IntRange
    # "small, bounded": §6.3 states no number (B-42 fixes the value at 3 calls in total).
    ack_version_mismatch_attempts_max: int | None
    lease_duration_ms: IntRange
    max_attempts: IntRange
    backoff_ms: IntRange
    identity_length_max: int


# --------------------------------------------------------------------------------------------
# The "Hard limit" column of §6.3
# --------------------------------------------------------------------------------------------

_SECOND: Final = 1_000
_MINUTE: Final = 60 * _SECOND
_HOUR: Final = 60 * _MINUTE
_DAY: Final = 24 * _HOUR

HARD_LIMITS: Final = HardLimits(
    page_size=IntRange(limits.PAGE_SIZE_MIN, limits.PAGE_SIZE_MAX),  # P-1: 1..64
    cadence_ms=IntRange(250, 24 * _HOUR),  # L-9: 250 ms..24 h
    stop_timeout_ms=IntRange(1, 60 * _SECOND),  # L-9: <= 60 s; B-05: > 0
    execution_control_lost_retry_per_cycle_max=64,  # ADR-0380 §3
    lost_retry_page_size_max=64,  # ADR-0021 §5.5, ADR-0232 §3
    cluster_runtime_recovery_page_size_max=64,  # ADR-0232 §1
    cluster_lost_retry_page_size_max=64,  # ADR-0232 §3
    cluster_cancellation_convergence_page_size_max=64,  # §1.9 (D-6): hard 64
    cluster_dispatch_grants_max=64,  # D WS-6: hard 64
    startup_recovery_page_size_max=64,  # D: B-31
    startup_recovery_total_max=limits.STARTUP_RECOVERY_TOTAL_MAX,  # D: B-31, D-11 (1024)
    lease_expiry_scanner_page_size_max=64,  # ADR-0021 §5.4
    claimed_dispatcher_scan=PagingLimit(64, 16),  # ADR-0021 §5.5: "scan 64 x 16 pages"
    scheduler_phase=PagingLimit(64, None),  # ADR-0229 §1: "64 per page"
    approved_action_phase=PagingLimit(64, 64),  # ADR-0036 §2: "64 x 64"
    journal_capacity_max=1024,  # ADR-0021 §4, F-7
    journal_record_size_max_bytes=192 * 1024,  # ADR-0021 §4, F-2: 192 KiB = 196,608 bytes
    journal_list_page_max=64,  # ADR-0021 §4, F-8
    journal_stale_window_ms=IntRange(5 * _SECOND, 5 * _MINUTE),  # ADR-0021 §4, W-4
    journal_refresh_divisor=2,  # ADR-0021 §4, W-4: refresh every half window
    startup_auditor=PagingLimit(64, 16),  # ADR-0021 §5, U-2: 64 per page, 16 pages
    startup_auditor_records_max=1024,  # ADR-0021 §5, U-2: 1024 records in total
    recovery_supervisor_actions_max=1024,  # ADR-0021 §5.3
    receipt_publish_grace_max_ms=limits.RECEIPT_PUBLISH_GRACE_MAX_MS,  # ADR-0021 §5.1: 5 s
    terminal_retention_page_size_max=64,  # ADR-0021 §5.3
    terminal_retention_deletes_max=64,  # ADR-0021 §5.3
    terminal_retention_ms=IntRange(1 * _MINUTE, 30 * _DAY),  # ADR-0021 §5.3: 1 min..30 days
    ack_version_mismatch_attempts_max=None,  # ADR-0021 §6: "small, bounded" (no number)
    lease_duration_ms=IntRange(  # D: B-10, 5 s..10 min
        limits.LEASE_DURATION_MIN_MS, limits.LEASE_DURATION_MAX_MS
    ),
    max_attempts=IntRange(limits.MAX_ATTEMPTS_MIN, limits.MAX_ATTEMPTS_MAX),  # D: B-14, 1..16
    backoff_ms=IntRange(0, limits.BACKOFF_MAX_MS),  # D: B-14, <= 24 h
    identity_length_max=limits.PORTABLE_ID_MAX_LENGTH,  # ADR-0229 §4: 36
)


# --------------------------------------------------------------------------------------------
# The profile columns of §6.3
# --------------------------------------------------------------------------------------------

_EDGE: Final = ProfileBudget(
    profile=Profile.EDGE,
    execution_control_cadence_ms=5_000,  # ADR-0380 §3: 5 s
    execution_control_lost_retry_per_cycle=2,  # ADR-0380 §3
    execution_control_slow_cleanup=SlowCleanupBudget(12, 60_000),  # D B-70: every 12th (60 s)
    lost_retry_page_size=16,  # ADR-0021 §5.5: default 16
    # ADR-0021 §5.5: 30 s x 8 (superseded, B-75)
    superseded_lost_retry_lifecycle=SupersededLifecycleBudget(30_000, 8),
    cluster_runtime_recovery_page_size=None,
    cluster_lost_retry_page_size=None,
    cluster_cancellation_convergence_page_size=None,
    cluster_dispatch_grants=None,
    startup_recovery=StartupRecoveryBudget(16, 1024),  # D B-31: 16; 1024
    lease_expiry_scanner_page_size=16,  # ADR-0021 §5.4
    claimed_dispatcher=ClaimedDispatcherBudget(1, Paging(8, 1)),  # ADR-0021 §5.5: 1; 8 x 1 page
    scheduler_cadence_ms=5_000,  # D B-71: 5 s
    scheduler_cancellation=Paging(4, 1),  # ADR-0229 §1: 4 x 1
    scheduler_trigger_schedule=Paging(4, 1),  # D TK-13: 4 x 1 (§6.3 has no row)
    scheduler_frontier=Paging(1, 1),  # ADR-0229 §1: 1 x 1
    scheduler_task_admission=Paging(1, 1),  # ADR-0229 §1: 1 x 1
    scheduler_dispatch_activations=1,  # ADR-0229 §1, B-27
    cluster_scheduler_cadence_ms=None,
    cluster_trigger_schedule=None,
    cluster_workflow_frontier=None,
    cluster_task_admission=None,
    approved_action=ApprovedActionBudget(  # ADR-0036 §3, §4 (§5.4 table)
        cadence_ms=30_000,  # 30 s
        recovery=Paging(8, 1),  # "1 page x 8"
        dispatch=Paging(8, 1),  # "1 page x 8"
        max_items_per_cycle=16,
        stop_timeout_ms=5_000,  # 5 s
        initial_delay_ms=0,
    ),
    lifecycle_stop_timeout_ms=5_000,  # D B-72: 5 s
    journal_capacity=64,  # ADR-0021 §4 (B-74: a Worker on this host)
    journal_record_size_bytes=196_608,  # ADR-0021 §4: 192 KiB
    journal_list_page_max=64,  # ADR-0021 §4: "≤ 64"
    journal_ownership=JournalOwnershipBudget(30_000, 15_000),  # ADR-0021 §4: 30 s; 15 s
    startup_auditor=Paging(16, 4),  # ADR-0021 §5, U-2: 16 x 4
    recovery_supervisor_actions=64,  # ADR-0021 §5.3
    receipt_publish_grace_ms=100,  # D B-52: 100 ms
    terminal_retention=TerminalRetentionBudget(16, 8, NoDefault.SET_EXPLICITLY),  # ADR-0021 §5.3
    ack_version_mismatch_attempts=3,  # D B-42
    lease_duration_ms=limits.LEASE_DURATION_DEFAULT_MS,  # D B-10, E-2: 60 s
    identity_length=36,  # ADR-0229 §4
)

_STANDALONE: Final = ProfileBudget(
    profile=Profile.STANDALONE,
    execution_control_cadence_ms=1_000,  # ADR-0380 §3: 1 s
    execution_control_lost_retry_per_cycle=16,  # ADR-0380 §3
    execution_control_slow_cleanup=SlowCleanupBudget(60, 60_000),  # D B-70: every 60th (60 s)
    lost_retry_page_size=16,  # ADR-0021 §5.5: default 16
    # ADR-0021 §5.5: 5 s x 32 (superseded, B-75)
    superseded_lost_retry_lifecycle=SupersededLifecycleBudget(5_000, 32),
    cluster_runtime_recovery_page_size=None,
    cluster_lost_retry_page_size=None,
    cluster_cancellation_convergence_page_size=None,
    cluster_dispatch_grants=None,
    startup_recovery=StartupRecoveryBudget(16, 1024),  # D B-31: 16; 1024
    lease_expiry_scanner_page_size=16,  # ADR-0021 §5.4
    claimed_dispatcher=ClaimedDispatcherBudget(1, Paging(8, 1)),  # ADR-0021 §5.5: 1; 8 x 1 page
    scheduler_cadence_ms=1_000,  # D B-71: 1 s
    scheduler_cancellation=Paging(32, 4),  # ADR-0229 §1: 32 x 4
    scheduler_trigger_schedule=Paging(16, 4),  # D TK-13: 16 x 4 (§6.3 has no row)
    scheduler_frontier=Paging(16, 4),  # ADR-0229 §1: 16 x 4
    scheduler_task_admission=Paging(16, 4),  # ADR-0229 §1: 16 x 4
    scheduler_dispatch_activations=4,  # ADR-0229 §1, B-27
    cluster_scheduler_cadence_ms=None,
    cluster_trigger_schedule=None,
    cluster_workflow_frontier=None,
    cluster_task_admission=None,
    approved_action=ApprovedActionBudget(  # ADR-0036 §3, §4 (§5.4 table)
        cadence_ms=2_000,  # 2 s
        recovery=Paging(16, 2),  # "2 pages x 16"
        dispatch=Paging(32, 4),  # "4 pages x 32"
        max_items_per_cycle=160,
        stop_timeout_ms=5_000,  # 5 s
        initial_delay_ms=0,
    ),
    lifecycle_stop_timeout_ms=5_000,  # D B-72: 5 s
    journal_capacity=64,  # ADR-0021 §4 (B-74: a Worker on this host)
    journal_record_size_bytes=196_608,  # ADR-0021 §4: 192 KiB
    journal_list_page_max=64,  # ADR-0021 §4: "≤ 64"
    journal_ownership=JournalOwnershipBudget(30_000, 15_000),  # ADR-0021 §4: 30 s; 15 s
    startup_auditor=Paging(64, 16),  # D B-49: 64 x 16 outside edge
    recovery_supervisor_actions=64,  # ADR-0021 §5.3
    receipt_publish_grace_ms=100,  # D B-52: 100 ms
    terminal_retention=TerminalRetentionBudget(16, 8, NoDefault.SET_EXPLICITLY),  # ADR-0021 §5.3
    ack_version_mismatch_attempts=3,  # D B-42
    lease_duration_ms=limits.LEASE_DURATION_DEFAULT_MS,  # D B-10, E-2: 60 s
    identity_length=36,  # ADR-0229 §4
)

_CLUSTER: Final = ProfileBudget(
    profile=Profile.CLUSTER,
    execution_control_cadence_ms=None,
    execution_control_lost_retry_per_cycle=None,
    execution_control_slow_cleanup=None,
    lost_retry_page_size=16,  # ADR-0232 §3: default 16
    superseded_lost_retry_lifecycle=None,
    cluster_runtime_recovery_page_size=16,  # ADR-0232 §1
    cluster_lost_retry_page_size=16,  # ADR-0232 §3
    cluster_cancellation_convergence_page_size=16,  # §1.9 (D-6): default 16
    cluster_dispatch_grants=16,  # D WS-6: default 16
    startup_recovery=None,
    lease_expiry_scanner_page_size=16,  # ADR-0021 §5.4 (PostgreSQL adapter; D-9: conformance only)
    claimed_dispatcher=None,
    scheduler_cadence_ms=None,
    scheduler_cancellation=None,
    scheduler_trigger_schedule=None,
    scheduler_frontier=None,
    scheduler_task_admission=None,
    scheduler_dispatch_activations=None,
    cluster_scheduler_cadence_ms=1_000,  # D B-71: 1 s
    cluster_trigger_schedule=Paging(16, 4),  # issue 17: as standalone (TK-13)
    cluster_workflow_frontier=Paging(16, 4),  # WF-8: as standalone
    cluster_task_admission=Paging(16, 4),  # WF-8: as standalone
    approved_action=REFUSED,  # ADR-0036 §5: refused (PROFILE_NOT_SUPPORTED)
    lifecycle_stop_timeout_ms=5_000,  # D B-72: 5 s
    journal_capacity=None,
    journal_record_size_bytes=None,
    journal_list_page_max=None,
    journal_ownership=None,
    startup_auditor=None,
    recovery_supervisor_actions=None,
    receipt_publish_grace_ms=None,
    terminal_retention=None,
    ack_version_mismatch_attempts=None,
    lease_duration_ms=limits.LEASE_DURATION_DEFAULT_MS,  # D B-10, E-2: 60 s
    identity_length=36,  # ADR-0229 §4
)

_WORKER: Final = ProfileBudget(
    profile=Profile.WORKER,
    execution_control_cadence_ms=None,
    execution_control_lost_retry_per_cycle=None,
    execution_control_slow_cleanup=None,
    lost_retry_page_size=None,
    superseded_lost_retry_lifecycle=None,
    cluster_runtime_recovery_page_size=None,
    cluster_lost_retry_page_size=None,
    cluster_cancellation_convergence_page_size=None,
    cluster_dispatch_grants=None,
    startup_recovery=None,
    lease_expiry_scanner_page_size=None,
    claimed_dispatcher=None,
    scheduler_cadence_ms=None,
    scheduler_cancellation=None,
    scheduler_trigger_schedule=None,
    scheduler_frontier=None,
    scheduler_task_admission=None,
    scheduler_dispatch_activations=None,
    cluster_scheduler_cadence_ms=None,
    cluster_trigger_schedule=None,
    cluster_workflow_frontier=None,
    cluster_task_admission=None,
    approved_action=REFUSED,  # ADR-0036 §5: Workers own no Approved Action tables
    lifecycle_stop_timeout_ms=5_000,  # D B-72: 5 s
    journal_capacity=64,  # ADR-0021 §4
    journal_record_size_bytes=196_608,  # ADR-0021 §4: 192 KiB
    journal_list_page_max=64,  # ADR-0021 §4: "≤ 64"
    journal_ownership=JournalOwnershipBudget(30_000, 15_000),  # ADR-0021 §4: 30 s; 15 s
    startup_auditor=Paging(64, 16),  # D B-49: 64 x 16 outside edge
    recovery_supervisor_actions=64,  # ADR-0021 §5.3
    receipt_publish_grace_ms=100,  # D B-52: 100 ms
    terminal_retention=TerminalRetentionBudget(16, 8, NoDefault.SET_EXPLICITLY),  # ADR-0021 §5.3
    ack_version_mismatch_attempts=3,  # D B-42
    lease_duration_ms=None,  # "-": the control plane sets the duration of the Worker's leases
    identity_length=36,  # ADR-0229 §4
)

BUDGETS: Final[Mapping[Profile, ProfileBudget]] = MappingProxyType(
    {
        Profile.EDGE: _EDGE,
        Profile.STANDALONE: _STANDALONE,
        Profile.CLUSTER: _CLUSTER,
        Profile.WORKER: _WORKER,
    }
)


#: The Worker's completion poll (E-6; §3.11, §3.12 driven one journal page at a time): records per
#: call [decision WK-6]. §6.3 has no row for it; it is the terminal-retention page (the other
#: per-call journal page of the Worker host), and at most the list page maximum (F-8).
WORKER_COMPLETION_POLL_PAGE: Final = 16


#: O-2 step 4 (CAD-02, D-1): Attempt logs (`<db>.d/logs/<attempt>.log`) examined per slow cycle
#: [decision LR-13]. §6.3 has no row for log cleanup; the receipt page of the same step (16),
#: at most the P-1 page maximum (64).
LOG_CLEANUP_PAGE: Final = 16

#: O-2 step 4 (CAD-02, D-1): how long an Attempt's log outlives the Attempt's end before slow-cycle
#: cleanup may delete it, by default [decision LR-13]: 7 days.
LOG_RETENTION_DEFAULT_MS: Final = 7 * _DAY

#: The log retention a local application accepts [decision LR-13]: 1 min (the terminal retention
#: floor of ADR-0021 §5.3: a log outlives the cycle that ended its Attempt) .. 365 days.
LOG_RETENTION_MS: Final = IntRange(1 * _MINUTE, 365 * _DAY)


def budget_for(profile: Profile) -> ProfileBudget:
    """The §6.3 column for `profile` (CAD-11). A plain string is accepted if it names a Profile."""
    return BUDGETS[Profile(profile)]


# --------------------------------------------------------------------------------------------
# Validation helpers (P-1, P-4, L-9): reject out-of-range configuration at construction
# --------------------------------------------------------------------------------------------


class BudgetError(ValueError):
    """Out-of-range budget configuration (P-1, L-9, CAD-11); `field` names the offending setting.

    The message carries only the field name, the integer value and the allowed range (S-1).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _require_int(value: object, field: str) -> int:
    # bool is an int subclass; floats, NaN and strings are not integers either (§5.5).
    if type(value) is not int:
        raise BudgetError(field, f"must be an integer, got {type(value).__name__}")
    return value


def check_in_range(value: int, limit: IntRange, *, field: str) -> int:
    """Return `value` if it is an int within `limit` (inclusive), else raise `BudgetError`."""
    checked = _require_int(value, field)
    if not limit.minimum <= checked <= limit.maximum:
        raise BudgetError(field, f"{checked} is outside {limit.minimum}..{limit.maximum}")
    return checked


def check_page_size(value: int, *, field: str) -> int:
    """P-1: a page size is an integer 1..64 (hard cap, every document)."""
    return check_in_range(value, HARD_LIMITS.page_size, field=field)


def check_paging(page_size: int, pages: int, *, field: str, hard_pages: int | None) -> Paging:
    """P-1 and P-4: `page_size` in 1..64 and `pages` in 1..`hard_pages`.

    `hard_pages=None` is for a component whose §6.3 hard limit states only a per-page cap (the local
    scheduler phases); `pages` must still be >= 1. Errors name `f"{field}.page_size"` or
    `f"{field}.pages"`.
    """
    size = check_page_size(page_size, field=f"{field}.page_size")
    pages_field = f"{field}.pages"
    count = _require_int(pages, pages_field)
    if count < 1:
        raise BudgetError(pages_field, f"{count} is below 1")
    if hard_pages is not None and count > hard_pages:
        raise BudgetError(pages_field, f"{count} exceeds the hard limit {hard_pages}")
    return Paging(size, count)


def check_interval_ms(value: int, *, field: str = "interval_ms") -> int:
    """L-9: a cadence interval is 250 ms..24 h."""
    return check_in_range(value, HARD_LIMITS.cadence_ms, field=field)


def check_stop_timeout_ms(value: int, *, field: str = "stop_timeout_ms") -> int:
    """L-9 and decision B-05: 0 < stop_timeout <= 60 s."""
    return check_in_range(value, HARD_LIMITS.stop_timeout_ms, field=field)


def check_initial_delay_ms(value: int, *, interval_ms: int, field: str = "initial_delay_ms") -> int:
    """L-9 and decision B-05: 0 <= initial_delay <= interval."""
    return check_in_range(value, IntRange(0, interval_ms), field=field)
