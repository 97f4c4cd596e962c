"""The restart window of issue 17 item 4, closed (SPEC Appendix E-2, E-3, §3.11; decision WS-1):
a `qlk worker` process SIGKILLed after its child finished and before it reported the completion,
restarted at once with the default settings, submits that completion — the work never runs
again. Real processes, a real PostgreSQL schema, real journal files.

Repetitions: `QL3_RESTART_REPETITIONS` (default 10 here; the closing note's figure is 100)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli.submit import fresh_ids
from conformance.cli.worker import KILL_POINT_VARIABLE
from kernel.specs import RunStatus
from kernel.task import TASK_EXECUTOR_TYPE
from runners.cluster.dispatch import dispatch_grants
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.task_schedule import submit_command

pytestmark = [pytest.mark.slow, pytest.mark.spec("INBOX-35")]

REPETITIONS = int(os.environ.get("QL3_RESTART_REPETITIONS", "10"))
DEADLINE_S = 90.0


def _worker(dsn: str, schema: str, state: Path, *, kill: bool) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != KILL_POINT_VARIABLE}
    if kill:
        env[KILL_POINT_VARIABLE] = "before_complete"
    argv = [sys.executable, "-m", "conformance.cli", "worker", "--dsn", dsn, "--schema", schema]
    argv += ["--journal", str(state), "--executor-type", TASK_EXECUTOR_TYPE, "--retention", "1m"]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _status(store: ClusterStore, run_id: str) -> str:
    runs = {r["run_id"]: r["status"] for r in store.project()["runs"]}
    return str(runs[run_id])


def test_a_worker_killed_before_reporting_and_restarted_at_once_completes_and_never_reruns(
    cluster_on_schema: tuple[str, str, ClusterStore], tmp_path: Path
) -> None:
    dsn, schema, store = cluster_on_schema
    state = tmp_path / "worker"
    reran = 0
    completed = 0
    for n in range(REPETITIONS):
        marker = tmp_path / f"marker-{n}"
        run_id, attempt_id = fresh_ids()
        submit_command(
            store,
            ClusterTaskStore(store),
            ["/bin/sh", "-c", f"echo ran >> {marker}"],
            now_ms=int(time.time() * 1000),
            run_id=run_id,
            attempt_id=attempt_id,
        )
        doomed = _worker(dsn, schema, state, kill=True)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while doomed.poll() is None:
                assert time.monotonic() < deadline, "the worker never reached its kill point"
                dispatch_grants(store)
                time.sleep(0.05)
        finally:
            if doomed.poll() is None:  # a failed wait must not leave the process behind
                doomed.kill()
        _out, err = doomed.communicate()
        assert doomed.returncode == -9, err  # killed at the kill point, nothing reported
        assert marker.read_text().count("ran") == 1  # the child finished
        assert _status(store, run_id) == RunStatus.RUNNING.value  # the completion is not in
        restarted = _worker(dsn, schema, state, kill=False)  # at once, default settings
        try:
            deadline = time.monotonic() + DEADLINE_S
            while _status(store, run_id) == RunStatus.RUNNING.value:
                assert restarted.poll() is None, restarted.communicate()
                assert time.monotonic() < deadline, "the restarted worker never completed"
                time.sleep(0.05)
        finally:
            restarted.terminate()  # SIGTERM: drain, then exit 0
            _out, err = restarted.communicate(timeout=DEADLINE_S)
        assert restarted.returncode == 0, err
        completed += _status(store, run_id) == RunStatus.SUCCEEDED.value
        reran += marker.read_text().count("ran") - 1
    attempts = store.project()["attempts"]
    print(
        f"restart window: {completed} of {REPETITIONS} completed by the restarted worker, "
        f"{reran} re-runs, {len(attempts)} Attempts"
    )
    assert (completed, reran) == (REPETITIONS, 0)
    assert len(attempts) == REPETITIONS  # one Attempt per Run: nothing went lost and retried
