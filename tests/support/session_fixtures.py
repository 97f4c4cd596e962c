"""Worker session rows and requests for the session machine's tests (SESSION_TABLE, WS-2): the
kernel's own test and the table walk of tests/test_state_tables.py use the same ones."""

from __future__ import annotations

from kernel import (
    DrainSession,
    ExpireSession,
    HeartbeatSession,
    RegisterSession,
    ResumeSession,
    SessionRecord,
    SessionRequest,
    StopSession,
)
from kernel.specs import SessionTrigger, WorkerSessionStatus

KEY = bytes(range(32))
T0 = 1_000_000
TTL = 30_000
ONLINE = WorkerSessionStatus.ONLINE
DRAINING = WorkerSessionStatus.DRAINING
OFFLINE = WorkerSessionStatus.OFFLINE


def record(
    worker_id: str = "w1",
    *,
    status: WorkerSessionStatus = ONLINE,
    session_id: str = "s1",
    generation: int = 1,
    types: tuple[str, ...] = ("shell",),
    capacity: int = 2,
    expires: int = T0 + TTL,
    updated: int = T0,
    version: int = 1,
) -> SessionRecord:
    return SessionRecord(
        worker_id=worker_id,
        session_id=session_id,
        generation=generation,
        status=status,
        executor_types=types,
        capacity=capacity,
        public_key=KEY,
        session_expires_at_ms=expires,
        registered_at_ms=T0,
        updated_at_ms=updated,
        version=version,
    )


def request_for(trigger: SessionTrigger, current: SessionRecord | None) -> SessionRequest:
    """A well-formed request of `trigger` naming the row's own session."""
    sid, gen = ("s1", 1) if current is None else (current.session_id, current.generation)
    if trigger is SessionTrigger.REGISTER:
        return RegisterSession("w1", "s-new", ("shell",), 2, KEY, TTL)
    if trigger is SessionTrigger.RESUME:
        return ResumeSession("w1", sid, gen, TTL)
    if trigger is SessionTrigger.HEARTBEAT:
        return HeartbeatSession("w1", sid, gen, TTL)
    if trigger is SessionTrigger.DRAIN:
        return DrainSession("w1", sid, gen)
    if trigger is SessionTrigger.STOP:
        return StopSession("w1", sid, gen)
    return ExpireSession("w1")


def rows_in(status: WorkerSessionStatus | None, trigger: SessionTrigger) -> SessionRecord | None:
    """A row whose lookup status for `trigger` is `status`: `expire` looks at the stored status
    of an expired row; every other trigger at the effective status (offline: stopped)."""
    if status is None:
        return None
    if trigger is SessionTrigger.EXPIRE:
        return record(status=status, expires=T0 + 10)
    if status is OFFLINE:
        return record(status=OFFLINE, expires=T0)
    return record(status=status)


NOW = T0 + 20
