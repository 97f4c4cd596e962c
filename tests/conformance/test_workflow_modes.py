"""Guard mode, kill mode and the lock probe cover the Workflow write paths on the edge runner
(issue 18 item 3; WF-05, RUN-06, V-1, D-2).

A Workflow command is one `execute_workflow` transaction (SPEC §4): every (command, outcome
code) pair the Workflow corpus applies is a write path of `conformance.run.walk`, killed at every
statement boundary of a real SQLite file (exactly the before- or the after-state on reopen,
WF-05), probed with a stale variant of every guard (an older StepRun epoch, each Workflow insert
twice) that the store must refuse, and held after its load while a second connection's
`BEGIN IMMEDIATE` must block. Planted runner bugs on a Workflow write (a dropped epoch guard, an
upsert, a write split into two commits) are caught, and `qlk conform` counts the Workflow paths.
The PostgreSQL half is `test_workflow_modes_cluster.py`.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

import pytest

from conformance.cli import main
from conformance.run.corpus import WORKFLOW_CORPUS
from conformance.run.edge import make_edge_adapter
from conformance.run.guards import probe_every_write, stale_variants
from conformance.run.kill_edge import kill_every_write
from conformance.run.kill_port import kill_every_write as kill_every_write_through_port
from conformance.run.locks import lock_every_write_edge
from examples.adapter.jsonstore import make_adapter as make_json_adapter
from kernel.approved_action import AnyActionEffect
from kernel.workflow import (
    WORKFLOW_COMMANDS_BY_NAME,
    InsertStepRun,
    InsertTaskAdmission,
    InsertWorkflowAdmission,
    StepRun,
    StepRunStatus,
    TaskAdmission,
    UpdateStepRun,
    WorkflowAdmission,
    WorkflowEffect,
)
from runners.edge import store as edge_store
from runners.edge.named_sql import WORKFLOW as EDGE_WORKFLOW
from runners.edge.store import EdgeStore, EdgeTransaction
from tests.support.kill_adapters import make_non_atomic

#: The Workflow (command, outcome code) pairs the Workflow corpus applies without a fault (the
#: Run commands it also applies, admit_run and the local ones, are the run corpus's paths).
WORKFLOW_PATHS = frozenset(
    {
        ("admit_workflow", "admitted"),
        ("advance_frontier", "applied"),
        ("admit_task", "admitted"),
        ("prepare_task", "applied"),
        ("record_task_handle", "applied"),
        ("request_workflow_cancel", "cancel_requested"),
        ("converge_workflow_cancel", "converged"),
        ("fail_task_start", "applied"),
        ("complete_task", "completed"),
        ("time_out_task", "applied"),
        ("recover_task_startup", "lost"),
        ("recover_task_startup", "completed"),
    }
)
CANCELLATION_PATHS = [
    ("admit_workflow", "admitted"),
    ("advance_frontier", "applied"),
    ("admit_task", "admitted"),
    ("prepare_task", "applied"),
    ("record_task_handle", "applied"),
    ("request_workflow_cancel", "cancel_requested"),
    ("converge_workflow_cancel", "converged"),
]
#: One short Workflow trace: admission, frontier, Task admission and execution, cancellation
#: (seven Workflow write paths, `CANCELLATION_PATHS`), enough for a planted bug to show.
CANCELLATION = "WF-05-cancellation-convergence-faults-write-nothing.jsonl"


def _workflow_keys(keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {key for key in keys if key[0] in WORKFLOW_COMMANDS_BY_NAME}


@pytest.fixture
def cancellation(tmp_path: Path) -> Path:
    target = tmp_path / "traces"
    target.mkdir()
    shutil.copyfile(WORKFLOW_CORPUS / CANCELLATION, target / CANCELLATION)
    return target


# ---------------------------------------------------------------------------- stale variants -


def _step_run(version: int) -> StepRun:
    return StepRun(
        step_run_id="s1",
        run_id="r1",
        step_key="build",
        ordinal=1,
        task_id="t1",
        task_revision=1,
        executor_type="shell",
        depends_on=(),
        max_attempts=1,
        retry_backoff_ms=0,
        status=StepRunStatus.READY,
        version=version,
        created_at_ms=1,
        updated_at_ms=1,
    )


def test_every_workflow_effect_has_its_stale_variants() -> None:
    """An older StepRun epoch for the CAS, the same row twice for every Workflow insert."""
    update = UpdateStepRun(_step_run(3), expected_version=2)
    ((guard, (stale,)),) = list(stale_variants(update))
    assert guard == "version"
    assert stale == UpdateStepRun(_step_run(3), expected_version=1)
    admission = WorkflowAdmission("r1", "plan", "d" * 64, 1, 1)
    ledger = TaskAdmission("a1", "r1", "s1", 2, "d" * 64, "t1", 1, "shell", 1, "e1", 1)
    inserts: list[WorkflowEffect] = [
        InsertWorkflowAdmission(admission),
        InsertStepRun(_step_run(1)),
        InsertTaskAdmission(ledger),
    ]
    for insert in inserts:
        assert list(stale_variants(insert)) == [("duplicate", (insert, insert))]


# ---------------------------------------------------------------------------- the runner -----


@pytest.mark.slow  # kill mode: a SIGKILLed child per statement boundary (~200 over the corpus)
@pytest.mark.spec("WF-05", "RUN-06")
def test_every_workflow_write_path_is_killed_guarded_and_lock_probed_on_edge() -> None:
    killed = kill_every_write(WORKFLOW_CORPUS)
    assert _workflow_keys([r.path.key for r in killed]) == WORKFLOW_PATHS
    for result in killed:
        assert result.failures == ()
        assert result.statements >= 3  # BEGIN IMMEDIATE, a write, COMMIT
        assert result.kills == result.statements + 1  # every boundary, none skipped
    guarded = probe_every_write(make_edge_adapter, WORKFLOW_CORPUS)
    assert _workflow_keys([(w.command, w.code) for w in guarded.writes]) == WORKFLOW_PATHS
    assert guarded.failures == []
    assert all(w.probes > 0 for w in guarded.writes)
    locked = lock_every_write_edge(WORKFLOW_CORPUS)
    assert _workflow_keys([r.path.key for r in locked.results]) == WORKFLOW_PATHS
    assert locked.failures == []
    # every Workflow write but the admission (no Run to lock yet) had a contender blocked
    blocked = {r.path.key for r in locked.results if r.contenders}
    assert WORKFLOW_PATHS - blocked == {("admit_workflow", "admitted")}


def _plant(monkeypatch: pytest.MonkeyPatch, name: str, old: str, new: str) -> None:
    """Replace `old` by `new` in the edge runner's Workflow SQL section `name`."""
    sections = dict(EDGE_WORKFLOW)  # the sections the edge store looks up at call time
    assert old in sections[name]
    sections[name] = sections[name].replace(old, new)
    monkeypatch.setattr(edge_store, "WORKFLOW", MappingProxyType(sections))


@pytest.mark.spec("WF-05")
@pytest.mark.parametrize(
    ("section", "old", "new", "probe"),
    [
        pytest.param(
            "update_step_run",
            "\n  AND version = :expected_version",
            "",
            "UpdateStepRun[",
            id="step-run-epoch-guard-dropped",
        ),
        pytest.param(
            "insert_step_run",
            "INSERT INTO",
            "INSERT OR REPLACE INTO",
            "InsertStepRun[",
            id="step-run-upsert",
        ),
        pytest.param(
            "insert_workflow_admission",
            "INSERT INTO",
            "INSERT OR REPLACE INTO",
            "InsertWorkflowAdmission[",
            id="workflow-admission-upsert",
        ),
        pytest.param(
            "insert_task_admission",
            "INSERT INTO",
            "INSERT OR REPLACE INTO",
            "InsertTaskAdmission[",
            id="task-admission-upsert",
        ),
    ],
)
def test_guard_mode_catches_a_workflow_write_without_its_guard(
    *,
    cancellation: Path,
    monkeypatch: pytest.MonkeyPatch,
    section: str,
    old: str,
    new: str,
    probe: str,
) -> None:
    """A serial replay never meets a stale write; guard mode shows the planted store accepting
    the stale StepRun epoch or the second insert, and names the effect and its guard."""
    _plant(monkeypatch, section, old, new)
    report = probe_every_write(make_edge_adapter, cancellation)
    assert report.raised == []
    assert report.accepted
    assert all(probe in line and "stale write accepted" in line for line in report.accepted)
    assert f", {len(report.accepted)} accepted by the runner" in report.summary()


@contextmanager
def _step_runs_after_commit(self: EdgeStore) -> Iterator[EdgeTransaction]:
    """Planted bug: a Workflow write split into two transactions, its StepRun updates
    committed second."""
    pending: list[WorkflowEffect | AnyActionEffect] = []

    class Deferring(EdgeTransaction):
        def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
            if isinstance(effect, UpdateStepRun):
                pending.append(effect)
            else:
                super().execute(effect)

    with self.authority.transaction() as conn:
        yield Deferring(conn)
    if pending:  # a write without a StepRun update still commits once
        with self.authority.transaction() as conn:
            late = EdgeTransaction(conn)
            for effect in pending:
                late.execute(effect)


@pytest.mark.slow  # kill mode over one trace with a planted bug
@pytest.mark.spec("WF-05")
def test_kill_mode_catches_a_workflow_write_split_into_two_commits(
    cancellation: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EdgeStore, "transaction", _step_runs_after_commit)
    results = kill_every_write(cancellation)
    torn = [line for r in results for line in r.failures]
    assert torn, "a Workflow write that commits twice passed kill mode"
    assert torn[0].startswith("advance_frontier:applied")  # the first write with a StepRun CAS
    # killed between the commits: the Run CAS is durable, its StepRun update is not
    assert "not the before-state: " in torn[0]
    assert "runs[wf].version: expected 1, got 2" in torn[0]
    # the writes without a StepRun update commit once and still pass
    whole = {r.path.key for r in results if not r.failures}
    assert ("admit_workflow", "admitted") in whole


@pytest.mark.slow  # replay, guard mode, kill mode and the lock probe of one Workflow trace
@pytest.mark.spec("WF-05")
def test_qlk_conform_counts_the_workflow_write_paths_of_every_mode(
    cancellation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conform", "--traces", str(cancellation), "-q"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":", 1)[0]: line for line in out.splitlines() if ": " in line}
    seven = "Workflow write paths: 7"
    assert re.match(r"guard mode: 7 write paths, \d+ stale writes probed ", lines["guard mode"])
    assert f"(every guard of every effect; {seven}), 0 accepted" in lines["guard mode"]
    assert re.match(r"kill mode: 7 write paths, \d+ SIGKILLs at every", lines["kill mode"])
    assert lines["kill mode"].endswith(
        f"0 left a state that was neither the before- nor the after-state ({seven})"
    )
    assert lines["lock probe"].startswith("lock probe: 7 write paths, ")
    assert f"after the load ({seven}), 0 failures" in lines["lock probe"]
    assert out.splitlines()[-1] == "verdict: PASS"


@pytest.mark.slow  # kill mode through the adapter port: a SIGKILLed child per boundary
@pytest.mark.spec("WF-05")
def test_a_third_party_adapter_with_kill_and_workflow_has_its_workflow_writes_killed(
    cancellation: Path,
) -> None:
    """Through the storage port (`conformance.run.kill_port`): the example JSON store declares
    `kill` and `workflow`; its Workflow writes survive a SIGKILL at every boundary, and the same
    store persisting effect by effect is caught on the first Workflow write."""
    report = kill_every_write_through_port(make_json_adapter, cancellation)
    assert report.not_run is None
    assert [r.path.key for r in report.results] == CANCELLATION_PATHS
    assert report.failures == []
    assert report.kills == sum(r.effects + 2 for r in report.results)
    torn = kill_every_write_through_port(make_non_atomic, cancellation).failures
    assert torn
    assert torn[0].startswith("admit_workflow:admitted")
    assert "killed before effect 2/" in torn[0]
    assert "not the before-state" in torn[0]
