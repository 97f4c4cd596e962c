"""`qlk serve` as a person runs it: a real `python -m conformance.cli serve` process on a real
SQLite file, real children, SIGTERM and SIGKILL (issue 15 items 2 and 4; SPEC O-1..O-4, E-7).

Every wait ends on its event or at a named generous deadline; wall times are printed, never
asserted."""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel import PolicyDefinition, Safety
from kernel.task import TaskDefinition, define_task
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.local.app import wall_clock_ms
from runners.local.launcher import LocalLayout
from runners.local.schedule import submit

pytestmark = pytest.mark.slow

DEADLINE_S = 120.0


#: Lost Attempts are retried (a kill before the command was sent makes its Attempt `lost`: §2.1),
#: so every Run can still succeed; `idempotent` because `sleep` may run twice safely.
RETRY = PolicyDefinition(16, True, Safety.IDEMPOTENT, 0, 0)


def _seed(
    db: Path, name: str, argv: list[str], count: int, policy: PolicyDefinition | None = None
) -> list[str]:
    store = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(store)
        definition = define_task(name, argv, retry_policy=policy)
        assert isinstance(definition, TaskDefinition)
        tasks.add(definition, wall_clock_ms())
        run_ids = [f"run-{secrets.token_hex(8)}" for _ in range(count)]
        for run_id in run_ids:
            outcome = submit(
                store,
                tasks,
                name,
                now_ms=wall_clock_ms(),
                run_id=run_id,
                attempt_id=f"att-{secrets.token_hex(8)}",
            )
            assert outcome.code.value == "admitted"
        return run_ids
    finally:
        store.close()


def _project(db: Path) -> dict[str, list[dict[str, object]]]:
    store = EdgeStore(db)
    try:
        return store.project()
    finally:
        store.close()


def _check_converged(db: Path, run_ids: list[str], context: object) -> None:
    """Every Run succeeded; no Attempt was spawned twice (the launcher's spawn journal); no
    completion was lost (an Attempt whose receipt exists never ended `lost`)."""
    projection = _project(db)
    statuses = {r["run_id"]: r["status"] for r in projection["runs"]}
    assert statuses == dict.fromkeys(run_ids, "succeeded"), context
    attempts = {str(a["attempt_id"]): str(a["status"]) for a in projection["attempts"]}
    layout = LocalLayout(db)
    journal = (layout.root / "spawns.log").read_text().splitlines()
    spawned = [line.split(" ")[1] for line in journal]
    assert len(spawned) == len(set(spawned)), context
    assert set(spawned) <= set(attempts), context
    receipts = {p.name.removesuffix(".json") for p in layout.receipts.glob("*.json")}
    assert all(attempts[a] != "lost" for a in receipts), context
    assert all(status in {"succeeded", "lost"} for status in attempts.values()), context


def _serve(db: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "serve", "--db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.05)


@pytest.mark.spec("CAD-01", "CAD-08")
def test_serve_until_idle_runs_twenty_submissions_and_exits_0(tmp_path: Path) -> None:
    db = tmp_path / "ql3.db"
    run_ids = _seed(db, "hello", ["echo", "hi"], 20)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "serve", "--db", str(db), "--until-idle"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    print(f"20 Runs through qlk serve --until-idle in {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr
    assert "succeeded" in done.stdout
    projection = _project(db)
    assert {r["run_id"]: r["status"] for r in projection["runs"]} == dict.fromkeys(
        run_ids, "succeeded"
    )
    assert len(projection["attempts"]) == 20
    assert done.stdout.count("started ") == 20


@pytest.mark.spec("CAD-08")
def test_sigterm_stops_serve_the_o4_way_with_exit_0(tmp_path: Path) -> None:
    db = tmp_path / "ql3.db"
    process = _serve(db)
    assert process.stderr is not None
    line = process.stderr.readline()  # the startup line: O-1 is done
    assert "qlk serve:" in line
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=DEADLINE_S)
    assert process.returncode == 0, err
    assert "Runs in ql3.db" in out
    assert "Traceback" not in err


@pytest.mark.spec("E-7")
def test_an_unusable_database_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "serve",
            "--db",
            str(tmp_path / "missing" / "ql3.db"),
            "--until-idle",
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "--db" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kill_after", [1, 2, 3, 5, 7])
def test_serve_killed_mid_run_and_restarted_spawns_nothing_twice(
    tmp_path: Path, kill_after: int
) -> None:
    """SIGKILL once `kill_after` spawns were registered, while children run (and possibly
    between an activation and its spawn, or a spawn and its handle fact); the restart's startup
    recovery completes, adopts or (nothing ran) loses them, lost ones are retried, every Run
    succeeds, no Attempt is spawned twice and no completion is lost."""
    db = tmp_path / "ql3.db"
    run_ids = _seed(db, "nap", ["sleep", "1"], 8, RETRY)
    spawns = LocalLayout(db).root / "spawns.log"
    first = _serve(db)

    def spawned() -> int:
        return len(spawns.read_text().splitlines()) if spawns.exists() else 0

    _wait_for(lambda: spawned() >= kill_after, f"{kill_after} spawns before the kill")
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=DEADLINE_S)
    again = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "serve", "--db", str(db), "--until-idle"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    _check_converged(db, run_ids, kill_after)


@pytest.mark.parametrize("profile", ["standalone", "edge"])
def test_sixteen_kills_at_random_delays_converge_with_no_second_spawn(
    tmp_path: Path, profile: str
) -> None:
    """`qlk serve` SIGKILLed 16 times at random delays (seeded by $QL3_KILL_SEED, printed)
    while real children run, each restart on the same file; a final `--until-idle` run settles
    everything: every Run succeeded, no Attempt was spawned twice, no completion was lost."""
    seed = int(os.environ.get("QL3_KILL_SEED", "20261204"))  # the delays; timing still varies
    rng = random.Random(seed)
    db = tmp_path / "ql3.db"
    run_ids = _seed(db, "nap", ["sleep", "0.3"], 10, RETRY)
    started = time.monotonic()
    for _ in range(16):
        process = _serve(db, "--profile", profile)
        time.sleep(rng.uniform(0.05, 1.5))
        process.kill()
        process.communicate(timeout=DEADLINE_S)
    final = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "serve",
            "--db",
            str(db),
            "--until-idle",
            "--profile",
            profile,
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S * 2,
        check=False,
    )
    print(f"seed {seed}: 16 kills and the final run in {time.monotonic() - started:.1f} s")
    assert final.returncode == 0, (seed, final.stderr)
    _check_converged(db, run_ids, seed)
