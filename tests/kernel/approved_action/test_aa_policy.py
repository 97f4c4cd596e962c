"""The Approved Action profile resource policy and configuration limits (SPEC §5.4, §5.5;
AA-03, AA-08, AA-09, AA-14)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.approved_action import policy as policy_module
from kernel.approved_action.paging import PhaseBudget
from kernel.approved_action.policy import (
    STATE_OF,
    ApprovedActionPolicy,
    ApprovedActionState,
    PhasePolicy,
    ProfileNotSupported,
    approved_action_config,
    local_primary_resource_policy,
)
from kernel.specs.budgets import BudgetError, ProfileBudget
from kernel.specs.cadence import CadenceState
from kernel.specs.codes import Code
from kernel.specs.states import Profile

HOUR_MS = 3_600_000

#: §5.4, read off the SPEC table: interval, recovery (page size, pages), dispatch, items, stop,
#: initial delay. ("1 page x 8" is max pages x page size: page size 8, 1 page.)
TABLE = {
    "edge": (30_000, (8, 1), (8, 1), 16, 5_000, 0),
    "standalone": (2_000, (16, 2), (32, 4), 160, 5_000, 0),
}


def _row(policy: ApprovedActionPolicy) -> tuple[Any, ...]:
    return (
        policy.interval_ms,
        (policy.recovery.page_size, policy.recovery.max_pages),
        (policy.dispatch.page_size, policy.dispatch.max_pages),
        policy.max_items_per_cycle,
        policy.stop_timeout_ms,
        policy.initial_delay_ms,
    )


# -- AA-08 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-08")
@pytest.mark.parametrize("profile", ["edge", "standalone", Profile.EDGE, Profile.STANDALONE])
def test_aa08_the_policies_equal_the_section_5_4_table(profile: str) -> None:
    policy = local_primary_resource_policy(profile)
    assert policy.profile == profile
    assert _row(policy) == TABLE[str(profile)]
    config = policy.to_config()
    assert config.max_items_per_cycle == TABLE[str(profile)][3]
    assert config.cadence.interval_ms == TABLE[str(profile)][0]


@pytest.mark.spec("AA-08")
def test_aa08_edge_and_standalone_differ() -> None:
    edge = local_primary_resource_policy("edge")
    standalone = local_primary_resource_policy("standalone")
    assert edge != standalone
    assert edge.interval_ms > standalone.interval_ms  # edge wakes less often
    assert edge.max_items_per_cycle < standalone.max_items_per_cycle


@pytest.mark.spec("AA-08")
@pytest.mark.parametrize("profile", ["edge", "standalone"])
def test_aa08_every_call_returns_a_deep_copy(profile: str) -> None:
    first = local_primary_resource_policy(profile)
    second = local_primary_resource_policy(profile)
    assert first == second
    assert first is not second
    assert first.recovery is not second.recovery
    assert first.dispatch is not second.dispatch
    # Mutate everything a caller can reach: the top level and both nested phase policies.
    first.interval_ms = 250
    first.stop_timeout_ms = 1
    first.recovery.page_size = 64
    first.recovery.max_pages = 64
    first.dispatch.max_pages = 64
    second.dispatch = PhasePolicy(1, 1)
    assert _row(local_primary_resource_policy(profile)) == TABLE[profile]


@pytest.mark.spec("AA-03", "AA-08")
def test_aa08_a_mutated_policy_is_still_checked_when_it_becomes_a_configuration() -> None:
    policy = local_primary_resource_policy("standalone")
    policy.dispatch.page_size = 65
    with pytest.raises(BudgetError):
        policy.to_config()
    policy.dispatch.page_size = 64
    policy.recovery.max_pages = 0
    with pytest.raises(BudgetError):
        policy.to_config()


# -- AA-09 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-09")
@pytest.mark.parametrize(
    "profile", ["cluster", "worker", Profile.CLUSTER, Profile.WORKER, "EDGE", "", "router", 3, None]
)
def test_aa09_other_profiles_are_refused_before_any_configuration_is_read(
    profile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Profile] = []

    def watched(p: Profile) -> ProfileBudget:
        reads.append(p)
        raise AssertionError("the budget table was read")

    monkeypatch.setattr(policy_module, "budget_source", watched)
    with pytest.raises(ProfileNotSupported) as caught:
        local_primary_resource_policy(profile)
    assert caught.value.code is Code.PROFILE_NOT_SUPPORTED
    assert str(Code.PROFILE_NOT_SUPPORTED) in str(caught.value)
    assert reads == []


@pytest.mark.spec("AA-09")
def test_aa09_a_supported_profile_does_read_the_budget_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The observation above can fail: a supported profile goes through `budget_source`."""
    reads: list[Profile] = []
    original = policy_module.budget_source

    def watched(p: Profile) -> ProfileBudget:
        reads.append(p)
        return original(p)

    monkeypatch.setattr(policy_module, "budget_source", watched)
    local_primary_resource_policy("edge")
    assert reads == [Profile.EDGE]


@pytest.mark.spec("AA-09")
def test_aa09_the_refusal_echoes_no_caller_text() -> None:
    with pytest.raises(ProfileNotSupported) as caught:
        local_primary_resource_policy("token=s3cr3t")
    assert "s3cr3t" not in str(caught.value)
    assert caught.value.profile is None


# -- AA-14, AA-03: configuration limits ----------------------------------------------------------
def _config(**overrides: Any) -> Any:
    args: dict[str, Any] = {
        "interval_ms": 1_000,
        "stop_timeout_ms": 5_000,
        "initial_delay_ms": 0,
        "recovery": PhaseBudget(8, 1),
        "dispatch": PhaseBudget(8, 1),
    }
    args.update(overrides)
    return approved_action_config(**args)


@pytest.mark.spec("AA-14")
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"interval_ms": 249}, "interval_ms"),
        ({"interval_ms": 24 * HOUR_MS + 1}, "interval_ms"),
        ({"interval_ms": 1_000.0}, "interval_ms"),
        ({"interval_ms": math.nan}, "interval_ms"),
        ({"interval_ms": True}, "interval_ms"),
        ({"stop_timeout_ms": 60_001}, "stop_timeout_ms"),
        ({"stop_timeout_ms": 0}, "stop_timeout_ms"),
        ({"stop_timeout_ms": math.nan}, "stop_timeout_ms"),
        ({"initial_delay_ms": -1}, "initial_delay_ms"),
        ({"initial_delay_ms": 1_001}, "initial_delay_ms"),
    ],
)
def test_aa14_out_of_range_timing_fails_closed(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(BudgetError) as caught:
        _config(**overrides)
    assert caught.value.field == field


@pytest.mark.spec("AA-14")
@given(st.integers(0, 25 * HOUR_MS), st.integers(-10, 70_000))
def test_aa14_interval_and_stop_timeout_ranges(interval: int, stop_timeout: int) -> None:
    valid = 250 <= interval <= 24 * HOUR_MS and 0 < stop_timeout <= 60_000
    if valid:
        config = _config(interval_ms=interval, stop_timeout_ms=stop_timeout)
        assert (config.cadence.interval_ms, config.cadence.stop_timeout_ms) == (
            interval,
            stop_timeout,
        )
    else:
        with pytest.raises(BudgetError):
            _config(interval_ms=interval, stop_timeout_ms=stop_timeout)


@pytest.mark.spec("AA-03", "AA-14")
def test_aa03_the_phases_must_be_checked_budgets_and_the_bounds_are_accepted() -> None:
    with pytest.raises(TypeError, match="recovery"):
        _config(recovery=(8, 1))
    with pytest.raises(TypeError, match="dispatch"):
        _config(dispatch=PhasePolicy(8, 1))
    low = _config(interval_ms=250, stop_timeout_ms=1, recovery=PhaseBudget(1, 1))
    high = _config(
        interval_ms=24 * HOUR_MS,
        stop_timeout_ms=60_000,
        initial_delay_ms=24 * HOUR_MS,
        dispatch=PhaseBudget(64, 64),
    )
    assert low.recovery.max_items == 1
    assert high.dispatch.max_items == 64 * 64


# -- §5.5 states ---------------------------------------------------------------------------------
def test_every_core_state_has_its_section_5_5_name() -> None:
    assert set(STATE_OF) == set(CadenceState)
    assert set(STATE_OF.values()) == set(ApprovedActionState)
    assert [s.value for s in ApprovedActionState] == [
        "inert",
        "scheduled",
        "cycling",
        "stopping",
        "stopped",
    ]
    assert STATE_OF[CadenceState.WAITING] is ApprovedActionState.SCHEDULED
    assert STATE_OF[CadenceState.RUNNING] is ApprovedActionState.CYCLING


def test_the_policy_is_a_plain_mutable_dataclass() -> None:
    """The deep-copy reading: a policy can be changed by its holder (so AA-08's copy matters)."""
    params = dataclasses.fields(ApprovedActionPolicy)
    assert [f.name for f in params][:2] == ["profile", "interval_ms"]
    policy = local_primary_resource_policy("edge")
    policy.recovery.page_size = 3
    assert policy.recovery.page_size == 3
