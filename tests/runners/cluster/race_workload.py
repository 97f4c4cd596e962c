"""Replica races on one PostgreSQL schema (issue 5 item 3): the workload of one OS process.

Every process is a replica of the cluster runner and a Worker at once, with a `ClusterStore` (its
own connection) and a `ClusterRuntime` on the same schema as all the others. Its loop admits its
share of the Runs, then mixes, at random with a fixed seed (`random.Random(seed)`), the
operations that race on the shared rows:

- dispatch: `local_dispatch_candidates` (the latest `claimed` Attempt of a queued Run) and
  `GrantLease` to its own current Worker session;
- Worker: `AcknowledgeStarting`, `AcknowledgeRunning`, `RenewLease` at one third of the lease,
  `CompleteWithLease`, each with the fence of the lease it holds; some leases are abandoned
  (the execution "crashed"), some are started or completed right at their expiry instant, on
  purpose, so that the Worker and the server race on one lease generation (LEASE-08);
- lease expiry: `lease_expiry_candidates` and `ExpireWithLease(profile=CLUSTER)`, now and then
  with a generation that is no longer current;
- runtime recovery: `runtime_recovery_page` with `NotRunningEvidence` for the Attempts whose
  execution the Workers declared gone (table `race_not_running`: a restarted session's id, or
  an abandoned Attempt's id), `UnknownEvidence(probe_failed)` for the rest;
- lost retry: `lost_retry_page`, with a fresh Attempt id per call;
- Worker restarts: a new session id and generation that forgets every lease it held; its old
  fences are then replayed now and then ("zombies") and must never be Applied.

Time is the database's `statement_timestamp()`, read in the transaction after the row locks as
`DatabaseClock` does, and sped up by `warp` around a fixed epoch (`WarpedDatabaseClock`): the
kernel's shortest lease is 5 s (LEASE_DURATION_MIN_MS), so the race needs many expiries per
second of real time. It is still one time source for every process, and monotonic.

Each process writes what it sent and what came back to a JSON file (counts by command, kind and
code; the Applied facts with their fences; the zombie replays; any exception with its traceback);
the test reads the files and the backdoor projection and checks them.
"""

from __future__ import annotations

import json
import random
import secrets
import time
import traceback
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg
from psycopg import sql

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    Actor,
    AdmitRun,
    Applied,
    Attempt,
    Command,
    CompleteWithLease,
    CompletionOutcome,
    Event,
    Evidence,
    ExpireWithLease,
    Fence,
    GrantLease,
    Lease,
    NotRunningEvidence,
    Outcome,
    PolicyDefinition,
    Profile,
    Raced,
    RenewLease,
    Run,
    RunAggregate,
    RunRetryPolicy,
    Safety,
    Secret,
    UnknownEvidence,
    UnknownReason,
    WorkerSession,
    WorkerSessionStatus,
)
from kernel.selection import Candidate
from runners.cluster.runtime import ClusterRuntime, TransientConflictExhausted
from runners.cluster.store import ClusterStore, Projection
from runners.passes import LostRetryUnavailable, RuntimeRecoveryUnavailable
from runners.rows import ATTEMPT_TYPES, LEASE_TYPES, POLICY_TYPES, RUN_TYPES

EXECUTOR: Final = "shell"
LOCAL_EXECUTOR: Final = "local"
FAR: Final = 10**15  # a Worker session expiry far beyond any (warped) clock reading
MAX_ATTEMPTS: Final = 3
TERMINAL: Final = ("succeeded", "failed", "cancelled", "timed_out")
PAGE: Final = 8  # candidates per source page: a page is one short transaction per candidate

#: The Workers' declarations "this execution no longer runs" (a session id or an Attempt id),
#: read by the recovery evidence port of every process. A test table, not the runner's.
CREATE_NOT_RUNNING: Final = "CREATE TABLE race_not_running (key text PRIMARY KEY)"
_DECLARE_NOT_RUNNING: Final = (
    "INSERT INTO race_not_running (key) VALUES (%(key)s) ON CONFLICT (key) DO NOTHING"
)
_NOT_RUNNING: Final = (
    "SELECT EXISTS (SELECT 1 FROM race_not_running AS n WHERE n.key = %(attempt_id)s "
    "OR n.key = (SELECT a.worker_session_id FROM attempts AS a "
    "WHERE a.attempt_id = %(attempt_id)s))"
)
_LEASED_GENERATIONS: Final = (
    "SELECT attempt_id, lease_generation FROM run_dispatch_leases "
    "WHERE status = 'leased' AND attempt_id = ANY(%(ids)s)"
)
_PROGRESS: Final = (
    "SELECT count(*), count(*) FILTER (WHERE status IN "
    "('succeeded', 'failed', 'cancelled', 'timed_out')) FROM runs"
)
_NOW_US: Final = "SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::bigint"


def connect(dsn: str, schema: str) -> psycopg.Connection[Any]:
    """An autocommit connection of the test's own whose `search_path` is `schema`."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    return conn


def database_now_us(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(_NOW_US).fetchone()
    assert row is not None
    return int(row[0])


class WarpedDatabaseClock:
    """The database's `statement_timestamp()` (µs), sped up `factor` times around `epoch_us`,
    in milliseconds: one shared, monotonic time source whose leases expire `factor` times
    sooner in real time. Read on the transaction's connection, after the locks (the
    `TransactionClock`
    port of `runners.cluster.clock`)."""

    def __init__(self, epoch_us: int, factor: int) -> None:
        self.epoch_us = epoch_us
        self.factor = factor

    def virtual_ms(self, real_us: int) -> int:
        return (self.epoch_us + (real_us - self.epoch_us) * self.factor) // 1000

    def now_ms(self, conn: psycopg.Connection[Any]) -> int:
        return self.virtual_ms(database_now_us(conn))


def policy() -> PolicyDefinition:
    """Lost Runs are retried at once, up to three Attempts (the REC-13 trace's policy)."""
    return PolicyDefinition(
        max_attempts=MAX_ATTEMPTS,
        retry_on_lost=True,
        safety=Safety.IDEMPOTENT,
        backoff_base_ms=0,
        backoff_max_ms=0,
    )


def admit(run_id: str, executor_type: str = EXECUTOR) -> AdmitRun:
    return AdmitRun(
        run_id=run_id,
        attempt_id=f"{run_id}-a1",
        project_id="proj",
        task_id="task",
        task_revision=1,
        executor_type=executor_type,
        provider_policy=policy(),
    )


def new_token() -> Secret:
    return Secret.of(secrets.token_urlsafe(32), "lease_token")


def outcome_key(name: str, outcome: Outcome) -> str:
    return f"{name}|{outcome.kind.value}|{outcome.code.value}"


@dataclass(frozen=True, slots=True)
class RaceConfig:
    dsn: str
    schema: str
    out_dir: str
    processes: int
    runs: int
    seed: int
    epoch_us: int
    warp: int = 4
    deadline_s: float = 60.0
    max_held: int = 16
    lease_ms: tuple[int, int] = (5_000, 6_500)
    restart_every_s: tuple[float, float] = (3.0, 6.0)

    def share(self, index: int) -> list[str]:
        """The Run ids process `index` admits."""
        return [f"r{index}-{i:04d}" for i in range(index, self.runs, self.processes)]


@dataclass(slots=True)
class Held:
    """One lease a Worker session holds: its fence and what the Worker plans to do with it."""

    run_id: str
    attempt_id: str
    lease_generation: int
    token: Secret
    version: int
    worker: WorkerSession
    duration_ms: int
    expires_at_ms: int
    renewed_at_ms: int
    plan: str  # normal | abandon | late_start | late_complete
    stage: str = "granted"  # granted | starting | running
    next_at_ms: int = 0
    started_at_ms: int = 0
    finish_at_ms: int = 0
    probes: int = 0

    def fence(self) -> Fence:
        return Fence(
            worker_id=self.worker.worker_id,
            worker_session_id=self.worker.session_id,
            worker_generation=self.worker.generation,
            lease_generation=self.lease_generation,
            lease_token=self.token,
            expected_version=self.version,
        )


@dataclass(slots=True)
class Report:
    index: int
    counts: Counter[str] = field(default_factory=Counter)
    pages: Counter[str] = field(default_factory=Counter)
    typed_errors: Counter[str] = field(default_factory=Counter)
    #: What the Worker's calls made right at the expiry instant got: `plan|command|kind|code`.
    boundary: Counter[str] = field(default_factory=Counter)
    #: Applied facts: [command, attempt_id, lease_generation, session_id, code, outcome].
    facts: list[list[Any]] = field(default_factory=list)
    #: Replays of stale fences: [command, attempt_id, lease_generation, session_id, kind, code].
    zombies: list[list[Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    operations: int = 0
    iterations: int = 0
    restarts: int = 0
    transient_retries: int = 0
    finished_all: bool = False
    elapsed_s: float = 0.0

    def dump(self, path: Path) -> None:
        data = {
            "index": self.index,
            "counts": dict(self.counts),
            "pages": dict(self.pages),
            "typed_errors": dict(self.typed_errors),
            "boundary": dict(self.boundary),
            "facts": self.facts,
            "zombies": self.zombies,
            "errors": self.errors,
            "operations": self.operations,
            "iterations": self.iterations,
            "restarts": self.restarts,
            "transient_retries": self.transient_retries,
            "finished_all": self.finished_all,
            "elapsed_s": round(self.elapsed_s, 3),
        }
        path.write_text(json.dumps(data), encoding="utf-8")


class Replica:
    """One process of the race: a replica of the runner with a Worker of its own."""

    def __init__(self, cfg: RaceConfig, index: int) -> None:
        self.cfg = cfg
        self.index = index
        self.rng = random.Random(cfg.seed * 7919 + index)  # a fixed seed per process
        self.report = Report(index)
        self.store = ClusterStore(cfg.dsn, cfg.schema)
        self.clock = WarpedDatabaseClock(cfg.epoch_us, cfg.warp)
        self.rt = ClusterRuntime(self.store, clock=self.clock)
        self.aux = connect(cfg.dsn, cfg.schema)
        self.generation = 0
        self.worker = self._session()
        self.held: dict[str, Held] = {}
        self.zombies: list[Held] = []
        # Host estimate of the warped time, for scheduling only (commands read the database).
        self.offset_ms = self.rt.now_ms() - self.clock.virtual_ms(time.time_ns() // 1000)

    # -- plumbing ---------------------------------------------------------------------------
    def close(self) -> None:
        self.aux.close()
        self.store.close()

    def vnow(self) -> int:
        return self.clock.virtual_ms(time.time_ns() // 1000) + self.offset_ms

    def _session(self) -> WorkerSession:
        self.generation += 1
        return WorkerSession(
            worker_id=f"w{self.index}",
            session_id=f"w{self.index}-s{self.generation}",
            generation=self.generation,
            status=WorkerSessionStatus.ONLINE,
            session_expires_at_ms=FAR,
            executor_types=(EXECUTOR,),
        )

    def send(self, command: Command, name: str | None = None) -> Outcome | None:
        """One command through the runtime; a transient conflict that survived the bounded retry
        is typed, counted and returns None (every try rolled back)."""
        label = name or command.name
        self.report.operations += 1
        try:
            outcome = self.rt.execute(command)
        except TransientConflictExhausted as exc:
            self.report.typed_errors[f"{label}|{exc.code}"] += 1
            return None
        self.report.counts[outcome_key(label, outcome)] += 1
        return outcome

    def fact(
        self, command: str, held: Held | None, attempt_id: str, code: str, **extra: Any
    ) -> None:
        self.report.facts.append(
            [
                command,
                attempt_id,
                extra.get("generation", held.lease_generation if held else None),
                held.worker.session_id if held else None,
                code,
                extra.get("outcome"),
            ]
        )

    def declare_not_running(self, key: str) -> None:
        self.aux.execute(_DECLARE_NOT_RUNNING, {"key": key})

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        cfg, rng = self.cfg, self.rng
        start = time.monotonic()
        deadline = start + cfg.deadline_s
        to_admit = cfg.share(self.index)
        next_restart = start + rng.uniform(1.0, cfg.restart_every_s[0])
        next_check = start + 0.5
        due: dict[str, float] = {"dispatch": 0.0, "expiry": 0.0, "recovery": 0.0, "retry": 0.0}
        gaps = {"dispatch": 0.02, "expiry": 0.15, "recovery": 0.15, "retry": 0.15}
        while time.monotonic() < deadline:
            self.report.iterations += 1
            if to_admit:
                for run_id in to_admit[:25]:
                    self.send(admit(run_id))
                del to_admit[:25]
            self.worker_step()
            now = time.monotonic()
            ready = [name for name, at in due.items() if at <= now]
            if ready:
                name = rng.choice(ready)
                getattr(self, f"op_{name}")()
                due[name] = time.monotonic() + rng.uniform(0.5, 1.5) * gaps[name]
            if self.zombies and rng.random() < 0.2:
                self.zombie_probe()
            if time.monotonic() >= next_restart:
                self.restart()
                next_restart = time.monotonic() + rng.uniform(*cfg.restart_every_s)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 0.5
                if not to_admit and self.all_terminal():
                    self.report.finished_all = True
                    break
            time.sleep(0.001)
        self.report.elapsed_s = time.monotonic() - start
        self.report.transient_retries = self.rt.transient_retries

    def all_terminal(self) -> bool:
        row = self.aux.execute(_PROGRESS).fetchone()
        assert row is not None
        return int(row[0]) == self.cfg.runs and int(row[1]) == self.cfg.runs

    # -- replica operations -----------------------------------------------------------------
    def op_dispatch(self) -> None:
        room = self.cfg.max_held - len(self.held)
        if room <= 0:
            return
        page = self.store.local_dispatch_candidates(EXECUTOR, 32)
        if not page.items:
            return
        picks = self.rng.sample(
            list(page.items), min(len(page.items), room, self.rng.randint(1, 6))
        )
        for candidate in picks:
            assert candidate.attempt_id is not None
            self.grant(candidate.run_id, candidate.attempt_id)

    def grant(self, run_id: str, attempt_id: str) -> None:
        rng = self.rng
        duration = rng.randint(*self.cfg.lease_ms)
        token = new_token()
        outcome = self.send(
            GrantLease(
                run_id=run_id,
                attempt_id=attempt_id,
                worker=self.worker,
                lease_token=token,
                lease_duration_ms=duration,
            )
        )
        if not isinstance(outcome, Applied):
            return
        attempt = outcome.aggregate.attempt(attempt_id)
        assert attempt is not None
        assert attempt.lease_generation is not None
        lease = outcome.aggregate.lease(attempt_id, attempt.lease_generation)
        assert lease is not None
        roll = rng.random()
        plan = (
            "abandon"
            if roll < 0.08
            else "late_start"
            if roll < 0.18
            else "late_complete"
            if roll < 0.30
            else "normal"
        )
        held = Held(
            run_id=run_id,
            attempt_id=attempt_id,
            lease_generation=lease.lease_generation,
            token=token,
            version=lease.version,
            worker=self.worker,
            duration_ms=duration,
            expires_at_ms=lease.expires_at_ms,
            renewed_at_ms=lease.renewed_at_ms,
            plan=plan,
        )
        if plan == "abandon":  # the execution crashes at some point after its start
            held.finish_at_ms = lease.acquired_at_ms + rng.randint(300, duration * 3 // 2)
        held.next_at_ms = (
            self.at_expiry(held)
            if plan == "late_start"
            else lease.acquired_at_ms + rng.randint(0, 300)
        )
        self.held[attempt_id] = held
        self.fact("grant_lease", held, attempt_id, outcome.code.value)

    def at_expiry(self, held: Held) -> int:
        """A time just around the lease's expiry instant: from 400 ms of real time before it to
        50 ms after (at warp 4); the call itself arrives a little later than planned, the more
        so the busier the machine, so both sides of the instant are met."""
        return held.expires_at_ms + self.rng.randint(-1_600, 200)

    def op_expiry(self) -> None:
        page = self.store.lease_expiry_candidates(self.rt.now_ms(), PAGE)
        if not page.items:
            return
        ids = [c.attempt_id for c in page.items]
        generations = dict(self.aux.execute(_LEASED_GENERATIONS, {"ids": ids}).fetchall())
        items = list(page.items)
        self.rng.shuffle(items)
        for candidate in items:
            assert candidate.attempt_id is not None
            generation = generations.get(candidate.attempt_id)
            if generation is None:
                self.report.counts["expire_with_lease|skipped|no_leased_row"] += 1
                continue
            stale = generation > 1 and self.rng.random() < 0.1
            generation = generation - 1 if stale else generation
            name = "expire_with_lease:stale_generation" if stale else "expire_with_lease"
            outcome = self.send(
                ExpireWithLease(
                    run_id=candidate.run_id,
                    attempt_id=candidate.attempt_id,
                    lease_generation=generation,
                    profile=Profile.CLUSTER,
                ),
                name,
            )
            if isinstance(outcome, Applied):
                self.fact(
                    name, None, candidate.attempt_id, outcome.code.value, generation=generation
                )

    def evidence(self, candidate: Candidate[tuple[int, int, str]]) -> Evidence:
        row = self.aux.execute(_NOT_RUNNING, {"attempt_id": candidate.attempt_id}).fetchone()
        if row is not None and row[0]:
            return NotRunningEvidence()
        return UnknownEvidence(reason=UnknownReason.PROBE_FAILED)

    def op_recovery(self) -> None:
        self.report.operations += 1
        try:
            page = self.rt.runtime_recovery_page(PAGE, self.evidence)
            outcomes = page.outcomes
        except RuntimeRecoveryUnavailable as exc:
            self.report.typed_errors[f"runtime_recovery_page|{exc.code}"] += 1
            outcomes = exc.partial.outcomes
        for attempt_id, kind, code in outcomes:
            self.report.counts[f"recover_runtime|{kind}|{code}"] += 1
            if kind == "applied":
                self.fact("recover_runtime", None, attempt_id, code)

    def new_attempt_id(self, run_id: str) -> str:
        return f"{run_id}.{self.index}{self.rng.getrandbits(32):08x}"

    def op_retry(self) -> None:
        self.report.operations += 1
        try:
            result = self.rt.lost_retry_page(PAGE, self.new_attempt_id)
        except LostRetryUnavailable as exc:
            self.report.typed_errors[f"lost_retry_page|{exc.code}"] += 1
            result = exc.partial
        for name in ("scanned", "scheduled", "requeued", "failed", "raced", "errored"):
            self.report.pages[f"lost_retry_page|{name}"] += getattr(result, name)

    # -- Worker -----------------------------------------------------------------------------
    def restart(self) -> None:
        """A Worker restart: declare the old session's executions gone, forget its leases (they
        become zombies), come back with a new session id and generation."""
        self.declare_not_running(self.worker.session_id)
        self.zombies.extend(self.held.values())
        self.held.clear()
        self.worker = self._session()
        self.report.restarts += 1
        del self.zombies[:-200]

    def lose(self, held: Held) -> None:
        """The Worker learnt that it lost the lease: stop the execution, say so, forget it."""
        if held.stage != "granted":
            self.declare_not_running(held.attempt_id)
        self.held.pop(held.attempt_id, None)
        self.zombies.append(held)

    def worker_step(self) -> None:
        now = self.vnow()
        due = sorted(
            (h for h in self.held.values() if h.next_at_ms <= now), key=lambda h: h.next_at_ms
        )
        for held in due:
            self.act(held)

    def act(self, held: Held) -> None:
        rng = self.rng
        now = self.vnow()
        if held.plan == "abandon" and held.stage != "granted" and now >= held.finish_at_ms:
            self.declare_not_running(held.attempt_id)  # the execution crashed: evidence only
            self.held.pop(held.attempt_id)
            return
        if held.stage == "granted":
            outcome = self.send(
                AcknowledgeStarting(
                    run_id=held.run_id,
                    attempt_id=held.attempt_id,
                    fence=held.fence(),
                    worker=held.worker,
                )
            )
            if held.plan == "late_start":
                self.at_boundary(held, "acknowledge_starting", outcome)
            if not isinstance(outcome, Applied):
                self.failed(held, outcome)
                return
            held.version += 1
            held.stage = "starting"
            held.started_at_ms = outcome.aggregate.run.updated_at_ms
            held.next_at_ms = now + rng.randint(0, 300)
            self.fact("acknowledge_starting", held, held.attempt_id, outcome.code.value)
            return
        if held.stage == "starting":
            outcome = self.send(
                AcknowledgeRunning(
                    run_id=held.run_id,
                    attempt_id=held.attempt_id,
                    fence=held.fence(),
                    worker=held.worker,
                    executor_handle=f"pid:{self.index}:{held.attempt_id}",
                    started_at_ms=held.started_at_ms,
                )
            )
            if not isinstance(outcome, Applied):
                self.failed(held, outcome)
                return
            held.version += 1
            held.stage = "running"
            self.fact("acknowledge_running", held, held.attempt_id, outcome.code.value)
            if held.plan == "late_complete":
                # On purpose: the Worker stops renewing, says the execution is gone, and then
                # completes right at the expiry instant, racing recovery on this generation.
                self.declare_not_running(held.attempt_id)
                held.finish_at_ms = self.at_expiry(held)
                held.next_at_ms = held.finish_at_ms
                return
            if held.plan != "abandon":
                span = held.duration_ms * (1.0 if held.plan == "normal" else 0.5)
                held.finish_at_ms = now + rng.randint(0, int(span))
            held.next_at_ms = min(held.finish_at_ms, held.renewed_at_ms + held.duration_ms // 3)
            return
        if now >= held.finish_at_ms:
            self.complete(held)
            return
        outcome = self.send(
            RenewLease(
                run_id=held.run_id,
                attempt_id=held.attempt_id,
                fence=held.fence(),
                worker=held.worker,
                lease_duration_ms=held.duration_ms,
            )
        )
        if not isinstance(outcome, Applied):
            self.failed(held, outcome)
            return
        held.version += 1
        lease = outcome.aggregate.lease(held.attempt_id, held.lease_generation)
        assert lease is not None
        held.expires_at_ms, held.renewed_at_ms = lease.expires_at_ms, lease.renewed_at_ms
        held.next_at_ms = min(held.finish_at_ms, held.renewed_at_ms + held.duration_ms // 3)

    def complete(self, held: Held) -> None:
        succeeded = self.rng.random() < 0.85
        result = CompletionOutcome.SUCCEEDED if succeeded else CompletionOutcome.FAILED
        outcome = self.send(
            CompleteWithLease(
                run_id=held.run_id,
                attempt_id=held.attempt_id,
                fence=held.fence(),
                worker=held.worker,
                callback_sequence=1,
                outcome=result,
                exit_code=0 if succeeded else 1,
            )
        )
        if held.plan == "late_complete":
            self.at_boundary(held, "complete_with_lease", outcome)
        if not isinstance(outcome, Applied):
            self.failed(held, outcome)
            return
        self.held.pop(held.attempt_id)
        self.fact(
            "complete_with_lease", held, held.attempt_id, outcome.code.value, outcome=result.value
        )

    def at_boundary(self, held: Held, command: str, outcome: Outcome | None) -> None:
        result = (
            "error|transient" if outcome is None else f"{outcome.kind.value}|{outcome.code.value}"
        )
        self.report.boundary[f"{held.plan}|{command}|{result}"] += 1

    def failed(self, held: Held, outcome: Outcome | None) -> None:
        """Nothing was written: a transient conflict or a lost race is tried again soon; a
        rejection (or a replay) means the lease is no longer this Worker's to use."""
        if outcome is None or isinstance(outcome, Raced):
            held.next_at_ms = self.vnow() + 50
            return
        self.lose(held)

    def zombie_probe(self) -> None:
        """Replay a stale fence (a restarted session's, or a lease already refused) with the
        Worker's current session as the control plane's view; it must never be Applied."""
        held = self.rng.choice(self.zombies)
        held.probes += 1
        if held.probes >= 3:
            self.zombies.remove(held)
        roll = self.rng.random()
        command: Command
        if roll < 0.6:
            command = CompleteWithLease(
                run_id=held.run_id,
                attempt_id=held.attempt_id,
                fence=held.fence(),
                worker=self.worker,
                callback_sequence=1,
                outcome=CompletionOutcome.SUCCEEDED,
                exit_code=0,
            )
        elif roll < 0.8:
            command = RenewLease(
                run_id=held.run_id,
                attempt_id=held.attempt_id,
                fence=held.fence(),
                worker=self.worker,
                lease_duration_ms=held.duration_ms,
            )
        else:
            command = AcknowledgeStarting(
                run_id=held.run_id,
                attempt_id=held.attempt_id,
                fence=held.fence(),
                worker=self.worker,
            )
        outcome = self.send(command, f"zombie:{command.name}")
        if outcome is not None:
            self.report.zombies.append(
                [
                    command.name,
                    held.attempt_id,
                    held.lease_generation,
                    held.worker.session_id,
                    outcome.kind.value,
                    outcome.code.value,
                ]
            )


def replica_main(cfg: RaceConfig, index: int) -> None:
    """Process entry point: run the loop until every Run is terminal or the deadline, then write
    the report. Any exception is recorded with its traceback and the process exits with 1."""
    report_path = Path(cfg.out_dir) / f"replica-{index}.json"
    report = Report(index)
    replica: Replica | None = None
    try:
        replica = Replica(cfg, index)
        report = replica.report
        replica.run()
    except BaseException:
        report.errors.append(traceback.format_exc())
    finally:
        if replica is not None:
            try:
                replica.close()
            except Exception:
                report.errors.append(traceback.format_exc())
        report.dump(report_path)
    if report.errors:
        raise SystemExit(1)


# -- RETRY-18: concurrent local activation ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class ActivationConfig:
    dsn: str
    schema: str
    out_dir: str
    seed: int
    targets: tuple[tuple[str, str], ...]  # (run_id, attempt_id), the same list for everyone


def activation_main(cfg: ActivationConfig, index: int, barrier: Any) -> None:
    """Race `ActivateLocal` on every target with a callback token of this process's own; write
    `[run_id, attempt_id, kind, code, callback digest]` per command."""
    report_path = Path(cfg.out_dir) / f"activation-{index}.json"
    records: list[list[Any]] = []
    errors: list[str] = []
    try:
        store = ClusterStore(cfg.dsn, cfg.schema)
        try:
            rt = ClusterRuntime(store)
            targets = list(cfg.targets)
            if index % 2:
                targets.reverse()  # half the processes meet the others head on
            barrier.wait(60)
            for run_id, attempt_id in targets:
                digest = new_token().digest()
                command = ActivateLocal(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    local_executor_type=LOCAL_EXECUTOR,
                    callback_sequence=1,
                    callback_token_sha256=digest,
                )
                try:
                    outcome = rt.execute(command)
                except TransientConflictExhausted as exc:
                    records.append([run_id, attempt_id, "error", exc.code, digest])
                    continue
                records.append([run_id, attempt_id, outcome.kind.value, outcome.code.value, digest])
        finally:
            store.close()
    except BaseException:
        errors.append(traceback.format_exc())
    report_path.write_text(json.dumps({"records": records, "errors": errors}), encoding="utf-8")
    if errors:
        raise SystemExit(1)


# -- the projection as kernel values ---------------------------------------------------------
def _entity(cls: Any, types: Any, row: dict[str, Any]) -> Any:
    return cls(
        **{
            name: value if value is None or name not in types else types[name](value)
            for name, value in row.items()
        }
    )


def aggregates(projection: Projection) -> dict[str, tuple[RunAggregate, tuple[Event, ...]]]:
    """Every Run of the backdoor projection as a `RunAggregate` with its Events, mapped as the
    store's own load maps rows (`runners.rows`)."""

    def by_run(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            out.setdefault(row["run_id"], []).append(row)
        return out

    attempts = by_run(projection["attempts"])
    policies = by_run(projection["policies"])
    leases = by_run(projection["leases"])
    events = by_run(projection["events"])
    out: dict[str, tuple[RunAggregate, tuple[Event, ...]]] = {}
    for row in projection["runs"]:
        run_id = row["run_id"]
        agg = RunAggregate(
            run=_entity(Run, RUN_TYPES, row),
            attempts=tuple(
                sorted(
                    (_entity(Attempt, ATTEMPT_TYPES, r) for r in attempts.get(run_id, [])),
                    key=lambda a: a.number,
                )
            ),
            policy=next(
                (_entity(RunRetryPolicy, POLICY_TYPES, r) for r in policies.get(run_id, [])), None
            ),
            leases=tuple(
                sorted(
                    (_entity(Lease, LEASE_TYPES, r) for r in leases.get(run_id, [])),
                    key=lambda x: (x.attempt_id, x.lease_generation),
                )
            ),
        )
        evs = tuple(
            Event(
                event_id=e["event_id"],
                run_id=e["run_id"],
                seq=e["seq"],
                type=e["type"],
                actor=Actor(e["actor"]),
                dedupe_key=e["dedupe_key"],
                at_ms=e["at_ms"],
                attempt_id=e["attempt_id"],
                step_run_id=e["step_run_id"],
                code=e["code"],
                payload=tuple(sorted((e["payload"] or {}).items())),
            )
            for e in sorted(events.get(run_id, []), key=lambda e: e["seq"])
        )
        out[run_id] = (agg, evs)
    return out
