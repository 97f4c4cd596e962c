"""Edge runner overhead and source scaling, as ratios measured in the same run.

1. Committed transitions per second through the edge runner (`EdgeStore` + `runners.engine`)
   versus raw `sqlite3` replaying the very statements the runner executed (captured during a
   recording pass), with the same pragmas and one `BEGIN IMMEDIATE` ... `COMMIT` per
   transaction. Measured with kernel contracts on and, in a child process, under `python -O`
   (icontract disabled), for `synchronous=FULL` (the default) and `NORMAL`.
2. Source page latency (`lost_retry_candidates`, `lease_expiry_candidates`, limit 16) with
   1,000 versus `--rows` (default 1,000,000) Runs in the file: mostly terminal Runs and
   non-candidate rows, the same few candidates at both sizes.

    python benchmarks/edge_runner.py [--rounds 5] [--runs 200] [--rows 1000000] [--quick]

Machines are noisy and shared: compare the ratios, never the absolute times.
"""

from __future__ import annotations

import argparse
import functools
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# Run as `python benchmarks/edge_runner.py`, this folder is sys.path[0] and `benchmarks/kernel.py`
# would shadow the `kernel` package: drop the folder before importing it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernel import (  # noqa: E402
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Applied,
    Command,
    CompleteWithLease,
    CompletionOutcome,
    Fence,
    GrantLease,
    PolicyDefinition,
    RenewLease,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
)
from runners.edge.named_sql import STATEMENTS  # noqa: E402
from runners.edge.store import EdgeStore  # noqa: E402
from runners.engine import execute  # noqa: E402

Statement = tuple[str, Any]
Transaction = list[Statement]
TRANSITIONS_PER_RUN = 6
DIGEST = "ab" * 32


# -- 1. runner vs raw sqlite3 ---------------------------------------------------------------
def command_mix(runs: int, prefix: str) -> Iterator[tuple[int, Command]]:
    """Per Run: admit, grant, acknowledge starting, renew, acknowledge running, complete."""
    worker = WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, 10**13, ("shell",))
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
    now = 1_000_000
    for i in range(runs):
        run_id, attempt_id = f"{prefix}r{i}", f"{prefix}a{i}"
        token = Secret.of(f"token_{i}".ljust(43, "x"), "lease_token")

        def fence(version: int, token: Secret = token) -> Fence:
            return Fence("w1", "s1", 1, 1, token, version)

        steps: list[Command] = [
            AdmitRun(run_id, attempt_id, "p", "t", 1, "shell", provider_policy=policy),
            GrantLease(run_id, attempt_id, worker, token, 30_000),
            AcknowledgeStarting(run_id, attempt_id, fence(1), worker),
            RenewLease(run_id, attempt_id, fence(2), worker, 30_000),
            AcknowledgeRunning(run_id, attempt_id, fence(3), worker, "pid:1", now + 45),
            CompleteWithLease(
                run_id, attempt_id, fence(4), worker, 1, CompletionOutcome.SUCCEEDED, 0
            ),
        ]
        for step, command in enumerate(steps, start=1):
            yield now + 10 * step, command
        now += 10 * (len(steps) + 1)


class RecordingConnection(sqlite3.Connection):
    """A connection that logs every `execute` (SQL text and parameters) before running it."""

    log: list[Statement]

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if not hasattr(self, "log"):
            self.log = []
        self.log.append((sql, parameters))
        return super().execute(sql, parameters)


def drive(store: EdgeStore, commands: Sequence[tuple[int, Command]]) -> None:
    for observed_at_ms, command in commands:
        outcome = execute(store, command, observed_at_ms)
        if not isinstance(outcome, Applied):
            raise SystemExit(f"{command.name} was not applied: {outcome}")


def record(directory: Path, commands: Sequence[tuple[int, Command]]) -> list[Transaction]:
    """One runner pass on a connection that logs; the statements split into transactions."""
    connect = functools.partial(sqlite3.connect, factory=RecordingConnection)
    with mock.patch.object(sqlite3, "connect", connect):
        store = EdgeStore(directory / "recorded.db")
    try:
        conn = store.authority._open()  # the connection it logged
        if not isinstance(conn, RecordingConnection):
            raise SystemExit("the recording connection was not installed")
        conn.log = []
        drive(store, commands)
        log = conn.log
    finally:
        store.close()
    transactions: list[Transaction] = []
    current: Transaction | None = None
    for sql, params in log:
        head = sql.strip().upper()
        if head.startswith("BEGIN"):
            current = []
        elif head.startswith("COMMIT"):
            if current is None:
                raise SystemExit("COMMIT outside a transaction in the recording")
            transactions.append(current)
            current = None
        elif current is not None:
            current.append((sql, params))
    if len(transactions) != len(commands):
        raise SystemExit(f"recorded {len(transactions)} transactions for {len(commands)}")
    return transactions


def fresh_store(path: Path, synchronous: str) -> EdgeStore:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return EdgeStore(path, synchronous=synchronous)


def time_runner(path: Path, synchronous: str, commands: Sequence[tuple[int, Command]]) -> float:
    store = fresh_store(path, synchronous)
    try:
        start = time.perf_counter()
        drive(store, commands)
        return time.perf_counter() - start
    finally:
        store.close()


def time_raw(path: Path, synchronous: str, transactions: Sequence[Transaction]) -> float:
    """The same statements on a fresh file (schema and pragmas set by the store, which is then
    closed), on a plain connection with the runner's pragmas, one BEGIN IMMEDIATE per
    transaction."""
    fresh_store(path, synchronous).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(STATEMENTS["pragma_journal_mode_wal"]).fetchall()
        conn.execute(STATEMENTS["pragma_foreign_keys_on"])
        conn.execute(STATEMENTS[f"pragma_synchronous_{synchronous.lower()}"])
        conn.execute(STATEMENTS["pragma_cache_size"])
        start = time.perf_counter()
        for statements in transactions:
            conn.execute(STATEMENTS["begin_immediate"])
            for sql, params in statements:
                conn.execute(sql, params).fetchall()
            conn.execute(STATEMENTS["commit"])
        return time.perf_counter() - start
    finally:
        conn.close()


def throughput(rounds: int, runs: int, synchronous: str) -> dict[str, Any]:
    """Transitions per second, runner and raw, medians of alternating rounds."""
    commands = list(command_mix(runs, "x"))
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        directory = Path(tmp)
        transactions = record(directory, commands)
        statements = sum(len(t) for t in transactions)
        time_runner(directory / "warm.db", synchronous, commands[: 6 * 10])  # imports, caches
        runner: list[float] = []
        raw: list[float] = []
        for round_no in range(rounds):
            first_runner = round_no % 2 == 0
            if first_runner:
                runner.append(time_runner(directory / "runner.db", synchronous, commands))
            raw.append(time_raw(directory / "raw.db", synchronous, transactions))
            if not first_runner:
                runner.append(time_runner(directory / "runner.db", synchronous, commands))
    runner_tps = len(commands) / statistics.median(runner)
    raw_tps = len(commands) / statistics.median(raw)
    return {
        "contracts": __debug__,
        "synchronous": synchronous,
        "transitions": len(commands),
        "statements_per_transaction": statements / len(commands),
        "runner_tps": runner_tps,
        "raw_tps": raw_tps,
        "ratio": runner_tps / raw_tps,
    }


def throughput_child(optimize: bool, rounds: int, runs: int, synchronous: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        *(["-O"] if optimize else []),
        __file__,
        "--worker",
        "--rounds",
        str(rounds),
        "--runs",
        str(runs),
        "--synchronous",
        synchronous,
    ]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["contracts"] is optimize:
        raise SystemExit("the child did not run with the requested contract mode")
    return result


# -- 2. source latency vs table size --------------------------------------------------------
CANDIDATES = 40  # per kind, identical at every size
NOW = 5_000_000_000


def _runs_row(run_id: str, status: str, at: int) -> tuple[Any, ...]:
    finished = at + 50 if status in {"succeeded", "failed", "cancelled", "timed_out"} else None
    return (
        run_id, "p", "t", 1, "shell", "ordinary", "runtime", status, 5, 6,
        at, at + 50, at + 1, at + 2, finished, None, None, None, None,
    )  # fmt: skip


def _attempt_row(attempt_id: str, run_id: str, status: str, at: int) -> tuple[Any, ...]:
    finished = None if status in {"claimed", "starting", "running"} else at + 50
    return (
        attempt_id, run_id, 1, status, "shell", at, None, "w1", "s1", 1, None, 1, 4,
        "pid:1", at + 2, None, 0, finished, 0, None, None,
    )  # fmt: skip


def _lease_row(attempt_id: str, run_id: str, status: str, expires: int) -> tuple[Any, ...]:
    at = expires - 30_000
    done = at + 50 if status != "leased" else None
    return (
        attempt_id, run_id, 1, status, 4, "w1", "s1", 1, DIGEST, at, at, expires, at,
        done if status == "released" else None,
        "lease_expired" if status == "released" else None,
        done if status == "completed" else None,
    )  # fmt: skip


def _bulk(rows: int) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]]:
    """Non-candidate rows: terminal Runs with a finished Attempt and a closed lease."""
    statuses = ("succeeded", "succeeded", "succeeded", "failed", "cancelled", "timed_out")
    for i in range(rows):
        run_id, attempt_id, at = f"b{i:08d}", f"ba{i:08d}", 1_000_000 + i * 7
        status = statuses[i % len(statuses)]
        attempt_status = "succeeded" if status == "succeeded" else status
        lease_status = "completed" if status in {"succeeded", "failed"} else "released"
        yield (
            _runs_row(run_id, status, at),
            _attempt_row(attempt_id, run_id, attempt_status, at),
            _lease_row(attempt_id, run_id, lease_status, at + 30_000),
        )


def populate(path: Path, rows: int) -> float:
    """Fill a fresh edge file directly: `rows` Runs in all (bulk plus the fixed candidates)."""
    fresh_store(path, "NORMAL").close()  # schema, WAL
    conn = sqlite3.connect(path, isolation_level=None)
    start = time.perf_counter()
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -200000")
        runs_sql = "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        attempts_sql = "INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        leases_sql = "INSERT INTO run_dispatch_leases VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        policies_sql = "INSERT INTO run_retry_policies VALUES (?,?,?,?,?,?,?,?,?,?)"
        bulk = _bulk(max(0, rows - 3 * CANDIDATES))
        chunk = 100_000
        while True:
            batch = [row for _, row in zip(range(chunk), bulk, strict=False)]
            if not batch:
                break
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(runs_sql, (r for r, _, _ in batch))
            conn.executemany(attempts_sql, (a for _, a, _ in batch))
            conn.executemany(leases_sql, (lease for _, _, lease in batch))
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        for i in range(CANDIDATES):
            at = NOW - 100_000 + i
            # A `lost` Run whose latest Attempt is lost (lost retry source, first branch).
            rid, aid = f"cl{i:04d}", f"cla{i:04d}"
            conn.execute(runs_sql, _runs_row(rid, "lost", at))
            conn.execute(attempts_sql, _attempt_row(aid, rid, "lost", at))
            conn.execute(leases_sql, _lease_row(aid, rid, "released", at + 30_000))
            # A due `retry_wait` Run (lost retry source, second branch).
            rid, aid = f"cw{i:04d}", f"cwa{i:04d}"
            conn.execute(runs_sql, _runs_row(rid, "retry_wait", at))
            conn.execute(attempts_sql, _attempt_row(aid, rid, "lost", at))
            conn.execute(leases_sql, _lease_row(aid, rid, "released", at + 30_000))
            conn.execute(
                policies_sql, (rid, 3, 1, "idempotent", 1_000, 60_000, 2, at, at, NOW - 10)
            )
            # A running Run whose lease expired (lease expiry source).
            rid, aid = f"ce{i:04d}", f"cea{i:04d}"
            conn.execute(runs_sql, _runs_row(rid, "running", at))
            conn.execute(attempts_sql, _attempt_row(aid, rid, "running", at))
            conn.execute(leases_sql, _lease_row(aid, rid, "leased", NOW - 1_000 + i))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return time.perf_counter() - start


def time_calls(call: Callable[[], object], calls: int) -> list[float]:
    out: list[float] = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def source_latency(rounds: int, big_rows: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        directory = Path(tmp)
        sizes = {"small": 1_000, "big": big_rows}
        populate_s = {name: populate(directory / f"{name}.db", n) for name, n in sizes.items()}
        stores = {name: EdgeStore(directory / f"{name}.db") for name in sizes}
        try:
            sources: dict[str, Callable[[EdgeStore], object]] = {
                "lost_retry_candidates": lambda s: s.lost_retry_candidates(NOW, 16),
                "lease_expiry_candidates": lambda s: s.lease_expiry_candidates(NOW, 16),
            }
            for source, call in sources.items():  # same page at both sizes, warm caches
                pages = [call(store) for store in stores.values()]
                if pages[0] != pages[1]:
                    raise SystemExit(f"{source}: the pages differ between the two sizes")
                for store in stores.values():
                    time_calls(functools.partial(call, store), calls // 10)
            samples: dict[tuple[str, str], list[float]] = {}
            for round_no in range(rounds):
                order = list(stores.items())
                if round_no % 2:
                    order.reverse()
                for source, call in sources.items():
                    for name, store in order:
                        got = time_calls(functools.partial(call, store), calls)
                        samples.setdefault((source, name), []).extend(got)
        finally:
            for store in stores.values():
                store.close()
    results: dict[str, Any] = {"rows": sizes, "populate_s": populate_s, "sources": {}}
    for source in ("lost_retry_candidates", "lease_expiry_candidates"):
        small = statistics.median(samples[(source, "small")])
        big = statistics.median(samples[(source, "big")])
        results["sources"][source] = {"small_us": small * 1e6, "big_us": big * 1e6}
    return results


# -- main -----------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=200, help="Runs per throughput round")
    parser.add_argument("--rows", type=int, default=1_000_000, help="Runs in the big file")
    parser.add_argument("--calls", type=int, default=2_000, help="source calls per round")
    parser.add_argument("--quick", action="store_true", help="CI size: 100k rows, fewer calls")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-sources", action="store_true")
    parser.add_argument("--synchronous", default="FULL", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(throughput(args.rounds, args.runs, args.synchronous)))
        return
    if args.quick:
        args.rows, args.calls, args.runs = 100_000, 500, 100
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}", flush=True)
    if not args.skip_throughput:
        print()
        print(
            f"1. committed transitions/s, runner vs raw sqlite3 "
            f"({args.runs} Runs x {TRANSITIONS_PER_RUN} transitions, median of "
            f"{args.rounds} rounds)"
        )
        print(
            f"  {'synchronous':<11} {'contracts':<9} {'stmts/tx':>8} {'runner/s':>10} "
            f"{'raw/s':>10} {'runner/raw':>10}  target >= 0.70"
        )
        for synchronous in ("FULL", "NORMAL"):
            for optimize in (False, True):
                r = throughput_child(optimize, args.rounds, args.runs, synchronous)
                verdict = "met" if r["ratio"] >= 0.7 else "MISSED"
                print(
                    f"  {synchronous:<11} {'on' if r['contracts'] else 'off (-O)':<9} "
                    f"{r['statements_per_transaction']:>8.1f} {r['runner_tps']:>10,.0f} "
                    f"{r['raw_tps']:>10,.0f} {r['ratio']:>10.2f}  {verdict}",
                    flush=True,
                )
    if not args.skip_sources:
        print()
        res = source_latency(args.rounds, args.rows, args.calls)
        small_n, big_n = res["rows"]["small"], res["rows"]["big"]
        print(
            f"2. source page latency (limit 16), {small_n:,} vs {big_n:,} Runs "
            f"(populated in {res['populate_s']['small']:.1f} s / "
            f"{res['populate_s']['big']:.1f} s; median of {args.rounds} x {args.calls} calls)"
        )
        print(f"  {'source':<24} {'small us':>9} {'big us':>9} {'big/small':>9}  target <= 1.5")
        for source, v in res["sources"].items():
            ratio = v["big_us"] / v["small_us"]
            verdict = "met" if ratio <= 1.5 else "MISSED"
            print(
                f"  {source:<24} {v['small_us']:>9.1f} {v['big_us']:>9.1f} {ratio:>9.2f}  {verdict}"
            )


if __name__ == "__main__":
    main()
