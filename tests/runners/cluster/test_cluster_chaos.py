"""Issue 17 item 5 in CI: three `qlk serve --profile cluster` replicas and three `qlk worker`
hosts as real processes on one PostgreSQL schema (conformance/cluster/chaos.py).

Small here; the full size (1,000 Runs, at least 50 kills) with `QL3_CHAOS=full`, whose figures
are in the issue's closing note and docs/performance.md."""

from __future__ import annotations

import os

import pytest

from conformance.cluster.chaos import run_chaos

pytestmark = pytest.mark.slow

FULL = os.environ.get("QL3_CHAOS") == "full"


@pytest.mark.spec("LEASE-04", "INBOX-11")
def test_every_run_succeeds_once_on_three_replicas_and_three_workers(pg_dsn: str) -> None:
    """No chaos: every Run ends succeeded with exactly one Attempt and one execution; no double
    lease; every completion is the Attempt's own lease's (the report's checks)."""
    report = run_chaos(pg_dsn, runs=1000 if FULL else 30, chaos=False, deadline_s=1200)
    print("\n".join(report.lines()))
    assert report.problems == []
    assert report.by_status == {"succeeded": report.runs}
    assert (report.attempts, report.executions) == (report.runs, report.runs)


@pytest.mark.spec("INBOX-35")
def test_kills_and_terminated_backends_never_run_an_attempt_twice(pg_dsn: str) -> None:
    """Chaos: a random replica or Worker SIGKILLed and restarted at once every couple of
    seconds, server backends terminated: every Run still ends, at most one execution per
    Attempt, dense Attempt numbers, no double lease, no stale completion accepted."""
    runs, kills = (1000, 50) if FULL else (40, 6)
    report = run_chaos(
        pg_dsn,
        runs=runs,
        chaos=True,
        kill_every_s=3.0 if FULL else 1.5,
        terminate_every_s=5.0 if FULL else 2.0,
        min_kills=kills,
        deadline_s=1800 if FULL else 600,
        seed=int(os.environ.get("QL3_CHAOS_SEED", "17")),
    )
    print("\n".join(report.lines()))
    assert report.problems == []
    assert sum(report.kills.values()) >= kills
    assert report.executions <= report.attempts
