"""Deadline control (SPEC O-2 step 2, B-06, L4; issue 15 item 2): a task's deadline becomes a
`timeout` intent once it passed since the Run started, and the same execution-control step
stops the process and times the Run out. Real SQLite file, real children."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel import Actor, CancelReason, RequestCancel, deadline_candidates
from kernel.specs import Profile
from kernel.task import TaskDefinition, define_task
from runners.engine import execute
from runners.lifecycle import SteppedScheduler
from runners.local import reads
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.schedule import submit

DEADLINE_S = 30.0


class Stepped:
    def __init__(self) -> None:
        self.by_name: dict[str, SteppedScheduler] = {}

    def __call__(self, name: str) -> SteppedScheduler:
        self.by_name[name] = SteppedScheduler()
        return self.by_name[name]

    def one(self, name: str) -> None:
        clock = self.by_name[name]
        pending = clock.pending_ms
        assert pending is not None
        clock.advance(pending - clock.now_ms)


@pytest.fixture
def stepped() -> Stepped:
    return Stepped()


@pytest.fixture
def app(tmp_path: Path, stepped: Stepped) -> Iterator[LocalApplication]:
    made = LocalApplication(tmp_path / "ql3.db", Profile.STANDALONE, schedulers=stepped)
    yield made
    # Leave no child behind: cancel what still runs and let execution control stop it.
    for run in made.store.project()["runs"]:
        execute(made.store, RequestCancel(str(run["run_id"]), CancelReason.USER), wall_clock_ms())
    _until(made.idle, lambda: stepped.one("execution_control"), "children stopped")
    made.stop()


def _until(condition: Callable[[], bool], step: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        step()
        time.sleep(0.02)


def _task(app: LocalApplication, name: str, argv: list[str], deadline_ms: int | None) -> None:
    definition = define_task(name, argv, deadline_ms=deadline_ms)
    assert isinstance(definition, TaskDefinition)
    app.tasks.add(definition, wall_clock_ms())


def _submit(app: LocalApplication, name: str) -> str:
    run_id = f"run-{secrets.token_hex(8)}"
    attempt_id = f"att-{secrets.token_hex(8)}"
    outcome = submit(
        app.store, app.tasks, name, now_ms=wall_clock_ms(), run_id=run_id, attempt_id=attempt_id
    )
    assert outcome.code.value == "admitted"
    return run_id


def _run(app: LocalApplication, run_id: str) -> dict[str, object]:
    return next(r for r in app.store.project()["runs"] if r["run_id"] == run_id)


def test_a_passed_deadline_times_the_run_out_and_stops_its_process(
    app: LocalApplication, stepped: Stepped
) -> None:
    _task(app, "slow", ["sleep", "60"], deadline_ms=1_000)
    run_id = _submit(app, "slow")
    app.start()
    stepped.one("scheduler")
    _until(
        lambda: _run(app, run_id)["status"] == "timed_out",
        lambda: stepped.one("execution_control"),
        "the deadline timing the Run out",
    )
    run = _run(app, run_id)
    assert run["cancel_reason"] == "timeout"
    attempts = [a for a in app.store.project()["attempts"] if a["run_id"] == run_id]
    assert [a["status"] for a in attempts] == ["timed_out"]
    events = [e["type"] for e in app.store.project()["events"] if e["run_id"] == run_id]
    assert "run.cancel_requested" in events
    assert events[-1] in {"attempt.timed_out", "run.timed_out"}
    _until(app.idle, lambda: stepped.one("execution_control"), "the stopped child reaped")


def test_the_deadline_source_is_the_kernels_selection(
    app: LocalApplication, stepped: Stepped
) -> None:
    """The SQL page equals the kernel oracle's at times around each Run's deadline: started
    Runs with and without a deadline, one with an intent already, one never started."""
    _task(app, "short", ["sleep", "60"], deadline_ms=1_000)
    _task(app, "long", ["sleep", "60"], deadline_ms=50_000)
    _task(app, "none", ["sleep", "60"], deadline_ms=None)
    started = [_submit(app, name) for name in ("short", "short", "long", "none")]
    app.start()
    stepped.one("scheduler")  # 4 starts per standalone cycle
    queued = _submit(app, "short")  # never started
    execute(app.store, RequestCancel(started[1], CancelReason.USER, Actor.USER), wall_clock_ms())
    projection = app.store.project()
    assert {r["run_id"]: r["status"] for r in projection["runs"]}[queued] == "queued"
    deadlines = {"short": 1_000, "long": 50_000, "none": None}
    with app.store.transaction() as tx:
        aggregates = [tx.load_run(str(r["run_id"])) for r in projection["runs"]]
    pairs = [(agg, deadlines[agg.run.task_id]) for agg in aggregates if agg is not None]
    starts = sorted(
        int(agg.run.started_at_ms) for agg, _ in pairs if agg.run.started_at_ms is not None
    )
    probes = {starts[0] - 1, starts[0] + 999, starts[0] + 1_000, starts[-1] + 1_000}
    probes |= {starts[-1] + 49_999, starts[-1] + 50_000, starts[-1] + 10**9}
    for now in sorted(probes):
        for limit in (1, 2, 16):
            oracle = deadline_candidates(pairs, now, limit)
            sql = reads.deadline_candidates(app.store, now, limit)
            assert sql == oracle, (now, limit)
    everything = reads.deadline_candidates(app.store, starts[-1] + 10**9, 16)
    assert {c.run_id for c in everything.items} == {started[0], started[2]}
