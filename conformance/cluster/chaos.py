"""The cluster profile under chaos (issue 17 item 5): `qlk serve --profile cluster` replicas and
`qlk worker` hosts as real processes on one PostgreSQL schema, real no-op commands, and a driver
that SIGKILLs a random replica or Worker every few seconds (restarting it at once) and terminates
server backends with `pg_terminate_backend`.

    python -m conformance.cluster.chaos --dsn DSN --runs 1000 [--kill-every 3] [--no-chaos]

Every Run's command appends its Run id to one log file, so executions are counted from outside.
At the end it checks, on the committed tables:
- every Run ended; Attempt numbers are dense (1..k) per Run;
- no Attempt ever had two `leased` leases, and lease generations are unique per Attempt
  (zero double leases);
- every `succeeded` Attempt has exactly one `completed` lease, its current one, held by the
  Worker session bound to the Attempt (zero stale completions accepted);
- executions per Run <= its Attempts (at most one execution per Attempt), and without chaos
  every Run succeeded with exactly one Attempt and one execution;
and reports kills, terminated backends, Runs/s and the longest time from a Worker kill to the
convergence of a Run that Worker held.

Processes are started with `application_name=ql3-chaos` in their DSN: only their backends are
terminated.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from conformance.cli.submit import fresh_ids
from kernel.task import TASK_EXECUTOR_TYPE
from runners.cluster.named_sql import STATEMENTS
from runners.cluster.status import run_status_counts
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.task_schedule import submit_command

APPLICATION_NAME = "ql3-chaos"
_TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})


@dataclass(slots=True)
class ChaosReport:
    runs: int
    seconds: float
    by_status: dict[str, int]
    kills: Counter[str] = field(default_factory=Counter)
    terminated_backends: int = 0
    longest_kill_to_convergence_ms: int | None = None
    problems: list[str] = field(default_factory=list)
    executions: int = 0
    attempts: int = 0

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        kills = sum(self.kills.values())
        longest = self.longest_kill_to_convergence_ms
        return [
            f"runs {self.runs} in {self.seconds:.1f} s ({self.runs_per_second:.1f} Runs/s); "
            f"by status {dict(sorted(self.by_status.items()))}",
            f"attempts {self.attempts}, executions {self.executions}",
            f"kills {kills} ({dict(sorted(self.kills.items()))}), terminated backends "
            f"{self.terminated_backends}, longest Worker kill -> Run converged "
            f"{'-' if longest is None else f'{longest / 1000:.1f} s'}",
            "problems: " + ("none" if not self.problems else "; ".join(self.problems)),
        ]


class _Process:
    """One `qlk` process of the cluster, restartable."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=out)  # noqa: S603 (qlk)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout_s: float = 60.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def _dsn(dsn: str) -> str:
    return conninfo.make_conninfo(dsn, application_name=APPLICATION_NAME)


def _qlk(*args: str) -> list[str]:
    return [sys.executable, "-m", "conformance.cli", *args]


@contextmanager
def _schema(dsn: str, schema: str | None) -> Iterator[str]:
    """The schema to run in: the given one, or a fresh one dropped afterwards."""
    if schema is not None:
        yield schema
        return
    name = f"chaos_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(STATEMENTS["drop_schema"]).format(schema=sql.Identifier(name)))


def _terminate_one(dsn: str, rng: random.Random) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            int(row[0])
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "AND pid <> pg_backend_pid()",
                (APPLICATION_NAME,),
            ).fetchall()
        ]
        if not pids:
            return 0
        pid = rng.choice(pids)
        found = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        return 1 if found is not None and found[0] else 0


def _held_by(store: ClusterStore, worker_id: str) -> set[str]:
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT DISTINCT run_id FROM run_dispatch_leases WHERE worker_id = %s "
            "AND status = 'leased'",
            (worker_id,),
        ).fetchall()
    return {str(row[0]) for row in rows}


def run_chaos(
    dsn: str,
    *,
    runs: int,
    replicas: int = 3,
    workers: int = 3,
    chaos: bool = True,
    kill_every_s: float = 3.0,
    terminate_every_s: float = 5.0,
    min_kills: int = 0,
    deadline_s: float = 900.0,
    schema: str | None = None,
    workdir: Path | None = None,
    seed: int = 17,
) -> ChaosReport:
    """Run the scenario (module docstring) and return its report; never raises for a failed
    check (the report's `problems` say what failed)."""
    rng = random.Random(seed)  # noqa: S311 (which process to kill, not a secret)
    with _schema(dsn, schema) as name, tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        store = ClusterStore(dsn, name, create_schema=True)
        try:
            return _scenario(
                dsn, schema=name, store=store, root=root, rng=rng, runs=runs,
                replicas=replicas, workers=workers, chaos=chaos, kill_every_s=kill_every_s,
                terminate_every_s=terminate_every_s, min_kills=min_kills, deadline_s=deadline_s,
            )  # fmt: skip
        finally:
            store.close()


def _scenario(
    dsn: str,
    *,
    schema: str,
    store: ClusterStore,
    root: Path,
    rng: random.Random,
    runs: int,
    replicas: int,
    workers: int,
    chaos: bool,
    kill_every_s: float,
    terminate_every_s: float,
    min_kills: int,
    deadline_s: float,
) -> ChaosReport:
    log = root / "executions.log"
    log.touch()
    target = ["--dsn", _dsn(dsn), "--schema", schema]
    procs: list[_Process] = [
        _Process(f"replica{i}", _qlk("serve", "--profile", "cluster", *target), root / f"r{i}.out")
        for i in range(replicas)
    ]
    worker_ids = {}
    for i in range(workers):
        worker_id = f"chaos-worker-{i}"
        worker_ids[f"worker{i}"] = worker_id
        argv = _qlk(
            "worker", *target, "--journal", str(root / f"w{i}"),
            "--executor-type", TASK_EXECUTOR_TYPE, "--worker-id", worker_id, "--retention", "1m",
        )  # fmt: skip
        procs.append(_Process(f"worker{i}", argv, root / f"w{i}.out"))
    tasks = ClusterTaskStore(store)
    run_ids: list[str] = []
    for _ in range(runs):
        run_id, attempt_id = fresh_ids()
        submit_command(
            store,
            tasks,
            ["/bin/sh", "-c", f"echo {run_id} >> {log}"],
            now_ms=int(time.time() * 1000),
            run_id=run_id,
            attempt_id=attempt_id,
        )
        run_ids.append(run_id)
    report = ChaosReport(runs=runs, seconds=0.0, by_status={})
    affected: list[tuple[int, set[str]]] = []  # (kill time ms, Runs the killed Worker held)
    began = time.monotonic()
    for proc in procs:
        proc.start()
    next_kill = began + kill_every_s
    next_terminate = began + terminate_every_s
    try:
        while True:
            counts = {s.value: n for s, n in run_status_counts(store).items()}
            ended = sum(n for s, n in counts.items() if s in _TERMINAL)
            kills = sum(report.kills.values())
            if ended == runs and (not chaos or kills >= min_kills):
                break
            now = time.monotonic()
            if now - began > deadline_s:
                report.problems.append(f"deadline {deadline_s:.0f} s: {counts}")
                break
            if chaos and now >= next_kill:
                victim = rng.choice(procs)
                held: set[str] = set()
                if victim.name in worker_ids:
                    held = _held_by(store, worker_ids[victim.name])
                victim.kill()
                affected.append((int(time.time() * 1000), held))
                report.kills["worker" if victim.name in worker_ids else "replica"] += 1
                victim.start()  # at once, default settings
                next_kill = now + kill_every_s * rng.uniform(0.5, 1.5)
            if chaos and now >= next_terminate:
                report.terminated_backends += _terminate_one(dsn, rng)
                next_terminate = now + terminate_every_s * rng.uniform(0.5, 1.5)
            time.sleep(0.1)
        report.seconds = time.monotonic() - began
    finally:
        for proc in procs:
            proc.stop()
    _check(store, log=log, run_ids=run_ids, report=report, affected=affected, chaos=chaos)
    return report


def _check(
    store: ClusterStore,
    *,
    log: Path,
    run_ids: list[str],
    report: ChaosReport,
    affected: list[tuple[int, set[str]]],
    chaos: bool,
) -> None:
    tables = store.project()
    runs = {str(r["run_id"]): r for r in tables["runs"]}
    report.by_status = dict(Counter(str(r["status"]) for r in runs.values()))
    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in tables["attempts"]:
        attempts[str(a["run_id"])].append(a)
    report.attempts = len(tables["attempts"])
    leases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for lease in tables["leases"]:
        leases[str(lease["attempt_id"])].append(lease)
    executions = Counter(log.read_text().split())
    report.executions = sum(executions.values())
    problems = report.problems
    for run_id in run_ids:
        run = runs.get(run_id)
        if run is None or str(run["status"]) not in _TERMINAL:
            problems.append(f"{run_id} not ended ({None if run is None else run['status']})")
            continue
        numbers = sorted(int(a["number"]) for a in attempts[run_id])
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"{run_id} attempt numbers {numbers}")
        if executions[run_id] > len(numbers):
            problems.append(f"{run_id} ran {executions[run_id]} times for {len(numbers)} attempts")
        if not chaos and (str(run["status"]), len(numbers), executions[run_id]) != (
            "succeeded",
            1,
            1,
        ):
            problems.append(
                f"{run_id} {run['status']} with {len(numbers)} attempts, "
                f"{executions[run_id]} executions"
            )
    for attempt_id, rows in leases.items():
        if sum(1 for r in rows if r["status"] == "leased") > 1:
            problems.append(f"{attempt_id} has two leased leases")
        generations = [int(r["lease_generation"]) for r in rows]
        if len(set(generations)) != len(generations):
            problems.append(f"{attempt_id} repeats a lease generation")
    for run_attempts in attempts.values():
        for a in run_attempts:
            if a["status"] != "succeeded":
                continue
            completed = [r for r in leases[str(a["attempt_id"])] if r["status"] == "completed"]
            if len(completed) != 1 or (
                int(completed[0]["lease_generation"]),
                completed[0]["worker_id"],
                completed[0]["worker_session_id"],
                int(completed[0]["worker_generation"]),
            ) != (
                int(a["lease_generation"]),
                a["worker_id"],
                a["worker_session_id"],
                int(a["worker_generation"]),
            ):
                problems.append(f"{a['attempt_id']} succeeded without its own completed lease")
    longest: int | None = None
    for killed_at, held in affected:
        for run_id in held:
            finished = runs.get(run_id, {}).get("finished_at_ms")
            if finished is not None:
                gap = int(finished) - killed_at
                longest = gap if longest is None else max(longest, gap)
    report.longest_kill_to_convergence_ms = longest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.cluster.chaos")
    parser.add_argument("--dsn", default=os.environ.get("QL3_PG_DSN"), required=False)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--terminate-every", type=float, default=5.0)
    parser.add_argument("--min-kills", type=int, default=50)
    parser.add_argument("--no-chaos", action="store_true")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("--dsn DSN (or $QL3_PG_DSN) is required")
    report = run_chaos(
        args.dsn,
        runs=args.runs,
        replicas=args.replicas,
        workers=args.workers,
        chaos=not args.no_chaos,
        kill_every_s=args.kill_every,
        terminate_every_s=args.terminate_every,
        min_kills=0 if args.no_chaos else args.min_kills,
    )
    for line in report.lines():
        print(line)
    return 0 if not report.problems else 1


if __name__ == "__main__":
    sys.exit(main())
