"""Deadline control (SPEC O-2 step 2, B-06, L4; issue 15 item 2): a task's deadline becomes a
`timeout` intent once it passed since the Run started, and the same execution-control step
stops the process and times the Run out. Real SQLite file, real children."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel import Actor, CancelReason, RequestCancel, deadline_candidates
from kernel.specs import Profile
from runners.engine import execute
from runners.local import reads
from runners.local.app import LocalApplication, wall_clock_ms
from tests.support.local_app import Stepped, add_task, submit_run, until


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
    until(made.idle, stepped.control, "children stopped")
    made.stop()


def _run(app: LocalApplication, run_id: str) -> dict[str, object]:
    return next(r for r in app.store.project()["runs"] if r["run_id"] == run_id)


def test_a_passed_deadline_times_the_run_out_and_stops_its_process(
    app: LocalApplication, stepped: Stepped
) -> None:
    add_task(app, "slow", ["sleep", "60"], deadline_ms=1_000)
    run_id = submit_run(app, "slow")
    app.start()
    stepped.scheduler()
    until(
        lambda: _run(app, run_id)["status"] == "timed_out",
        stepped.control,
        "the deadline timing the Run out",
    )
    run = _run(app, run_id)
    assert run["cancel_reason"] == "timeout"
    attempts = [a for a in app.store.project()["attempts"] if a["run_id"] == run_id]
    assert [a["status"] for a in attempts] == ["timed_out"]
    events = [e["type"] for e in app.store.project()["events"] if e["run_id"] == run_id]
    assert "run.cancel_requested" in events
    assert events[-1] in {"attempt.timed_out", "run.timed_out"}
    until(app.idle, stepped.control, "the stopped child reaped")


def test_the_deadline_source_is_the_kernels_selection(
    app: LocalApplication, stepped: Stepped
) -> None:
    """The SQL page equals the kernel oracle's at times around each Run's deadline: started
    Runs with and without a deadline, one with an intent already, one never started."""
    add_task(app, "short", ["sleep", "60"], deadline_ms=1_000)
    add_task(app, "long", ["sleep", "60"], deadline_ms=50_000)
    add_task(app, "none", ["sleep", "60"], deadline_ms=None)
    started = [submit_run(app, name) for name in ("short", "short", "long", "none")]
    app.start()
    stepped.scheduler()  # 4 starts per standalone cycle
    queued = submit_run(app, "short")  # never started
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
