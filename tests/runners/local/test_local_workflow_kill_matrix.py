"""The application SIGKILL matrix over the Workflow phases (issue 18 item 5; SPEC §4.2-§4.8,
WF-17; ADR-0229 verification 7: admission and conclusive-stop/control-terminal scenarios).

As `test_local_kill_matrix.py` does for the Run phases: for each profile and each Workflow phase
(phase 1's stop and convergence, the frontier, Task admission, the Task half of dispatch, the
completion of Task receipts, the Workflow Task startup recovery), one SQLite file is seeded with
Workflows that exercise the phase; then the local application, exactly as `qlk serve` runs it,
starts again and again on that file in a child process (`kill_matrix_child.py`) that SIGKILLs
itself at the K-th transaction boundary of that phase. Before each child the harness tops the
file up (two-step Workflows; for phase 1, Workflows whose long step runs and then gets a
cancellation intent; for startup recovery, a previous process killed after its Task spawns).
Once the phase was killed `KILLS` times (4; 16 with `QL3_KILL_MATRIX=deep`), a normal
`qlk serve --until-idle` runs on the same file and must converge to the no-crash state: every
Workflow terminal with the status its work calls for, every StepRun of a succeeded Workflow with
exactly one Attempt and one admission (the exact replay: no duplicate admission, Attempt or
dispatch), every StepRun and Attempt final, no Attempt spawned twice (the launcher's
`spawns.log`), no Attempt with a receipt ended `lost`, and each step's command run at most once.

Wall times and kill counts are printed (one summary line per test), never asserted.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from kernel.task import LOCAL_EXECUTOR_TYPE, TaskDefinition, define_task
from kernel.workflow import AdmitWorkflow, PinnedStep, RequestWorkflowCancel
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.engine import execute_workflow
from runners.local.app import wall_clock_ms
from runners.local.launcher import LocalLayout

pytestmark = pytest.mark.slow  # real processes, real SIGKILLs, 5 s cycles on edge

ROOT: Final = Path(__file__).resolve().parents[3]
CHILD: Final = "tests.runners.local.kill_matrix_child"
DEEP: Final = os.environ.get("QL3_KILL_MATRIX", "") == "deep"
KILLS: Final = 16 if DEEP else 4
K_RANGE: Final = {"standalone": 8 if DEEP else 4, "edge": 4}
MAX_CHILDREN: Final = KILLS * 5 + 8
CHILD_DEADLINE_S: Final = 180.0
FINAL_DEADLINE_S: Final = 600.0
SIGKILLED: Final = -9
CONCURRENT: Final = 6

PROFILES: Final = ("edge", "standalone")
PHASES: Final = (
    "workflow_cancellation",
    "frontier",
    "task_admission",
    "task_activation",
    "completion",
    "task_recovery",
)
#: Workflows kept waiting before each child, per profile.
MIN_OPEN: Final = {"standalone": 3, "edge": 2}
FINAL_STEP: Final = {"succeeded", "failed", "cancelled", "timed_out"}
FINAL_ATTEMPT: Final = FINAL_STEP | {"lost"}


@dataclass
class Matrix:
    db: Path
    profile: str
    phase: str
    log: Path
    expected: dict[str, str] = field(default_factory=dict)  # run id -> final status
    markers: dict[str, Path] = field(default_factory=dict)  # step run id -> its marker file
    kills: Counter[str] = field(default_factory=Counter)
    not_reached: int = 0
    children: int = 0
    prep_kills: int = 0

    def store(self) -> EdgeStore:
        return EdgeStore(self.db)

    def projection(self) -> dict[str, list[dict[str, object]]]:
        store = self.store()
        try:
            return store.project()
        finally:
            store.close()

    def open_runs(self) -> list[dict[str, object]]:
        return [
            r
            for r in self.projection()["runs"]
            if r["status"] not in ("succeeded", "failed", "cancelled", "timed_out")
        ]

    def admit(self, seconds: str = "0.2", expected: str = "succeeded") -> str:
        """A two-step Workflow (`first` then `second`), each step appending to its own marker
        file before it sleeps, so the final check counts how often each command ran."""
        run_id = f"wf-{secrets.token_hex(8)}"
        store = self.store()
        try:
            tasks = EdgeTaskStore(store)
            pins = []
            for key, after in (("first", ()), ("second", ("first",))):
                step_run_id = f"{run_id}-{key}"
                marker = self.db.parent / f"{step_run_id}.ran"
                self.markers[step_run_id] = marker
                argv = ["sh", "-c", f"echo x >> {marker}; sleep {seconds}"]
                definition = define_task(f"{run_id}-{key}", argv)
                assert isinstance(definition, TaskDefinition), definition
                assert isinstance(tasks.add(definition, wall_clock_ms()), TaskWrite)
                pins.append(
                    PinnedStep(key, step_run_id, f"{run_id}-{key}", 1, LOCAL_EXECUTOR_TYPE, after)
                )
            digest = hashlib.sha256(run_id.encode()).hexdigest()
            command = AdmitWorkflow(run_id, "local", "kill-matrix", digest, tuple(pins))
            outcome = execute_workflow(store, command, wall_clock_ms())
            assert outcome.kind.value == "applied", outcome
        finally:
            store.close()
        self.expected[run_id] = expected
        return run_id

    def cancel_open(self) -> bool:
        """Once a long step's process runs: an intent on every open Workflow (phase 1 then has
        a conclusive stop to make for that one, and converges the others at once)."""
        projection = self.projection()
        running = any(a["status"] == "running" for a in projection["attempts"])
        if not running:
            return False
        store = self.store()
        try:
            for row in self.open_runs():
                if row["cancel_reason"] is None:
                    command = RequestWorkflowCancel(str(row["run_id"]))
                    outcome = execute_workflow(store, command, wall_clock_ms())
                    assert outcome.kind.value == "applied", outcome
        finally:
            store.close()
        return True

    def child(self, phase: str, k: int) -> tuple[int, str]:
        self.children += 1
        out = self.log.with_name(f"{self.log.stem}-{self.children:03d}.txt")
        with out.open("w") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", CHILD, str(self.db), self.profile, phase, str(k)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            try:
                returncode = process.wait(timeout=CHILD_DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=CHILD_DEADLINE_S)
                pytest.fail(f"child {phase} K={k} stuck:\n{out.read_text()[-3000:]}")
        text = out.read_text()
        with self.log.open("a") as whole:
            whole.write(f"=== child {self.children}: {phase} K={k}: rc {returncode}\n{text}")
        return returncode, text

    def refill(self) -> None:
        if self.phase == "workflow_cancellation":
            self._refill_cancellation()
        elif self.phase == "task_recovery":
            self._refill_recovery()
        elif len(self.open_runs()) < MIN_OPEN[self.profile]:
            for _ in range(MIN_OPEN[self.profile] - len(self.open_runs())):
                self.admit()

    def _refill_cancellation(self) -> None:
        """Workflows whose first step sleeps 20 s; a prep child starts the first one's process
        (killed at the next prepare, K=5: the first handle fact is committed); then the
        intents, set while no child runs."""
        if any(r["cancel_reason"] is not None for r in self.open_runs()):
            return  # phase 1 still has work
        if not self.open_runs():
            for _ in range(MIN_OPEN[self.profile]):
                self.admit("20", expected="cancelled")
        for _ in range(8):
            if self.cancel_open():
                return
            returncode, text = self.child("task_activation", 5)
            assert returncode in (0, SIGKILLED), text
            self.prep_kills += returncode == SIGKILLED
        pytest.fail("no long step started in 8 children")

    def _refill_recovery(self) -> None:
        """A previous process killed just after it launched Task processes (before or after
        their handle facts), unless one already left Task Attempts started."""
        live = {"starting", "running"}
        if any(a["status"] in live for a in self.projection()["attempts"]):
            return
        if len(self.open_runs()) < MIN_OPEN[self.profile]:
            for index in range(MIN_OPEN[self.profile] - len(self.open_runs())):
                self.admit("1.5" if index % 2 else "0.2")
        for k in (3, 4) * 4:  # before the first handle write's BEGIN or COMMIT: launched
            returncode, text = self.child("task_activation", k)
            if returncode == SIGKILLED:
                self.prep_kills += 1
                return
            assert returncode == 0, text
        pytest.fail("no prep child reached its activation boundary")


def _check_converged(matrix: Matrix, final_out: str) -> None:
    context = f"phase {matrix.phase} profile {matrix.profile}; final run:\n{final_out[-3000:]}"
    projection = matrix.projection()
    runs = {str(r["run_id"]): r for r in projection["runs"]}
    assert set(runs) == set(matrix.expected), context
    wrong = {r: (row["status"], matrix.expected[r]) for r, row in runs.items()
             if row["status"] != matrix.expected[r]}  # fmt: skip
    assert wrong == {}, context
    steps = projection.get("step_runs", [])
    attempts = projection["attempts"]
    ledger = projection.get("task_admissions", [])
    assert {s["status"] for s in steps} <= FINAL_STEP, context
    assert {a["status"] for a in attempts} <= FINAL_ATTEMPT, context
    # The exact replay (WF-17): each StepRun of a succeeded Workflow ran with exactly one Attempt
    # and one admission; its command ran exactly once.
    for step in steps:
        if matrix.expected[str(step["run_id"])] != "succeeded":
            continue
        mine = [a for a in attempts if a["step_run_id"] == step["step_run_id"]]
        admitted = [e for e in ledger if e["step_run_id"] == step["step_run_id"]]
        assert [a["status"] for a in mine] == ["succeeded"], (step["step_run_id"], context)
        assert len(admitted) == 1, (step["step_run_id"], context)
        marker = matrix.markers[str(step["step_run_id"])]
        assert marker.read_text().count("x") == 1, (step["step_run_id"], context)
    # Every command ran at most once, cancelled Workflows included.
    for step_run_id, marker in matrix.markers.items():
        ran = marker.read_text().count("x") if marker.exists() else 0
        assert ran <= 1, (step_run_id, context)
    # Zero second spawns; zero lost completions.
    layout = LocalLayout(matrix.db)
    journal = layout.root / "spawns.log"
    lines = journal.read_text().splitlines() if journal.exists() else []
    spawned = Counter(line.split(" ")[1] for line in lines)
    assert [a for a, n in spawned.items() if n > 1] == [], context
    by_id = {str(a["attempt_id"]): a for a in attempts}
    receipts = {p.name.removesuffix(".json") for p in layout.receipts.glob("*.json")}
    assert [a for a in receipts if a in by_id and by_id[a]["status"] == "lost"] == [], context


def _run_matrix(directory: Path, profile: str, phase: str) -> str:
    started = time.monotonic()
    matrix = Matrix(directory / "ql3.db", profile, phase, directory / "matrix.log")
    EdgeStore(matrix.db).close()
    killed = 0
    for index in range(MAX_CHILDREN):
        if killed >= KILLS:
            break
        matrix.refill()
        k = index % K_RANGE[profile] + 1
        returncode, text = matrix.child(phase, k)
        assert "the next cycle tries again" not in text, text  # no lifecycle incident
        if returncode == SIGKILLED:
            marker = f"SIGKILL at phase {phase} boundary {k} ["
            assert marker in text, f"a SIGKILL the child did not announce:\n{text}"
            kind = text.split(marker, 1)[1].split("]", 1)[0]
            matrix.kills[kind.split()[0]] += 1
            killed += 1
        else:
            assert returncode == 0, f"child rc {returncode}:\n{text}"
            assert "not reached" in text, text
            matrix.not_reached += 1
    assert killed >= KILLS, f"only {killed} of {KILLS} kills of {phase}; log: {matrix.log}"
    final = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "serve", "--db", str(matrix.db),
         "--profile", profile, "--until-idle"],
        cwd=ROOT, capture_output=True, text=True, timeout=FINAL_DEADLINE_S, check=False,
    )  # fmt: skip
    output = final.stdout + final.stderr
    assert final.returncode == 0, output
    assert "the next cycle tries again" not in final.stderr, output
    _check_converged(matrix, output)
    where = ", ".join(f"{n} before {s}" for s, n in sorted(matrix.kills.items()))
    return (
        f"workflow phase {phase} profile {profile}: {killed} kills ({where}), "
        f"{matrix.not_reached} not reached, {matrix.prep_kills} prep kills, "
        f"{len(matrix.expected)} Workflows, wall {time.monotonic() - started:.1f} s"
    )


@pytest.fixture(scope="module")
def matrices(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, str], Future[str]]]:
    """The selected matrices side by side (as in test_local_kill_matrix.py)."""
    module = request.module
    selected = [
        (str(item.callspec.params["profile"]), str(item.callspec.params["phase"]))
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.module is module and hasattr(item, "callspec")
    ]
    order = list(dict.fromkeys(selected))
    pool = ThreadPoolExecutor(max_workers=CONCURRENT, thread_name_prefix="wf-matrix")
    try:
        yield {
            (profile, phase): pool.submit(
                _run_matrix, tmp_path_factory.mktemp(f"wf-{profile}-{phase}"), profile, phase
            )
            for profile, phase in order
        }
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.spec("WF-17")
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("profile", PROFILES)
def test_serve_killed_at_every_boundary_of_a_workflow_phase_converges(
    matrices: dict[tuple[str, str], Future[str]], profile: str, phase: str
) -> None:
    print(f"\n{matrices[(profile, phase)].result()}")
