"""The model machines under the active Hypothesis profile (issue 3, items 2 and 5).

`ci` (the default, derandomized): each machine runs its budget from `machines.BUDGETS`; together
they make at least 50,000 state-machine steps (asserted by the last test, which also prints the
throughput). `deep` (`QL3_HYPOTHESIS_PROFILE=deep`): randomized, at least 1,000,000 steps.
`python -m model_tests.deep` is the faster long run with the same rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hypothesis.stateful import run_state_machine_as_test

from model_tests.harness import STATS
from model_tests.machines import (
    MACHINES,
    MIN_TOTAL_STEPS,
    ModelMachine,
    RetryExhaustionMachine,
    RunLifecycleMachine,
    active_profile,
    machine_settings,
)

pytestmark = pytest.mark.slow  # model checking: ~59,000 state-machine steps (about 40 s)

# Steps that each machine's budgeted run made in this session.
BUDGET_STEPS = STATS.timed_steps


def run_budgeted(machine: type[ModelMachine], run: Callable[[], None]) -> None:
    counts = STATS.of(machine.NAME)
    before = counts.steps
    started = time.perf_counter()
    try:
        run()
    finally:
        elapsed = time.perf_counter() - started
        STATS.seconds[machine.NAME] = STATS.seconds.get(machine.NAME, 0.0) + elapsed
    BUDGET_STEPS[machine.NAME] = BUDGET_STEPS.get(machine.NAME, 0) + counts.steps - before


@pytest.mark.spec(
    "RUN-01", "RUN-02", "RUN-08", "LEASE-02", "LEASE-03", "LEASE-09", "RETRY-09", "RETRY-11"
)
class TestRunLifecycle(RunLifecycleMachine.TestCase):  # type: ignore[misc,valid-type]
    """Several Runs, two or three Workers, fences in a Bundle, every fault as a rule."""

    settings = machine_settings(RunLifecycleMachine)

    def runTest(self) -> None:
        run_budgeted(RunLifecycleMachine, super().runTest)


@pytest.mark.spec(
    "RUN-01",
    "RETRY-03",
    "RETRY-04",
    "RETRY-05",
    "RETRY-06",
    "RETRY-07",
    "RETRY-08",
    "RETRY-09",
    "RETRY-11",
    "RETRY-16",
)
class TestRetryExhaustion(RetryExhaustionMachine.TestCase):  # type: ignore[misc,valid-type]
    """Runs whose Attempts keep getting lost end by the §1.8.1 precedence."""

    settings = machine_settings(RetryExhaustionMachine)

    def runTest(self) -> None:
        run_budgeted(RetryExhaustionMachine, super().runTest)


@pytest.mark.spec("RUN-01")
def test_ci_budget_runs_at_least_50000_model_steps() -> None:
    """Issue 3 item 5: the profile's step budget is met (50,000 under ci). A machine whose
    test did not run in this session (e.g. this test selected alone) is run here."""
    for name, machine in MACHINES.items():
        if name not in BUDGET_STEPS:

            def run(m: type[ModelMachine] = machine) -> None:
                run_state_machine_as_test(m, settings=machine_settings(m))

            run_budgeted(machine, run)
    profile = active_profile()
    steps = sum(BUDGET_STEPS.values())
    seconds = sum(STATS.seconds.values())
    checks = sum(STATS.of(name).invariant_checks for name in MACHINES)
    print(
        f"\nmodel budget ({profile}): {steps} steps "
        f"({', '.join(f'{k} {v}' for k, v in sorted(BUDGET_STEPS.items()))}) in {seconds:.1f} s "
        f"= {steps / seconds:.0f} steps/s; {checks} invariant checks"
    )
    assert steps >= MIN_TOTAL_STEPS.get(profile, 1), f"{steps} steps under {profile}"
    assert checks > steps  # every step is followed by the invariants
    # Appendix E-1: the lifecycle model cancels while running, lets the lease expire (T9) and
    # converges, and the harness checked each such convergence (`_check_converge`).
    revoked = STATS.of(RunLifecycleMachine.NAME).revoked_convergences
    print(f"E-1 convergences checked: {revoked}")
    assert revoked > 0
    # Decision R-27 is checked whenever the random walk reaches it (rarely: a local Attempt
    # must run under an intent); the exhaustive model reaches every case (test_exhaustive).
    intent = STATS.of(RunLifecycleMachine.NAME).intent_completions
    print(f"R-27 completions under an intent checked: {intent}")
