"""Replica races on one PostgreSQL database (issue 5 item 3): several OS processes, each with its
own `ClusterStore` connection and `ClusterRuntime` on the same schema, run recovery, lost retry,
dispatch, the Worker's fenced calls and lease expiry at once over 1,000 Runs, with random lease
expiries and Worker restarts (`race_workload.py` describes one process). Afterwards the backdoor
projection and what every process sent and got back are checked:

- every kernel invariant (I-1..I-4, I-6..I-9, V-rules, I-7 with the Events) holds for every Run;
- Attempt numbers are 1..N per Run, N <= max_attempts, no Attempt holds two `leased` leases;
- RETRY-09: an Attempt N+1 exists only when Attempt N is `lost`, and the lost-retry pages'
  `requeued` total equals the number of Attempts beyond the first (one requeue, one Attempt);
- no stale fence completed anything: each completed Attempt has exactly one Applied completion,
  sent with the fence (session, lease generation) that the Attempt and its `completed` lease
  row record, and no replay of a restarted session's (or a refused) fence was ever Applied;
- LEASE-08: completion and expiry never both apply to one lease generation, and every Applied
  outcome of any process is exactly one durable fact (the accounting of leases, versions and
  Events below), so no write was lost or doubled by a race.

RETRY-18 has a focused race of its own: four processes activate the same local Attempts.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    Applied,
    Fence,
    GrantLease,
    NotRunningEvidence,
    RequestCancel,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
    check_invariants,
)
from kernel.specs.states import CancelReason
from runners.cluster.clock import InjectedClock
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore, Projection
from tests.runners.cluster.race_workload import (
    CREATE_NOT_RUNNING,
    EXECUTOR,
    FAR,
    LOCAL_EXECUTOR,
    MAX_ATTEMPTS,
    TERMINAL,
    ActivationConfig,
    RaceConfig,
    activation_main,
    admit,
    aggregates,
    database_now_us,
    new_token,
    replica_main,
)

PROCESSES = 4
RUNS = 1_000
SEED = 20_250_611
DEADLINE_S = 50.0  # per process; the workload normally ends well before, when all Runs are done
JOIN_GRACE_S = 45.0  # start-up (spawn imports) and the report, on top of the deadline

Schema = tuple[psycopg.Connection[Any], str]


def race_dsn(dsn: str) -> str:
    """The processes' DSN: commits do not wait for the WAL flush (`synchronous_commit=off`, a
    session setting). Only crash durability changes; locking, isolation and what a committed
    transaction makes visible to the others are the same, and the race is about those."""
    return make_conninfo(dsn, options="-c synchronous_commit=off")


@pytest.fixture
def store(pg_dsn: str, pg_schema: Schema) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])  # migrates the schema before any process opens it
    try:
        yield s
    finally:
        s.close()


def _run_processes(
    ctx: Any, target: Any, args: Sequence[tuple[Any, ...]], timeout_s: float
) -> list[str]:
    """Start one process per argument tuple, join them all by `timeout_s`; a process still
    alive then is killed, and that, or a non-zero exit, is a failure."""
    procs = [ctx.Process(target=target, args=a, name=f"race-{i}") for i, a in enumerate(args)]
    for proc in procs:
        proc.start()
    end = time.monotonic() + timeout_s
    failures: list[str] = []
    for proc in procs:
        proc.join(max(0.0, end - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(10)
            failures.append(f"{proc.name} did not finish within {timeout_s:.0f} s and was killed")
        elif proc.exitcode != 0:
            failures.append(f"{proc.name} exited with {proc.exitcode}")
    return failures


def _reports(out_dir: Path, prefix: str, n: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The processes' reports, and a failure for each process that wrote none."""
    reports, missing = [], []
    for i in range(n):
        path = out_dir / f"{prefix}-{i}.json"
        if path.exists():
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        else:
            missing.append(f"process {i} wrote no report")
    return reports, missing


def _check_race(
    projection: Projection, reports: list[dict[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    """Every check of the module docstring; returns (failures, summary)."""
    bad: list[str] = []
    counts: Counter[str] = Counter()
    pages: Counter[str] = Counter()
    typed: Counter[str] = Counter()
    boundary: Counter[str] = Counter()
    facts: list[list[Any]] = []
    zombies: list[list[Any]] = []
    for report in reports:
        counts.update(report["counts"])
        pages.update(report["pages"])
        typed.update(report["typed_errors"])
        boundary.update(report["boundary"])
        facts.extend(report["facts"])
        zombies.extend(report["zombies"])

    def applied(name: str, code: str | None = None) -> int:
        return sum(
            n
            for key, n in counts.items()
            if key.split("|")[0] == name
            and key.split("|")[1] == "applied"
            and (code is None or key.split("|")[2] == code)
        )

    aggs = aggregates(projection)
    attempts = {a["attempt_id"]: a for a in projection["attempts"]}
    leases = {(x["attempt_id"], x["lease_generation"]): x for x in projection["leases"]}
    events = Counter(e["type"] for e in projection["events"])

    # Kernel invariants, numbering, leases, RETRY-09 per Run.
    for run_id, (agg, evs) in aggs.items():
        bad.extend(str(v) for v in check_invariants(agg, evs))
        numbers = [a.number for a in agg.attempts]
        if numbers != list(range(1, len(numbers) + 1)) or len(numbers) > MAX_ATTEMPTS:
            bad.append(f"{run_id}: attempt numbers {numbers}")
        for earlier in agg.attempts[:-1]:
            if earlier.status.value != "lost":
                bad.append(f"RETRY-09 {run_id}: attempt {earlier.number} is {earlier.status}")
        for attempt in agg.attempts:
            rows = [x for x in agg.leases if x.attempt_id == attempt.attempt_id]
            if sum(1 for x in rows if x.status.value == "leased") > 1:
                bad.append(f"{attempt.attempt_id}: two leased leases")
            generations = sorted(x.lease_generation for x in rows)
            if generations != list(range(1, len(generations) + 1)):
                bad.append(f"{attempt.attempt_id}: lease generations {generations}")
            ends = [
                e.type
                for e in evs
                if e.attempt_id == attempt.attempt_id
                and e.type.split(".")[1] in (*TERMINAL, "lost")
            ]
            if len(ends) > 1:
                bad.append(f"LEASE-08 {attempt.attempt_id}: ended twice {ends}")
    if len(aggs) != RUNS:
        bad.append(f"{len(aggs)} Runs in the database, {RUNS} admitted")

    # No stale fence completed anything.
    completions: dict[str, list[Any]] = {}
    for command, attempt_id, generation, session, _code, outcome in facts:
        if command != "complete_with_lease":
            continue
        if attempt_id in completions:
            bad.append(f"{attempt_id}: two Applied completions")
        completions[attempt_id] = [generation, session, outcome]
        row = attempts[attempt_id]
        lease = leases.get((attempt_id, generation))
        if (
            row["status"] != outcome
            or row["worker_session_id"] != session
            or row["lease_generation"] != generation
            or lease is None
            or lease["status"] != "completed"
            or lease["worker_session_id"] != session
        ):
            bad.append(f"{attempt_id}: completion fence gen={generation} does not match the rows")
    completed = {a for a, row in attempts.items() if row["status"] in ("succeeded", "failed")}
    if completed != set(completions):
        bad.append(
            f"completed attempts without their one completion: {completed ^ set(completions)}"
        )
    for zombie in zombies:
        command, attempt_id, _gen, _session, kind, code = zombie
        if kind == "applied" or (command != "acknowledge_starting" and kind != "rejected"):
            bad.append(f"stale fence {command} on {attempt_id} was {kind}/{code}")
    for key, n in counts.items():
        if key.startswith("expire_with_lease:stale_generation|applied"):
            bad.append(f"{n} expiries of a non-current generation applied")

    # LEASE-08: completion and expiry never both apply, per lease generation and per Attempt.
    expired = {(f[1], f[2]) for f in facts if f[0] == "expire_with_lease"}
    recovered_lost = {f[1] for f in facts if f[0] == "recover_runtime" and f[4] == "lost"}
    for attempt_id, (generation, _session, _outcome) in completions.items():
        if (attempt_id, generation) in expired or attempt_id in recovered_lost:
            bad.append(f"LEASE-08 {attempt_id}: completed and expired")
    for (attempt_id, generation), lease in leases.items():
        row = attempts[attempt_id]
        if lease["status"] == "completed" and (
            row["status"] not in ("succeeded", "failed") or row["lease_generation"] != generation
        ):
            bad.append(f"LEASE-08 {attempt_id}/{generation}: completed lease, attempt {row}")
        if (
            lease["release_reason"] == "lease_expired"
            and row["lease_generation"] == generation
            and row["status"] not in ("claimed", "lost")
        ):
            bad.append(f"LEASE-08 {attempt_id}/{generation}: expired lease, {row['status']}")

    # Accounting: every Applied outcome is exactly one durable fact.
    lease_rows = projection["leases"]
    released = sum(1 for x in lease_rows if x["release_reason"] == "lease_expired")
    lost = sum(1 for a in attempts.values() if a["status"] == "lost")
    lost_retry_failed = sum(
        1 for r in projection["runs"] if str(r["error_code"]).startswith("RUN_LOST_RETRY")
    )
    mutations = (
        applied("acknowledge_starting")
        + applied("acknowledge_running")
        + applied("renew_lease")
        + applied("complete_with_lease")
        + released
    )
    ledger = {
        "admitted runs": (applied("admit_run"), len(projection["runs"])),
        "granted leases": (applied("grant_lease"), len(lease_rows)),
        "starting events": (applied("acknowledge_starting"), events["attempt.starting"]),
        "running events": (applied("acknowledge_running"), events["attempt.running"]),
        "completed leases": (
            applied("complete_with_lease"),
            sum(1 for x in lease_rows if x["status"] == "completed"),
        ),
        "completed attempts": (applied("complete_with_lease"), len(completed)),
        "lost attempts": (applied("recover_runtime", "lost"), lost),
        "expired leases": (
            applied("expire_with_lease") + applied("recover_runtime"),
            released,
        ),
        "lease versions (V-2)": (
            len(lease_rows) + mutations,
            sum(x["version"] for x in lease_rows),
        ),
        "requeued attempts (RETRY-09)": (
            pages["lost_retry_page|requeued"],
            len(attempts) - len(projection["runs"]),
        ),
        "retry_wait events": (pages["lost_retry_page|scheduled"], events["run.retry_wait"]),
        "lost retry failures": (pages["lost_retry_page|failed"], lost_retry_failed),
    }
    for name, (reported, durable) in ledger.items():
        if reported != durable:
            bad.append(f"accounting {name}: Applied {reported} != durable {durable}")

    statuses = Counter(r["status"] for r in projection["runs"])
    summary = {
        "runs": len(projection["runs"]),
        "processes": len(reports),
        "operations": sum(r["operations"] for r in reports),
        "iterations": sum(r["iterations"] for r in reports),
        "restarts": sum(r["restarts"] for r in reports),
        "transient_retries": sum(r["transient_retries"] for r in reports),
        "all_runs_terminal": all(r["finished_all"] for r in reports)
        or statuses.total() == sum(statuses[s] for s in TERMINAL),
        "elapsed_s": max(r["elapsed_s"] for r in reports),
        "run_statuses": dict(sorted(statuses.items())),
        "attempts": len(attempts),
        "leases": len(lease_rows),
        "events": len(projection["events"]),
        "zombie_replays": len(zombies),
        "outcomes": dict(sorted(counts.items())),
        "lost_retry_pages": dict(sorted(pages.items())),
        "typed_errors": dict(sorted(typed.items())),
        "at_expiry_instant": dict(sorted(boundary.items())),
        "ledger": {k: list(v) for k, v in ledger.items()},
    }
    return bad, summary


@pytest.mark.slow  # the race workload: four replica processes, 1,000 Runs
@pytest.mark.spec("LEASE-08", "RETRY-09")
def test_replicas_race_on_one_database_and_every_invariant_holds(
    pg_dsn: str, pg_schema: Schema, store: ClusterStore, tmp_path: Path
) -> None:
    conn, schema = pg_schema
    conn.execute(CREATE_NOT_RUNNING)
    cfg = RaceConfig(
        dsn=race_dsn(pg_dsn),
        schema=schema,
        out_dir=str(tmp_path),
        processes=PROCESSES,
        runs=RUNS,
        seed=SEED,
        epoch_us=database_now_us(conn),
        deadline_s=DEADLINE_S,
    )
    started = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    failures = _run_processes(
        ctx, replica_main, [(cfg, i) for i in range(PROCESSES)], DEADLINE_S + JOIN_GRACE_S
    )
    reports, missing = _reports(tmp_path, "replica", PROCESSES)
    errors = [f"process {r['index']}: {e}" for r in reports for e in r["errors"]]
    assert not failures + missing + errors, failures + missing + errors
    bad, summary = _check_race(store.project(), reports)
    summary["duration_s"] = round(time.monotonic() - started, 1)
    (tmp_path / "race-summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    line = (
        f"replica race: {summary['runs']} runs, {summary['processes']} processes, "
        f"{summary['operations']} operations, {summary['restarts']} restarts, "
        f"{summary['duration_s']} s, statuses {summary['run_statuses']}, "
        f"typed errors {summary['typed_errors']}, outcomes {summary['outcomes']}, "
        f"lost retry {summary['lost_retry_pages']}, "
        f"at the expiry instant {summary['at_expiry_instant']}"
    )
    print(line)
    assert not bad, f"{bad[:20]}\n{line}"

    # The race really raced: each kind of conflict this test is about happened.
    counts: Counter[str] = Counter(summary["outcomes"])
    seen = {key.rsplit("|", 1)[0] for key in counts}
    for needed in (
        "grant_lease|raced",
        "complete_with_lease|applied",
        "expire_with_lease|applied",
        "recover_runtime|applied",
        "zombie:complete_with_lease|rejected",
    ):
        assert needed in seen, f"{needed} never happened\n{line}"
    assert summary["lost_retry_pages"].get("lost_retry_page|requeued", 0) > 0, line
    assert summary["restarts"] >= 1, line


# -- RETRY-18 ---------------------------------------------------------------------------------
def _local_worker() -> WorkerSession:
    return WorkerSession(
        worker_id="w-remote",
        session_id="w-remote-s1",
        generation=1,
        status=WorkerSessionStatus.ONLINE,
        session_expires_at_ms=FAR,
        executor_types=(LOCAL_EXECUTOR,),
    )


def _fence(worker: WorkerSession, token: Secret, version: int) -> Fence:
    return Fence(
        worker_id=worker.worker_id,
        worker_session_id=worker.session_id,
        worker_generation=worker.generation,
        lease_generation=1,
        lease_token=token,
        expected_version=version,
    )


def _activation_scenario(store: ClusterStore, conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Runs of every eligibility, built through the kernel's commands at times ten minutes
    behind the database (so the race, at database time, comes after all of them). Returns
    the expected result per target Attempt: `spawn` for the eligible ones, else the code."""
    t0 = database_now_us(conn) // 1000 - 600_000
    clock = InjectedClock(t0)
    rt = ClusterRuntime(store, clock=clock)
    expected: dict[str, str] = {}

    def ok(outcome: object) -> Applied:
        assert isinstance(outcome, Applied), outcome
        return outcome

    for i in range(200):  # eligible: the latest, claimed, never leased, local, queued
        ok(rt.execute(admit(f"e{i:03d}", LOCAL_EXECUTOR)))
        expected[f"e{i:03d}-a1"] = "spawn"
    for i in range(25):  # cancelled: an intent refuses the activation
        ok(rt.execute(admit(f"c{i:03d}", LOCAL_EXECUTOR)))
        ok(rt.execute(RequestCancel(run_id=f"c{i:03d}", reason=CancelReason.USER)))
        expected[f"c{i:03d}-a1"] = "CANCEL_REQUESTED"
    for i in range(25):  # another executor type
        ok(rt.execute(admit(f"x{i:03d}", EXECUTOR)))
        expected[f"x{i:03d}-a1"] = "EXECUTOR_TYPE_MISMATCH"
    worker = _local_worker()
    for i in range(25):  # Attempt 1 lost and retried: only Attempt 2 may be activated
        run_id, attempt_id = f"n{i:03d}", f"n{i:03d}-a1"
        ok(rt.execute(admit(run_id, LOCAL_EXECUTOR)))
        token = new_token()
        lease = ok(
            rt.execute(
                GrantLease(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    worker=worker,
                    lease_token=token,
                    lease_duration_ms=5_000,
                )
            )
        ).aggregate.lease(attempt_id, 1)
        assert lease is not None
        ok(
            rt.execute(
                AcknowledgeStarting(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    fence=_fence(worker, token, 1),
                    worker=worker,
                )
            )
        )
        ok(
            rt.execute(
                AcknowledgeRunning(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    fence=_fence(worker, token, 2),
                    worker=worker,
                    executor_handle="pid:1",
                    started_at_ms=t0,
                )
            )
        )
        expected[attempt_id] = "ATTEMPT_NOT_LATEST"
        expected[f"{run_id}-a2"] = "spawn"
    for i in range(25):  # offered to a remote Worker: it has a lease, so never local
        run_id, attempt_id = f"l{i:03d}", f"l{i:03d}-a1"
        ok(rt.execute(admit(run_id, LOCAL_EXECUTOR)))
        ok(
            rt.execute(
                GrantLease(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    worker=worker,
                    lease_token=new_token(),
                    lease_duration_ms=600_000,
                )
            )
        )
        expected[attempt_id] = "EXECUTOR_TYPE_MISMATCH"
    clock.set(t0 + 60_000)  # the n-Runs' leases have expired: recovery, then lost retry
    page = rt.runtime_recovery_page(64, lambda c: NotRunningEvidence())
    assert page.count("applied", "lost") == 25, page
    clock.set(t0 + 60_001)
    assert rt.lost_retry_page(64, lambda run_id: f"{run_id}-a2").scheduled == 25
    clock.set(t0 + 60_002)
    assert rt.lost_retry_page(64, lambda run_id: f"{run_id}-a2").requeued == 25
    return expected


@pytest.mark.spec("RETRY-18")
def test_concurrent_local_activations_of_one_attempt_spawn_exactly_once(
    pg_dsn: str, pg_schema: Schema, store: ClusterStore, tmp_path: Path
) -> None:
    """RETRY-18 on PostgreSQL: four processes race `ActivateLocal` on the same Attempts (half of
    them in the opposite order). Each eligible Attempt is activated exactly once, by the
    process whose callback digest the row then holds; every other try is `Raced`; a cancelled
    Run, a non-latest Attempt, another executor type or a remotely offered Attempt is never
    activated, and those rows are unchanged."""
    conn, schema = pg_schema
    expected = _activation_scenario(store, conn)
    run_of = {a["attempt_id"]: a["run_id"] for a in store.project()["attempts"]}
    targets = tuple((run_of[a], a) for a in sorted(expected))
    before = {a["attempt_id"]: a for a in store.project()["attempts"]}
    cfg = ActivationConfig(
        dsn=race_dsn(pg_dsn), schema=schema, out_dir=str(tmp_path), seed=SEED, targets=targets
    )
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    failures = _run_processes(
        ctx, activation_main, [(cfg, i, barrier) for i in range(PROCESSES)], 120
    )
    reports, missing = _reports(tmp_path, "activation", PROCESSES)
    failures += missing + [e for report in reports for e in report["errors"]]
    assert not failures, failures

    outcomes: Counter[str] = Counter()
    winners: dict[str, list[str]] = {}
    for report in reports:
        for _run_id, attempt_id, kind, code, digest in report["records"]:
            outcomes[f"{kind}|{code}"] += 1
            want = expected[attempt_id]
            if kind == "applied":
                winners.setdefault(attempt_id, []).append(digest)
            elif want == "spawn":
                assert kind == "raced", (attempt_id, kind, code)
            else:
                assert (kind, code) == ("rejected", want), (attempt_id, kind, code)
    spawn = {a for a, want in expected.items() if want == "spawn"}
    print(f"local activation race: {PROCESSES} processes, {len(targets)} targets, {dict(outcomes)}")
    assert set(winners) == spawn
    assert all(len(w) == 1 for w in winners.values()), winners
    assert sum(len(w) for w in winners.values()) == len(spawn) == 225

    projection = store.project()
    for row in projection["attempts"]:
        attempt_id = row["attempt_id"]
        if attempt_id in spawn:
            assert row["status"] == "starting"
            assert row["callback_token_sha256"] == winners[attempt_id][0]
            assert row["callback_sequence"] == 1
        else:
            assert row == before[attempt_id], attempt_id
    for run_id, (agg, evs) in aggregates(projection).items():
        assert check_invariants(agg, evs) == [], run_id
