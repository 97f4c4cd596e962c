"""`qlk workflow submit PLAN` on real SQLite files (issue 18 item 5; SPEC §4.1): the Run id alone
on stdout, the Workflow Run `running` with one `pending` StepRun per step as the database holds
them, `qlk status RUN` showing the steps, `qlk cancel RUN` taking the Workflow path, bad plan
files and `--dsn` as one line and exit 2 (SPEC E-7) with nothing written (the README's
"Running a Workflow" section is run by tests/runners/local/test_readme_workflow.py).

Running the steps (frontier, Task admission, dispatch on the launcher) is `qlk serve`'s and is
tested with the scheduler, not here."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from kernel import Replayed, is_portable_id
from kernel.specs import Code
from kernel.task import TaskRefused
from kernel.workflow import PlanStep, WorkflowApplied, WorkflowPlan
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.workflow_submit import derived_step_run_id, submit_workflow
from tests.support.qlk import one_line, qlk, qlk_process

RUN_ID = re.compile(r"run-[0-9a-f]{32}")
STEP_RUN_ID = re.compile(r"st-[0-9a-f]{32}")

PLAN = """\
name = "build-and-test"

[[steps]]
key = "build"
argv = ["echo", "building"]

[[steps]]
key = "test"
argv = ["echo", "testing"]
after = ["build"]
max_attempts = 3
retry_backoff_ms = 1000
"""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ql3.db"


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN, encoding="utf-8")
    return path


def rows(db: Path, query: str, *params: object) -> list[tuple[Any, ...]]:
    """The database as stored, read without the code under test."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [tuple(row) for row in conn.execute(query, params).fetchall()]
    finally:
        conn.close()


def written(db: Path) -> dict[str, int]:
    """How many rows each table a submission writes holds."""
    tables = ("runs", "attempts", "events", "workflow_admissions", "step_runs", "tasks")
    return {t: rows(db, f"SELECT count(*) FROM {t}")[0][0] for t in tables}  # noqa: S608


def submitted(capsys: pytest.CaptureFixture[str], db: Path, plan: Path) -> str:
    status, out, err = qlk(capsys, db, "workflow", "submit", str(plan))
    assert (status, err) == (0, ""), err
    run_id = out.removesuffix("\n")
    assert RUN_ID.fullmatch(run_id), out
    return run_id


# -- submit ------------------------------------------------------------------------------------


@pytest.mark.spec("E-7")
def test_submit_prints_the_run_id_alone_and_every_step_is_pending(
    tmp_path: Path, plan: Path
) -> None:
    """As a shell uses it (`RUN=$(qlk workflow submit plan.toml)`), in a real process on a fresh
    database: the Workflow Run `running`, its admission, one `pending` StepRun at epoch 1 per
    step in plan order, each pinning its command's implicit task, no Attempt yet."""
    done = qlk_process(tmp_path, "workflow", "submit", plan.name)
    assert (done.returncode, done.stderr) == (0, "")
    run_id = done.stdout.removesuffix("\n")
    assert "\n" not in run_id
    assert RUN_ID.fullmatch(run_id)
    assert is_portable_id(run_id)
    db = tmp_path / "ql3.db"
    [run] = rows(db, "SELECT run_id, kind, status, task_id, executor_type, project_id FROM runs")
    assert run == (run_id, "workflow", "running", "build-and-test", "workflow", "local")
    [(plan_name, step_count)] = rows(db, "SELECT plan_name, step_count FROM workflow_admissions")
    assert (plan_name, step_count) == ("build-and-test", 2)
    steps = rows(
        db,
        "SELECT step_key, status, version, task_id, task_revision, executor_type, depends_on,"
        " max_attempts, retry_backoff_ms, step_run_id FROM step_runs WHERE run_id = ?"
        " ORDER BY ordinal",
        run_id,
    )
    assert [s[:3] for s in steps] == [("build", "pending", 1), ("test", "pending", 1)]
    assert [s[5:9] for s in steps] == [
        ("local.posix", "[]", 1, 0),
        ("local.posix", '["build"]', 3, 1000),
    ]
    for step in steps:
        assert re.fullmatch(r"adhoc:[0-9a-f]{16}", step[3])
        assert step[4] == 1
        assert STEP_RUN_ID.fullmatch(step[9])
    tasks = rows(db, "SELECT task_name, revision, argv FROM task_revisions")
    assert {(t[0], t[1], json.loads(t[2])[1]) for t in tasks} == {
        (steps[0][3], 1, "building"),
        (steps[1][3], 1, "testing"),
    }
    assert rows(db, "SELECT count(*) FROM attempts") == [(0,)]
    assert rows(db, "SELECT type FROM events WHERE run_id = ?", run_id) == [("workflow.admitted",)]


def test_status_of_a_workflow_run_shows_its_steps(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db, plan)
    status, out, err = qlk(capsys, db, "status", run_id)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"run {run_id}: running"
    assert re.fullmatch(r"  workflow  build-and-test \(plan [0-9a-f]{12}\)", lines[1])
    header = next(line for line in lines if line.startswith("| step "))
    assert re.split(r"\s*\|\s*", header.strip("| ")) == [
        "step", "status", "epoch", "attempts", "started", "finished", "error",
    ]  # fmt: skip
    cells = [
        re.split(r"\s*\|\s*", line.strip("| "))
        for line in lines
        if line.startswith(("| build ", "| test "))
    ]
    assert cells == [
        ["build", "pending", "1", "0/1", "-", "-", "-"],
        ["test", "pending", "1", "0/3", "-", "-", "-"],
    ]
    assert lines.index("steps") < lines.index("attempts") < lines.index("events")


def test_status_json_of_a_workflow_run_has_the_workflow_key(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db, plan)
    status, out, _ = qlk(capsys, db, "status", run_id, "--json")
    assert status == 0
    document = json.loads(out)
    assert set(document) == {
        "run", "attempts", "events", "events_truncated", "log", "log_exists", "workflow",
    }  # fmt: skip
    workflow = document["workflow"]
    assert workflow["plan_name"] == "build-and-test"
    assert re.fullmatch(r"[0-9a-f]{64}", workflow["plan_digest"])
    stored = dict(rows(db, "SELECT step_key, step_run_id FROM step_runs"))
    steps = workflow["steps"]
    assert [(s["step_key"], s["status"], s["epoch"]) for s in steps] == [
        ("build", "pending", 1),
        ("test", "pending", 1),
    ]
    assert [s["after"] for s in steps] == [[], ["build"]]
    assert [(s["attempts_admitted"], s["max_attempts"]) for s in steps] == [(0, 1), (0, 3)]
    assert {s["step_key"]: s["step_run_id"] for s in steps} == stored
    assert all(s["started_at_ms"] is None and s["error_code"] is None for s in steps)


def test_an_ordinary_runs_status_json_has_no_workflow_key(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Workflow key is added for a Workflow Run only: an ordinary Run's document is as it
    was."""
    status, out, _ = qlk(capsys, db, "submit", "--", "true")
    assert status == 0
    status, shown, _ = qlk(capsys, db, "status", out.strip(), "--json")
    assert status == 0
    assert "workflow" not in json.loads(shown)
    status, text, _ = qlk(capsys, db, "status", out.strip())
    assert "steps" not in text.splitlines()


def test_the_overview_counts_a_workflow_among_the_running_runs(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    submitted(capsys, db, plan)
    assert qlk(capsys, db, "submit", "--", "true")[0] == 0
    status, out, err = qlk(capsys, db, "status", "--json")
    assert (status, err) == (0, "")
    document = json.loads(out)
    assert document["total"] == 2
    assert (document["runs"]["running"], document["runs"]["queued"]) == (1, 1)
    status, text, _ = qlk(capsys, db, "status")
    assert status == 0
    assert text.splitlines()[0].startswith("2 runs at ")


def test_the_same_plan_twice_is_two_workflows(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fresh Run ids each time; the steps pin the same implicit tasks (the same command is the
    same task, TK-5) under different StepRun ids."""
    first = submitted(capsys, db, plan)
    second = submitted(capsys, db, plan)
    assert first != second
    assert rows(db, "SELECT count(*) FROM runs WHERE kind = 'workflow'") == [(2,)]
    by_run = {
        run_id: rows(
            db,
            "SELECT step_key, task_id, task_revision, step_run_id FROM step_runs"
            " WHERE run_id = ? ORDER BY ordinal",
            run_id,
        )
        for run_id in (first, second)
    }
    assert [s[:3] for s in by_run[first]] == [s[:3] for s in by_run[second]]
    ids = {s[3] for steps in by_run.values() for s in steps}
    assert len(ids) == 4
    assert rows(db, "SELECT count(*) FROM tasks") == [(2,)]


def test_step_run_ids_are_derived_from_the_run_id_and_the_step_key(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db, plan)
    stored = rows(db, "SELECT step_key, step_run_id FROM step_runs WHERE run_id = ?", run_id)
    assert sorted(stored) == [
        ("build", derived_step_run_id(run_id, "build")),
        ("test", derived_step_run_id(run_id, "test")),
    ]
    assert derived_step_run_id(run_id, "build") == derived_step_run_id(run_id, "build")
    assert derived_step_run_id("run-a", "build") != derived_step_run_id("run-b", "build")
    assert derived_step_run_id("run-a", "build") != derived_step_run_id("run-a", "test")
    assert all(is_portable_id(i) and len(i) == 35 for _, i in stored)


# -- submit_workflow -------------------------------------------------------------------------


TWO_STEPS = WorkflowPlan(
    "two",
    (PlanStep("a", ("echo", "a")), PlanStep("b", ("echo", "b"), after=("a",), max_attempts=2)),
)


def test_submitting_the_same_run_id_again_is_an_exact_replay(db: Path) -> None:
    """A retried submission (same Run id, same plan) recomputes the same StepRun ids and is the
    kernel's `Replayed(EXISTING)`: no second Workflow, no second StepRun."""
    store = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(store)
        first = submit_workflow(store, tasks, TWO_STEPS, now_ms=1_000, run_id="run-1")
        again = submit_workflow(store, tasks, TWO_STEPS, now_ms=2_000, run_id="run-1")
    finally:
        store.close()
    assert isinstance(first, WorkflowApplied)
    assert [s.step_run_id for s in first.aggregate.step_runs] == [
        derived_step_run_id("run-1", "a"),
        derived_step_run_id("run-1", "b"),
    ]
    assert again == Replayed(Code.EXISTING)
    assert written(db) == {
        "runs": 1, "attempts": 0, "events": 1, "workflow_admissions": 1, "step_runs": 2,
        "tasks": 2,
    }  # fmt: skip


def test_a_step_run_id_factory_is_used_when_given(db: Path) -> None:
    store = EdgeStore(db)
    try:
        outcome = submit_workflow(
            store,
            EdgeTaskStore(store),
            TWO_STEPS,
            now_ms=1_000,
            run_id="run-1",
            project_id="proj",
            step_run_id=lambda key: f"step-{key}",
        )
    finally:
        store.close()
    assert isinstance(outcome, WorkflowApplied)
    assert rows(db, "SELECT step_run_id FROM step_runs ORDER BY ordinal") == [
        ("step-a",),
        ("step-b",),
    ]
    assert rows(db, "SELECT project_id FROM runs") == [("proj",)]


def test_a_removed_implicit_task_is_pinned_at_its_new_revision(db: Path) -> None:
    """TK-7: re-adding a removed task reactivates it at a new revision; the step pins that
    revision, not 1."""
    store = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(store)
        first = submit_workflow(store, tasks, TWO_STEPS, now_ms=1_000, run_id="run-1")
        assert isinstance(first, WorkflowApplied)
        task_a = first.aggregate.step_runs[0].task_id
        assert not isinstance(tasks.remove(task_a, 2_000), TaskRefused)
        second = submit_workflow(store, tasks, TWO_STEPS, now_ms=3_000, run_id="run-2")
    finally:
        store.close()
    assert isinstance(second, WorkflowApplied)
    assert [(s.step_key, s.task_revision) for s in second.aggregate.step_runs] == [
        ("a", 2),
        ("b", 1),
    ]


# -- refusals ----------------------------------------------------------------------------------


BAD_PLANS = {
    "not TOML": ("name = \n", "not a TOML file"),
    "unknown step": (PLAN.replace('after = ["build"]', 'after = ["x"]'), 'names unknown step "x"'),
    "a cycle": (
        PLAN.replace('argv = ["echo", "building"]', 'argv = ["echo"]\nafter = ["test"]'),
        "dependency cycle",
    ),
    "unknown key": (PLAN.replace("max_attempts = 3", "retries = 3"), 'unknown key "retries"'),
}


@pytest.mark.spec("E-7")
@pytest.mark.parametrize("case", sorted(BAD_PLANS))
def test_a_bad_plan_file_is_one_line_naming_it_and_writes_nothing(
    tmp_path: Path, case: str
) -> None:
    """The file is refused before the database is opened: no database file appears."""
    text, problem = BAD_PLANS[case]
    (tmp_path / "plan.toml").write_text(text, encoding="utf-8")
    done = qlk_process(tmp_path, "workflow", "submit", "plan.toml")
    assert (done.returncode, done.stdout) == (2, "")
    line = one_line(done.stderr)
    assert line.startswith("qlk: plan.toml: "), line
    assert problem in line
    assert not (tmp_path / "ql3.db").exists()


@pytest.mark.spec("E-7")
def test_a_missing_plan_file_on_an_existing_database_writes_nothing(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    submitted(capsys, db, plan)
    before = written(db)
    missing = plan.parent / "nope.toml"
    status, out, err = qlk(capsys, db, "workflow", "submit", str(missing))
    assert (status, out) == (2, "")
    assert one_line(err) == f"qlk: {missing}: cannot read the plan file (No such file or directory)"
    assert written(db) == before


@pytest.mark.spec("E-7")
def test_a_plan_name_longer_than_a_portable_id_is_one_line_and_writes_nothing(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan name is its Workflow Run's task id, a §0.4 portable id (at most 36 characters):
    a longer one is refused with the plan file, before any task is written."""
    long_name = tmp_path / "long.toml"
    long_name.write_text(PLAN.replace("build-and-test", "b" * 40), encoding="utf-8")
    status, out, err = qlk(capsys, db, "workflow", "submit", str(long_name))
    assert (status, out) == (2, "")
    line = one_line(err)
    assert line.startswith(f"qlk: {long_name}: plan: name must match"), line
    assert not db.exists()  # refused with the file, before the database is opened


@pytest.mark.spec("E-7")
def test_a_refused_step_command_names_the_step_and_writes_no_workflow(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's argv limits are inside the task's (TK-2), so the kernel's refusal of a step's
    command cannot come from a plan file today; stand one in to check the path."""
    import runners.workflow_submit as module  # noqa: PLC0415

    def refuse(argv: object) -> TaskRefused:
        return TaskRefused(Code.TASK_ARGV_INVALID, "argv")

    monkeypatch.setattr(module, "adhoc_definition", refuse)
    status, out, err = qlk(capsys, db, "workflow", "submit", str(plan))
    assert (status, out) == (2, "")
    assert one_line(err) == f'qlk: {plan}: step "build": argv refused [TASK_ARGV_INVALID]'
    assert set(written(db).values()) == {0}


@pytest.mark.spec("E-7")
def test_the_cluster_profile_is_refused_in_one_line(tmp_path: Path, plan: Path) -> None:
    """No PostgreSQL is contacted (the DSN is not even valid) and nothing is written."""
    for flags in (["--dsn", "postgresql://nobody@127.0.0.1:1/none"], ["--schema", "x"]):
        done = qlk_process(tmp_path, "workflow", "submit", *flags, plan.name)
        assert (done.returncode, done.stdout) == (2, "")
        assert one_line(done.stderr) == (
            "qlk: workflow submit --dsn: the cluster profile runs no Workflow Task yet "
            "(issue 18 leaves remote Task dispatch out)"
        )
    assert not (tmp_path / "ql3.db").exists()


@pytest.mark.spec("E-7")
def test_workflow_without_an_action_is_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workflow"]) == 2
    assert "submit" in capsys.readouterr().err


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_of_a_workflow_records_the_workflow_intent(
    db: Path, plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`qlk cancel RUN` of a Workflow takes the kernel's Workflow command: the intent is on the
    Workflow Run, which stays `running` for the convergence (§4.4 phase 1); asking again says
    it was already requested."""
    run_id = submitted(capsys, db, plan)
    status, out, err = qlk(capsys, db, "cancel", run_id)
    assert (status, err) == (0, "")
    assert out.startswith(f"{run_id}: cancellation requested (user);")
    [(run_status, reason, at)] = rows(
        db,
        "SELECT status, cancel_reason, cancel_requested_at_ms FROM runs WHERE run_id = ?",
        run_id,
    )
    assert (run_status, reason) == ("running", "user")
    assert at is not None
    events = rows(db, "SELECT type, dedupe_key FROM events WHERE run_id = ? ORDER BY seq", run_id)
    assert [e[0] for e in events] == ["workflow.admitted", "run.cancel_requested"]
    # The Event was written by the Workflow transition, not the ordinary `request_cancel`
    # (which, on a Workflow without Task Attempts, would write the same intent).
    assert events[1][1].startswith("request_workflow_cancel:")
    assert rows(db, "SELECT DISTINCT status FROM step_runs") == [("pending",)]
    status, again, _ = qlk(capsys, db, "cancel", run_id)
    assert status == 0
    assert again.startswith(f"{run_id}: cancellation already requested at ")
    assert len(rows(db, "SELECT 1 FROM events WHERE run_id = ?", run_id)) == 2


def test_cancel_of_an_ordinary_run_is_unchanged(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = qlk(capsys, db, "submit", "--", "true")
    assert status == 0
    run_id = out.strip()
    status, said, err = qlk(capsys, db, "cancel", run_id, "--reason", "timeout")
    assert (status, err) == (0, "")
    assert said.startswith(f"{run_id}: cancellation requested (timeout);")
    assert rows(db, "SELECT cancel_reason FROM runs WHERE run_id = ?", run_id) == [("timeout",)]
    [(key,)] = rows(db, "SELECT dedupe_key FROM events WHERE run_id = ? AND seq = 3", run_id)
    assert key.startswith("request_cancel:")
    status, _, err = qlk(capsys, db, "cancel", "run-none")
    assert status == 2
    assert one_line(err) == "qlk: RUN run-none: no such run [RUN_NOT_FOUND]"
