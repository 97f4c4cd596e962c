"""The durable Worker registry on PostgreSQL (SPEC §1.1 Worker session, §3.8 D-5..D-8, Appendix
E-2, E-8; issue 17 item 2).

`WorkerRegistry(store)` runs every registry call in one transaction of its own: lock the Worker's
row (`FOR UPDATE`, the only lock these transactions take), read the database time after the
lock, let the kernel decide (`kernel.decide_session`), and write what it decided with a CAS on
`version` (an insert for a worker id's first session). No rule lives here: refusals, generations,
expiry and the lease of the session are the kernel's.

`session(worker_id)` is the current view at database time, expiry applied by the kernel
(`kernel.session_view`). The fenced Worker commands read the same row inside their own
transaction instead (`ClusterTransaction.worker_session`), which is what the cluster passes to
`EngineControlPlane` as `lambda tx, w: tx.worker_session(w)`.
"""

from __future__ import annotations

from typing import Any

import psycopg

from kernel import (
    DrainSession,
    ExpireSession,
    HeartbeatSession,
    RegisterSession,
    ResumeSession,
    SessionApplied,
    SessionDecision,
    SessionRecord,
    SessionRefused,
    SessionRequest,
    StopSession,
    WorkerSession,
    check_limit,
    decide_session,
    session_view,
)
from kernel.specs import SESSION_TTL_DEFAULT_MS, SessionCode
from runners.cluster.clock import DatabaseClock, TransactionClock
from runners.cluster.named_sql import REGISTRY
from runners.cluster.session_rows import record_params, session_record
from runners.cluster.store import STALE_ERRORS, ClusterStore

__all__ = ["WorkerRegistry"]


class _Lost(Exception):
    """The guarded write matched no row: roll back and report the kernel's CAS refusal."""


class WorkerRegistry:
    """Register, resume, heartbeat, drain, stop and expire Worker sessions (module docstring)."""

    def __init__(self, store: ClusterStore, *, clock: TransactionClock | None = None) -> None:
        self.store = store
        self.clock: TransactionClock = DatabaseClock() if clock is None else clock

    def __repr__(self) -> str:
        return f"WorkerRegistry(schema={self.store.schema!r})"

    # -- calls -----------------------------------------------------------------------------
    def register(
        self,
        worker_id: str,
        session_id: str,
        *,
        executor_types: tuple[str, ...],
        capacity: int,
        public_key: bytes,
        ttl_ms: int = SESSION_TTL_DEFAULT_MS,
    ) -> SessionDecision:
        """A process start: a new session (the caller's fresh `session_id`), generation + 1."""
        return self.decide(
            RegisterSession(worker_id, session_id, executor_types, capacity, public_key, ttl_ms)
        )

    def resume(
        self,
        worker_id: str,
        session_id: str,
        generation: int,
        *,
        ttl_ms: int = SESSION_TTL_DEFAULT_MS,
        public_key: bytes | None = None,
    ) -> SessionDecision:
        """E-2 [decision WS-1]: the same session again, for a host that owns its journal."""
        return self.decide(ResumeSession(worker_id, session_id, generation, ttl_ms, public_key))

    def heartbeat(
        self,
        worker_id: str,
        session_id: str,
        generation: int,
        *,
        ttl_ms: int = SESSION_TTL_DEFAULT_MS,
    ) -> SessionDecision:
        return self.decide(HeartbeatSession(worker_id, session_id, generation, ttl_ms))

    def drain(self, worker_id: str, session_id: str, generation: int) -> SessionDecision:
        return self.decide(DrainSession(worker_id, session_id, generation))

    def stop(self, worker_id: str, session_id: str, generation: int) -> SessionDecision:
        return self.decide(StopSession(worker_id, session_id, generation))

    def expire_sweep(self, limit: int) -> tuple[SessionDecision, ...]:
        """Persist the expiry of at most `limit` sessions whose lease ran out (optional: expiry
        is decided on every read anyway). Each in its own transaction; the kernel re-decides
        under the row lock, so a session renewed meanwhile is refused `SESSION_NOT_EXPIRED`."""
        check_limit(limit)
        with self.store.connection() as conn:
            now = self.clock.now_ms(conn)
            rows = conn.execute(
                REGISTRY["expired_worker_sessions"], {"observed_at_ms": now, "limit": limit}
            ).fetchall()
        return tuple(self.decide(ExpireSession(str(row[0]))) for row in rows)

    def session(self, worker_id: str) -> WorkerSession | None:
        """The Worker's current session at database time, expiry applied (`None`: unknown)."""
        with self.store.connection() as conn:
            now = self.clock.now_ms(conn)
            row = conn.execute(REGISTRY["select_worker_session"], {"worker_id": worker_id})
            found = row.fetchone()
        return None if found is None else session_view(session_record(found), now)

    def record(self, worker_id: str) -> SessionRecord | None:
        """The stored row as it is (no expiry applied): for diagnostics and tests."""
        with self.store.connection() as conn:
            found = conn.execute(
                REGISTRY["select_worker_session"], {"worker_id": worker_id}
            ).fetchone()
        return None if found is None else session_record(found)

    # -- one transaction -------------------------------------------------------------------
    def decide(self, request: SessionRequest) -> SessionDecision:
        """Lock the row, read the time, let the kernel decide, persist an applied decision."""
        try:
            with self.store.connection() as conn, conn.transaction():
                current = self._locked(conn, request.worker_id)
                decision = decide_session(current, request, self.clock.now_ms(conn))
                if isinstance(decision, SessionApplied):
                    self._write(conn, decision)
                return decision
        except _Lost:
            return SessionRefused(request.trigger, SessionCode.CAS_CONFLICT)

    @staticmethod
    def _locked(conn: psycopg.Connection[Any], worker_id: str) -> SessionRecord | None:
        row = conn.execute(
            REGISTRY["select_worker_session_for_update"], {"worker_id": worker_id}
        ).fetchone()
        return None if row is None else session_record(row)

    @staticmethod
    def _write(conn: psycopg.Connection[Any], decision: SessionApplied) -> None:
        params = record_params(decision.record)
        try:
            if decision.before is None:
                cursor = conn.execute(REGISTRY["insert_worker_session"], params)
            else:
                params["expected_version"] = decision.before.version
                cursor = conn.execute(REGISTRY["update_worker_session"], params)
        except STALE_ERRORS:
            raise _Lost from None
        if cursor.rowcount != 1:
            raise _Lost
