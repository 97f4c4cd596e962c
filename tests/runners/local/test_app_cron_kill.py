"""Done-when of issue 15 item 3 through the whole local application: "a cron task fires once per
due minute across a SIGKILL and restart, never twice" (TK-6, TK-9, TK-10; D-1; O-1..O-4).

`test_schedule_kill.py` checks this at the schedule-phase level. Here a child
(`app_cron_kill_child.py`) runs the whole `LocalApplication` as `qlk serve` does (standalone:
startup recovery, the first execution-control cycle, the execution-control and scheduler
lifecycles with the schedule and dispatch phases, real launch wrappers running `true` and
`sh -c 'echo even'`) on a real SQLite file, with a fast clock: one fake timeline
`T0 + (wall - wall epoch) x SPEED` shared by every restart (a fake minute is 4 real seconds, so
downtime passes fake minutes too). Two cron tasks: `every` (`* * * * *`) and `even`
(`*/2 * * * *`).

The harness SIGKILLs the child `KILLS` times (seeded), in turn (`STRATEGIES`): at a random moment
after it booted (during startup recovery, inside or between cycles); as soon as a read-only poll
of the file sees a claimed fire (between the claim and the record of its admission; else at the
next new Run); as soon as a poll sees a new Run (just after a fire's admission committed: before
its record, or in the dispatch that follows). Between a kill and the restart the application
stays down for a seeded while (none, short, or over two fake minutes). A last child runs at
least 1.5 fake minutes, then until idle, and stops the O-4 way.

Every child logs, per scheduler cycle that returned, the time its schedule phase ran at and the
fires it planned. With `L(t)` the latest cron time <= t of a task, the test checks, per task:

1. ids (TK-6): every Run is `fire_run_id(task, 1, f)` of a cron time `f` after the task was added
   (TK-9), admitted once (one `run.queued` Event), with exactly one Attempt,
   `fire_attempt_id(task, 1, f)` (no retry policy); no Run with another id; no fire applied twice
   in any logged cycle (a resumed fire whose Run exists is a `replayed`).
2. while up: after every logged cycle at t that did not resume a claim of the task, L(t) is
   admitted; and for each child, every cron time from L(its first such cycle) to L(its last
   cycle) is admitted: every due minute during which the application was up, exactly once.
   (The scheduler cycles about every 1.5 real seconds, more than twice a fake minute; one that
   stalled for a whole fake minute would collapse that minute into the next, TK-10, and fail
   this.)
3. while down (TK-10): for each restart, of the cron times after L(K) (K: the previous child's
   kill, fake) up to L(t_b) (t_b: the restart's first cycle that resumed nothing), exactly one is
   admitted, the latest, L(t_b); the earlier missed ones never are.
4. nothing else: every admitted fire is one of (2), or the one fire a killed child had claimed
   or admitted in the cycle the kill interrupted (at most one per killed child, a cron time
   that child saw: L(start) <= f <= L(K), not before L of the last logged cycle), admitted by
   it or resumed by a restart. Some due fires were never admitted (TK-10 was exercised).
5. every Run terminal; each Attempt at most once in the launcher's `spawns.log` (D-1: no second
   spawn), no other Attempt in it; a succeeded Run's Attempt was spawned once and its command
   ran exactly once (its log holds one line); any other Run ended `failed` with its Attempt
   `lost` and its command never ran (a kill after the activation L1, before the command was
   sent: §2.1, LR-9), and was never started again.
6. no lifecycle incident or failed cycle; the last child drained at its O-4 stop.

Waits end on their event or at `DEADLINE_S`; the random sleeps only place faults (a kill, a
downtime). Set `QL3_APP_CRON_KILL_PLANT` to one of the child's PLANTS to run the same test
against a planted bug (it must fail).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from kernel.task import TaskDefinition, define_task, fire_attempt_id, fire_run_id
from runners.edge.projection import read_only_uri
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.local.app import wall_clock_ms
from runners.local.launcher import LocalLayout
from tests.runners.local.app_cron_kill_child import (
    PLANTS,
    SPEED,
    T0,
    fake_ms,
    log_path,
    read_epoch,
)

pytestmark = pytest.mark.slow  # a dozen SIGKILLed applications on a fast clock: about a minute

ROOT: Final = Path(__file__).resolve().parents[3]
CHILD: Final = "tests.runners.local.app_cron_kill_child"
#: Run the test against a planted bug of the child (one of its PLANTS): it must fail.
PLANT_ENV: Final = "QL3_APP_CRON_KILL_PLANT"

#: task -> (cron, period in ms, argv). Both periods divide T0.
#: Each command prints its task's name once: its Attempt's log (appended to by every start, in
#: the application's state root) says how often it ran.
TASKS: Final = {
    "every": ("* * * * *", 60_000, ["echo", "every"]),
    "even": ("*/2 * * * *", 120_000, ["sh", "-c", "echo even"]),
}
#: The tasks are added just before the timeline starts: the first fire is at T0 (TK-9).
SINCE: Final = T0 - 1
KILLS: Final = 10
#: How each child is killed, in turn: a random moment; as soon as a reader sees a claimed fire
#: (between the claim and the record of its admission) or else a new Run; as soon as a reader
#: sees a new Run (just after a fire's admission committed).
STRATEGIES: Final = ("timer", "claimed", "admitted")
SEED: Final = 1503
#: Downtime after each kill (real seconds): none, short, or over two fake minutes (so a restart
#: after it finds at least two missed fires of `every`, one never admitted: TK-10).
DOWNTIMES: Final = ("none", "short", "long", "short", "none", "long", "short", "none", "short")
#: Generous bound on any one wait (a loaded CI machine), never a fixed sleep as the assertion.
DEADLINE_S: Final = 60.0
#: How often the harness looks for a claim or a new Run (fast: the kill should follow at once),
#: and for anything else.
FAST_POLL_S: Final = 0.001
POLL_S: Final = 0.02
FINAL_TRIES: Final = 3
TERMINAL: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out"})


@dataclass
class Life:
    """One child: its index, how it ended, and the fake times it could read (bounds)."""

    index: int
    strategy: str  # one of STRATEGIES, or final
    start_fake: int  # <= every time this child read
    end_fake: int = 0  # >= every time this child read (taken after it was reaped)
    killed: bool = False


@dataclass(frozen=True)
class Cycle:
    life: int
    now: int
    fires: tuple[tuple[str, str, int, str], ...]  # task, kind, fire time, outcome


@dataclass
class Harness:
    db: Path
    out: Path
    plant: str | None
    lives: list[Life] = field(default_factory=list)

    # -- the file, read-only ---------------------------------------------------------------------
    def progress(self) -> tuple[int, int] | None:
        """(Runs, schedules with a claimed fire) committed so far, or None when the file
        cannot be read this instant."""
        try:
            conn = sqlite3.connect(read_only_uri(self.db), uri=True, isolation_level=None)
            with closing(conn):
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM runs), "
                    "(SELECT count(*) FROM task_schedules WHERE fire_state = 'claimed')"
                ).fetchone()
        except sqlite3.Error:
            return None
        return int(row[0]), int(row[1])

    def log_lines(self) -> list[str]:
        path = log_path(self.db)
        return path.read_text().splitlines() if path.exists() else []

    def fake_now(self) -> int:
        epoch = read_epoch(self.db)
        return T0 if epoch is None else fake_ms(epoch, wall_clock_ms())

    # -- the children ----------------------------------------------------------------------------
    def spawn(self, life: Life, mode: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", CHILD, str(self.db), str(life.index), mode]
        if self.plant:
            argv.append(self.plant)
        with (self.out / f"life-{life.index:02d}.txt").open("wb") as sink:
            return subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def output(self, life: Life) -> str:
        return (self.out / f"life-{life.index:02d}.txt").read_text(errors="replace")[-4000:]

    def wait_for(
        self,
        proc: subprocess.Popen[bytes],
        life: Life,
        what: str,
        done: Callable[[], bool],
        poll_s: float = POLL_S,
    ) -> None:
        """Poll `done` until it holds; fail if the child exits or at the deadline."""
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            returncode = proc.poll()
            assert returncode is None, (
                f"life {life.index} exited ({returncode}) waiting for {what}:\n{self.output(life)}"
            )
            assert time.monotonic() < deadline, (
                f"life {life.index}: no {what} within {DEADLINE_S} s:\n{self.output(life)}"
            )
            time.sleep(poll_s)

    def serve_and_kill(self, index: int, strategy: str, rng: random.Random) -> Life:
        life = Life(index, strategy, self.fake_now())
        self.lives.append(life)
        proc = self.spawn(life, "serve")
        try:
            self._await_moment(proc, life, rng)
            proc.send_signal(signal.SIGKILL)
            returncode = proc.wait(timeout=DEADLINE_S)
        finally:
            if proc.poll() is None:  # a failed wait: leave no application running
                proc.kill()
                proc.wait(timeout=DEADLINE_S)
        life.end_fake = self.fake_now()  # the child is reaped: it reads no later time
        assert returncode == -signal.SIGKILL, (returncode, self.output(life))
        life.killed = True
        return life

    def _await_moment(self, proc: subprocess.Popen[bytes], life: Life, rng: random.Random) -> None:
        """Wait for the moment `life.strategy` kills at (module docstring)."""
        booted = f"boot {life.index} "
        self.wait_for(proc, life, "boot line", lambda: any(booted in x for x in self.log_lines()))
        # A random moment: in startup recovery, the first control cycle, or any cycle; for
        # the other strategies, the first such moment after it.
        pause = rng.uniform(0.0, 6.0 if life.strategy == "timer" else 3.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            returncode = proc.wait(timeout=pause)
            pytest.fail(f"life {life.index} exited ({returncode}):\n{self.output(life)}")
        if life.strategy == "timer":
            return
        runs: list[int] = []

        def moment() -> bool:
            found = self.progress()  # None: not readable this instant
            if found is None:
                return False
            runs.append(found[0])
            if life.strategy == "claimed" and found[1] > 0:
                return True  # a fire claimed, its admission or its record not yet committed
            return found[0] > runs[0]  # a fire's admission committed (a new Run)

        self.wait_for(proc, life, "a new claim or Run", moment, FAST_POLL_S)

    def final(self, index: int) -> Life:
        life = Life(index, "final", self.fake_now())
        self.lives.append(life)
        proc = self.spawn(life, "final")
        try:
            returncode = proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)
            pytest.fail(f"final life {index} not idle within {DEADLINE_S} s:\n{self.output(life)}")
        life.end_fake = self.fake_now()
        assert returncode == 0, (returncode, self.output(life))
        return life


def _parse_cycles(lines: list[str]) -> list[Cycle]:
    cycles = []
    for line in lines:
        words = line.split()
        if words[0] != "cycle":
            continue
        fires = []
        for item in words[3:]:
            task, kind, fire_at, outcome = item.split(":")
            fires.append((task, kind, int(fire_at), outcome))
        cycles.append(Cycle(int(words[1]), int(words[2]), tuple(fires)))
    return cycles


def _check_ids(harness: Harness, end: int) -> tuple[dict[str, set[int]], list[str]]:
    """Checks 1 and 5 (module docstring): the admitted fire times per task, and the Runs whose
    command never ran."""
    store = EdgeStore(harness.db)
    try:
        projection = store.project()
    finally:
        store.close()
    known: dict[str, tuple[str, int]] = {}
    for task, (_cron, period, _argv) in TASKS.items():
        for fire in range(T0 - 2 * period, end + period, period):
            known[fire_run_id(task, 1, fire)] = (task, fire)
    runs = {str(r["run_id"]): r for r in projection["runs"]}
    strangers = sorted(r for r in runs if r not in known)
    assert strangers == [], f"Runs that are no fire's deterministic id: {strangers}"
    admitted: dict[str, set[int]] = {task: set() for task in TASKS}
    for run_id, row in runs.items():
        task, fire = known[run_id]
        assert row["task_id"] == task, (run_id, row)
        assert fire > SINCE, f"TK-9: {task} fired for {fire}, before it was added"
        admitted[task].add(fire)
    # The admission's Event (A-1..A-5): `run.queued` at seq 1, once per Run.
    queued = Counter(str(e["run_id"]) for e in projection["events"] if e["type"] == "run.queued")
    assert {r: n for r, n in queued.items() if n != 1} == {}, "a Run admitted twice"
    assert set(queued) == set(runs)
    # 5: terminal, one Attempt each (its fire's), at most one spawn, none of another Attempt.
    attempts: dict[str, list[dict[str, object]]] = {r: [] for r in runs}
    for attempt in projection["attempts"]:
        attempts[str(attempt["run_id"])].append(attempt)
    layout = LocalLayout(harness.db)
    journal = layout.root / "spawns.log"
    lines = journal.read_text().splitlines() if journal.exists() else []
    spawned = Counter(line.split(" ")[1] for line in lines)
    assert {a: n for a, n in spawned.items() if n > 1} == {}, "D-1: an Attempt spawned twice"
    never_ran: list[str] = []
    for run_id, row in runs.items():
        task, fire = known[run_id]
        assert row["status"] in TERMINAL, (run_id, row["status"])
        ids = [str(a["attempt_id"]) for a in attempts[run_id]]
        assert ids == [fire_attempt_id(task, 1, fire)], (run_id, ids)
        log = layout.log_path(ids[0])
        ran = log.read_text().splitlines() if log.exists() else []
        if row["status"] == "succeeded":
            assert spawned[ids[0]] == 1, (run_id, "succeeded without a registered spawn")
            assert ran == [task], (run_id, "its command ran", len(ran), "times")
        else:
            # Killed after the activation (L1), before the command was sent: it never ran,
            # recovery found it not running (no receipt; LR-9) and it ended lost (§2.1).
            assert row["status"] == "failed", (run_id, row)
            assert attempts[run_id][0]["status"] == "lost", (run_id, attempts[run_id])
            assert ran == [], (run_id, "a lost Attempt whose command ran")
            never_ran.append(run_id)
    assert set(spawned) <= {a["attempt_id"] for a in projection["attempts"]}, "a stray spawn"
    return admitted, never_ran


def _fresh(cycle: Cycle, task: str) -> bool:
    """The cycle did not resume a claim of `task` (one fire per task per cycle)."""
    return not any(t == task and kind == "resume" for t, kind, _f, _o in cycle.fires)


def _check_schedule(
    harness: Harness, cycles: list[Cycle], admitted: dict[str, set[int]]
) -> dict[str, int]:
    """Checks 2, 3 and 4 (module docstring), per task; counts for the summary."""
    lives = harness.lives
    by_life: dict[int, list[Cycle]] = {life.index: [] for life in lives}
    for cycle in cycles:
        by_life[cycle.life].append(cycle)
    stats: Counter[str] = Counter()
    for task, (_cron, period, _argv) in TASKS.items():

        def latest(t: int, period: int = period) -> int:
            return t // period * period

        mine = admitted[task]
        context = f"task {task}: admitted {sorted((f - T0) // 60_000 for f in mine)} (minutes)"
        # 1 (log): no fire applied twice.
        applied = Counter(
            f for c in cycles for t, _k, f, o in c.fires if t == task and o == "applied"
        )
        assert {f: n for f, n in applied.items() if n > 1} == {}, context
        # 2: after each fresh cycle at t, L(t) is admitted; within a child, every cron time
        # between its first fresh cycle and its last cycle.
        witnessed: set[int] = set()
        for life in lives:
            fresh = [c for c in by_life[life.index] if _fresh(c, task)]
            for cycle in fresh:
                fire = latest(cycle.now)
                assert fire in mine, (
                    f"life {life.index}: after the cycle at {cycle.now} (minute "
                    f"{(cycle.now - T0) // 60_000}) its fire {fire} is not admitted; {context}"
                )
                witnessed.add(fire)
            if fresh:
                up = range(latest(fresh[0].now), latest(by_life[life.index][-1].now) + 1, period)
                missing = [f for f in up if f not in mine]
                assert missing == [], (
                    f"life {life.index}: due while up, never admitted: {missing}; {context}"
                )
                stats["up fires"] += len(up)
        # 3: each restart admits, of the fires missed while down, exactly the latest.
        for position, life in enumerate(lives):
            fresh = [c for c in by_life[life.index] if _fresh(c, task)]
            if not fresh:
                continue
            # Down since the previous child was killed (or stopped; the first: since added).
            kill = lives[position - 1].end_fake if position else SINCE
            restart = latest(fresh[0].now)
            missed = set(range(latest(kill) + period, restart + 1, period))
            got = missed & mine
            assert got == ({restart} if missed else set()), (
                f"life {life.index}: of the fires due after the kill at {kill} up to its first "
                f"fresh cycle at {fresh[0].now}, {sorted(missed)}, admitted {sorted(got)}; "
                f"TK-10 admits only the latest; {context}"
            )
            stats["restarts that missed fires"] += bool(missed)
        # 4: every other admitted fire is one killed child's interrupted cycle.
        extras = sorted(mine - witnessed)
        slots = []
        for position, life in enumerate(lives):
            if not life.killed:
                continue
            seen = [latest(c.now) for x in lives[: position + 1] for c in by_life[x.index]]
            after = max([latest(SINCE), *seen])
            slots.append((latest(life.end_fake), max(after, latest(life.start_fake)), life))
        used: set[int] = set()
        for fire in extras:
            fits = [
                (high, life.index)
                for high, low, life in slots
                if low <= fire <= high and life.index not in used
            ]
            assert fits, (
                f"fire {fire} (minute {(fire - T0) // 60_000}) was admitted but no logged cycle "
                f"saw it due and no killed child can have claimed it; {context}"
            )
            used.add(min(fits)[1])
        stats["fires of interrupted cycles"] += len(extras)
        end = latest(lives[-1].end_fake)
        stats["due fires never admitted"] += sum(
            1 for f in range(T0, end + 1, period) if f not in mine
        )
    return dict(stats)


def test_cron_fires_once_per_due_minute_across_sigkill_of_the_application(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    plant = os.environ.get(PLANT_ENV) or None
    assert plant is None or plant in PLANTS, f"{PLANT_ENV}={plant!r}: one of {PLANTS}"
    db = tmp_path / "app.sqlite3"
    setup = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(setup)
        for name, (cron, _period, argv) in TASKS.items():
            definition = define_task(name, argv, cron=cron)
            assert isinstance(definition, TaskDefinition), definition
            assert isinstance(tasks.add(definition, SINCE), TaskWrite)
    finally:
        setup.close()
    harness = Harness(db, tmp_path, plant)
    rng = random.Random(SEED)
    for index in range(KILLS):
        harness.serve_and_kill(index, STRATEGIES[index % len(STRATEGIES)], rng)
        if index < len(DOWNTIMES):
            kind = DOWNTIMES[index]
            downtime = {
                "none": 0.0,
                "short": rng.uniform(0.1, 1.5),
                "long": rng.uniform(2.1, 2.5) * 60 / SPEED,
            }
            time.sleep(downtime[kind])  # places the next fault: fake minutes pass while down
    for attempt in range(FINAL_TRIES):
        # The last child stops once idle; a minute may begin between that check and O-4's
        # scheduler drain and leave a fresh Run unfinished: then another last child.
        harness.final(KILLS + attempt)
        store = EdgeStore(db)
        try:
            statuses = {str(r["status"]) for r in store.project()["runs"]}
        finally:
            store.close()
        if statuses <= TERMINAL:
            break
    lines = harness.log_lines()
    problems = [x for x in lines if x.split()[0] in ("failed", "incident")]
    assert problems == [], problems
    last = lines[-1].split()
    assert last[:2] == ["stopped", str(harness.lives[-1].index)], last
    assert last[3] == "drained=True", last
    cycles = _parse_cycles(lines)
    admitted, never_ran = _check_ids(harness, harness.lives[-1].end_fake)
    stats = _check_schedule(harness, cycles, admitted)
    assert stats.get("due fires never admitted", 0) >= 2, ("TK-10 was not exercised", stats)
    kills = Counter(life.strategy for life in harness.lives if life.killed)
    assert sum(kills.values()) == KILLS
    resumed = sum(1 for c in cycles for _t, kind, _f, _o in c.fires if kind == "resume")
    replayed = sum(1 for c in cycles for _t, _k, _f, outcome in c.fires if outcome == "replayed")
    # Printed, not asserted: where the kills land depends on the machine's speed.
    print(
        f"\napp cron kill: {sum(kills.values())} SIGKILLs ({dict(kills)}), "
        f"{len(harness.lives)} lives, {sum(map(len, admitted.values()))} Runs over "
        f"{(harness.lives[-1].end_fake - T0) // 60_000} fake minutes, {stats}, "
        f"{resumed} claims resumed ({replayed} replayed), {len(never_ran)} never ran, "
        f"wall {time.monotonic() - started:.1f} s"
    )
