"""The application SIGKILL matrix per cycle phase (issue 15 item 5, first bullet; SPEC O-1..O-4,
§2.1, D-1, TK-6).

For each profile and each cycle phase (startup recovery, the execution-control steps
completion, cancellation and lost retry, the scheduler's schedule and dispatch phases, and the
dispatcher's activation writes), one SQLite file is seeded with work that exercises the phase;
then the local application, exactly as `qlk serve` runs it, is started again and again on that
file in a child process (`kill_matrix_child.py`) that SIGKILLs itself at the K-th transaction
boundary of that phase (K = 1, 2, 3, ... cycling over a small range: each restart starts from
the state the previous kill left, so the kills land at many distinct states). Before each child
the harness tops the file up with work for the phase (queued Runs, cancelled Runs and a Run
whose deadline passes, lost Runs, due cron fires, or, for startup recovery, a previous process
killed after a spawn). Once the phase was killed at least `KILLS` times (4; 16 with
`QL3_KILL_MATRIX=deep`), a normal `qlk serve --until-idle` runs on the same file and must
converge: every Run terminal with the status its work calls for, no Attempt spawned twice (the
launcher's `spawns.log`), no Attempt with a receipt ended `lost` (zero lost completions), every
fire Run the deterministic id of one due `(task, fire time)` admitted once, and no Attempt left
claimed, starting or running.

Every wait ends on its event or at a named generous deadline; wall times and kill counts are
printed (one summary line per test), never asserted.

The matrices of the selected tests run side by side in one module fixture (at most
`CONCURRENT` at once, each on its own file, children and final run), because a matrix mostly
waits (an edge child waits out its profile's 5 s cycles): the module takes about as long as its
slowest matrix instead of the sum of all fourteen. Each test waits for its own matrix and fails
with what that matrix raised.
"""

from __future__ import annotations

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

from kernel import (
    ActivateLocal,
    Actor,
    CancelReason,
    NotRunningEvidence,
    PolicyDefinition,
    RecoverLocalStartup,
    RequestCancel,
    Safety,
)
from kernel.specs import Paging
from kernel.task import (
    LOCAL_EXECUTOR_TYPE,
    FireState,
    TaskDefinition,
    define_task,
    fire_attempt_id,
    fire_run_id,
)
from runners.edge.cron import first_fire_after
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.engine import execute
from runners.local.app import wall_clock_ms
from runners.local.launcher import LocalLayout
from runners.local.schedule import submit

pytestmark = pytest.mark.slow  # real processes, real SIGKILLs, 5 s cycles on edge

ROOT: Final = Path(__file__).resolve().parents[3]
CHILD: Final = "tests.runners.local.kill_matrix_child"

DEEP: Final = os.environ.get("QL3_KILL_MATRIX", "") == "deep"
#: Kills of the phase each test needs before the final run.
KILLS: Final = 16 if DEEP else 4
#: K cycles over 1..K_RANGE[profile] (edge cycles are 5 s: small K keeps its restarts short).
K_RANGE: Final = {"standalone": 8 if DEEP else 4, "edge": 4}
#: Startup recovery happens at once on both profiles: deep runs walk further into it (the
#: second and third candidate, after the first one's recovery committed).
K_RANGE_STARTUP: Final = {"standalone": 12 if DEEP else 4, "edge": 8 if DEEP else 4}
#: At most this many matrix children per test (kills, plus children that did not reach K).
MAX_CHILDREN: Final = KILLS * 4 + 8

#: Generous bounds on a loaded machine, each failing with the wait it names.
CHILD_DEADLINE_S: Final = 180.0  # one matrix child until it dies or goes idle
FINAL_DEADLINE_S: Final = 600.0  # the final `qlk serve --until-idle`
SIGKILLED: Final = -9
#: Matrices run side by side (fixture `matrices`), at most this many at once: the seven edge
#: matrices (the long ones, mostly waiting out 5 s cycles) start together, the standalone ones
#: take the slots they free. Each matrix is slower beside the others (two cores), the module
#: about four times faster than one matrix after the other.
CONCURRENT: Final = 7

#: Edge first: its matrices wait the longest (5 s cycles), so they start first (`matrices`).
PROFILES: Final = ("edge", "standalone")
PHASES: Final = (
    "startup_recovery",
    "completion",
    "cancellation",
    "lost_retry",
    "schedule",
    "dispatch",
    "activation",
)

#: Lost Attempts are retried (a kill before the command was sent makes its Attempt `lost`: §2.1),
#: so every Run can still succeed; `idempotent` because `sleep` may run twice safely.
RETRY: Final = PolicyDefinition(16, True, Safety.IDEMPOTENT, 0, 0)
#: The work: short naps; longer dozes (live at the next startup: adopted); a deadline Run that
#: outlives its deadline (timed out and stopped by the cancellation step). Fire Runs run `true`.
TASKS: Final = {
    "nap": (["sleep", "0.2"], None),
    "doze": (["sleep", "1.5"], None),
    "slow": (["sleep", "20"], 1_000),
}
#: Manual Runs seeded up front, and the queued Runs kept before each child, per profile.
SEED: Final = {"standalone": 12, "edge": 3}
MIN_QUEUED: Final = {"standalone": 4, "edge": 2}
MIN_LOST: Final = {"standalone": 3, "edge": 2}
#: Prep kills for startup recovery: at the activation boundary just before the L2 handle write
#: of the first, second or third activation (the child spawned, its handle not recorded).
PREP_K: Final = {"standalone": (7, 11, 3), "edge": (3,)}
TERMINAL_ATTEMPT: Final = {"succeeded", "failed", "cancelled", "timed_out", "lost"}
_ANY_DUE: Final = Paging(1, 1)


@dataclass
class Matrix:
    """One test's file, what the harness put in it, and what the children did."""

    db: Path
    profile: str
    phase: str
    log: Path
    expected: dict[str, str] = field(default_factory=dict)  # run id -> final status
    crons: dict[str, tuple[str, int]] = field(default_factory=dict)  # task -> (cron, since)
    kills: Counter[str] = field(default_factory=Counter)  # statement killed before -> count
    not_reached: int = 0
    prep_kills: int = 0
    children: int = 0
    refills: int = 0
    cancel_refills: int = 0
    stopped_then_lost: int = 0  # stopped under an intent, the stop's record lost
    finished_first: int = 0  # an intent Run whose command succeeded before it was stopped

    # -- the file ------------------------------------------------------------------------------
    def store(self) -> EdgeStore:
        return EdgeStore(self.db)

    def projection(self) -> dict[str, list[dict[str, object]]]:
        store = self.store()
        try:
            return store.project()
        finally:
            store.close()

    def statuses(self) -> Counter[str]:
        return Counter(str(r["status"]) for r in self.projection()["runs"])

    def add_tasks(self) -> None:
        store = self.store()
        try:
            tasks = EdgeTaskStore(store)
            for name, (argv, deadline_ms) in TASKS.items():
                definition = define_task(name, argv, deadline_ms=deadline_ms, retry_policy=RETRY)
                assert isinstance(definition, TaskDefinition), definition
                assert isinstance(tasks.add(definition, wall_clock_ms()), TaskWrite)
        finally:
            store.close()

    def submit(self, task: str, count: int, expected: str = "succeeded") -> list[str]:
        store = self.store()
        try:
            tasks = EdgeTaskStore(store)
            run_ids = []
            for _ in range(count):
                run_id = f"run-{secrets.token_hex(8)}"
                outcome = submit(
                    store,
                    tasks,
                    task,
                    now_ms=wall_clock_ms(),
                    run_id=run_id,
                    attempt_id=f"att-{secrets.token_hex(8)}",
                )
                assert outcome.code.value == "admitted", outcome
                self.expected[run_id] = expected
                run_ids.append(run_id)
            return run_ids
        finally:
            store.close()

    def cancel(self, run_ids: list[str]) -> None:
        store = self.store()
        try:
            for run_id in run_ids:
                intent = RequestCancel(run_id, CancelReason.USER, Actor.USER)
                outcome = execute(store, intent, wall_clock_ms())
                assert outcome.kind.value == "applied", outcome
        finally:
            store.close()

    def make_lost(self, count: int) -> None:
        """Runs made `lost` the way a restart makes them (test_local_app.py `_lost_runs`):
        activated (L1), then trusted not-running evidence with no receipt (§2.1)."""
        run_ids = self.submit("nap", count)
        projection = self.projection()
        first = {str(a["run_id"]): str(a["attempt_id"]) for a in projection["attempts"]}
        store = self.store()
        try:
            for run_id in run_ids:
                now = wall_clock_ms()
                activate = ActivateLocal(run_id, first[run_id], LOCAL_EXECUTOR_TYPE, 1, "0" * 64)
                assert execute(store, activate, now).kind.value == "applied"
                recover = RecoverLocalStartup(run_id, first[run_id], NotRunningEvidence())
                assert execute(store, recover, now).code.value == "lost"
        finally:
            store.close()

    def add_cron(self, name: str, cron: str, since_ms: int) -> None:
        """A cron task of `true` added at `since_ms` (in the past: its first fire is due)."""
        store = self.store()
        try:
            definition = define_task(name, ["true"], cron=cron)
            assert isinstance(definition, TaskDefinition), definition
            assert isinstance(EdgeTaskStore(store).add(definition, since_ms), TaskWrite)
            self.crons[name] = (cron, since_ms)
        finally:
            store.close()

    def due(self) -> int:
        store = self.store()
        try:
            return len(EdgeTaskStore(store).due(wall_clock_ms(), _ANY_DUE))
        finally:
            store.close()

    # -- the children --------------------------------------------------------------------------
    def child(self, phase: str, k: int) -> tuple[int, str]:
        """One child until it dies or exits; its return code and its output."""
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
                pytest.fail(
                    f"child {phase} K={k} neither died nor went idle within "
                    f"{CHILD_DEADLINE_S} s:\n{out.read_text()[-3000:]}"
                )
        text = out.read_text()
        with self.log.open("a") as whole:
            whole.write(f"=== child {self.children}: {phase} K={k}: rc {returncode}\n{text}")
        return returncode, text

    def refill(self) -> None:
        """Work for the phase, added while no child runs (module docstring)."""
        self.refills += 1
        statuses = self.statuses()
        queued = statuses["queued"]
        if self.phase in ("completion", "dispatch", "activation"):
            if queued < MIN_QUEUED[self.profile]:
                self.submit("nap", MIN_QUEUED[self.profile] - queued)
        elif self.phase == "lost_retry":
            if statuses["lost"] < MIN_LOST[self.profile]:
                self.make_lost(MIN_LOST[self.profile] - statuses["lost"])
        elif self.phase == "schedule":
            if self.due() == 0:
                now = wall_clock_ms()
                minute = (now // 60_000 - 1) % 60  # the minute that just passed: due once
                for _ in range(2 if self.profile == "standalone" else 1):
                    name = f"hourly-{len(self.crons)}"
                    self.add_cron(name, f"{minute} * * * *", now - 5 * 60_000)
        elif self.phase == "cancellation":
            self._refill_cancellation()
        elif self.phase == "startup_recovery":
            self._refill_startup_recovery()

    def _refill_cancellation(self) -> None:
        """Alternately: queued Runs with a user intent (they converge), and a Run whose 1 s
        deadline passes while it runs (a `timeout` intent, then the stop through its handle)."""
        projection = self.projection()
        open_ = [
            r
            for r in projection["runs"]
            if r["status"] not in ("succeeded", "failed", "cancelled", "timed_out")
            and (r["cancel_reason"] is not None or r["task_id"] == "slow")
        ]
        if open_:
            return
        self.cancel_refills += 1
        if self.cancel_refills % 2:
            self.cancel(self.submit("nap", 2, expected="cancelled"))
        else:
            self.submit("slow", 1, expected="timed_out")

    def _refill_startup_recovery(self) -> None:
        """A previous process killed just after it spawned children (before their handle facts),
        unless one already left Attempts starting or running."""
        live = {"starting", "running"}  # a queued Run's pristine Attempt is `claimed`
        if any(a["status"] in live for a in self.projection()["attempts"]):
            return
        prep = PREP_K[self.profile]
        for _ in range(8):  # a prep child may find nothing to start (all Runs done): refill
            queued = self.statuses()["queued"]
            if queued < MIN_QUEUED[self.profile]:
                for i in range(MIN_QUEUED[self.profile] - queued):
                    self.submit("doze" if (self.refills + i) % 2 else "nap", 1)
            k = prep[self.prep_kills % len(prep)]
            returncode, text = self.child("activation", k)
            if returncode == SIGKILLED:
                assert f"SIGKILL at phase activation boundary {k} [" in text, text
                self.prep_kills += 1
                return
            assert returncode == 0, text
            assert "not reached" in text, text
        pytest.fail("no prep child reached its activation boundary in 8 tries")


def _check_converged(matrix: Matrix, final_out: str) -> None:
    context = f"phase {matrix.phase} profile {matrix.profile}; final run:\n{final_out[-3000:]}"
    projection = matrix.projection()
    runs = {str(r["run_id"]): r for r in projection["runs"]}
    attempts = {str(a["attempt_id"]): a for a in projection["attempts"]}
    # Every Run terminal with the status its work calls for (fire Runs succeed).
    fires = {r for r, row in runs.items() if row["task_id"] in matrix.crons}
    assert set(runs) == set(matrix.expected) | fires, context
    # SPEC §1.9: a live execution under an intent is stopped and the Run ends cancelled or
    # timed_out (L4/L5). When the kill lands between the stop and its record, the next startup
    # recovery finds the stopped child's receipt (its exit status: killed by the stop's signal);
    # decision R-27 ends it with the intent's status too, keeping the exit code, which is how
    # such a Run is told apart (L4/L5 write none) and counted.
    matrix.stopped_then_lost = sum(
        1
        for r, row in runs.items()
        if row["cancel_reason"] is not None
        and any(
            a["run_id"] == r and isinstance(a["exit_code"], int) and a["exit_code"] < 0
            for a in attempts.values()
        )
    )
    # A deadline Run whose command finished while no process watched it (the application was
    # killed and restarted for longer than the command ran) completes from its receipt before
    # any stop: L3, the first terminal fact wins. Its Attempt then says so itself.
    for r, row in runs.items():
        done = [(a["status"], a["exit_code"]) for a in attempts.values() if a["run_id"] == r]
        intended = matrix.expected.get(r) in ("timed_out", "cancelled")
        if intended and row["status"] == "succeeded" and ("succeeded", 0) in done:
            matrix.expected[r] = "succeeded"
            matrix.finished_first += 1
    wrong = {
        r: (row["status"], matrix.expected.get(r, "succeeded"))
        for r, row in runs.items()
        if row["status"] != matrix.expected.get(r, "succeeded")
    }
    assert wrong == {}, context
    # No Attempt left claimed, starting or running.
    stuck = {
        a: row["status"] for a, row in attempts.items() if row["status"] not in TERMINAL_ATTEMPT
    }
    assert stuck == {}, context
    # Zero second spawns: the launcher registers every start call, before the spawn (D-1).
    layout = LocalLayout(matrix.db)
    journal = layout.root / "spawns.log"
    lines = journal.read_text().splitlines() if journal.exists() else []
    spawned = Counter(line.split(" ")[1] for line in lines)
    assert [a for a, n in spawned.items() if n > 1] == [], context
    assert set(spawned) <= set(attempts), context
    # Zero lost completions: an Attempt whose receipt was published never ended `lost`.
    receipts = {p.name.removesuffix(".json") for p in layout.receipts.glob("*.json")}
    assert [a for a in receipts if attempts[a]["status"] == "lost"] == [], context
    # No fire admitted twice: each fire Run is the deterministic id of one due minute of its
    # task (TK-6), its first Attempt the fire's, created once; the bookkeeping ended admitted.
    created = Counter(str(e["run_id"]) for e in projection["events"] if e["type"] == "run.created")
    assert all(n == 1 for n in created.values()), context
    end = wall_clock_ms()
    store = matrix.store()
    try:
        tasks = EdgeTaskStore(store)
        for name, (cron, since) in matrix.crons.items():
            ids: dict[str, int] = {}
            at = first_fire_after(cron, since)
            while at is not None and at <= end:
                ids[fire_run_id(name, 1, at)] = at
                at = first_fire_after(cron, at)
            mine = [r for r in fires if runs[r]["task_id"] == name]
            assert all(r in ids for r in mine), (name, mine, context)
            for run_id in mine:
                first = [a for a, row in attempts.items() if row["run_id"] == run_id]
                assert fire_attempt_id(name, 1, ids[run_id]) in first, (run_id, context)
            schedule = tasks.schedule(name)
            assert schedule is not None
            if schedule.last_fire is not None:
                assert schedule.last_fire.state is FireState.ADMITTED, (name, context)
    finally:
        store.close()


def _run_matrix(directory: Path, profile: str, phase: str) -> str:
    """One phase's matrix on a file of its own: the kills, the final `qlk serve --until-idle`,
    the convergence checks; the summary line (a failure raises, as in a test)."""
    started = time.monotonic()
    matrix = Matrix(directory / "ql3.db", profile, phase, directory / "matrix.log")
    matrix.add_tasks()
    if phase == "startup_recovery":  # naps end before the restart, dozes are still live
        for i in range(SEED[profile]):
            matrix.submit("doze" if i % 2 else "nap", 1)
    else:
        matrix.submit("nap", SEED[profile])
    if phase == "schedule":
        matrix.add_cron("every", "* * * * *", wall_clock_ms() - 2 * 60_000)
    span = (K_RANGE_STARTUP if phase == "startup_recovery" else K_RANGE)[profile]
    killed = 0
    for index in range(MAX_CHILDREN):
        if killed >= KILLS:
            break
        matrix.refill()
        k = index % span + 1
        returncode, text = matrix.child(phase, k)
        assert "the next cycle tries again" not in text, text  # no lifecycle incident
        if returncode == SIGKILLED:
            marker = f"SIGKILL at phase {phase} boundary {k} ["
            assert marker in text, f"a SIGKILL the child did not announce:\n{text}"
            kind = text.split(marker, 1)[1].split("]", 1)[0]
            matrix.kills[kind.split()[0]] += 1  # BEGIN, COMMIT or read
            killed += 1
        else:
            assert returncode == 0, f"child rc {returncode}:\n{text}"
            assert "not reached" in text, text
            matrix.not_reached += 1
    assert killed >= KILLS, (
        f"only {killed} of {KILLS} kills of phase {phase} in {MAX_CHILDREN} children; "
        f"log: {matrix.log}"
    )
    final = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "serve",
            "--db",
            str(matrix.db),
            "--profile",
            profile,
            "--until-idle",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=FINAL_DEADLINE_S,
        check=False,
    )
    output = final.stdout + final.stderr
    assert final.returncode == 0, output
    assert "the next cycle tries again" not in final.stderr, output
    _check_converged(matrix, output)
    where = ", ".join(f"{n} before {s}" for s, n in sorted(matrix.kills.items()))
    return (
        f"phase {phase} profile {profile}: {killed} kills ({where}), "
        f"{matrix.not_reached} not reached, {matrix.prep_kills} prep kills, "
        f"{len(matrix.projection()['runs'])} Runs, "
        f"{matrix.stopped_then_lost} stopped with the record lost (R-27), "
        f"{matrix.finished_first} finished before their stop, "
        f"wall {time.monotonic() - started:.1f} s"
    )


@pytest.fixture(scope="module")
def matrices(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, str], Future[str]]]:
    """The matrices of the (profile, phase) pairs this session selected, started side by side
    in the tests' order (at most CONCURRENT at once, so a test never waits for more than its own
    matrix and the ones before it), each on its own file, as the Worker kill matrix runs its
    cases (tests/runners/worker/test_kill_matrix.py). A matrix mostly waits, on its children and
    they on the edge profile's 5 s cycles, so side by side they take about as long as the
    slowest one, not the sum; each test then waits for its own matrix and fails with what that
    matrix raised."""
    module = request.module
    selected = [
        (str(item.callspec.params["profile"]), str(item.callspec.params["phase"]))
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.module is module and hasattr(item, "callspec")
    ]
    order = list(dict.fromkeys(selected))
    pool = ThreadPoolExecutor(max_workers=CONCURRENT, thread_name_prefix="matrix")
    try:
        yield {
            (profile, phase): pool.submit(
                _run_matrix, tmp_path_factory.mktemp(f"{profile}-{phase}"), profile, phase
            )
            for profile, phase in order
        }
    finally:  # a session that ends early (-x, an interrupt) does not start the rest
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.spec("CAD-01", "CAD-08")
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("profile", PROFILES)
def test_serve_killed_at_every_boundary_of_a_phase_converges(
    matrices: dict[tuple[str, str], Future[str]], profile: str, phase: str
) -> None:
    print(f"\n{matrices[(profile, phase)].result()}")
