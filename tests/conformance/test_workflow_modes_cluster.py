"""Guard mode, kill mode, terminate mode and the lock probe cover the Workflow write paths on the
cluster runner, over a real PostgreSQL server (issue 18 item 3; WF-05, WF-19, RUN-06, B-35).

The Workflow writes of one short trace (admission, frontier, Task admission, execution,
cancellation) are killed at every query boundary (a SIGKILLed client: exactly the before- or the
after-state), their backend terminated at every boundary, held after their load while second
connections' `FOR UPDATE` on the Run and its Task Attempts must block (`select_run ... FOR
UPDATE` of the Workflow load); every guard of every Workflow write path of the corpus is probed
with a stale variant the store must refuse; and a planted runner whose StepRun CAS lost its epoch
guard is caught. The edge half is `test_workflow_modes.py`.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from conformance.run.cluster import make_cluster_adapter
from conformance.run.corpus import WORKFLOW_CORPUS
from conformance.run.guards import probe_every_write
from conformance.run.kill_cluster import kill_every_write, terminate_every_write
from conformance.run.locks import lock_every_write_cluster
from kernel.workflow import WORKFLOW_COMMANDS_BY_NAME
from runners.cluster import store as cluster_store
from runners.cluster.named_sql import WORKFLOW as CLUSTER_WORKFLOW
from tests.support.postgres import reachable_dsn

pytestmark = pytest.mark.slow  # real PostgreSQL, a SIGKILLed client per query boundary

CANCELLATION = "WF-05-cancellation-convergence-faults-write-nothing.jsonl"
#: The Workflow write paths of that trace, in the order it applies them.
CANCELLATION_PATHS = [
    ("admit_workflow", "admitted"),
    ("advance_frontier", "applied"),
    ("admit_task", "admitted"),
    ("prepare_task", "applied"),
    ("record_task_handle", "applied"),
    ("request_workflow_cancel", "cancel_requested"),
    ("converge_workflow_cancel", "converged"),
]


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    yield from reachable_dsn("the Workflow modes")


@pytest.fixture
def cancellation(tmp_path: Path) -> Path:
    target = tmp_path / "traces"
    target.mkdir()
    shutil.copyfile(WORKFLOW_CORPUS / CANCELLATION, target / CANCELLATION)
    return target


@pytest.mark.spec("WF-05", "WF-19", "RUN-06")
def test_every_workflow_write_is_atomic_under_a_client_kill_and_a_backend_termination(
    pg_dsn: str, cancellation: Path
) -> None:
    """WF-19 on PostgreSQL: the Task admission (Attempt, StepRun epoch, ledger row, Event) is
    all or nothing at every query boundary, as is every other Workflow write (WF-05)."""
    killed = kill_every_write(cancellation, pg_dsn)
    assert [r.path.key for r in killed] == CANCELLATION_PATHS
    for result in killed:
        assert result.failures == ()
        assert result.statements >= 3  # BEGIN, the Run row FOR UPDATE, ..., COMMIT
        assert result.kills == result.statements + 1  # every boundary, then after COMMIT
    terminated = terminate_every_write(cancellation, pg_dsn)
    assert [r.path.key for r in terminated] == CANCELLATION_PATHS
    for run in terminated:
        assert run.failures == ()
        assert run.terminations == run.statements  # every boundary, then the call that applies


@pytest.mark.spec("WF-19")
def test_every_workflow_write_holds_its_run_row_until_it_commits(
    pg_dsn: str, cancellation: Path
) -> None:
    report = lock_every_write_cluster(cancellation, pg_dsn)
    assert [r.path.key for r in report.results] == CANCELLATION_PATHS
    assert report.failures == []
    # the admission creates its Run (nothing to lock); every later write locks the Run row, and
    # the Task Attempts once there are some
    contenders = {r.path.key: r.contenders for r in report.results}
    assert contenders[("admit_workflow", "admitted")] == 0
    assert contenders[("advance_frontier", "applied")] == 1
    assert contenders[("prepare_task", "applied")] == 2


def test_every_guard_of_every_workflow_write_path_is_enforced_by_postgresql(pg_dsn: str) -> None:
    report = probe_every_write(functools.partial(make_cluster_adapter, pg_dsn), WORKFLOW_CORPUS)
    flows = [w for w in report.writes if w.command in WORKFLOW_COMMANDS_BY_NAME]
    assert len(flows) == 12  # every Workflow (command, outcome code) pair of the corpus
    assert all(w.probes > 0 for w in flows)
    assert report.failures == []


@pytest.mark.spec("WF-19")
def test_guard_mode_catches_a_step_run_cas_without_its_epoch_guard_on_postgresql(
    pg_dsn: str, cancellation: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = dict(CLUSTER_WORKFLOW)  # the sections the store looks up at call time
    guard = "\n  AND version = %(expected_version)s"
    assert guard in sections["update_step_run"]
    sections["update_step_run"] = sections["update_step_run"].replace(guard, "")
    monkeypatch.setattr(cluster_store, "WORKFLOW", MappingProxyType(sections))
    report = probe_every_write(functools.partial(make_cluster_adapter, pg_dsn), cancellation)
    assert report.raised == []
    assert report.accepted
    assert all("UpdateStepRun[" in line and ".version:" in line for line in report.accepted)
