"""The cluster Worker host in-process (issue 17 item 3): a Run submitted to PostgreSQL, granted by
the dispatcher, pulled from the database by the host, run as a real child, completed; the host's
session resumed after a restart on the same journal (WS-1), drained on request (D-8).

Real parts: the PostgreSQL server, a fresh schema per test, real journal files, real children."""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from conformance.cli.submit import fresh_ids
from kernel.specs import RunStatus, WorkerSessionStatus
from kernel.task import TASK_EXECUTOR_TYPE
from runners.cluster.dispatch import dispatch_grants
from runners.cluster.registry import WorkerRegistry
from runners.cluster.status import run_status_counts
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.cluster.worker_host import HostRefused, HostSettings, JournalLocation, WorkerHost
from runners.task_schedule import submit_command

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0


def _submit(store: ClusterStore, argv: list[str]) -> str:
    run_id, attempt_id = fresh_ids()
    now = int(time.time() * 1000)
    submit_command(
        store,
        ClusterTaskStore(store),
        argv,
        now_ms=now,
        run_id=run_id,
        attempt_id=attempt_id,
    )
    return run_id


def _until(check: Callable[[], bool], store: ClusterStore, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {DEADLINE_S} s: {run_status_counts(store)}")
        dispatch_grants(store)
        time.sleep(0.05)


def _host(dsn: str, schema: str, state: Path, **extra: object) -> WorkerHost:
    settings = HostSettings(
        dsn=dsn,
        schema=schema,
        journal=JournalLocation.parse(str(state)),
        executor_types=(TASK_EXECUTOR_TYPE,),
        retention_ms=60_000,
        **extra,  # type: ignore[arg-type]
    )
    return WorkerHost(settings)


def _succeeded(store: ClusterStore, n: int) -> Callable[[], bool]:
    return lambda: run_status_counts(store).get(RunStatus.SUCCEEDED, 0) == n


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_granted_run_is_pulled_run_and_completed_once(
    cluster_on_schema: tuple[str, str, ClusterStore], tmp_path: Path, kind: str
) -> None:
    dsn, schema, store = cluster_on_schema
    marker = tmp_path / "marker"
    for _ in range(3):
        _submit(store, ["/bin/sh", "-c", f"echo x >> {marker}"])
    state = tmp_path / "w1"
    location = str(state) if kind == "file" else f"sqlite:{state}"
    settings = HostSettings(
        dsn=dsn,
        schema=schema,
        journal=JournalLocation.parse(location),
        executor_types=(TASK_EXECUTOR_TYPE,),
        retention_ms=60_000,
    )
    host = WorkerHost(settings)
    session = host.start()
    try:
        assert session.status is WorkerSessionStatus.ONLINE
        _until(_succeeded(store, 3), store, "3 Runs succeeded")
    finally:
        host.stop()
    assert marker.read_text().count("x") == 3  # each Run's command ran exactly once
    attempts = store.project()["attempts"]
    assert len(attempts) == 3
    assert {a["number"] for a in attempts} == {1}
    # The state directory and the session file keep their secrets to the owner (S-1).
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state / "session").st_mode) == 0o600
    # Stopped: the session is offline, nothing of the host is left granted.
    registry_store = ClusterStore(dsn, schema)
    try:
        view = WorkerRegistry(registry_store).session(host.worker_id)
    finally:
        registry_store.close()
    assert view is not None
    assert view.status is WorkerSessionStatus.OFFLINE


def test_a_restarted_host_resumes_its_session_and_a_new_directory_is_a_new_worker(
    cluster_on_schema: tuple[str, str, ClusterStore], tmp_path: Path
) -> None:
    """WS-1: the same state directory, restarted while the session is unexpired, resumes the
    same session id and generation; a stopped session is not resumed (a new session, generation
    + 1); another directory is another Worker."""
    dsn, schema, _store = cluster_on_schema
    first = _host(dsn, schema, tmp_path / "w1")
    one = first.start()
    # A crash: no stop, the runtime and journal lock are simply abandoned (the lock's owner is
    # this process, alive, so release it the way a dead owner's reclaim would end: E-2 is the
    # journal lock's own test; here only the registry's side is under test).
    assert first.runtime is not None
    assert first.cadence is not None
    first.cadence.stop()
    first.runtime.stop()
    second = _host(dsn, schema, tmp_path / "w1")
    two = second.start()
    try:
        assert (two.worker_id, two.session_id, two.generation) == (
            one.worker_id,
            one.session_id,
            one.generation,
        )
    finally:
        second.stop()  # the session goes offline
    third = _host(dsn, schema, tmp_path / "w1")
    three = third.start()
    other = _host(dsn, schema, tmp_path / "w2")
    four = other.start()
    try:
        assert three.worker_id == one.worker_id
        assert three.session_id != one.session_id
        assert three.generation == one.generation + 1
        assert four.worker_id != one.worker_id
    finally:
        third.stop()
        other.stop()


def test_a_draining_host_gets_no_new_grant_and_finishes_what_it_holds(
    cluster_on_schema: tuple[str, str, ClusterStore], tmp_path: Path
) -> None:
    """D-8 through the registry: after `drain()` the dispatcher grants the session nothing; the
    Run it already held completes; `drained()` then holds (kernel `drain_finished`)."""
    dsn, schema, store = cluster_on_schema
    marker = tmp_path / "m"
    _submit(store, ["/bin/sh", "-c", f"sleep 2; echo x >> {marker}"])
    host = _host(dsn, schema, tmp_path / "w1")
    host.start()
    try:
        # Delivered and running: an offer granted but not yet delivered when the drain begins
        # is a `new_claim`, which a draining Worker refuses (D-8); its lease then expires.
        _until(lambda: run_status_counts(store).get(RunStatus.RUNNING, 0) == 1, store, "running")
        host.drain()
        late = _submit(store, ["/bin/sh", "-c", f"echo late >> {marker}"])
        _until(_succeeded(store, 1), store, "the held Run succeeded")
        deadline = time.monotonic() + DEADLINE_S
        while not host.drained():
            assert time.monotonic() < deadline, "the host never drained"
            time.sleep(0.05)
        for _ in range(5):
            assert dispatch_grants(store).granted == 0
        runs = {r["run_id"]: r["status"] for r in store.project()["runs"]}
        assert runs[late] == RunStatus.QUEUED.value
    finally:
        host.stop()
    assert "late" not in marker.read_text()


def test_an_unusable_state_directory_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    host = _host("postgresql://127.0.0.1:1/none", "ql3", blocker / "sub")
    with pytest.raises(HostRefused) as refused:
        host.start()
    assert str(blocker / "sub") in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_host_started_before_any_replica_creates_the_schema(pg_dsn: str, tmp_path: Path) -> None:
    """The README starts `qlk serve --profile cluster &` and `qlk worker &` together: the host
    may come first, and then it creates and migrates the schema as a replica would."""
    schema = f"wh_first_{uuid.uuid4().hex[:10]}"
    host = _host(pg_dsn, schema, tmp_path / "w1")
    try:
        session = host.start()
        assert session.status is WorkerSessionStatus.ONLINE
        store = ClusterStore(pg_dsn, schema, create_schema=True)  # the replica, second
        try:
            _submit(store, ["true"])
            _until(_succeeded(store, 1), store, "1 Run succeeded")
        finally:
            store.close()
    finally:
        host.stop()
        _drop(pg_dsn, schema)


def test_concurrent_creators_of_one_schema_all_succeed(pg_dsn: str) -> None:
    """Replicas and hosts starting at once serialize on the migrator's advisory lock: bare
    concurrent `CREATE SCHEMA IF NOT EXISTS` can fail on pg_namespace's unique index."""
    for _ in range(3):
        schema = f"wh_race_{uuid.uuid4().hex[:10]}"
        start = threading.Barrier(6)
        errors: list[BaseException] = []

        def create(
            schema: str = schema,
            start: threading.Barrier = start,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                start.wait(timeout=DEADLINE_S)
                ClusterStore(pg_dsn, schema, create_schema=True).close()
            except BaseException as exc:  # collected: asserted below
                errors.append(exc)

        racers = [threading.Thread(target=create) for _ in range(6)]
        try:
            for racer in racers:
                racer.start()
            for racer in racers:
                racer.join(timeout=DEADLINE_S)
        finally:
            _drop(pg_dsn, schema)
        assert errors == []


def _drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
