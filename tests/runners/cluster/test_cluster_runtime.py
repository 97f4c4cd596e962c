"""The cluster runtime on a real PostgreSQL: database time vs the injected clock (ADR-0232 §1,
RETRY-20), the per-candidate lock order (B-26, REC-06), fencing at the resource with raw SQL,
the bounded retry of deadlocks, and recovery after the server terminated the connection.

Times are the database's own (`statement_timestamp()`), so the Worker sessions here expire far
in the future of the real clock, and every scenario is built through the kernel's commands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from kernel import (
    Applied,
    CompleteWithLease,
    CompletionOutcome,
    NotRunningEvidence,
    Raced,
    RecoverRuntime,
    UnknownEvidence,
    apply,
    attempt_lock_key,
    token_digest,
)
from kernel.specs.states import UnknownReason
from runners.cluster.clock import InjectedClock
from runners.cluster.named_sql import STATEMENTS
from runners.cluster.runtime import ClusterRuntime, TransientConflictExhausted
from runners.cluster.store import ClusterStore
from runners.passes import RuntimeRecoveryUnavailable
from runners.rows import effect_statement
from tests.support.cluster_fixtures import (
    admit,
    applied,
    db_now,
    fence,
    past,
    policy,
    running,
    worker,
)


def _row(store: ClusterStore, table: str, key: str, value: str) -> dict[str, Any]:
    rows = [r for r in store.project()[table] if r[key] == value]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture
def store(pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])
    try:
        yield s
    finally:
        s.close()


# -- time -------------------------------------------------------------------------------------
def test_the_database_clock_stamps_transitions_with_statement_timestamp(
    store: ClusterStore, pg_schema: tuple[psycopg.Connection[Any], str]
) -> None:
    """Production path (ADR-0232 §1): the observation time is read from the database in the
    command's transaction; the Events carry it, not a host time."""
    conn = pg_schema[0]
    before = db_now(conn)
    applied(ClusterRuntime(store).execute(admit("r1")))
    after = db_now(conn)
    stamps = {e["at_ms"] for e in store.project()["events"]}
    assert len(stamps) == 1
    assert before <= stamps.pop() <= after


def test_the_injected_clock_stamps_exactly_the_given_time(store: ClusterStore) -> None:
    """Conformance path: the trace's time goes in through the clock port unchanged."""
    applied(ClusterRuntime(store, clock=InjectedClock(1_234_567)).execute(admit("r1")))
    assert {e["at_ms"] for e in store.project()["events"]} == {1_234_567}


def _retry_wait_run(rt: ClusterRuntime, store: ClusterStore, backoff_ms: int) -> str:
    """A Run in `retry_wait`, due `backoff_ms` after the database time of its lost retry."""
    attempt = running(past(store), "r1", lease_ms=5_000, policy=policy(backoff_ms))
    page = rt.runtime_recovery_page(16, lambda c: NotRunningEvidence())
    assert page.outcomes == ((attempt, "applied", "lost"),)
    tally = rt.lost_retry_page(16, lambda run_id: f"{run_id}-a2")
    assert tally.scheduled == 1
    assert _row(store, "runs", "run_id", "r1")["status"] == "retry_wait"
    return attempt


@pytest.mark.spec("RETRY-20")
def test_a_runner_clock_ahead_does_not_requeue_a_run_before_database_time(
    store: ClusterStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RETRY-20: with the runner host's clock two hours ahead, a Run due in one hour (database
    time) is not requeued by the database-time page; the same page at the runner's clock would
    requeue it (the control that shows the check can fail)."""
    hour = 3_600_000
    rt = ClusterRuntime(store)
    _retry_wait_run(rt, store, backoff_ms=hour)
    ahead = time.time() + 2 * 3600
    monkeypatch.setattr(time, "time", lambda: ahead)
    monkeypatch.setattr(time, "time_ns", lambda: int(ahead * 1e9))

    tally = rt.lost_retry_page(16, lambda run_id: f"{run_id}-a2")
    assert (tally.scanned, tally.requeued) == (0, 0)
    run = _row(store, "runs", "run_id", "r1")
    assert run["status"] == "retry_wait"
    assert len(store.project()["attempts"]) == 1

    runner_clock = ClusterRuntime(store, clock=InjectedClock(int(time.time() * 1000)))
    control = runner_clock.lost_retry_page(16, lambda run_id: f"{run_id}-a2")
    assert control.requeued == 1


def test_a_due_retry_wait_run_is_requeued_at_database_time(store: ClusterStore) -> None:
    rt = ClusterRuntime(store)
    _retry_wait_run(rt, store, backoff_ms=1)
    time.sleep(0.005)
    assert rt.lost_retry_page(16, lambda run_id: f"{run_id}-a2").requeued == 1
    assert _row(store, "runs", "run_id", "r1")["status"] == "queued"


# -- lock order ---------------------------------------------------------------------------------
@pytest.mark.spec("REC-06")
def test_each_recovery_candidate_locks_advisory_then_run_attempt_policy_lease(
    store: ClusterStore,
) -> None:
    """REC-06: the statements of one recovery candidate's transaction, in the order sent: the
    Attempt's advisory lock first, then the Run, Attempt, policy and lease rows (FOR UPDATE),
    then the writes."""
    rt = ClusterRuntime(store)
    attempt = running(past(store), "r1", lease_ms=5_000, policy=policy(0))
    store.statement_trace = []
    page = rt.runtime_recovery_page(16, lambda c: NotRunningEvidence())
    assert page.outcomes == ((attempt, "applied", "lost"),)
    trace = store.statement_trace
    assert trace[:6] == [
        "attempt_lock",
        "select_run_id_of_attempt",
        "select_run",
        "select_attempts_of_run",
        "select_policy_of_run",
        "select_leases_of_run",
    ]
    assert trace.count("attempt_lock") == 1
    writes = trace[6:]
    assert "update_lease" in writes  # lost and the lease release in one transaction
    assert "update_attempt" in writes
    assert not any(name.startswith("select_") for name in writes)


@pytest.mark.spec("REC-06")
def test_the_advisory_lock_is_held_by_the_transaction_and_keyed_by_b26(
    store: ClusterStore, pg_schema: tuple[psycopg.Connection[Any], str]
) -> None:
    """B-26: while a transaction has loaded an Attempt, the server shows this backend holding
    the advisory lock with the stable key of the Attempt, and another replica cannot take it;
    the commit releases it."""
    rt = ClusterRuntime(store)
    attempt = running(rt, "r1", lease_ms=60_000)
    key = attempt_lock_key(attempt)
    other = pg_schema[0]
    with store.transaction() as tx:
        assert tx.load_run_of_attempt(attempt) is not None
        pid = tx.connection.info.backend_pid
        held = other.execute(
            "SELECT classid::bigint, objid::bigint FROM pg_locks "
            "WHERE locktype = 'advisory' AND pid = %(pid)s AND granted",
            {"pid": pid},
        ).fetchall()
        assert held == [((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)]
        with other.transaction():
            taken = other.execute("SELECT pg_try_advisory_xact_lock(%(k)s)", {"k": key})
            assert taken.fetchone() == (False,)
    with other.transaction():
        taken = other.execute("SELECT pg_try_advisory_xact_lock(%(k)s)", {"k": key})
        assert taken.fetchone() == (True,)


def test_attempt_lock_keys_are_stable_signed_64_bit() -> None:
    """B-26: the key depends only on the Attempt id and fits a bigint."""
    assert attempt_lock_key("r1-a1") == attempt_lock_key("r1-a1")
    assert attempt_lock_key("r1-a1") != attempt_lock_key("r1-a2")
    keys = [attempt_lock_key(f"r{i}-a1") for i in range(1000)]
    assert all(-(2**63) <= k < 2**63 for k in keys)
    assert any(k < 0 for k in keys)
    assert any(k > 0 for k in keys)


# -- recovery source --------------------------------------------------------------------------
@pytest.mark.spec("REC-13")
def test_an_evidence_failure_stops_the_recovery_page_closed(store: ClusterStore) -> None:
    """§2.3 step 4: an error on a candidate aborts the page (RUNTIME_RECOVERY_UNAVAILABLE)
    before later candidates are touched; unknown evidence writes nothing (I-R4)."""
    rt = ClusterRuntime(store)
    first = running(past(store), "r1", lease_ms=5_000)
    second = running(past(store), "r2", lease_ms=6_000)
    before = store.project()
    seen: list[str] = []

    def evidence(candidate: Any) -> Any:
        seen.append(candidate.attempt_id)
        if candidate.attempt_id == second:
            raise OSError("probe transport down")
        return UnknownEvidence(UnknownReason.PROBE_FAILED)

    with pytest.raises(RuntimeRecoveryUnavailable) as stopped:
        rt.runtime_recovery_page(16, evidence)
    assert stopped.value.code == "RUNTIME_RECOVERY_UNAVAILABLE"
    assert stopped.value.partial.outcomes == ((first, "rejected", "probe_failed"),)
    assert seen == [first, second]
    assert store.project() == before


# -- fencing at the resource ----------------------------------------------------------------
_RAW_STALE_UPDATES: dict[str, tuple[str, dict[str, Any]]] = {
    # The runner's own guarded statements, sent by hand with a stale guard: zero rows.
    "stale token": (
        "update_lease",
        {"token_digest": token_digest("x" * 43)},
    ),
    "stale version": ("update_lease", {"expected_version": 1}),
    "stale generation": ("update_lease", {"lease_generation": 7}),
}


@pytest.mark.spec("LEASE-09")
def test_raw_sql_with_a_stale_token_or_version_changes_nothing(store: ClusterStore) -> None:
    """Fencing at the resource (issue 5 item 4): the runner's own UPDATE statements, sent as raw
    SQL that bypasses the kernel, with a stale lease token digest, version or generation,
    match zero rows; with the current guard the same statement matches one (control, rolled
    back)."""
    rt = ClusterRuntime(store, clock=InjectedClock(2_000_000))
    attempt = running(rt, "r1", lease_ms=60_000)
    aggregate_effects: list[tuple[str, dict[str, Any]]] = []
    # The statement the kernel would send for a completion, captured without committing it.
    with store.transaction() as tx:
        agg = tx.load_run_of_attempt(attempt)
        assert agg is not None
        outcome = apply(
            agg,
            CompleteWithLease(
                run_id="r1",
                attempt_id=attempt,
                fence=fence(attempt, 3),
                worker=worker(),
                callback_sequence=1,
                outcome=CompletionOutcome.SUCCEEDED,
                exit_code=0,
            ),
            2_000_001,
        )
        assert isinstance(outcome, Applied)
        for effect in outcome.effects:
            name, params = effect_statement(effect)
            aggregate_effects.append((name, dict(params)))
    lease_update = next(p for n, p in aggregate_effects if n == "update_lease")
    before = store.project()
    with psycopg.connect(store.dsn, autocommit=True) as raw:
        raw.execute("SELECT set_config('search_path', %(s)s, false)", {"s": store.schema})
        for label, (name, stale) in _RAW_STALE_UPDATES.items():
            params = {**lease_update, **stale}
            missing = set(params) ^ set(lease_update)
            assert not missing, (label, missing)
            rows = raw.execute(STATEMENTS[name], params).rowcount
            assert rows == 0, label
        assert store.project() == before
        with raw.transaction(force_rollback=True):
            assert raw.execute(STATEMENTS["update_lease"], lease_update).rowcount == 1
    assert store.project() == before


# -- transient conflicts ----------------------------------------------------------------------
def test_a_deadlock_is_retried_and_the_command_applies_once(
    store: ClusterStore, pg_schema: tuple[psycopg.Connection[Any], str]
) -> None:
    """A real deadlock: another session holds the Run row and then asks for the Attempt's
    advisory lock the runner holds. PostgreSQL aborts the runner's transaction (its deadlock
    timeout is the shorter); the runtime retries it and the command applies exactly once."""
    rt = ClusterRuntime(store, clock=InjectedClock(2_000_000))
    attempt = running(rt, "r1", lease_ms=60_000)
    store._open().execute("SET deadlock_timeout = '100ms'")
    other = psycopg.connect(store.dsn)
    other.execute("SELECT set_config('search_path', %(s)s, false)", {"s": store.schema})
    other.execute("SET deadlock_timeout = '5s'")
    other.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE")
    result: list[object] = []

    def complete() -> None:
        result.append(
            rt.execute(
                CompleteWithLease(
                    run_id="r1",
                    attempt_id=attempt,
                    fence=fence(attempt, 3),
                    worker=worker(),
                    callback_sequence=1,
                    outcome=CompletionOutcome.SUCCEEDED,
                    exit_code=0,
                )
            )
        )

    pid = store._open().info.backend_pid  # before the runner's statement is in flight (PG-10)
    runner = threading.Thread(target=complete)
    runner.start()
    _wait_for_lock_wait(pg_schema[0], pid)
    other.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": attempt_lock_key(attempt)})
    other.rollback()
    other.close()
    runner.join(30)
    assert not runner.is_alive()
    assert len(result) == 1
    assert isinstance(result[0], Applied), result
    assert rt.transient_retries == 1
    assert _row(store, "runs", "run_id", "r1")["status"] == "succeeded"
    assert [e["type"] for e in store.project()["events"]].count("run.succeeded") == 1


def _wait_for_lock_wait(conn: psycopg.Connection[Any], pid: int) -> None:
    """Until the runner's session `pid` waits for a lock. The pid is read before the runner
    starts: `store._open()` while its statement is in flight would replace that session
    (PG-10: a session left mid-command is not reused)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %(pid)s", {"pid": pid}
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError("the runner never waited for the Run row lock")


def test_a_deadlock_on_every_try_surfaces_as_a_typed_error(
    store: ClusterStore, pg_schema: tuple[psycopg.Connection[Any], str]
) -> None:
    """With one try allowed, the deadlock is not retried: the caller gets
    `TransientConflictExhausted` (stable code, no arguments in the message) and nothing was
    written."""
    rt = ClusterRuntime(store, clock=InjectedClock(2_000_000), max_attempts=1)
    attempt = running(rt, "r1", lease_ms=60_000)
    before = store.project()
    store._open().execute("SET deadlock_timeout = '100ms'")
    other = psycopg.connect(store.dsn)
    other.execute("SELECT set_config('search_path', %(s)s, false)", {"s": store.schema})
    other.execute("SET deadlock_timeout = '5s'")
    other.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE")
    errors: list[BaseException] = []
    command = CompleteWithLease(
        run_id="r1",
        attempt_id=attempt,
        fence=fence(attempt, 3),
        worker=worker(),
        callback_sequence=1,
        outcome=CompletionOutcome.SUCCEEDED,
        exit_code=0,
    )

    def complete() -> None:
        try:
            rt.execute(command)
        except BaseException as exc:
            errors.append(exc)

    pid = store._open().info.backend_pid  # before the runner's statement is in flight (PG-10)
    runner = threading.Thread(target=complete)
    runner.start()
    _wait_for_lock_wait(pg_schema[0], pid)
    other.execute("SELECT pg_advisory_xact_lock(%(k)s)", {"k": attempt_lock_key(attempt)})
    other.rollback()
    other.close()
    runner.join(30)
    assert len(errors) == 1
    assert isinstance(errors[0], TransientConflictExhausted)
    assert errors[0].code == "STORAGE_TRANSIENT_CONFLICT"
    assert str(errors[0]) == (
        "STORAGE_TRANSIENT_CONFLICT: complete_with_lease rolled back 1 times (DeadlockDetected)"
    )
    assert store.project() == before


# -- a terminated connection --------------------------------------------------------------------
def test_a_terminated_connection_rolls_back_and_the_next_call_recovers(
    store: ClusterStore, pg_schema: tuple[psycopg.Connection[Any], str]
) -> None:
    """`pg_terminate_backend` on the runner's connection inside a transaction: the call fails
    (never success), the state is the before-state, and the runner's next call reconnects and
    applies the command."""
    rt = ClusterRuntime(store, clock=InjectedClock(2_000_000))
    attempt = running(rt, "r1", lease_ms=60_000)
    before = store.project()
    command = RecoverRuntime(run_id="r1", attempt_id=attempt, evidence=NotRunningEvidence())
    admin = pg_schema[0]

    class Terminate(list[str]):
        def append(self, name: str) -> None:
            if name == "select_run":
                pid = store._open().info.backend_pid
                admin.execute("SELECT pg_terminate_backend(%(p)s, 5000)", {"p": pid})
            super().append(name)

    store.statement_trace = Terminate()
    with pytest.raises(psycopg.OperationalError):
        rt.execute(command)
    store.statement_trace = None
    assert store.project() == before
    # Not expired yet at 2_000_000 + 1: a Raced no-op is the kernel's answer; at expiry, lost.
    assert isinstance(rt.execute(command), Raced)
    rt_later = ClusterRuntime(store, clock=InjectedClock(2_000_000 + 60_000))
    applied(rt_later.execute(command))
    assert _row(store, "attempts", "attempt_id", attempt)["status"] == "lost"


# -- the pooled store ---------------------------------------------------------------------------
def test_a_pooled_store_serves_concurrent_callers_each_on_its_own_connection(
    pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]
) -> None:
    """`ClusterStore(pool_size=4)`: four threads admit and start Runs at once through one
    store; every command applies exactly once, the transactions ran on more than one backend,
    and sources and projection see all of it."""
    pooled = ClusterStore(pg_dsn, pg_schema[1], pool_size=4)
    try:
        rt = ClusterRuntime(pooled, clock=InjectedClock(2_000_000))
        backends: set[int] = set()
        original = pooled.transaction

        def recording() -> Any:
            return _recording_transaction(original, backends)

        pooled.transaction = recording  # type: ignore[method-assign]
        failures: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(10):
                    running(rt, f"t{n}r{i}", lease_ms=60_000)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert failures == []
        assert len(backends) > 1
        state = pooled.project()
        assert len(state["runs"]) == 40
        assert {r["status"] for r in state["runs"]} == {"running"}
        assert pooled.lease_expiry_candidates(2_000_000 + 60_000, 64).has_more is False
        assert len(pooled.lease_expiry_candidates(2_000_000 + 60_000, 64).items) == 40
    finally:
        pooled.close()


@contextmanager
def _recording_transaction(original: Any, backends: set[int]) -> Iterator[Any]:
    with original() as t:
        backends.add(t.connection.info.backend_pid)
        yield t
