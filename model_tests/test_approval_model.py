"""The approval domain model under the active Hypothesis profile (`model_tests/approval_machine.py`;
issue 19 item 4: at most one start across crashes, decision AA-D1).

`ci` (default, derandomized) runs `APPROVAL_BUDGETS["ci"]` on a real edge SQLite file per machine
run; `deep` (`QL3_HYPOTHESIS_PROFILE=deep`) the larger budget. Then the figures (the run reached
requests, decisions, starts, crashes behind the barrier, reconciled failures, dispatch pages after
a crash, supervisor cycles and restarts), and a planted bug the model must catch: a reconciler
that starts what it finds behind the barrier instead of resolving it from the Run's facts.

There is no AA id for the approval domain (AA-01..AA-15 are the supervisor's), so no spec mark.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kernel.approved_action import ActionCursor, RecoveryCounters, RecoveryPage, StartAction
from kernel.approved_action.selection import ActionSource
from model_tests.approval_machine import (
    NAME,
    REACHED,
    ApprovalMachine,
    ModelViolation,
    approval_settings,
)
from model_tests.harness import STATS
from runners.engine import execute_action
from runners.local.approvals import EdgeApprovalPorts

pytestmark = pytest.mark.slow  # model checking on a real SQLite file (a few seconds)

TIMED: dict[str, float] = {}


class TestApprovalMachine(ApprovalMachine.TestCase):  # type: ignore[misc,valid-type]
    """Requests, decisions, dispatch and reconcile pages, crashes behind the barrier, supervisor
    cycles and restarts on one edge file: after every step the machine's invariants hold."""

    settings = approval_settings()

    def runTest(self) -> None:
        counts = STATS.of(NAME)
        before = counts.steps
        started = time.perf_counter()
        try:
            super().runTest()
        finally:
            TIMED["seconds"] = TIMED.get("seconds", 0.0) + time.perf_counter() - started
            TIMED["steps"] = TIMED.get("steps", 0) + counts.steps - before


MUST_REACH = (
    "request",
    "replayed_request",
    "approved",
    "denied",
    "decision_replayed",
    "decision_refused",
    "dispatched",
    "started",
    "crashed_behind_barrier",
    "interrupted_failed",
    "dispatch_after_crash",
    "supervisor_cycle",
    "restart",
)


def test_approval_model_figures() -> None:
    """The budgeted run happened in this session (else it runs here) and reached every path
    that matters; prints the figures."""
    if "steps" not in TIMED:
        started = time.perf_counter()
        before = STATS.of(NAME).steps
        run_state_machine_as_test(ApprovalMachine, settings=approval_settings())
        TIMED["seconds"] = time.perf_counter() - started
        TIMED["steps"] = STATS.of(NAME).steps - before
    counts = STATS.of(NAME)
    print(
        f"\napproval model ({settings.get_current_profile_name()}): {int(TIMED['steps'])} steps,"
        f" {counts.commands} commands, {counts.invariant_checks} invariant checks in"
        f" {TIMED['seconds']:.1f} s; reached {dict(sorted(REACHED.items()))}"
    )
    assert counts.invariant_checks > counts.steps > 0
    missing = [name for name in MUST_REACH if REACHED[name] == 0]
    assert not missing, f"never reached: {missing}"


class BlindRestartPorts(EdgeApprovalPorts):
    """A planted bug: the reconciler starts what it finds behind the barrier (a blind restart),
    instead of resolving it from the Run's facts."""

    def reconcile_batch(self, cursor: ActionCursor | None, page_size: int) -> RecoveryPage:
        now = self._clock()
        page = self._store.action_page(ActionSource.RECOVERY, cursor, page_size)
        for key in page.keys:
            execute_action(self._store, StartAction(key.action_id), now)
        counters = RecoveryCounters.zero()
        counters = RecoveryCounters(
            **(counters.as_dict() | {"scanned": len(page.keys), "verified_failed": len(page.keys)})
        )
        return RecoveryPage(counters, page.truncated, page.next_cursor)


def test_the_model_catches_a_reconciler_that_starts_behind_the_barrier() -> None:
    planted = ApprovalMachine.configured(PORTS=BlindRestartPorts)
    budget = settings(approval_settings(), phases=[Phase.generate], print_blob=False)
    with pytest.raises(ModelViolation, match=r"at-most-once|reference"):
        run_state_machine_as_test(planted, settings=budget)
