"""The Approved Action supervisor and lifecycle model under the active Hypothesis profile
(`model_tests/approved_action_supervisor_machine.py`; SPEC §5, Appendix D-4, §0.4 L-rules).

`ci` (default, derandomized) runs `AA_BUDGETS["ci"]`; `deep` (`QL3_HYPOTHESIS_PROFILE=deep`) the
larger budget. A derandomized search must reach every path that matters, and two planted bugs
must be caught: a supervisor that forgets its resume cursors when a cycle fails (AA-06), and
§5.3's superseded reading of a stalled recovery cursor instead of Appendix D-4's (AA-01).
"""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kernel.approved_action.paging import CycleSummary, CycleVerdict, ResumeCursors
from model_tests.approved_action_supervisor_machine import (
    REACHED,
    ApprovedActionSupervisorMachine,
    ModelViolation,
    aa_settings,
)
from model_tests.harness import STATS
from runners.approved_action import ApprovedActionRuntimeSupervisor
from runners.approved_action import supervisor as supervisor_module

pytestmark = pytest.mark.slow  # model checking (a few seconds)

MODEL_IDS = (
    "AA-01",
    "AA-02",
    "AA-04",
    "AA-05",
    "AA-06",
    "AA-07",
    "AA-10",
    "AA-11",
    "AA-12",
    "AA-13",
)


@pytest.mark.spec(*MODEL_IDS)
class TestApprovedActionSupervisorModel(ApprovedActionSupervisorMachine.TestCase):  # type: ignore[misc,valid-type]
    """Random due indexes, port faults (raise, stalled cursors, slow and hung cycles), raising
    callbacks, clock steps, start/stop/run_once/restart: after every step the AA invariants of
    the machine's docstring hold."""

    settings = aa_settings()


#: What the budgeted run must reach: every stop reason of both phases, both port failures, the
#: D-4 failure, a resume from a page-limit cursor, slow calls, hung cycles stopped in either
#: phase and a raising metrics callback.
MUST_REACH = (
    "recovery_complete",
    "recovery_page_limit",
    "dispatch_complete",
    "dispatch_page_limit",
    "dispatch_cursor_stalled",
    "recovery_raised",
    "dispatch_raised",
    "recovery_stalled_failed_cycle",
    "resumed_from_page_limit",
    "slow_call",
    "hung_recovery_stopped",
    "hung_dispatch_stopped",
    "on_cycle_raised",
)


def _search(examples: int, steps: int) -> settings:
    """A derandomized search without shrinking, whatever the active profile (reproducible)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@pytest.mark.spec("AA-01", "AA-05", "AA-06", "AA-12", "AA-13")
def test_a_search_reaches_every_path() -> None:
    """The model is not idle: a derandomized search of the machine's budget size drives cycles
    down every path that matters (each counted in `REACHED`; printed) and checks the
    invariants after every step."""
    counts = STATS.of("approved_action")
    steps, checks, reached = counts.steps, counts.invariant_checks, collections.Counter(REACHED)
    run_state_machine_as_test(ApprovedActionSupervisorMachine, settings=_search(150, 40))
    gained = collections.Counter(REACHED) - reached
    print(f"\napproved action model: {counts.steps - steps} steps; {dict(sorted(gained.items()))}")
    assert counts.steps - steps > 500
    assert counts.invariant_checks - checks > counts.steps - steps
    missing = [key for key in MUST_REACH if gained[key] == 0]
    assert not missing, missing


class ForgetfulSupervisor(ApprovedActionRuntimeSupervisor):
    """*** PLANTED BUG, for the model's self-check only. *** Clears both resume cursors when a
    cycle fails, where §5.3 keeps them (AA-06)."""

    def run_cycle(self) -> CycleSummary:
        try:
            return super().run_cycle()
        except Exception:
            self._cursors = ResumeCursors()
            raise


@pytest.mark.spec("AA-06")
def test_the_model_catches_a_supervisor_that_forgets_its_cursors_on_failure() -> None:
    machine = ApprovedActionSupervisorMachine.configured(SUPERVISOR=ForgetfulSupervisor)
    with pytest.raises(ModelViolation) as caught:
        run_state_machine_as_test(machine, settings=_search(300, 40))
    assert str(caught.value).startswith("AA-06: ")


@pytest.mark.spec("AA-01")
def test_the_model_catches_a_cycle_that_dispatches_after_a_stalled_recovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """*** PLANTED BUG ***: §5.3's superseded reading (a stalled recovery cursor ends only the
    phase) in place of Appendix D-4's (it fails the cycle): the dispatcher is called after a
    stalled recovery phase."""
    monkeypatch.setattr(supervisor_module, "after_recovery", lambda _s: CycleVerdict.RUN_DISPATCH)
    with pytest.raises(ModelViolation) as caught:
        run_state_machine_as_test(ApprovedActionSupervisorMachine, settings=_search(300, 40))
    assert str(caught.value).startswith("AA-01: ")
