"""The Worker kill matrix (issue 6 item 7, second half; SPEC §3.5, §3.7, §3.10-§3.13, §3.17).

Real Worker processes (`python -m conformance.journal.kill_worker`) are SIGKILLed at every journal
state boundary (before and after each durable write of every §3.4 state), right after the
executor's spawn line, right after `Executor.start()` returned, right after the control plane
committed a completion, at lease-version merges, during a restart's own recovery, and by the
harness at random delays; each while a real child runs through the real POSIX executor, on both
journal adapters, against one real control-plane SQLite file shared by the harness and the
Worker. After every kill the Worker is restarted on the same directories and session until the
Attempt is terminal. `conformance/journal/kill_matrix.py` holds the cases and the checks.

CI runs `ci_cases()` (about 45 s on an idle 2-core machine, a little more under load: the cases
run 12 at a time, because every restart waits out the dead owner's 5 s stale lock window). No
outcome here depends on the machine's speed (decision KM-10): the harness's waits end on events
or at generous deadlines reported as such, and the wall time is printed, never asserted.
`QL3_KILL_MATRIX=deep` adds the nightly matrix: many more harness-side SIGKILLs, up to three per
case, at random delays, with a fresh seed (`QL3_KILL_MATRIX_SEED` replays one).
"""

from __future__ import annotations

import os
import secrets

import pytest

from conformance.journal.kill_matrix import (
    ADAPTERS,
    Case,
    CaseResult,
    MatrixReport,
    ci_cases,
    deep_cases,
    run_matrix,
    sabotage_cases,
)
from kernel.specs.journal import JournalState

pytestmark = pytest.mark.slow  # real processes, real SIGKILLs, 5 s stale-lock windows

DEEP = os.environ.get("QL3_KILL_MATRIX", "") == "deep"


def _cases() -> list[Case]:
    if not DEEP:
        return ci_cases()
    given = os.environ.get("QL3_KILL_MATRIX_SEED")
    seed = int(given) if given else secrets.randbelow(2**31)
    print(f"\ndeep kill matrix: QL3_KILL_MATRIX_SEED={seed}")
    return deep_cases(int(os.environ.get("QL3_KILL_MATRIX_REPETITIONS", "40")), seed)


@pytest.fixture(scope="module")
def matrix() -> tuple[list[Case], MatrixReport]:
    cases = _cases()
    report = run_matrix(cases, ADAPTERS, parallel=12)
    print("\n" + report.summary())
    return cases, report


def _of(report: MatrixReport, label: str) -> list[CaseResult]:
    found = [r for r in report.results if r.label == label]
    assert len(found) == len(ADAPTERS), label
    return found


@pytest.mark.spec("INBOX-04", "INBOX-05", "INBOX-06", "INBOX-34", "INBOX-35", "INBOX-36")
def test_every_kill_converges_with_zero_second_spawns_and_zero_lost_completions(
    matrix: tuple[list[Case], MatrixReport],
) -> None:
    """I-J1 / INBOX-04 across real crashes: for every kill point, on both adapters, the
    restarted Worker converges (the Attempt terminal as the case allows, the journal record in
    its final state, no receipt left), the executor's own spawn journal shows at most one
    `Executor.start()` for the offer and the child ran at most once (zero second spawns), and
    every child that ran has its completion, with its exit code, on the control plane (zero
    lost completions). Every announced kill really happened (a death by SIGKILL, at the point
    announced), and every §3.4 state had a write boundary killed."""
    cases, report = matrix
    assert report.failures == []
    assert report.duplicate_spawns == 0
    assert report.lost_completions == 0
    assert all(r.spawn_lines <= 1 and r.child_runs <= 1 for r in report.results)
    assert len(report.results) == len(cases) * len(ADAPTERS)
    assert report.kills == sum(len(c.kills) for c in cases) * len(ADAPTERS)
    assert report.journal_states == {s.value for s in JournalState}
    if not DEEP:
        assert report.kills >= 60
    assert {"after:spawn_logged", "after:executor_start", "after:complete"} <= report.points
    assert {"before:lease_merged", "after:lease_merged"} <= report.points


@pytest.mark.spec("INBOX-05")
def test_a_restart_that_finds_launching_never_spawns_and_the_attempt_ends_lost(
    matrix: tuple[list[Case], MatrixReport],
) -> None:
    """INBOX-05: killed after `launching` was durable and before any child existed (before
    `Executor.start()`, or after its spawn line but before the wrapper), the restart writes
    `recovery_required(launch_outcome_unknown)` and calls no Executor; no child ran and no
    receipt exists, so the lease expiry ends the Attempt `lost`: a correct outcome, not a lost
    completion."""
    _, report = matrix
    for label, lines in (("after:launching", 0), ("after:spawn_logged", 1)):
        for result in _of(report, label):
            assert result.status == "lost"
            assert (result.journal_state, result.recovery_reason) == (
                "recovery_required",
                "launch_outcome_unknown",
            )
            assert result.spawn_lines == lines  # the restart added none
            assert result.child_runs == 0
            assert not result.receipt_left


@pytest.mark.spec("INBOX-34", "INBOX-35")
def test_a_child_that_ran_before_the_kill_completes_through_its_receipt(
    matrix: tuple[list[Case], MatrixReport],
) -> None:
    """INBOX-34/35: a child whose `started` never became durable (the Worker died right after
    `Executor.start()` returned) completes from its authenticated receipt at the restart; a
    completion the control plane committed before the Worker died converges through the exact
    replay (`already_terminal`) to `completion_acknowledged`, and the receipt is deleted last."""
    _, report = matrix
    for label in ("after:executor_start", "after:complete", "before:completion_acknowledged"):
        for result in _of(report, label):
            assert (result.status, result.journal_state) == (
                "succeeded",
                "completion_acknowledged",
            )
            # the restart's startup recovery completed it, before any delivery
            assert result.paths[-1].startswith("startup:ready(actions 1, unsettled 0)")
            assert (result.spawn_lines, result.child_runs, result.receipt_left) == (1, 1, False)
    for result in _of(report, "after:executor_start exit 3"):
        assert (result.status, result.exit_code) == ("failed", 3)


@pytest.mark.spec("INBOX-06", "INBOX-36")
def test_a_restart_that_finds_started_with_a_running_child_replays_only_the_running_ack(
    matrix: tuple[list[Case], MatrixReport],
) -> None:
    """INBOX-06/36: killed after `started` while the (slow) child still runs, the restart's
    recovery acknowledges running (T4) from the journal's lease and writes
    `running_acknowledged` (killed right there, before any delivery reached it); the third
    process waits for the child and completes it. One spawn in all."""
    _, report = matrix
    for result in _of(report, "slow: after:started, restart after:running_acknowledged"):
        assert result.paths[1] == "KILL@after:running_acknowledged"  # during the startup
        assert (result.status, result.spawn_lines, result.child_runs) == ("succeeded", 1, 1)


@pytest.mark.spec("INBOX-08")
def test_a_refused_start_converges_to_start_failure_acknowledged(
    matrix: tuple[list[Case], MatrixReport],
) -> None:
    """INBOX-08, §3.7: a command that does not exist is refused by the executor (nothing
    runs). Killed after `start_failed`, the redelivery replays `fail_start` only; killed after
    the control plane accepted the failure (T5 released the lease, so no redelivery can come),
    the restart itself replays `fail_start` (exact replay) and the journal reaches
    `start_failure_acknowledged` all the same. Killed before `start_failed`, the record is
    `launch_outcome_unknown` (INBOX-05) and the Attempt ends `lost`."""
    _, report = matrix
    for label in ("refused after:start_failed", "refused before:start_failure_acknowledged"):
        for result in _of(report, label):
            assert (result.status, result.journal_state) == (
                "failed",
                "start_failure_acknowledged",
            )
            assert (result.spawn_lines, result.child_runs) == (1, 0)
    for result in _of(report, "refused before:start_failed"):
        assert (result.status, result.recovery_reason) == ("lost", "launch_outcome_unknown")


def test_the_lease_token_stays_in_the_pipe_and_the_journal(
    matrix: tuple[list[Case], MatrixReport],
) -> None:
    """S-1 / I-J5: the lease token reached every Worker through its stdin only: it is in no
    Worker's argv or environment (/proc), stdout, stderr, the spawn journal, the child's output
    or the report; no result or summary line carries it either (the check is part of every
    case, so a leak is a failure of the case)."""
    _, report = matrix
    assert not [f for f in report.failures if "lease token" in f]
    assert "lease_token" not in report.summary()
    assert all(r.ok for r in report.results)


@pytest.mark.spec("INBOX-04")
def test_the_matrix_catches_a_second_spawn_and_a_lost_completion() -> None:
    """The checks have teeth: a restarted Worker that forgets `launching` (it reads it as
    `starting_acknowledged`) starts the Attempt again, and one that cannot see receipts lets a
    completed child's Attempt expire `lost`; the matrix reports both."""
    report = run_matrix(sabotage_cases(), ("file",), parallel=2)
    by_label = {r.label: r for r in report.results}
    forgetful = by_label["teeth: forget-launching"]
    assert forgetful.spawn_lines == 2
    assert forgetful.duplicate_spawns >= 1
    assert any("Executor.start() calls" in f for f in forgetful.failures)
    blind = by_label["teeth: blind-receipts"]
    assert blind.lost_completion
    assert blind.status == "lost"
    assert report.duplicate_spawns >= 1
    assert report.lost_completions >= 1
