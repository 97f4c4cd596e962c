"""Cluster runner overhead: committed transitions per second, runner vs raw psycopg, as ratios
measured in the same run.

The runner side is `runners.engine.execute` over a `ClusterStore` (load -> kernel -> effects ->
commit) on PostgreSQL, with the edge benchmark's command mix (`benchmarks/edge_runner.py`: per
Run admit, grant, acknowledge starting, renew, acknowledge running, complete). The raw side is
plain psycopg replaying the very statements the runner sent: a recording pass wraps psycopg's
`Cursor.execute` / `executemany` and `Connection.transaction` while the runner drives the
workload, so whatever the store issues (SQL text, parameters, keyword arguments, transaction
boundaries) is captured and replayed as it is, with no kernel and no row <-> entity mapping.

Each side runs with 1 and with `--connections` (default 4) connections; with several, each
worker (a process by default, `--threads` for threads of one process) has its own connection
and its own disjoint Runs, all in one schema, and the figure is the aggregate committed
transitions per second (all transitions / first start to last end). Rounds alternate which
side goes first; every round uses two fresh schemas (one per side), dropped right after, and
checks that the raw replay committed as many transactions, and as many rows per table, as the
runner. Kernel contracts are on, and off under `python -O`, in child processes as in the edge
benchmark. Besides the rates, each side's client CPU per transition is reported (the server's
work is the same statements on both sides).

    python benchmarks/cluster_runner.py [--rounds 5] [--runs 160] [--connections 4] [--quick]
    python benchmarks/cluster_runner.py --synchronous-commit off   # commit without the flush
    python benchmarks/cluster_runner.py --profile     # cProfile of the runner side, 1 connection

The DSN comes from `QL3_PG_DSN` (default postgresql://postgres@127.0.0.1:5432/test).
Machines are noisy and shared: compare the ratios, never the absolute times.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import io
import json
import multiprocessing
import os
import pstats
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# Run as `python benchmarks/cluster_runner.py`, this folder is sys.path[0] and
# `benchmarks/kernel.py` would shadow the `kernel` package: drop the folder before importing it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from benchmarks.edge_runner import TRANSITIONS_PER_RUN, command_mix  # noqa: E402
from kernel import Applied, Command  # noqa: E402
from runners.cluster.named_sql import PROJECTION, STATEMENTS  # noqa: E402
from runners.cluster.store import ClusterStore  # noqa: E402
from runners.engine import execute  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TARGET = 0.7
BARRIER_TIMEOUT_S = 120.0

#: One captured call: cursor method ("execute" or "executemany"), query, params, keyword args.
Statement = tuple[str, Any, Any, dict[str, Any]]
Transaction = list[Statement]
Commands = list[tuple[int, Command]]
#: (start, end, committed transitions, CPU seconds) of one worker: start and end on
#: `time.perf_counter()` (CLOCK_MONOTONIC, the same clock in every process of the machine), the
#: CPU time of the worker's thread (`time.thread_time()`, this client's side only).
Timing = tuple[float, float, int, float]
_BEGIN, _COMMIT, _ROLLBACK = "begin", "commit", "rollback"


class Waiter(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...


def dsn(synchronous_commit: str | None = None) -> str:
    """`QL3_PG_DSN`; with `synchronous_commit`, the same DSN with that server setting for every
    connection of both sides (libpq `options`, so the store is not touched)."""
    target = os.environ.get("QL3_PG_DSN") or DEFAULT_DSN
    if synchronous_commit is None:
        return target
    options = conninfo_to_dict(target).get("options") or ""
    setting = f"-c synchronous_commit={synchronous_commit}"
    return make_conninfo(target, options=f"{options} {setting}".strip())


# -- schemas --------------------------------------------------------------------------------
def create_schema(target: str) -> str:
    """A fresh, migrated schema of the benchmark's own (the store migrates it, then closes)."""
    name = f"ql3_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(sql.SQL(STATEMENTS["create_schema"]).format(schema=sql.Identifier(name)))
    try:
        ClusterStore(target, name).close()
    except BaseException:
        drop_schema(target, name)
        raise
    return name


def drop_schema(target: str, name: str) -> None:
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(sql.SQL(STATEMENTS["drop_schema"]).format(schema=sql.Identifier(name)))


@contextmanager
def fresh_schema(target: str) -> Iterator[str]:
    name = create_schema(target)
    try:
        yield name
    finally:
        drop_schema(target, name)


def row_counts(target: str, schema: str) -> dict[str, int]:
    """Rows per projected table: what a side committed, compared between the two sides (row
    counts, not values, so a value the store reads from the server clock cannot differ)."""
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(STATEMENTS["set_search_path"], {"schema": schema})
        return {
            name: len(conn.execute(statement).fetchall()) for name, statement in PROJECTION.items()
        }


# -- the two sides --------------------------------------------------------------------------
def drive(store: ClusterStore, commands: Sequence[tuple[int, Command]]) -> int:
    for observed_at_ms, command in commands:
        outcome = execute(store, command, observed_at_ms)
        if not isinstance(outcome, Applied):
            raise SystemExit(f"{command.name} was not applied: {outcome}")
    return len(commands)


def replay(conn: psycopg.Connection[Any], transactions: Sequence[Transaction]) -> int:
    """The recorded statements, one psycopg transaction each, every result set fetched (as
    tuples: `rownumber` is None when a statement returned no rows to fetch, and is cheaper to
    read than `description`, which builds column objects)."""
    cur = conn.cursor()
    for statements in transactions:
        with conn.transaction():
            for method, query, params, kwargs in statements:
                getattr(cur, method)(query, params, **kwargs)
                if cur.rownumber is not None:
                    cur.fetchall()
    return len(transactions)


def record(target: str, mixes: Sequence[Commands]) -> list[list[Transaction]]:
    """One runner pass per mix (sequentially, in a scratch schema) while psycopg's cursor
    execution and transaction blocks are wrapped to log; the log split into transactions."""
    log: list[Statement | str] = []
    original_execute = psycopg.Cursor.execute
    original_executemany = psycopg.Cursor.executemany
    original_transaction = psycopg.Connection.transaction
    depth = 0

    def logged_execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        log.append(("execute", query, params, kwargs))
        return original_execute(self, query, params, **kwargs)

    def logged_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        params_seq = list(params_seq)
        log.append(("executemany", query, params_seq, kwargs))
        return original_executemany(self, query, params_seq, **kwargs)

    @contextmanager
    def logged_transaction(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        nonlocal depth
        if depth:
            raise SystemExit("the store nests transactions: the raw replay does not model that")
        depth += 1
        log.append(_BEGIN)
        try:
            with original_transaction(self, *args, **kwargs) as tx:
                yield tx
        except BaseException:
            log.append(_ROLLBACK)
            raise
        finally:
            depth -= 1
        log.append(_COMMIT)

    out: list[list[Transaction]] = []
    with fresh_schema(target) as schema:
        for commands in mixes:
            store = ClusterStore(target, schema)
            try:
                log.clear()
                with (
                    mock.patch.object(psycopg.Cursor, "execute", logged_execute),
                    mock.patch.object(psycopg.Cursor, "executemany", logged_executemany),
                    mock.patch.object(psycopg.Connection, "transaction", logged_transaction),
                ):
                    drive(store, commands)
            finally:
                store.close()
            out.append(split(log, len(commands)))
    return out


def split(log: Sequence[Statement | str], expected: int) -> list[Transaction]:
    transactions: list[Transaction] = []
    current: Transaction | None = None
    for entry in log:
        if entry == _BEGIN:
            current = []
        elif entry == _COMMIT:
            if current is None:
                raise SystemExit("a commit outside a transaction in the recording")
            transactions.append(current)
            current = None
        elif entry == _ROLLBACK:
            raise SystemExit("a transaction rolled back during the recording")
        elif isinstance(entry, tuple):
            if current is None:
                raise SystemExit(f"a statement outside a transaction: {entry[1]!r}")
            current.append(entry)
    if len(transactions) != expected:
        raise SystemExit(f"recorded {len(transactions)} transactions for {expected} commands")
    return transactions


def job(side: str, target: str, schema: str, payload: Any, barrier: Waiter) -> Timing:
    """One worker: open its connection (the store's, or a plain one), wait for the others,
    run its share, report when it started and ended and how many transactions it committed."""
    if side == "runner":
        store = ClusterStore(target, schema)
        try:
            barrier.wait(BARRIER_TIMEOUT_S)
            start, cpu = time.perf_counter(), time.thread_time()
            committed = drive(store, payload)
            return start, time.perf_counter(), committed, time.thread_time() - cpu
        finally:
            store.close()
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(STATEMENTS["set_search_path"], {"schema": schema})
        barrier.wait(BARRIER_TIMEOUT_S)
        start, cpu = time.perf_counter(), time.thread_time()
        committed = replay(conn, payload)
        return start, time.perf_counter(), committed, time.thread_time() - cpu


_process_barrier: Waiter | None = None


def _init_process(barrier: Waiter) -> None:
    global _process_barrier  # noqa: PLW0603 - the barrier a pool process is started with
    _process_barrier = barrier


def _process_job(side: str, target: str, schema: str, payload: Any) -> Timing:
    if _process_barrier is None:
        raise RuntimeError("the pool process has no barrier")
    return job(side, target, schema, payload, _process_barrier)


class Workers:
    """`n` workers that start each batch together: processes (started once, reused for every
    round) or threads; with one connection the job runs in this process."""

    def __init__(self, n: int, threads: bool) -> None:
        self.n = n
        self._threads = threads
        self._pool: concurrent.futures.Executor | None = None
        self._barrier: Waiter = threading.Barrier(n)
        if n > 1 and threads:
            self._pool = concurrent.futures.ThreadPoolExecutor(n)
        elif n > 1:
            # fork where there is one: no connection is open here at this point, and the
            # children start without importing everything again
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            barrier = context.Barrier(n)
            self._pool = concurrent.futures.ProcessPoolExecutor(
                n, mp_context=context, initializer=_init_process, initargs=(barrier,)
            )

    def run(self, side: str, target: str, schema: str, payloads: Sequence[Any]) -> Timing:
        """All workers' share at once; (first start, last end, transactions committed, CPU
        seconds of all workers)."""
        if len(payloads) != self.n:
            raise ValueError("one payload per worker")
        if self._pool is None:
            timings = [job(side, target, schema, payloads[0], self._barrier)]
        elif self._threads:
            futures = [
                self._pool.submit(job, side, target, schema, p, self._barrier) for p in payloads
            ]
            timings = [f.result() for f in futures]
        else:
            futures = [self._pool.submit(_process_job, side, target, schema, p) for p in payloads]
            timings = [f.result() for f in futures]
        return (
            min(t[0] for t in timings),
            max(t[1] for t in timings),
            sum(t[2] for t in timings),
            sum(t[3] for t in timings),
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def throughput(
    rounds: int, runs: int, connections: int, threads: bool, synchronous_commit: str | None
) -> dict[str, Any]:
    """Aggregate transitions per second, runner and raw, medians of alternating rounds, each
    round on fresh schemas; `runs` Runs per round split evenly over the connections. The raw
    side must commit as many transactions, and as many rows per table, as the runner."""
    target = dsn(synchronous_commit)
    per_connection = max(1, runs // connections)
    mixes = [list(command_mix(per_connection, f"c{i}_")) for i in range(connections)]
    transitions = sum(len(m) for m in mixes)
    recorded = record(target, mixes)
    statements = sum(len(tx) for txs in recorded for tx in txs)
    workers = Workers(connections, threads)
    runner: list[float] = []
    raw: list[float] = []
    runner_cpu: list[float] = []
    raw_cpu: list[float] = []
    rows: dict[str, int] = {}
    try:
        warm = [m[: TRANSITIONS_PER_RUN * 5] for m in mixes]
        with fresh_schema(target) as schema:  # imports, caches, the pool's processes
            workers.run("runner", target, schema, warm)
        for round_no in range(rounds):
            sides = ["runner", "raw"] if round_no % 2 == 0 else ["raw", "runner"]
            with fresh_schema(target) as runner_schema, fresh_schema(target) as raw_schema:
                for side in sides:
                    schema = runner_schema if side == "runner" else raw_schema
                    payloads: Sequence[Any] = mixes if side == "runner" else recorded
                    start, end, committed, cpu = workers.run(side, target, schema, payloads)
                    if committed != transitions:
                        raise SystemExit(f"{side}: {committed} of {transitions} committed")
                    (runner if side == "runner" else raw).append(end - start)
                    (runner_cpu if side == "runner" else raw_cpu).append(cpu / transitions)
                rows = row_counts(target, runner_schema)
                raw_rows = row_counts(target, raw_schema)
                if rows != raw_rows:
                    raise SystemExit(f"the sides committed different rows: {rows} vs {raw_rows}")
    finally:
        workers.close()
    runner_tps = transitions / statistics.median(runner)
    raw_tps = transitions / statistics.median(raw)
    # The ratio of each round's two sides, measured next to each other: the spread shows the noise.
    per_round = sorted(raw_s / runner_s for runner_s, raw_s in zip(runner, raw, strict=True))
    return {
        "contracts": __debug__,
        "connections": connections,
        "parallel": "threads" if threads else "processes",
        "synchronous_commit": synchronous_commit or "server default",
        "transitions": transitions,
        "statements_per_transaction": statements / transitions,
        "runner_s": runner,
        "raw_s": raw,
        "runner_tps": runner_tps,
        "raw_tps": raw_tps,
        "ratio": runner_tps / raw_tps,
        "round_ratios": per_round,
        "runner_cpu_ms": 1000 * statistics.median(runner_cpu),
        "raw_cpu_ms": 1000 * statistics.median(raw_cpu),
        "rows": rows,
    }


def throughput_child(
    optimize: bool,
    *,
    rounds: int,
    runs: int,
    connections: int,
    threads: bool,
    synchronous_commit: str | None,
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        *(["-O"] if optimize else []),
        __file__,
        "--worker",
        "--rounds",
        str(rounds),
        "--runs",
        str(runs),
        "--connections",
        str(connections),
        *(["--threads"] if threads else []),
        *(["--synchronous-commit", synchronous_commit] if synchronous_commit else []),
    ]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the benchmark child failed:\n{done.stderr}{done.stdout}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["contracts"] is optimize:
        raise SystemExit("the child did not run with the requested contract mode")
    return result


# -- profile --------------------------------------------------------------------------------
#: (file suffix, function): the cumulative time of these, read from the profile.
Frame = tuple[str, str]
PSYCOPG_SQL: tuple[Frame, ...] = (
    ("psycopg/cursor.py", "execute"),
    ("psycopg/cursor.py", "fetchall"),
    ("psycopg/cursor.py", "fetchone"),
)
PSYCOPG_TRANSACTION: tuple[Frame, ...] = (
    ("psycopg/transaction.py", "__enter__"),
    ("psycopg/transaction.py", "__exit__"),
)
KERNEL: tuple[Frame, ...] = (("kernel/transitions/__init__.py", "apply"),)
MAPPING: tuple[Frame, ...] = (
    ("runners/cluster/store.py", "_rows"),
    ("runners/cluster/store.py", "_entity"),
    ("runners/cluster/store.py", "_pg_params"),
    ("runners/rows.py", "effect_statement"),
)
ENGINE: Frame = ("runners/engine.py", "execute")


def profile(runs: int, synchronous_commit: str | None) -> None:
    """cProfile of the runner side, one connection, on a fresh schema: shares of
    `engine.execute`'s cumulative time (profiling inflates Python: read shares, not seconds)."""
    target = dsn(synchronous_commit)
    commands = list(command_mix(runs, "p_"))
    with fresh_schema(target) as schema:
        store = ClusterStore(target, schema)
        try:
            drive(store, list(command_mix(5, "warm_")))
            profiler = cProfile.Profile()
            profiler.enable()
            drive(store, commands)
            profiler.disable()
        finally:
            store.close()
    table: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def cumulative(*frames: Frame) -> float:
        return float(
            sum(
                entry[3]
                for (filename, _, function), entry in table.items()
                if any(filename.endswith(f) and function == name for f, name in frames)
            )
        )

    total = cumulative(ENGINE)
    sql_s = cumulative(*PSYCOPG_SQL)
    transaction_s = cumulative(*PSYCOPG_TRANSACTION)
    kernel_s = cumulative(*KERNEL)
    # `_rows` calls `fetchall`, already counted as SQL.
    mapping_s = cumulative(*MAPPING) - cumulative(("psycopg/cursor.py", "fetchall"))
    contracts = "on" if __debug__ else "off (-O)"
    print(f"cProfile of {len(commands)} runner transitions, 1 connection, contracts {contracts}")
    print(f"  engine.execute, cumulative: {total:.3f} s (profiled; read the shares)")
    for label, seconds in (
        ("psycopg execute + fetch (what raw also pays)", sql_s),
        ("psycopg transaction BEGIN / COMMIT (raw too)", transaction_s),
        ("kernel apply (transition and its contracts)", kernel_s),
        ("rows <-> entities (_rows, _entity, params)", mapping_s),
        (
            "the rest (engine, context managers, loads)",
            total - sql_s - transaction_s - kernel_s - mapping_s,
        ),
    ):
        print(f"  {label:<46} {100 * seconds / total:5.1f} %")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    print(out.getvalue())


# -- main -----------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--runs", type=int, default=160, help="Runs per round, split over the connections"
    )
    parser.add_argument("--connections", type=int, default=4, help="the multi-connection case")
    parser.add_argument("--threads", action="store_true", help="workers as threads, not processes")
    parser.add_argument(
        "--synchronous-commit",
        choices=("on", "off", "local", "remote_write", "remote_apply"),
        help="set for every connection of both sides (default: the server's setting)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke size: 32 Runs, 3 rounds")
    parser.add_argument("--skip-optimized", action="store_true", help="contracts on only")
    parser.add_argument("--profile", action="store_true", help="cProfile the runner side")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = throughput(
            args.rounds, args.runs, args.connections, args.threads, args.synchronous_commit
        )
        print(json.dumps(result))
        return
    if args.profile:
        profile(args.runs, args.synchronous_commit)
        return
    if args.quick:
        args.runs, args.rounds, args.skip_optimized = 32, 3, True
    with psycopg.connect(dsn(args.synchronous_commit), autocommit=True) as conn:
        server = conn.info.parameter_status("server_version")
        commit_mode = conn.execute("SHOW synchronous_commit").fetchone()
    print(
        f"PostgreSQL {server} (synchronous_commit = {commit_mode[0] if commit_mode else '?'}), "
        f"psycopg {psycopg.__version__}, Python {sys.version.split()[0]}",
        flush=True,
    )
    print()
    per_connection = max(1, args.runs // args.connections)
    print(
        f"committed transitions/s, cluster runner vs raw psycopg (median of {args.rounds} "
        f"rounds; a round: {args.runs} Runs x {TRANSITIONS_PER_RUN} transitions on 1 "
        f"connection, {per_connection} Runs each on {args.connections}, one "
        f"{'thread' if args.threads else 'process'} per connection)"
    )
    print(
        f"  {'mode':<8} {'contracts':<9} {'stmts/tx':>8} {'runner/s':>10} "
        f"{'raw/s':>10} {'runner/raw':>10} {'rounds':>11} {'cpu ms/tx':>11}  "
        f"target >= {TARGET:.2f}"
    )
    results: list[dict[str, Any]] = []
    for connections in dict.fromkeys((1, args.connections)):
        for optimize in (False,) if args.skip_optimized else (False, True):
            r = throughput_child(
                optimize,
                rounds=args.rounds,
                runs=args.runs,
                connections=connections,
                threads=args.threads,
                synchronous_commit=args.synchronous_commit,
            )
            results.append(r)
            verdict = "met" if r["ratio"] >= TARGET else "MISSED"
            mode = f"{connections} conn"
            print(
                f"  {mode:<8} {'on' if r['contracts'] else 'off (-O)':<9} "
                f"{r['statements_per_transaction']:>8.1f} {r['runner_tps']:>10,.0f} "
                f"{r['raw_tps']:>10,.0f} {r['ratio']:>10.2f} "
                f"{r['round_ratios'][0]:>5.2f}-{r['round_ratios'][-1]:<5.2f} "
                f"{r['runner_cpu_ms']:>5.2f}/{r['raw_cpu_ms']:<5.2f}  {verdict}",
                flush=True,
            )
    print(
        "  runner/raw: ratio of the median rates; rounds: lowest-highest ratio of one round's "
        "two sides;\n  cpu ms/tx: this client's CPU per committed transition, runner/raw "
        "(median; the server's CPU not included).\n  Checked every round: the raw replay "
        "committed as many transactions as the runner, and the same number of rows per table."
    )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
