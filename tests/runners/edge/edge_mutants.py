"""Planted-bug variants of the edge SQLite runner (issue 4 item 6: the suite must have teeth).

Each `Mutant` is one realistic, small change to the runner: a one-token edit of one named SQL
section (`runners/edge/sql/*.sql`, made with an exact `str.replace` that must change the text), or,
for the Event-ordering kinds, a patch of one store method. `modes` names the parts of
`qlk conform` that must catch it: the corpus replay, the guard mode or the kill mode. `apply()`
plants it with pytest's `monkeypatch` in the module that looks the statement up
(`runners.edge.store.STATEMENTS` for writes, `runners.edge.sources.SOURCES` for the candidate
sources), so it is undone after the test.

`hunt()` replays the bundled corpus against the mutated runner and stops at the first diverged
trace; named traces that the mutant's `hints` point at are replayed first to keep it fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from conformance.run.corpus import RUN_CORPUS, read_trace, trace_paths
from conformance.run.edge import make_edge_adapter
from conformance.run.replay import Divergence, replay
from kernel import AppendEvent, Effect, RunAggregate
from runners.edge import named_sql, sources, store
from runners.edge.store import EdgeStore, EdgeTransaction

#: Where each file's sections are looked up at execution time.
_TABLES: Mapping[str, tuple[Any, str, Mapping[str, str]]] = {
    "statements": (store, "STATEMENTS", named_sql.STATEMENTS),
    "sources": (sources, "SOURCES", named_sql.SOURCES),
}


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    breaks: str
    #: "statements" / "sources": a SQL edit of `section`; "method": `patch` plants it.
    table: str
    section: str = ""
    old: str = ""
    new: str = ""
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    #: Named trace file-name prefixes replayed first (a speed hint, never the assertion).
    hints: tuple[str, ...] = ()
    #: The parts of `qlk conform` that must each catch this mutant: "corpus" (the replay),
    #: "guards" (guard mode, `conformance.run.guards`), "kill" (kill mode,
    #: `conformance.run.kill_edge`).
    modes: tuple[str, ...] = ("corpus",)
    #: For guard mode: the (effect, guard) whose stale variant the mutant accepts.
    guard: tuple[str, str] | None = None

    def original(self) -> str:
        return _TABLES[self.table][2][self.section]

    def mutated(self) -> str:
        """The mutated statement text; the replacement must match exactly once."""
        text = self.original()
        count = text.count(self.old)
        if count != 1:
            raise AssertionError(f"{self.name}: {self.old!r} occurs {count} times")
        out = text.replace(self.old, self.new)
        if out == text:
            raise AssertionError(f"{self.name}: the replacement changed nothing")
        return out

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.table == "method":
            assert self.patch is not None
            self.patch(monkeypatch)
            return
        module, attribute, sections = _TABLES[self.table]
        patched = dict(sections)
        patched[self.section] = self.mutated()
        monkeypatch.setattr(module, attribute, MappingProxyType(patched))


# -- method mutants -------------------------------------------------------------------------
class _EventsDropped(EdgeTransaction):
    """Writes every effect except the Events."""

    def execute(self, effect: Effect) -> None:
        if not isinstance(effect, AppendEvent):
            super().execute(effect)


def _drop_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "EdgeTransaction", _EventsDropped)


class _Deferring:
    """Executes the state effects now and keeps the Events for after the commit."""

    def __init__(self, inner: EdgeTransaction, pending: list[Effect]) -> None:
        self._inner = inner
        self._pending = pending

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._inner.load_run(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        return self._inner.load_run_of_attempt(attempt_id)

    def execute(self, effect: Effect) -> None:
        if isinstance(effect, AppendEvent):
            self._pending.append(effect)
        else:
            self._inner.execute(effect)


@contextmanager
def _events_after_commit(self: EdgeStore) -> Iterator[_Deferring]:
    pending: list[Effect] = []
    with self.authority.transaction() as conn:
        yield _Deferring(EdgeTransaction(conn), pending)
    with self.authority.transaction() as conn:  # a second transaction, after the commit
        late = EdgeTransaction(conn)
        for effect in pending:
            late.execute(effect)


def _defer_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EdgeStore, "transaction", _events_after_commit)


# -- the mutants ----------------------------------------------------------------------------
MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="update_run_no_version_cas",
        breaks="V-1: the Run version CAS dropped from update_run's WHERE (lost update)",
        table="statements",
        section="update_run",
        old="WHERE run_id = :run_id\n  AND version = :expected_version;",
        new="WHERE run_id = :run_id;",
        modes=("guards",),
        guard=("UpdateRun", "version"),
    ),
    Mutant(
        name="update_lease_no_token_digest",
        breaks="V-2: the lease token digest missing from update_lease's fence",
        table="statements",
        section="update_lease",
        old="\n  AND token_digest = :token_digest;",
        new=";",
        hints=("LEASE-02", "LEASE-09"),
        modes=("guards",),
        guard=("UpdateLease", "token_digest"),
    ),
    Mutant(
        name="update_lease_no_generation",
        breaks="V-2: lease_generation missing from update_lease's key (all generations hit)",
        table="statements",
        section="update_lease",
        old="\n  AND lease_generation = :lease_generation",
        new="",
        hints=("LEASE-09", "REC-04", "LEASE-07"),
        modes=("guards",),
        guard=("UpdateLease", "lease_generation"),
    ),
    Mutant(
        name="lost_lease_left_leased",
        breaks="the lease status is never written: a lost/released lease stays `leased`",
        table="statements",
        section="update_lease",
        old="status = :status, version",
        new="status = status, version",
        hints=("LEASE-07", "REC-04", "LEASE-09"),
    ),
    Mutant(
        name="update_attempt_keeps_worker",
        breaks="the Attempt's worker binding is never written (kept from before)",
        table="statements",
        section="update_attempt",
        old="worker_id = :worker_id,",
        new="worker_id = worker_id,",
        hints=("LEASE-09", "REC-04"),
    ),
    Mutant(
        name="retry_attempt_inherits_worker",
        breaks="a retry Attempt inherits the previous Attempt's worker binding",
        table="statements",
        section="insert_attempt",
        old=":worker_id, :worker_session_id,",
        new=(
            "(SELECT p.worker_id FROM attempts AS p WHERE p.run_id = :run_id"
            " ORDER BY p.number DESC LIMIT 1), :worker_session_id,"
        ),
        hints=("RETRY-08", "RETRY-09", "RUN-02"),
    ),
    Mutant(
        name="events_not_inserted",
        breaks="V-3/I-7: Events are never appended",
        table="method",
        patch=_drop_events,
        modes=("corpus", "guards"),
        guard=("AppendEvent", "duplicate"),
    ),
    Mutant(
        name="events_after_commit",
        breaks="Events appended in a second transaction after the state commit",
        table="method",
        patch=_defer_events,
        hints=("RUN-06", "RETRY-10"),
        modes=("guards", "kill"),
        guard=("AppendEvent", "duplicate"),
    ),
    Mutant(
        name="lost_retry_has_more_off_by_one",
        breaks="P-2: `LIMIT :limit` instead of `:limit + 1` in the lost-retry source",
        table="sources",
        section="lost_retry_candidates",
        old="LIMIT :limit + 1;",
        new="LIMIT :limit;",
        hints=("RETRY-13",),
    ),
    Mutant(
        name="lost_retry_due_strict",
        breaks="`<` instead of `<=` for a due retry_wait in the lost-retry source",
        table="sources",
        section="lost_retry_candidates",
        old="p.next_attempt_at_ms <= :observed_at_ms",
        new="p.next_attempt_at_ms < :observed_at_ms",
        hints=("RETRY-07", "RETRY-08", "RETRY-20"),
    ),
    Mutant(
        name="local_startup_selects_workflow_runs",
        breaks="REC-07: the local startup source returns Workflow Runs (kind filter dropped)",
        table="sources",
        section="local_startup_candidates",
        old="  AND r.kind = 'ordinary'\nORDER BY",
        new="ORDER BY",
        hints=("REC-07-workflow-runs-never-selected-by-local-startup",),
    ),
    Mutant(
        name="cancel_convergence_ignores_revoked_authority",
        breaks="E-1: the cancellation source skips a started Run whose lease T9 released",
        table="sources",
        section="cancel_convergence_candidates",
        old="AND l.release_reason = 'lease_expired'",
        new="AND l.release_reason = 'cancelled'",
        hints=("E-1",),
    ),
    Mutant(
        name="update_attempt_keeps_status",
        breaks="the Attempt status is never written (a lost Attempt stays running)",
        table="statements",
        section="update_attempt",
        old="status = :status, executor_type",
        new="status = status, executor_type",
        hints=("LEASE-07", "REC-04"),
    ),
    Mutant(
        name="lease_expiry_strict",
        breaks="`<` instead of `<=` for an expired lease in the lease-expiry source",
        table="sources",
        section="lease_expiry_candidates",
        old="l.expires_at_ms <= :observed_at_ms",
        new="l.expires_at_ms < :observed_at_ms",
        hints=("LEASE-07", "LEASE-08"),
    ),
    Mutant(
        name="update_policy_no_version_cas",
        breaks="the policy version CAS dropped from update_policy's WHERE (lost cursor update)",
        table="statements",
        section="update_policy",
        old="WHERE run_id = :run_id\n  AND version = :expected_version;",
        new="WHERE run_id = :run_id;",
        modes=("guards",),
        guard=("UpdatePolicy", "version"),
    ),
    Mutant(
        name="update_attempt_no_status_guard",
        breaks="the previous-status guard dropped from update_attempt's WHERE",
        table="statements",
        section="update_attempt",
        old="\n  AND status = :expected_status",
        new="",
        modes=("guards",),
        guard=("UpdateAttempt", "status"),
    ),
    Mutant(
        name="update_lease_no_status_guard",
        breaks="the lease status CAS dropped: a released lease can be released or completed again",
        table="statements",
        section="update_lease",
        old="\n  AND status = :expected_status",
        new="",
        modes=("guards",),
        guard=("UpdateLease", "status"),
    ),
)

BY_NAME: Mapping[str, Mutant] = {m.name: m for m in MUTANTS}

#: Serial replay never produces a stale write (the kernel has already checked the guard on the
#: aggregate it loaded in the same transaction), so the dropped-guard mutants ("guards" only)
#: pass every trace: guard mode is what catches them, and it is part of `qlk conform`.


# -- hunting --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Hunt:
    mutant: str
    divergence: Divergence | None
    traces: int
    seconds: float

    @property
    def caught_by(self) -> str:
        d = self.divergence
        return "SURVIVED" if d is None else f"{d.trace}:{d.step} ({d.command})"


def ordered_paths(hints: tuple[str, ...] = ()) -> list[Path]:
    """The corpus, hinted named traces first, then the named ones, then the generated ones."""
    paths = trace_paths()

    def rank(path: Path) -> int:
        if path.parent != RUN_CORPUS:
            return 2
        return 0 if path.name.startswith(hints) and hints else 1

    return sorted(paths, key=rank)  # stable: each group keeps the corpus order


def hunt(mutant: Mutant, paths: list[Path] | None = None) -> Hunt:
    """Replay `paths` (default: the whole corpus, hinted first) against the runner as it is now
    (the mutant already applied); stop at the first divergence."""
    started = time.perf_counter()
    chosen = ordered_paths(mutant.hints) if paths is None else paths
    replayed = 0
    for path in chosen:
        replayed += 1
        result = replay(read_trace(path), make_edge_adapter)
        if result.divergence is not None:
            return Hunt(mutant.name, result.divergence, replayed, time.perf_counter() - started)
    return Hunt(mutant.name, None, replayed, time.perf_counter() - started)
