"""The edge store on real SQLite files: connection set-up, the versioned schema, fencing at the
resource (every guarded statement matches zero rows on a stale guard and raises `StaleWrite`),
faults before commit at every effect of every write path, tokens only as digests, and
concurrent writers on one lease."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from conformance.run.adapter import ConformanceAdapter, run_step
from conformance.run.corpus import RUN_CORPUS
from conformance.run.edge import EdgeAdapter
from conformance.run.faults import Fault, FaultKind
from conformance.run.reference import ReferenceStore
from conformance.run.replay import replay
from conformance.run.trace import loads
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    AppendEvent,
    Applied,
    Attempt,
    Command,
    CompleteLocal,
    CompleteWithLease,
    CompletionOutcome,
    ConvergeCancel,
    Effect,
    Event,
    ExpireWithLease,
    Fence,
    GrantLease,
    InsertAttempt,
    InsertLease,
    InsertRun,
    Lease,
    LocalReceipt,
    LostRetryStep,
    PolicyDefinition,
    Profile,
    RecordLocalHandle,
    RenewLease,
    RequestCancel,
    Run,
    RunAggregate,
    RunRetryPolicy,
    Safety,
    Secret,
    UpdateAttempt,
    UpdateLease,
    UpdatePolicy,
    UpdateRun,
    apply,
)
from kernel.approved_action import ACTION_COLUMNS, ACTION_EVENT_COLUMNS
from kernel.specs.codes import Code
from kernel.specs.states import Actor, AttemptStatus, CancelReason, LeaseStatus
from kernel.workflow import StepRun, TaskAdmission, WorkflowAdmission
from runners.edge import migrate as migrate_module
from runners.edge.connection import EdgeConfigError
from runners.edge.migrate import MigrationError, migrate, migrations, split_statements
from runners.edge.named_sql import (
    APPROVAL,
    SOURCES,
    STATEMENTS,
    WORKFLOW,
    SqlFileError,
    parse_sections,
)
from runners.edge.projection import read_only_uri
from runners.edge.store import EdgeStore, EdgeTransaction
from runners.edge.tasks import TASKS
from runners.engine import StaleWrite, Storage, StorageTransaction, execute, load_for
from runners.sources import Sources
from tests.support.sim import callback_token, lease_token, worker_session

T0 = 1_000_000
W1 = worker_session("w1")
POLICY = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)


def fence(attempt_id: str, version: int, generation: int = 1) -> Fence:
    return Fence("w1", "w1-s1", 1, generation, lease_token(attempt_id, generation), version)


def remote_script(run_id: str = "run-1") -> list[tuple[Command, int]]:
    """Every remote write path of the Run domain: admission with a policy, grant, starting,
    renew, running, expiry into `lost` (T8, edge), lost retry scheduled and requeued, a second
    grant, starting and completion."""
    a1, a2 = f"{run_id}-a1", f"{run_id}-a2"
    expire_at = T0 + 100_000
    return [
        (AdmitRun(run_id, a1, "p", "t", 1, "shell", POLICY), T0),
        (GrantLease(run_id, a1, W1, lease_token(a1, 1), 30_000), T0 + 1),
        (AcknowledgeStarting(run_id, a1, fence(a1, 1), W1), T0 + 2),
        (RenewLease(run_id, a1, fence(a1, 2), W1, 30_000), T0 + 3),
        (AcknowledgeRunning(run_id, a1, fence(a1, 3), W1, "pid:42", T0 + 3), T0 + 4),
        (ExpireWithLease(run_id, a1, 1, Profile.EDGE), expire_at),
        (LostRetryStep(run_id, a2), expire_at + 1),
        (LostRetryStep(run_id, a2), expire_at + 1_000),
        (GrantLease(run_id, a2, W1, lease_token(a2, 1), 30_000), expire_at + 1_001),
        (AcknowledgeStarting(run_id, a2, fence(a2, 1), W1), expire_at + 1_002),
        (
            CompleteWithLease(
                run_id, a2, fence(a2, 2), W1, 1, CompletionOutcome.SUCCEEDED, exit_code=0
            ),
            expire_at + 1_003,
        ),
    ]


def local_script(run_id: str = "run-2") -> list[tuple[Command, int]]:
    """The local executor path (L1..L3) and cancellation (intent, convergence)."""
    a1 = f"{run_id}-a1"
    digest = hashlib.sha256(callback_token(a1).encode()).hexdigest()
    receipt = LocalReceipt(run_id, a1, 1, digest, CompletionOutcome.FAILED, T0 + 12, exit_code=3)
    cancelled = f"{run_id}-c"
    return [
        (AdmitRun(run_id, a1, "p", "t", 1, "local"), T0 + 10),
        (ActivateLocal(run_id, a1, "local", 1, digest), T0 + 11),
        (RecordLocalHandle(run_id, a1, "pid:7", T0 + 12), T0 + 12),
        (CompleteLocal(run_id, a1, receipt), T0 + 13),
        (AdmitRun(cancelled, f"{cancelled}-a1", "p", "t", 1, "shell"), T0 + 14),
        (RequestCancel(cancelled, CancelReason.USER), T0 + 15),
        (ConvergeCancel(cancelled), T0 + 16),
    ]


def dump(path: Path) -> list[str]:
    """Every row and schema object of the committed file, through a read-only connection."""
    with closing(sqlite3.connect(read_only_uri(path), uri=True)) as conn:
        return list(conn.iterdump())


def effect_count(store: EdgeStore, command: Command, now: int) -> int:
    with store.transaction() as tx:
        outcome = apply(load_for(tx, command), command, now)
    assert isinstance(outcome, Applied), outcome
    return len(outcome.effects)


# -- connection set-up ----------------------------------------------------------------------
def test_pragmas_are_set_on_the_one_connection(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "edge.sqlite3")
    try:
        assert store.settings() == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": 5_000,
            "synchronous": 2,  # FULL: an acknowledged transition survives power loss
            "cache_size": -65_536,  # 64 MiB, so source pages stay flat on big files
        }
    finally:
        store.close()


@pytest.mark.parametrize(("mode", "level"), [("NORMAL", 1), ("FULL", 2), ("extra", 3)])
def test_synchronous_and_busy_timeout_are_configurable(
    tmp_path: Path, mode: str, level: int
) -> None:
    store = EdgeStore(tmp_path / "edge.sqlite3", synchronous=mode, busy_timeout_ms=250)
    try:
        settings = store.settings()
        assert (settings["synchronous"], settings["busy_timeout"]) == (level, 250)
        store.reopen()
        assert store.settings() == settings
    finally:
        store.close()


@pytest.mark.parametrize(
    ("synchronous", "busy"), [("OFF", 5_000), ("fast", 5_000), ("FULL", -1), ("FULL", True)]
)
def test_unsafe_or_invalid_settings_are_refused(
    tmp_path: Path, synchronous: str, busy: int
) -> None:
    with pytest.raises(EdgeConfigError):
        EdgeStore(tmp_path / "edge.sqlite3", synchronous=synchronous, busy_timeout_ms=busy)
    assert not (tmp_path / "edge.sqlite3").exists()


def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "edge.sqlite3")
    store.close()
    store.close()  # idempotent
    with pytest.raises(sqlite3.ProgrammingError):
        store.lost_retry_candidates(0, 1)
    with pytest.raises(sqlite3.ProgrammingError), store.transaction():
        pass
    with pytest.raises(sqlite3.ProgrammingError):
        store.project()


def test_the_store_and_adapter_implement_the_ports(tmp_path: Path) -> None:
    """Checked by mypy: the store is the engine's `Storage` and the `Sources`; the adapter is a
    `ConformanceAdapter` with the edge capabilities."""
    edge = EdgeAdapter(tmp_path / "edge.sqlite3")
    adapter: ConformanceAdapter = edge
    storage: Storage = edge.store
    sources: Sources = edge.store
    try:
        assert storage.transaction is not None
        assert sources.lost_retry_candidates(0, 1).items == ()
        assert adapter.capabilities == {
            "run",
            "faults",
            "sources",
            "local_recovery",
            "lost_retry_local",
            "guards",
            "workflow",  # the Workflow traces (SPEC §4, issue 18)
            "approved_action",  # the approval domain's traces (SPEC §5, issue 19)
        }
    finally:
        adapter.close()
    assert (tmp_path / "edge.sqlite3").exists()  # only the temporary factory deletes its file


# -- schema and migrations ------------------------------------------------------------------
ENTITY_TABLES: dict[str, type] = {
    "runs": Run,
    "attempts": Attempt,
    "run_retry_policies": RunRetryPolicy,
    "run_dispatch_leases": Lease,
    "events": Event,
}
#: The Workflow tables (migration 0003, SPEC §4.1, issue 18): each a kernel Workflow entity.
WORKFLOW_TABLES: dict[str, type] = {
    "workflow_admissions": WorkflowAdmission,
    "step_runs": StepRun,
    "task_admissions": TaskAdmission,
}
#: The task store's tables (migration 0002, issue 15): not the Run domain, and not used by
#: recovery or lost retry; they leave the Run tables above exactly as §1.1 has them.
TASK_TABLES = frozenset({"tasks", "task_revisions", "task_schedules"})
#: The approval domain's tables (migration 0004, SPEC §5, issue 19): the columns of
#: `kernel.approved_action.codec`, which is also the canonical projection's row.
APPROVAL_TABLES: dict[str, tuple[str, ...]] = {
    "approved_actions": ACTION_COLUMNS,
    "action_events": ACTION_EVENT_COLUMNS,
}


#: Every index of the created schema and what needs it. The first two are §1.1's own; each other
#: one has a user that is neither recovery nor lost retry (CAD-16, docs/decisions.md E-2), so
#: recovery and retry ride on schema the runtime needs anyway and add nothing of their own.
SCHEMA_INDEXES: dict[str, tuple[str, str] | None] = {
    "run_dispatch_leases_by_expiry": None,  # §1.1: (status, expires_at_ms, attempt_id)
    "run_dispatch_leases_one_leased": None,  # §1.1: at most one leased row per Attempt
    "runs_by_status": ("sources", "local_dispatch_candidates"),  # also cancel convergence
    "run_dispatch_leases_by_run": ("statements", "select_leases_of_run"),  # aggregate load
    "task_schedules_by_due": ("tasks", "due_schedules"),  # the schedule phase (issue 15)
    "step_runs_by_status": ("sources", "task_admission_candidates"),  # Workflow phase 4
    "task_admissions_by_run": ("workflow", "select_task_admissions_of_run"),  # Workflow load
    # The Approved Action ports' due indexes and `qlk approvals` (issue 19).
    "approved_actions_dispatch_due": ("approval", "approval_dispatch"),
    "approved_actions_recovery_due": ("approval", "approval_recovery"),
    "approved_actions_by_request": ("approval", "list_actions"),
}


@pytest.mark.spec("CAD-16")
def test_the_created_schema_is_the_run_domain_of_1_1(tmp_path: Path) -> None:
    """CAD-16: one migration creates exactly the §1.1 tables, each with exactly the kernel
    entity's fields as columns, plus the version record; nothing else exists (no view, no
    trigger), and every index beyond §1.1's two is used by a statement outside recovery and
    lost retry, shown by its query plan."""
    store = EdgeStore(tmp_path / "edge.sqlite3")
    store.close()
    with closing(sqlite3.connect(tmp_path / "edge.sqlite3")) as conn:
        objects = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        tables = {name for kind, name in objects if kind == "table"}
        assert tables == set(ENTITY_TABLES) | {"schema_version"} | TASK_TABLES | set(
            WORKFLOW_TABLES
        ) | set(APPROVAL_TABLES)
        for table, entity in (ENTITY_TABLES | WORKFLOW_TABLES).items():
            columns = [
                row[1] for row in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))
            ]
            assert columns == [f.name for f in dataclasses.fields(entity)], table
        for table, expected in APPROVAL_TABLES.items():
            columns = [
                row[1] for row in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))
            ]
            assert tuple(columns) == expected, table
        indexes = {name for kind, name in objects if kind == "index"}
        assert indexes == set(SCHEMA_INDEXES)
        assert not {kind for kind, _ in objects} - {"table", "index"}  # no view, no trigger
        expiry = conn.execute(
            "SELECT name FROM pragma_index_info('run_dispatch_leases_by_expiry') ORDER BY seqno"
        ).fetchall()
        assert [c for (c,) in expiry] == ["status", "expires_at_ms", "attempt_id"]
        for index, user in SCHEMA_INDEXES.items():
            if user is None:
                continue
            kind, name = user
            statement = {
                "sources": SOURCES,
                "statements": STATEMENTS,
                "tasks": TASKS,
                "workflow": WORKFLOW,
                "approval": APPROVAL,
            }[kind][name]
            params = dict.fromkeys(re.findall(r":(\w+)", statement), 1)
            rows = conn.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()
            assert any(index in str(row[3]) for row in rows), (index, name, rows)
    assert [m.name for m in migrations()] == [
        "0001_initial",
        "0002_tasks",
        "0003_workflows",
        "0004_approved_actions",
    ]


@pytest.mark.spec("CAD-16")
def test_recovery_and_retry_add_no_table_index_or_migration(tmp_path: Path) -> None:
    """CAD-16: recovery and retry add no table, index or migration. No runtime SQL section
    (statements or sources) creates, alters or drops anything, and replaying every named
    startup-recovery and lost-retry trace of the corpus leaves the schema objects and the
    recorded migrations exactly as the one migration created them."""
    ddl = re.compile(r"\b(CREATE|ALTER|DROP|REINDEX)\b", re.IGNORECASE)
    for name, text in {**STATEMENTS, **SOURCES}.items():
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        assert not ddl.search(body), name
    traces = sorted(
        path for path in RUN_CORPUS.glob("*.jsonl") if path.name.startswith(("REC-", "RETRY-"))
    )
    assert len(traces) >= 10
    replayed = 0
    for path in traces:
        db = tmp_path / f"{path.stem}.sqlite3"
        EdgeStore(db).close()
        before = _schema(db)
        result = replay(loads(path.read_text()), functools.partial(EdgeAdapter, db))
        if result.missing_capabilities:
            continue  # a cluster-only trace: the edge runner does not run it
        assert result.divergence is None, path.name
        assert _schema(db) == before, path.name
        replayed += 1
    assert replayed >= 10


def _schema(path: Path) -> list[tuple[str, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        objects = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        versions = conn.execute("SELECT * FROM schema_version ORDER BY version").fetchall()
    return [tuple(map(str, row)) for row in objects + versions]


def test_migration_records_its_version_and_rerunning_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "edge.sqlite3"
    store = EdgeStore(path)
    store.close()
    before = dump(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert conn.execute("SELECT version, name, checksum FROM schema_version").fetchall() == [
            (m.version, m.name, m.checksum) for m in migrations()
        ]
        assert migrate(conn) == []
    EdgeStore(path).close()  # opening again migrates nothing either
    assert dump(path) == before


def test_a_changed_or_unknown_migration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "edge.sqlite3"
    EdgeStore(path).close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE schema_version SET checksum = ? WHERE version = 1", ("0" * 64,))
    with pytest.raises(MigrationError, match="changed"):
        EdgeStore(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "UPDATE schema_version SET checksum = ? WHERE version = 1",
            (migrations()[0].checksum,),
        )
        future = len(migrations()) + 1
        conn.execute(
            "INSERT INTO schema_version VALUES (?, ?, ?)",
            (future, f"{future:04d}_future", "1" * 64),
        )
    with pytest.raises(MigrationError, match="newer"):
        EdgeStore(path)


def test_a_failed_migration_leaves_no_partial_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = migrate_module.Migration(
        1, "0001_initial", migrations()[0].text + "\nCREATE TABLE runs (x INTEGER);\n"
    )
    monkeypatch.setattr(migrate_module, "migrations", lambda: (broken,))
    path = tmp_path / "edge.sqlite3"
    with pytest.raises(sqlite3.OperationalError):
        EdgeStore(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_migration_scripts_split_into_complete_statements() -> None:
    assert split_statements("-- c\nCREATE TABLE a (x);\n\nCREATE TABLE b (y);\n-- end\n") == [
        "-- c\nCREATE TABLE a (x);",
        "CREATE TABLE b (y);",
    ]
    with pytest.raises(MigrationError):
        split_statements("CREATE TABLE a (x)")


def test_named_sections_hold_exactly_one_statement() -> None:
    assert parse_sections("-- file\n-- name: a\nSELECT 1;\n-- after\n", "t") == {"a": "SELECT 1;"}
    for bad in (
        "-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n",  # a name twice
        "-- name: a\nSELECT 1; SELECT 2;\n",  # two statements
        "-- name: a\nSELECT 1\n",  # incomplete
        "SELECT 1;\n-- name: a\nSELECT 1;\n",  # text before the first header
        "-- name: a\n-- only a comment\n",
    ):
        with pytest.raises(SqlFileError):
            parse_sections(bad, "t")
    assert {"update_run", "update_attempt", "update_policy", "update_lease"} <= set(STATEMENTS)


# -- fencing at the resource ----------------------------------------------------------------
@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[EdgeStore, RunAggregate]]:
    """A Run with a policy whose Attempt is `starting` under lease generation 1, version 2."""
    store = EdgeStore(tmp_path / "edge.sqlite3")
    for command, now in remote_script()[:3]:
        assert execute(store, command, now).kind.value == "applied"
    with store.transaction() as tx:
        agg = tx.load_run("run-1")
    assert agg is not None
    yield store, agg
    store.close()


def _stale(store: EdgeStore, effect: Effect) -> None:
    with pytest.raises(StaleWrite), store.transaction() as tx:
        tx.execute(effect)


@pytest.mark.spec("LEASE-09")
def test_every_guarded_write_with_a_stale_guard_affects_zero_rows(
    started: tuple[EdgeStore, RunAggregate],
) -> None:
    store, agg = started
    before = store.project()
    run, attempt, policy, lease = agg.run, agg.attempts[0], agg.policy, agg.leases[0]
    assert policy is not None
    assert (attempt.status, lease.status, lease.version) == (
        AttemptStatus.STARTING,
        LeaseStatus.LEASED,
        2,
    )
    later = dataclasses.replace
    # The raw statement itself: a wrong token digest matches no row (the fence at the resource).
    params = {f.name: getattr(lease, f.name) for f in dataclasses.fields(lease)}
    params |= {"status": "released", "release_reason": "declined", "version": 3}
    params |= {"expected_version": 2, "expected_status": "leased"}
    with store.transaction() as tx:
        conn = tx._conn
        wrong = params | {"token_digest": lease_token("someone-else", 1).digest()}
        assert conn.execute(STATEMENTS["update_lease"], wrong).rowcount == 0
        assert (
            conn.execute(STATEMENTS["update_lease"], params | {"expected_version": 1}).rowcount == 0
        )
        assert (
            conn.execute(STATEMENTS["update_lease"], params | {"lease_generation": 2}).rowcount == 0
        )
    # Through the runner's effect execution: each stale guard raises StaleWrite.
    released = later(lease, status=LeaseStatus.RELEASED, version=3)
    _stale(store, UpdateLease(released, expected_version=1, expected_status=LeaseStatus.LEASED))
    _stale(store, UpdateLease(released, 2, LeaseStatus.COMPLETED))
    _stale(
        store,
        UpdateLease(later(released, token_digest="f" * 64), 2, LeaseStatus.LEASED),
    )
    _stale(store, UpdateRun(later(run, version=run.version + 1), run.version - 1))
    _stale(store, UpdateRun(later(run, run_id="nope"), run.version))
    _stale(
        store, UpdateAttempt(later(attempt, status=AttemptStatus.LOST), AttemptStatus.CLAIMED, 2)
    )
    _stale(
        store, UpdateAttempt(later(attempt, status=AttemptStatus.LOST), AttemptStatus.STARTING, 1)
    )
    _stale(store, UpdatePolicy(later(policy, version=policy.version + 1), policy.version + 1))
    # Inserts that collide: another writer got there first.
    _stale(store, InsertRun(run))
    _stale(store, InsertAttempt(attempt))
    _stale(store, InsertAttempt(later(attempt, attempt_id="other-id")))  # (run_id, number)
    _stale(store, InsertAttempt(later(attempt, attempt_id="x", run_id="ghost")))  # no such Run
    _stale(store, InsertLease(lease))
    _stale(store, InsertLease(later(lease, lease_generation=2)))  # a second leased row
    dedupe = before["events"][0]["dedupe_key"]
    event = Event("evt:run-1:1", "run-1", 1, "run.queued", Actor.TRIGGER, dedupe, T0)
    _stale(store, AppendEvent(event))  # seq 1 exists
    _stale(store, AppendEvent(later(event, event_id="e-x", seq=99)))  # dedupe key exists
    assert store.project() == before


class _StaleLoads:
    """Storage whose transactions load a remembered (stale) aggregate: the kernel decides on
    old state, and only the guarded statement can notice."""

    def __init__(self, inner: EdgeStore, stale: RunAggregate) -> None:
        self._inner = inner
        self._stale = stale

    @contextmanager
    def transaction(self) -> Iterator[StorageTransaction]:
        with self._inner.transaction() as tx:
            yield _StaleTx(tx, self._stale)


class _StaleTx:
    def __init__(self, inner: EdgeTransaction, stale: RunAggregate) -> None:
        self._inner = inner
        self._stale = stale

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._stale

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        return self._stale

    def execute(self, effect: Effect) -> None:
        self._inner.execute(effect)


def test_a_decision_on_stale_state_is_raced_and_writes_nothing(
    started: tuple[EdgeStore, RunAggregate],
) -> None:
    store, stale = started
    # Another writer moves the Attempt on (running, lease version 3).
    running = AcknowledgeRunning("run-1", "run-1-a1", fence("run-1-a1", 2), W1, "pid:1", T0 + 3)
    assert execute(store, running, T0 + 3).kind.value == "applied"
    after = store.project()
    # A completion decided on the stale aggregate (the old fence still matches it).
    complete = CompleteWithLease(
        "run-1", "run-1-a1", fence("run-1-a1", 2), W1, 1, CompletionOutcome.SUCCEEDED, 0
    )
    outcome = execute(_StaleLoads(store, stale), complete, T0 + 4)
    assert (outcome.kind.value, outcome.code) == ("raced", Code.CAS_CONFLICT)
    assert store.project() == after


# -- faults before commit at every effect ---------------------------------------------------
@pytest.mark.spec("RUN-06", "RETRY-10")
@pytest.mark.parametrize("script", [remote_script, local_script], ids=["remote", "local"])
def test_a_fault_at_any_effect_of_any_write_leaves_the_file_unchanged(
    tmp_path: Path, script: Callable[[], list[tuple[Command, int]]]
) -> None:
    """For each write of the script, an I/O error at effect k (every k) and a crash before
    commit leave the committed file exactly as before (rows and schema, read by another
    connection), also after a reopen; the write then commits and matches the oracle."""
    path = tmp_path / "edge.sqlite3"
    store = EdgeStore(path)
    oracle = ReferenceStore()
    faults = 0
    try:
        for command, now in script():
            before, projection = dump(path), store.project()
            count = effect_count(store, command, now)
            for k in range(1, count + 1):
                result = run_step(store, command, now, Fault(FaultKind.IO_ERROR, at_effect=k))
                assert result.kind == "error"
                assert dump(path) == before
                faults += 1
            crashed = run_step(store, command, now, Fault(FaultKind.CRASH_BEFORE_COMMIT))
            assert crashed.kind == "crashed"
            assert (dump(path), store.project()) == (before, projection)
            store.reopen()
            assert (dump(path), store.project()) == (before, projection)
            expected = execute(oracle, command, now)
            assert expected.kind.value == "applied", (command.name, expected)
            assert run_step(store, command, now, None).kind == "applied"
            store.reopen()
            assert store.project() == oracle.project()
    finally:
        store.close()
    assert faults >= 20


@pytest.mark.spec("LEASE-10")
def test_no_table_or_log_holds_a_raw_lease_token(tmp_path: Path) -> None:
    path = tmp_path / "edge.sqlite3"
    store = EdgeStore(path)
    tokens: list[Secret] = []
    try:
        for command, now in remote_script():
            token = getattr(command, "lease_token", None) or getattr(
                getattr(command, "fence", None), "lease_token", None
            )
            if isinstance(token, Secret):
                tokens.append(token)
            assert execute(store, command, now).kind.value == "applied"
        files = sorted(p for p in tmp_path.iterdir() if p.is_file())
        assert {p.name for p in files} >= {"edge.sqlite3", "edge.sqlite3-wal"}
        raw = b"".join(p.read_bytes() for p in files)
        leases = store.project()["leases"]
    finally:
        store.close()
    assert tokens
    for token in tokens:
        assert token.reveal().encode() not in raw
    assert {lease["token_digest"] for lease in leases} == {t.digest() for t in tokens}
    assert all(lease["token_digest"].encode() in raw for lease in leases)


# -- concurrent writers ---------------------------------------------------------------------
def _race_commands(run_id: str) -> list[tuple[Command, int]]:
    a1 = f"{run_id}-a1"
    return [
        (RenewLease(run_id, a1, fence(a1, 2), W1, 30_000), T0 + 20_000),
        (
            CompleteWithLease(run_id, a1, fence(a1, 2), W1, 1, CompletionOutcome.SUCCEEDED, 0),
            T0 + 20_001,
        ),
        (ExpireWithLease(run_id, a1, 1, Profile.EDGE), T0 + 40_000),
    ]


@pytest.mark.spec("LEASE-08")
def test_concurrent_renew_completion_and_expiry_end_in_a_serial_state(tmp_path: Path) -> None:
    """Three connections (as three processes) race renew, completion and expiry of one lease;
    `BEGIN IMMEDIATE` serializes them, so the file ends in the state of some serial order,
    and completion and expiry never both apply."""
    path = tmp_path / "edge.sqlite3"
    stores = [EdgeStore(path, synchronous="NORMAL") for _ in range(3)]
    try:
        for round_ in range(6):
            run_id = f"race-{round_}"
            for command, now in remote_script(run_id)[:3]:
                assert execute(stores[0], command, now).kind.value == "applied"
            race = _race_commands(run_id)
            barrier = threading.Barrier(3)
            kinds: dict[int, str] = {}

            def worker(
                i: int,
                race: list[tuple[Command, int]] = race,
                barrier: threading.Barrier = barrier,
                kinds: dict[int, str] = kinds,
            ) -> None:
                barrier.wait()
                command, now = race[i]
                kinds[i] = execute(stores[i], command, now).kind.value

            # Vary which thread arrives at the barrier last (it tends to run first).
            start_order = list(itertools.permutations(range(3)))[round_]
            threads = [threading.Thread(target=worker, args=(i,)) for i in start_order]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert not (kinds[1] == "applied" and kinds[2] == "applied"), kinds
            final = _project_run(stores[0], run_id)
            assert final in _serial_states(run_id), kinds
    finally:
        for store in stores:
            store.close()


def _project_run(store: EdgeStore, run_id: str) -> object:
    projection = store.project()
    return {
        table: [row for row in rows if row["run_id"] == run_id]
        for table, rows in projection.items()
    }


def _serial_states(run_id: str) -> list[object]:
    states: list[object] = []
    for order in itertools.permutations(range(3)):
        oracle = ReferenceStore()
        for command, now in remote_script(run_id)[:3]:
            execute(oracle, command, now)
        race = _race_commands(run_id)
        for i in order:
            execute(oracle, *race[i])
        states.append(oracle.project())
    return states
