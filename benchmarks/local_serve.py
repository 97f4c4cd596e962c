"""Local application (`qlk serve`) costs, as ratios against baselines measured in the same run
(issue 15 item 5).

1. No-op tasks completed per second through `qlk serve --profile standalone --until-idle`:
   `--tasks` Runs of a task `true` are submitted, serve runs as a child process, timed from
   start to exit; every Run must have `succeeded` with exactly one Attempt. Compared with the
   standalone budget's ceiling (Run starts per scheduler cycle / cadence: 4 per second, a bound
   by design), with spawning `true` directly the same number of times, and with starting the
   launch wrapper (the Python process every Run's start waits for) directly.
2. Peak RSS (`VmHWM`, polled every 50 ms) of that serve process running `--rss-tasks` no-op
   tasks, against a child that only imports what `qlk serve` imports before it opens the
   database (`conformance.cli.serve`) and sleeps 1 s (and, to show where the memory comes from,
   a bare interpreter and the layers of imports on serve's path).
3. Admission latency under the write lock with 4 concurrent submitters: 4 processes each calling
   `runners.local.schedule.submit` `--submits` times on one file, against 4 processes each doing
   as many `BEGIN IMMEDIATE; INSERT; COMMIT` on a scratch table of a file with the same pragmas;
   rounds alternate which side goes first.

    python benchmarks/local_serve.py [--tasks 200] [--rss-tasks 1000] [--submits 250] [--quick]

Machines are noisy and shared: compare the ratios, never the absolute times.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# Run as `python benchmarks/local_serve.py`, this folder is sys.path[0] and `benchmarks/kernel.py`
# would shadow the `kernel` package: drop the folder before importing it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernel import Applied  # noqa: E402
from kernel.specs import Profile, budget_for  # noqa: E402
from kernel.task import TaskDefinition, TaskRefused, define_task  # noqa: E402
from runners.edge.connection import DEFAULT_BUSY_TIMEOUT_MS  # noqa: E402
from runners.edge.named_sql import STATEMENTS  # noqa: E402
from runners.edge.store import EdgeStore  # noqa: E402
from runners.edge.tasks import EdgeTaskStore  # noqa: E402
from runners.local.app import wall_clock_ms  # noqa: E402
from runners.local.schedule import submit  # noqa: E402
from runners.worker.posix.launch_wrapper import WRAPPER_MODULE  # noqa: E402

NOOP_TASK = "noop"
NOOP_ARGV = ("true",)
POLL_S = 0.05  # VmHWM poll period
ROLLUP_EVERY = 5  # read smaps_rollup every 5th poll (250 ms)
SUBMITTERS = 4
WRAPPER_SPAWNS_MAX = 40  # the wrapper takes ~0.25 s to start: bound that baseline's length
RSS_GOAL_BYTES = 30_000_000  # issue 15: <= 30 MB
BARRIER_TIMEOUT_S = 120.0  # a submitter that failed to start breaks the barrier for the others
RECORDED_P95_MS = 4.05  # the records: admission p95 at 0.5 CPU (quoted, not asserted)
MIB = 1024 * 1024
BUDGET = budget_for(Profile.STANDALONE)
assert BUDGET.scheduler_cadence_ms is not None, "a local profile"
assert BUDGET.scheduler_dispatch_activations is not None, "a local profile"
ACTIVATIONS: int = BUDGET.scheduler_dispatch_activations
CADENCE_S = BUDGET.scheduler_cadence_ms / 1000
CEILING = ACTIVATIONS / CADENCE_S  # Runs started per second, at most (by design)


def serve_command(db: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "conformance.cli",
        "serve",
        "--profile",
        "standalone",
        "--until-idle",
        "--db",
        str(db),
    ]


# -- seeding and checking --------------------------------------------------------------------
def seed(db: Path, count: int, prefix: str) -> list[str]:
    """A fresh file with the task `noop` (`true`) and `count` queued manual Runs of it."""
    store = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(store)
        definition = define_task(NOOP_TASK, list(NOOP_ARGV))
        if not isinstance(definition, TaskDefinition):
            raise SystemExit(f"define_task refused the no-op task: {definition}")
        written = tasks.add(definition, wall_clock_ms())
        if isinstance(written, TaskRefused):
            raise SystemExit(f"the task store refused the no-op task: {written}")
        run_ids: list[str] = []
        for i in range(count):
            run_id = f"{prefix}r{i:05d}"
            outcome = submit(
                store,
                tasks,
                NOOP_TASK,
                now_ms=wall_clock_ms(),
                run_id=run_id,
                attempt_id=f"{prefix}a{i:05d}",
            )
            if not isinstance(outcome, Applied):
                raise SystemExit(f"submit {run_id}: {outcome}")
            run_ids.append(run_id)
        return run_ids
    finally:
        store.close()


def verify(db: Path, run_ids: Sequence[str]) -> None:
    """Every Run `succeeded`, each with exactly one Attempt (nothing lost, nothing retried)."""
    store = EdgeStore(db)
    try:
        projection = store.project()
    finally:
        store.close()
    statuses = {str(r["run_id"]): str(r["status"]) for r in projection["runs"]}
    if statuses != dict.fromkeys(run_ids, "succeeded"):
        raise SystemExit(f"{db.name}: Runs by status {dict(Counter(statuses.values()))}")
    attempts = Counter(str(a["run_id"]) for a in projection["attempts"])
    if set(attempts) != set(run_ids) or set(attempts.values()) != {1}:
        raise SystemExit(f"{db.name}: Attempts per Run {dict(Counter(attempts.values()))}")


# -- watching a child process ----------------------------------------------------------------
def read_hwm_kib(pid: int) -> int | None:
    """`VmHWM` (peak resident set) in KiB; None once the process is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def read_rollup_kib(pid: int) -> dict[str, int]:
    """`/proc/<pid>/smaps_rollup` as {field: KiB}; empty when unreadable."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1])
    return out


@dataclass
class Watched:
    """One child process, watched to its exit."""

    elapsed_s: float
    returncode: int
    hwm_kib: int  # the last VmHWM read (it only grows), or the peak reported at exit if larger
    rollup_kib: dict[str, int]  # the smaps_rollup read (every 250 ms) with the largest Rss
    cpu_s: float  # user + system time of the child and the children it reaped
    lines: list[tuple[float, str]] = field(default_factory=list)  # stdout, seconds from start
    stderr: str = ""


def _read_lines(stream: IO[str], lines: list[tuple[float, str]], start: float) -> None:
    for line in stream:
        lines.append((time.perf_counter() - start, line.rstrip("\n")))


def _reap(pid: int, reaped: list[tuple[int, int | None]]) -> None:
    """Wait for `pid` (on a thread): its wait status and, when the kernel's figure is the
    child's, its peak resident set in KiB (else None). A reaped child's `ru_maxrss` (Linux) is
    the largest of its own peak, its reaped children's (serve's launch wrappers, smaller than
    serve) and the image it was started from (this process's, shared until `exec`), so above
    this process's own peak it is the child's. It keeps a peak reached after the last VmHWM
    poll: serve imports rich and prints its table in its last milliseconds."""
    _, status, usage = os.wait4(pid, 0)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reaped.append((status, usage.ru_maxrss if usage.ru_maxrss > own else None))


def watch(cmd: Sequence[str], timeout_s: float, cwd: Path = ROOT) -> Watched:
    """Run `cmd`, polling its VmHWM every 50 ms until it exits (and taking its peak at exit,
    `_reap`, when larger); stdout lines are timestamped."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines: list[tuple[float, str]] = []
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True
        )
        assert process.stdout is not None
        reader = threading.Thread(
            target=_read_lines, args=(process.stdout, lines, start), daemon=True
        )
        reader.start()
        reaped: list[tuple[int, int | None]] = []
        reaper = threading.Thread(target=_reap, args=(process.pid, reaped), daemon=True)
        reaper.start()
        hwm, polls = 0, 0
        rollup: dict[str, int] = {}
        while True:
            value = read_hwm_kib(process.pid)
            if value is not None:
                hwm = value
            if polls % ROLLUP_EVERY == 0:
                read = read_rollup_kib(process.pid)
                if read.get("Rss", 0) >= rollup.get("Rss", 0):
                    rollup = read
            polls += 1
            reaper.join(timeout=POLL_S)
            if not reaper.is_alive():
                break
            if time.perf_counter() - start > timeout_s:
                process.kill()
                reaper.join()
                raise SystemExit(f"not done within {timeout_s:.0f} s: {' '.join(cmd)}")
        elapsed = time.perf_counter() - start
        status, peak_kib = reaped[0]
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        hwm = max(hwm, peak_kib or 0)
        reader.join(timeout=10)
        err.seek(0)
        stderr = err.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Watched(elapsed, process.returncode, hwm, rollup, cpu, lines, stderr)


def run_serve(directory: Path, tasks: int, name: str) -> Watched:
    """Seed `tasks` no-op Runs in a fresh file, run serve on it to idle, check every Run."""
    db = directory / f"{name}.db"
    run_ids = seed(db, tasks, f"{name}-")
    watched = watch(serve_command(db), timeout_s=120 + tasks * 2.0)
    if watched.returncode != 0:
        raise SystemExit(f"qlk serve exited {watched.returncode}:\n{watched.stderr}")
    verify(db, run_ids)
    return watched


def start_batches(watched: Watched) -> list[tuple[float, int]]:
    """The `started` lines grouped into scheduler cycles: (time of the cycle's first line,
    Runs it started). Serve prints them when the cycle's report arrives, i.e. as it ends."""
    batches: list[tuple[float, int]] = []
    last = -1.0
    for at, line in watched.lines:
        if not line.startswith("started "):
            continue
        if batches and at - last < 0.3:
            batches[-1] = (batches[-1][0], batches[-1][1] + 1)
        else:
            batches.append((at, 1))
        last = at
    return batches


# -- 1. throughput ---------------------------------------------------------------------------
def spawn_rate(cmd: Sequence[str], count: int, cwd: Path) -> float:
    """Processes per second: `cmd` started and waited for `count` times, one after another."""
    start = time.perf_counter()
    for _ in range(count):
        subprocess.run(
            cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=False
        )
    return count / (time.perf_counter() - start)


@dataclass
class ThroughputRound:
    serve_rate: float
    elapsed_s: float
    cpu_per_task_ms: float
    period_s: float | None  # median time between two cycles' starts
    batch_sizes: Counter[int]
    raw_rate: float
    wrapper_rate: float
    hwm_kib: int


def throughput_round(directory: Path, tasks: int, round_no: int) -> ThroughputRound:
    wrapper = [sys.executable, "-P", "-m", WRAPPER_MODULE]  # refuses the empty payload, exits
    wrapper_count = min(tasks, WRAPPER_SPAWNS_MAX)

    def baselines() -> tuple[float, float]:
        raw = spawn_rate(NOOP_ARGV, tasks, directory)
        return raw, spawn_rate(wrapper, wrapper_count, Path("/"))

    if round_no % 2:  # odd rounds: baselines first
        raw_rate, wrapper_rate = baselines()
        watched = run_serve(directory, tasks, f"tp{round_no}")
    else:
        watched = run_serve(directory, tasks, f"tp{round_no}")
        raw_rate, wrapper_rate = baselines()
    batches = start_batches(watched)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(batches)]
    return ThroughputRound(
        serve_rate=tasks / watched.elapsed_s,
        elapsed_s=watched.elapsed_s,
        cpu_per_task_ms=watched.cpu_s / tasks * 1000,
        period_s=statistics.median(gaps) if gaps else None,
        batch_sizes=Counter(size for _, size in batches),
        raw_rate=raw_rate,
        wrapper_rate=wrapper_rate,
        hwm_kib=watched.hwm_kib,
    )


def report_throughput(directory: Path, tasks: int, rounds: int) -> None:
    print()
    print(
        f"1. no-op tasks/s through qlk serve --profile standalone --until-idle "
        f"({tasks} Runs of `true`, {rounds} round(s), baselines alternating before/after)"
    )
    print(
        f"  {'round':<5} {'serve s':>8} {'serve/s':>8} {'ceiling':>8} {'serve/ceil':>10} "
        f"{'raw true/s':>10} {'serve/raw':>9} {'wrapper/s':>9} {'cycle s':>8} "
        f"{'model/s':>8} {'serve/model':>11} {'cpu ms/task':>11}"
    )
    results: list[ThroughputRound] = []
    for round_no in range(rounds):
        r = throughput_round(directory, tasks, round_no)
        results.append(r)
        # The model: one cycle starts `ACTIVATIONS` wrappers one after another (each start waits
        # for the wrapper's handshake), and the next cycle is armed `CADENCE_S` after it ends.
        model = ACTIVATIONS / (CADENCE_S + ACTIVATIONS / r.wrapper_rate)
        period = f"{r.period_s:.2f}" if r.period_s is not None else "-"
        print(
            f"  {round_no:<5} {r.elapsed_s:>8.1f} {r.serve_rate:>8.2f} {CEILING:>8.2f} "
            f"{r.serve_rate / CEILING:>10.2f} {r.raw_rate:>10.0f} "
            f"{r.serve_rate / r.raw_rate:>9.4f} {r.wrapper_rate:>9.2f} {period:>8} "
            f"{model:>8.2f} {r.serve_rate / model:>11.2f} {r.cpu_per_task_ms:>11.0f}",
            flush=True,
        )
    sizes = sum((r.batch_sizes for r in results), Counter[int]())
    print(
        f"  median serve {statistics.median(r.serve_rate for r in results):.2f}/s; "
        f"ceiling {ACTIVATIONS} starts per {CADENCE_S:g} s cycle = {CEILING:.2f}/s (a bound by "
        f"design); Runs started per cycle {dict(sorted(sizes.items()))}; "
        f"peak RSS {max(r.hwm_kib for r in results) / 1024:.1f} MiB"
    )
    print(
        "  cycle s: median time between two cycles' first `started` lines (cadence + cycle); "
        f"model/s: {ACTIVATIONS} / ({CADENCE_S:g} s + {ACTIVATIONS} wrapper starts)"
    )


# -- 2. peak RSS -----------------------------------------------------------------------------
#: The imports on serve's path, layer by layer (each in a fresh interpreter): the kernel's two
#: largest dependencies, the kernel, croniter (the local application's cron iteration), the
#: local application; after the baseline, rich, which serve imports as it exits (its table).
IMPORT_LADDER: tuple[tuple[str, str], ...] = (
    ("interpreter only", "import time"),
    ("import icontract", "import time, icontract"),
    ("import icontract, hashlib", "import time, icontract, hashlib"),
    ("import kernel", "import time, kernel"),
    ("import kernel, croniter", "import time, kernel, croniter"),
    ("import runners.local.app", "import time, runners.local.app"),
)
BASELINE = ("baseline: import conformance.cli.serve", "import time, conformance.cli.serve")
AFTER_BASELINE: tuple[tuple[str, str], ...] = (
    (
        "import conformance.cli.serve, rich.console, rich.table",
        "import time, conformance.cli.serve, rich.console, rich.table",
    ),
)


def import_child(code: str) -> Watched:
    watched = watch([sys.executable, "-c", f"{code}; time.sleep(1)"], timeout_s=60)
    if watched.returncode != 0:
        raise SystemExit(f"{code}: exited {watched.returncode}:\n{watched.stderr}")
    return watched


def _rollup_text(rollup: dict[str, int]) -> str:
    if "Rss" not in rollup:
        return ""
    anon = rollup.get("Anonymous", 0)
    return (
        f"(largest smaps_rollup: Rss {rollup['Rss'] / 1024:.1f}, anon {anon / 1024:.1f}, "
        f"file {(rollup['Rss'] - anon) / 1024:.1f} MiB)"
    )


def report_rss(directory: Path, tasks: int) -> None:
    print()
    print(f"2. peak RSS (VmHWM, polled every {POLL_S * 1000:.0f} ms) of qlk serve, {tasks} Runs")
    rows: list[tuple[str, Watched]] = []
    for label, code in IMPORT_LADDER:
        rows.append((label, import_child(code)))
    before = import_child(BASELINE[1])
    serve = run_serve(directory, tasks, "rss")
    after = import_child(BASELINE[1])
    baseline_kib = max(before.hwm_kib, after.hwm_kib)
    rows += [
        (f"{BASELINE[0]} (before)", before),
        (f"{BASELINE[0]} (after)", after),
    ]
    rows += [(label, import_child(code)) for label, code in AFTER_BASELINE]
    rows.append((f"qlk serve, {tasks} no-op Runs ({serve.elapsed_s:.0f} s)", serve))
    for label, w in rows:
        print(f"  {label:<60} {w.hwm_kib / 1024:>6.1f} MiB  {_rollup_text(w.rollup_kib)}")
    diff = serve.hwm_kib - baseline_kib
    goal = "met" if serve.hwm_kib * 1024 <= RSS_GOAL_BYTES else "MISSED"
    print(
        f"  serve {serve.hwm_kib / 1024:.1f} MiB, baseline {baseline_kib / 1024:.1f} MiB "
        f"(the larger reading), serve - baseline {diff / 1024:+.1f} MiB, "
        f"serve/baseline {serve.hwm_kib / baseline_kib:.2f}; "
        f"goal <= 30 MB ({RSS_GOAL_BYTES / MIB:.1f} MiB): {goal}; "
        f"serve rate {tasks / serve.elapsed_s:.2f}/s",
        flush=True,
    )


# -- 3. admission under the write lock -------------------------------------------------------
Result = tuple[int, list[int], float, str]  # worker, call ns, loop seconds, error ("" if none)


@dataclass(frozen=True)
class Job:
    """One submitter's share of a round (picklable: it crosses to a spawned process)."""

    db: str
    index: int
    calls: int
    prefix: str


def admission_worker(job: Job, barrier: Barrier, out: Queue[Result]) -> None:
    """`calls` manual submissions of the no-op task, each timed (spawned child)."""
    try:
        store = EdgeStore(Path(job.db))
        try:
            tasks = EdgeTaskStore(store)

            def one(tag: str) -> int:
                now = wall_clock_ms()
                start = time.perf_counter_ns()
                outcome = submit(
                    store, tasks, NOOP_TASK, now_ms=now, run_id=f"r{tag}", attempt_id=f"a{tag}"
                )
                took = time.perf_counter_ns() - start
                if not isinstance(outcome, Applied):
                    raise RuntimeError(f"submit r{tag}: {outcome}")
                return took

            # Warm-up before the barrier: lazy imports, caches, compiled statements.
            one(f"{job.prefix}{job.index}w")
            barrier.wait(BARRIER_TIMEOUT_S)
            started = time.perf_counter()
            samples = [one(f"{job.prefix}{job.index}-{i:05d}") for i in range(job.calls)]
            out.put((job.index, samples, time.perf_counter() - started, ""))
        finally:
            store.close()
    except BaseException as exc:
        out.put((job.index, [], 0.0, f"{type(exc).__name__}: {exc}"))
        raise


RAW_INSERT = "INSERT INTO bench_scratch (worker, seq, payload) VALUES (?, ?, ?)"


def raw_worker(job: Job, barrier: Barrier, out: Queue[Result]) -> None:
    """`calls` times `BEGIN IMMEDIATE; INSERT; COMMIT` with the store's pragmas (spawned child)."""
    try:
        conn = sqlite3.connect(job.db, timeout=DEFAULT_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.execute(STATEMENTS["pragma_journal_mode_wal"]).fetchall()
            conn.execute(STATEMENTS["pragma_foreign_keys_on"])
            conn.execute(STATEMENTS["pragma_synchronous_full"])
            conn.execute(STATEMENTS["pragma_cache_size"])
            payload = "x" * 200

            def one(seq: int) -> int:
                start = time.perf_counter_ns()
                conn.execute(STATEMENTS["begin_immediate"])
                conn.execute(RAW_INSERT, (job.index, seq, payload))
                conn.execute(STATEMENTS["commit"])
                return time.perf_counter_ns() - start

            one(-1)  # warm-up
            barrier.wait(BARRIER_TIMEOUT_S)
            started = time.perf_counter()
            samples = [one(i) for i in range(job.calls)]
            out.put((job.index, samples, time.perf_counter() - started, ""))
        finally:
            conn.close()
    except BaseException as exc:
        out.put((job.index, [], 0.0, f"{type(exc).__name__}: {exc}"))
        raise


def prepare_admission(db: Path) -> None:
    seed(db, 0, "")


def prepare_raw(db: Path) -> None:
    EdgeStore(db).close()  # the same schema, WAL, the same file pragmas
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(
            "CREATE TABLE bench_scratch (id INTEGER PRIMARY KEY, worker INTEGER NOT NULL, "
            "seq INTEGER NOT NULL, payload TEXT NOT NULL)"
        )
    finally:
        conn.close()


def concurrent(side: str, db: Path, calls: int, prefix: str) -> tuple[list[int], float]:
    """One round of one side: 4 spawned processes on `db`, started together on a barrier.
    Returns every call's ns and the calls per second (all calls / slowest worker's loop)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(SUBMITTERS)
    out: Queue[Result] = ctx.Queue()
    target = admission_worker if side == "admission" else raw_worker
    workers = [
        ctx.Process(target=target, args=(Job(str(db), i, calls, prefix), barrier, out))
        for i in range(SUBMITTERS)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    errors = [error for _, _, _, error in results if error]
    if errors:
        raise SystemExit(f"{side} worker failed: {errors[0]}")
    samples = [ns for _, got, _, _ in results for ns in got]
    return samples, len(samples) / max(loop for _, _, loop, _ in results)


def percentiles_ms(samples: Sequence[int]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49] / 1e6, cuts[94] / 1e6, cuts[98] / 1e6


def report_admission(directory: Path, calls: int, rounds: int) -> None:
    print()
    print(
        f"3. admission under the write lock, {SUBMITTERS} concurrent processes x {calls} calls, "
        f"{rounds} rounds alternating (synchronous FULL, busy timeout "
        f"{DEFAULT_BUSY_TIMEOUT_MS / 1000:g} s)"
    )
    pooled: dict[str, list[int]] = {"admission": [], "raw": []}
    rates: dict[str, list[float]] = {"admission": [], "raw": []}
    round_ratios: list[float] = []
    for round_no in range(rounds):
        order = ["admission", "raw"] if round_no % 2 == 0 else ["raw", "admission"]
        p95: dict[str, float] = {}
        for side in order:
            db = directory / f"{side}{round_no}.db"
            if side == "admission":
                prepare_admission(db)
            else:
                prepare_raw(db)
            samples, rate = concurrent(side, db, calls, f"{round_no}x")
            if side == "admission":
                verify_admitted(db, SUBMITTERS * (calls + 1))
            pooled[side] += samples
            rates[side].append(rate)
            p95[side] = percentiles_ms(samples)[1]
        round_ratios.append(p95["admission"] / p95["raw"])
        print(
            f"  round {round_no}: p95 admission {p95['admission']:.2f} ms, raw "
            f"{p95['raw']:.2f} ms, ratio {round_ratios[-1]:.2f}",
            flush=True,
        )
    print(f"  {'side':<10} {'calls':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'calls/s':>8}")
    for side, samples in pooled.items():
        p50, p95_, p99 = percentiles_ms(samples)
        print(
            f"  {side:<10} {len(samples):>6} {p50:>8.2f} {p95_:>8.2f} {p99:>8.2f} "
            f"{statistics.median(rates[side]):>8.0f}"
        )
    ratio = percentiles_ms(pooled["admission"])[1] / percentiles_ms(pooled["raw"])[1]
    print(
        f"  p95 admission / p95 raw {ratio:.2f} (rounds {min(round_ratios):.2f} to "
        f"{max(round_ratios):.2f}); the records report {RECORDED_P95_MS} ms admission p95 "
        "at 0.5 CPU (for comparison, not a target checked here)"
    )


def verify_admitted(db: Path, expected: int) -> None:
    store = EdgeStore(db)
    try:
        runs = store.project()["runs"]
    finally:
        store.close()
    queued = sum(1 for r in runs if r["status"] == "queued")
    if len(runs) != expected or queued != expected:
        raise SystemExit(f"{db.name}: {len(runs)} Runs ({queued} queued), expected {expected}")


# -- main ------------------------------------------------------------------------------------
WARM_IMPORTS = ("runners.local.app", "conformance.cli.serve", "rich.table", WRAPPER_MODULE)


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}, nproc {os.cpu_count()}"


def bytecode(directory: Path, *, inherit: bool) -> str:
    """Unless `inherit`: every child (serve, the wrappers it starts, the baselines, the
    submitters) loads the project's modules from bytecode cached in a temporary
    `PYTHONPYCACHEPREFIX` (nothing is written into the source tree), as an installed package
    does; the cache is filled once before anything is measured."""
    if inherit:
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            return "as inherited (PYTHONDONTWRITEBYTECODE set: project modules compiled per start)"
        return "as inherited"
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(directory / "pycache")
    subprocess.run(
        [sys.executable, "-c", f"import {', '.join(WARM_IMPORTS)}"],
        cwd=ROOT,
        check=True,
    )
    # and what serve imports only as it runs (a wrapper's start, the table it prints at exit)
    run_serve(directory, 1, "warm")
    return "cached in a temporary PYTHONPYCACHEPREFIX (as installed; --inherit-bytecode: not)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="Runs per throughput round")
    parser.add_argument("--serve-rounds", type=int, default=2, help="throughput rounds")
    parser.add_argument("--rss-tasks", type=int, default=1_000, help="Runs in the RSS run")
    parser.add_argument("--submits", type=int, default=250, help="calls per submitter per round")
    parser.add_argument("--rounds", type=int, default=5, help="admission rounds")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI size (about 75 s): 20 and 100 Runs, 3 rounds of 100 calls",
    )
    parser.add_argument(
        "--inherit-bytecode",
        action="store_true",
        help="keep the environment's bytecode settings instead of a temporary pyc cache",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--skip-admission", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.serve_rounds, args.rss_tasks = 20, 1, 100
        args.submits, args.rounds = 100, 3
    began = time.perf_counter()
    print(
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {machine()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="local-serve-bench-") as tmp:
        directory = Path(tmp)
        print(f"bytecode: {bytecode(directory, inherit=args.inherit_bytecode)}", flush=True)
        if not args.skip_throughput:
            report_throughput(directory, args.tasks, args.serve_rounds)
        if not args.skip_rss:
            report_rss(directory, args.rss_tasks)
        if not args.skip_admission:
            report_admission(directory, args.submits, args.rounds)
    print()
    print(f"done in {time.perf_counter() - began:.0f} s; {machine()}")


if __name__ == "__main__":
    main()
