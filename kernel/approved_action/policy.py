"""The Approved Action profile resource policy and lifecycle configuration, pure (SPEC §5.4, §5.5;
ADR-0036 §3-§5; AA-03, AA-08, AA-09, AA-14).

- `local_primary_resource_policy(profile)`: the §5.4 table row of `edge` or `standalone`, built
  afresh from `kernel/specs/budgets.py`'s `ApprovedActionBudget` on every call. Any other
  profile (`cluster`, `worker`, or a name that is no profile) raises `ProfileNotSupported`
  (`PROFILE_NOT_SUPPORTED`) BEFORE any configuration is read: the profile check comes first and
  the budget table is only reached through `budget_source`, a module-level lookup consulted after
  it (tests replace it to see that a refused profile never reads it; AA-09).
- Deep copy [decision]: the returned `ApprovedActionPolicy` is deliberately MUTABLE (a plain
  dataclass holding two mutable `PhasePolicy` values), so "every call returns a deep copy" is a
  property a test can break: mutating one returned policy, or its nested phase policies, never
  changes what a later call returns (AA-08). A policy is settings, not a validated value:
  `to_config()` turns it into the frozen, checked `ApprovedActionConfig`.
- `approved_action_config(...)`: §5.5 limits, checked at construction: interval 250 ms..24 h,
  0 < stop timeout <= 60 s, 0 <= initial delay <= interval (L-9, via `cadence_config`), and the
  two `PhaseBudget`s (page size 1..64, max pages 1..64). A non-int, a bool, NaN or an
  out-of-range value raises `BudgetError` naming the field (AA-03, AA-14).
- `ApprovedActionState` and `STATE_OF` [decision]: §5.5 names the lifecycle's states `inert`,
  `scheduled`, `cycling`, `stopping`, `stopped`; the lifecycle core's `CadenceState` (L-rules,
  `kernel/specs/cadence.py`) names them `inert`, `waiting`, `running`/`manual`, `stopping`,
  `stopped`. `STATE_OF` maps the core's state to the §5.5 name (`manual`, a `run_once()` cycle
  on a lifecycle not started, is `cycling` too).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kernel.approved_action.paging import PhaseBudget
from kernel.specs.budgets import ApprovedActionBudget, ProfileBudget, budget_for
from kernel.specs.cadence import CadenceConfig, CadenceState, cadence_config
from kernel.specs.codes import Code
from kernel.specs.states import Profile

__all__ = [
    "STATE_OF",
    "SUPPORTED_PROFILES",
    "ApprovedActionConfig",
    "ApprovedActionPolicy",
    "ApprovedActionState",
    "PhasePolicy",
    "ProfileNotSupported",
    "approved_action_config",
    "budget_source",
    "local_primary_resource_policy",
]

#: §5.4 / ADR-0036 §5: the only profiles with an Approved Action lifecycle (local SQLite primary).
SUPPORTED_PROFILES: Final = frozenset({Profile.EDGE, Profile.STANDALONE})

#: Where the policy reads the §6.3 budget table from, consulted only after the profile check
#: (AA-09: a refused profile reads no configuration). Tests replace it to observe that.
budget_source: Callable[[Profile], ProfileBudget] = budget_for


class ProfileNotSupported(ValueError):
    """§5.4: `cluster` (cluster-control) and `worker` never run this lifecycle; neither does a
    name that is no profile. `code` is `PROFILE_NOT_SUPPORTED`; the message names the profile
    only if it is a known one (S-1: caller text is not echoed)."""

    code: Final = Code.PROFILE_NOT_SUPPORTED

    def __init__(self, profile: Profile | None) -> None:
        named = "an unknown profile" if profile is None else f"profile {profile.value!r}"
        super().__init__(
            f"{Code.PROFILE_NOT_SUPPORTED}: Approved Action runs on edge and "
            f"standalone only, not on {named}"
        )
        self.profile = profile


@dataclass(slots=True)
class PhasePolicy:
    """One phase's budget as settings (mutable on purpose: a caller's own copy)."""

    page_size: int
    max_pages: int

    @property
    def max_items(self) -> int:
        return self.page_size * self.max_pages


@dataclass(slots=True)
class ApprovedActionPolicy:
    """A §5.4 row as settings: mutable on purpose, a fresh deep copy per call (AA-08).

    `to_config()` checks it against §5.5 and returns the frozen `ApprovedActionConfig`.
    """

    profile: Profile
    interval_ms: int
    recovery: PhasePolicy
    dispatch: PhasePolicy
    stop_timeout_ms: int
    initial_delay_ms: int

    @property
    def max_items_per_cycle(self) -> int:
        """§5.4 "max items per cycle": the recovery and dispatch phase bounds together."""
        return self.recovery.max_items + self.dispatch.max_items

    def to_config(self) -> ApprovedActionConfig:
        """The validated configuration (§5.5; raises `BudgetError` naming a bad field)."""
        return approved_action_config(
            self.interval_ms,
            self.stop_timeout_ms,
            self.initial_delay_ms,
            PhaseBudget(self.recovery.page_size, self.recovery.max_pages),
            PhaseBudget(self.dispatch.page_size, self.dispatch.max_pages),
        )


def _supported(profile: object) -> Profile:
    """The profile check, which reads no configuration (AA-09)."""
    if not isinstance(profile, str):
        raise ProfileNotSupported(None)
    try:
        known = Profile(profile)
    except ValueError:
        raise ProfileNotSupported(None) from None
    if known not in SUPPORTED_PROFILES:
        raise ProfileNotSupported(known)
    return known


def local_primary_resource_policy(profile: str) -> ApprovedActionPolicy:
    """§5.4: the resource policy of `edge` or `standalone`, a fresh deep copy on every call
    (AA-08); any other profile raises `ProfileNotSupported` before the budget table is read
    (AA-09)."""
    known = _supported(profile)
    budget = budget_source(known).approved_action
    if not isinstance(budget, ApprovedActionBudget):  # the table says "refused" for it
        raise ProfileNotSupported(known)
    policy = ApprovedActionPolicy(
        profile=known,
        interval_ms=budget.cadence_ms,
        recovery=PhasePolicy(budget.recovery.page_size, budget.recovery.pages),
        dispatch=PhasePolicy(budget.dispatch.page_size, budget.dispatch.pages),
        stop_timeout_ms=budget.stop_timeout_ms,
        initial_delay_ms=budget.initial_delay_ms,
    )
    if policy.max_items_per_cycle != budget.max_items_per_cycle:
        # §5.4's "max items per cycle" column is the two phase bounds together; the table and
        # its per-phase cells must agree (a table edit that breaks this is refused loudly).
        raise ValueError("the Approved Action budget's items per cycle disagree with its phases")
    return policy


@dataclass(frozen=True, slots=True)
class ApprovedActionConfig:
    """The checked configuration of one Approved Action lifecycle and its supervisor (§5.5)."""

    cadence: CadenceConfig
    recovery: PhaseBudget
    dispatch: PhaseBudget

    @property
    def max_items_per_cycle(self) -> int:
        return self.recovery.max_items + self.dispatch.max_items


def approved_action_config(
    interval_ms: int,
    stop_timeout_ms: int,
    initial_delay_ms: int,
    recovery: PhaseBudget,
    dispatch: PhaseBudget,
) -> ApprovedActionConfig:
    """§5.5 limits at construction (AA-03, AA-14): the cadence by `cadence_config` (L-9), the
    phases as `PhaseBudget`s (already checked when they were built).

    :raises BudgetError: a timing value out of range, non-int, bool or NaN (names the field).
    :raises TypeError: a phase budget that is not a `PhaseBudget`.
    """
    cadence = cadence_config(
        interval_ms, stop_timeout_ms=stop_timeout_ms, initial_delay_ms=initial_delay_ms
    )
    for name, phase in (("recovery", recovery), ("dispatch", dispatch)):
        if type(phase) is not PhaseBudget:
            raise TypeError(f"{name} must be a PhaseBudget")
    return ApprovedActionConfig(cadence, recovery, dispatch)


class ApprovedActionState(enum.StrEnum):
    """The §5.5 lifecycle states [decision]."""

    INERT = "inert"
    SCHEDULED = "scheduled"  # timer pending
    CYCLING = "cycling"  # cycle in flight
    STOPPING = "stopping"
    STOPPED = "stopped"


#: The lifecycle core's state (L-rules) under its §5.5 name.
STATE_OF: Final[Mapping[CadenceState, ApprovedActionState]] = MappingProxyType(
    {
        CadenceState.INERT: ApprovedActionState.INERT,
        CadenceState.WAITING: ApprovedActionState.SCHEDULED,
        CadenceState.RUNNING: ApprovedActionState.CYCLING,
        CadenceState.MANUAL: ApprovedActionState.CYCLING,
        CadenceState.STOPPING: ApprovedActionState.STOPPING,
        CadenceState.STOPPED: ApprovedActionState.STOPPED,
    }
)
