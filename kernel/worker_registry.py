"""The durable Worker registry's decisions and the cluster grant target (SPEC §1.1 Worker session,
§1.7 T1, §3.8 D-5..D-8, Appendix E-2, E-8; issue 17 item 2).

A registry row (`SessionRecord`, table `worker_sessions`) holds one Worker's *current* session.
Every registry call is `decide_session(current row or None, request, now) -> SessionDecision`:
total over any input, walking only the edges of `SESSION_TABLE`
(`kernel/specs/worker_session.py`); the runner loads the row under its lock, asks, and writes the
new row with a CAS on `version` (or nothing on a refusal).

- Expiry is decided on read: `effective_status(row, now)` is `offline` once
  `session_expires_at_ms <= now`, whatever the row stores; `session_view(row, now)` is the
  `WorkerSession` the Worker-side guards take (D-6: `WORKER_OFFLINE`, `WORKER_SESSION_EXPIRED`).
- `register` is a new session on every process start: the caller's new session id, generation =
  the worker id's previous generation + 1. `resume` [decision WS-1] is the one exception: a host
  restarted at once, that proved it owns its predecessor's journal (E-2), keeps the same session id
  and generation while that session is `online`/`draining` and unexpired, so it can still submit
  the completion of a child that finished before the crash (§3.11: a new session never submits for
  an old one).

The grant target (§1.7 T1's guard "Worker online, not draining, executor type matches", plus the
capacity the Worker registered): `grant_target(executor_type, loads, now)` picks, among sessions
that are `online` (not draining, unexpired), advertise the executor type and have spare capacity
(load = the session's `leased` leases not yet released), the least loaded one; ties go to the
smallest worker id [decision WS-5]. `grant_fits(row, load)` is the same capacity rule for the
load counted inside the grant's own transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, TypeAlias

from kernel.entities import WorkerSession
from kernel.identity import is_other_id
from kernel.specs.states import WorkerSessionStatus
from kernel.specs.worker_session import (
    SESSION_CAPACITY_MAX,
    SESSION_REFUSALS,
    SESSION_TTL_DEFAULT_MS,
    SESSION_TTL_MAX_MS,
    SESSION_TTL_MIN_MS,
    WORKER_PUBLIC_KEY_BYTES,
    SessionCode,
    SessionTrigger,
    next_session_status,
)

__all__ = [
    "DrainSession",
    "ExpireSession",
    "HeartbeatSession",
    "RegisterSession",
    "ResumeSession",
    "SessionApplied",
    "SessionDecision",
    "SessionLoad",
    "SessionRecord",
    "SessionRefused",
    "SessionRequest",
    "StopSession",
    "can_take_grant",
    "decide_session",
    "dispatch_executor_types",
    "effective_status",
    "grant_fits",
    "grant_target",
    "session_view",
]

_EXECUTOR_TYPE_MAX_LENGTH = 256
_EXECUTOR_TYPES_MAX = 64


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One `worker_sessions` row: a Worker's current session, what it runs, how much it takes,
    and the X25519 public key its lease tokens are sealed to."""

    worker_id: str
    session_id: str
    generation: int
    status: WorkerSessionStatus
    executor_types: tuple[str, ...]
    capacity: int
    public_key: bytes
    session_expires_at_ms: int
    registered_at_ms: int
    updated_at_ms: int
    version: int


# -- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterSession:
    """A process start: the new session id is the caller's (fresh per start)."""

    trigger: ClassVar[SessionTrigger] = SessionTrigger.REGISTER
    worker_id: str
    session_id: str
    executor_types: tuple[str, ...]
    capacity: int
    public_key: bytes
    ttl_ms: int = SESSION_TTL_DEFAULT_MS


@dataclass(frozen=True, slots=True)
class ResumeSession:
    """E-2 [decision WS-1]: the same session again. `public_key` replaces the registered key
    when given (a host that lost its key file can no longer open offers sealed to the old one)."""

    trigger: ClassVar[SessionTrigger] = SessionTrigger.RESUME
    worker_id: str
    session_id: str
    generation: int
    ttl_ms: int = SESSION_TTL_DEFAULT_MS
    public_key: bytes | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatSession:
    trigger: ClassVar[SessionTrigger] = SessionTrigger.HEARTBEAT
    worker_id: str
    session_id: str
    generation: int
    ttl_ms: int = SESSION_TTL_DEFAULT_MS


@dataclass(frozen=True, slots=True)
class DrainSession:
    trigger: ClassVar[SessionTrigger] = SessionTrigger.DRAIN
    worker_id: str
    session_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class StopSession:
    trigger: ClassVar[SessionTrigger] = SessionTrigger.STOP
    worker_id: str
    session_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class ExpireSession:
    """Persist the expiry decided on read (an optional sweep); names no session: the row's."""

    trigger: ClassVar[SessionTrigger] = SessionTrigger.EXPIRE
    worker_id: str


SessionRequest: TypeAlias = (
    RegisterSession | ResumeSession | HeartbeatSession | DrainSession | StopSession | ExpireSession
)
_Named: TypeAlias = ResumeSession | HeartbeatSession | DrainSession | StopSession


# -- decisions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionApplied:
    """Write `record` (insert when `before` is None, else CAS on `before.version`)."""

    trigger: SessionTrigger
    code: SessionCode
    before: SessionRecord | None
    record: SessionRecord


@dataclass(frozen=True, slots=True)
class SessionRefused:
    """Nothing to write."""

    trigger: SessionTrigger
    code: SessionCode


SessionDecision: TypeAlias = SessionApplied | SessionRefused

_APPLIED_CODES = {
    SessionTrigger.REGISTER: SessionCode.REGISTERED,
    SessionTrigger.RESUME: SessionCode.RESUMED,
    SessionTrigger.HEARTBEAT: SessionCode.RENEWED,
    SessionTrigger.DRAIN: SessionCode.DRAINING,
    SessionTrigger.STOP: SessionCode.STOPPED,
    SessionTrigger.EXPIRE: SessionCode.EXPIRED,
}


def effective_status(record: SessionRecord, now: int) -> WorkerSessionStatus:
    """The status at `now`: `offline` once the session lease ran out (decided on read)."""
    if record.session_expires_at_ms <= now:
        return WorkerSessionStatus.OFFLINE
    return record.status


def session_view(record: SessionRecord, now: int) -> WorkerSession:
    """The control plane's view of the Worker at `now` (§1.1), expiry applied."""
    return WorkerSession(
        worker_id=record.worker_id,
        session_id=record.session_id,
        generation=record.generation,
        status=effective_status(record, now),
        session_expires_at_ms=record.session_expires_at_ms,
        executor_types=record.executor_types,
    )


def _plain_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ttl_ok(ttl_ms: object) -> bool:
    return _plain_int(ttl_ms) and SESSION_TTL_MIN_MS <= ttl_ms <= SESSION_TTL_MAX_MS  # type: ignore[operator]


def _key_ok(key: object) -> bool:
    return isinstance(key, bytes) and len(key) == WORKER_PUBLIC_KEY_BYTES


def _id_ok(value: object) -> bool:
    return isinstance(value, str) and is_other_id(value)


def _types_ok(types: object) -> bool:
    if not isinstance(types, tuple) or not 1 <= len(types) <= _EXECUTOR_TYPES_MAX:
        return False
    if len(set(types)) != len(types):
        return False
    return all(
        isinstance(t, str) and 1 <= len(t) <= _EXECUTOR_TYPE_MAX_LENGTH and t.isprintable()
        for t in types
    )


def _request_ok(request: SessionRequest) -> bool:
    if not _id_ok(request.worker_id):
        return False
    if isinstance(request, ExpireSession):
        return True
    if not _id_ok(request.session_id):
        return False
    if isinstance(request, RegisterSession):
        return (
            _types_ok(request.executor_types)
            and _plain_int(request.capacity)
            and 1 <= request.capacity <= SESSION_CAPACITY_MAX
            and _key_ok(request.public_key)
            and _ttl_ok(request.ttl_ms)
        )
    if not _plain_int(request.generation) or request.generation < 1:
        return False
    if isinstance(request, ResumeSession):
        return _ttl_ok(request.ttl_ms) and (
            request.public_key is None or _key_ok(request.public_key)
        )
    if isinstance(request, HeartbeatSession):
        return _ttl_ok(request.ttl_ms)
    return True


def decide_session(
    current: SessionRecord | None, request: SessionRequest, now: int
) -> SessionDecision:
    """What `request` does to the worker id's row `current` at `now` (module docstring).
    Refusal order: malformed request, unknown worker, superseded session (or a reused session
    id on register), clock regression, then the table (by the effective status; `expire` by the
    stored one and its guard)."""
    trigger = request.trigger
    if not _request_ok(request) or not _plain_int(now):
        return SessionRefused(trigger, SessionCode.INVALID)
    if current is not None and current.worker_id != request.worker_id:
        return SessionRefused(trigger, SessionCode.INVALID)  # the caller loaded another row
    if isinstance(request, RegisterSession):
        return _register(current, request, now)
    if current is None:
        return SessionRefused(trigger, SESSION_REFUSALS[None])
    if not isinstance(request, ExpireSession) and (
        current.session_id != request.session_id or current.generation != request.generation
    ):
        return SessionRefused(trigger, SessionCode.SUPERSEDED)
    if now < current.updated_at_ms:
        return SessionRefused(trigger, SessionCode.CLOCK_REGRESSION)
    if isinstance(request, ExpireSession):
        return _expire(current, now)
    status = effective_status(current, now)
    target = next_session_status(status, trigger)
    if target is None:
        return SessionRefused(trigger, SESSION_REFUSALS[status])
    return SessionApplied(
        trigger, _APPLIED_CODES[trigger], current, _step(current, request, target, now)
    )


def _register(current: SessionRecord | None, request: RegisterSession, now: int) -> SessionDecision:
    trigger = request.trigger
    if current is not None:
        if current.session_id == request.session_id:
            return SessionRefused(trigger, SessionCode.SESSION_ID_REUSED)
        if now < current.updated_at_ms:
            return SessionRefused(trigger, SessionCode.CLOCK_REGRESSION)
    target = next_session_status(None if current is None else current.status, trigger)
    assert target is not None  # register is a row from every source (SESSION_TABLE)
    record = SessionRecord(
        worker_id=request.worker_id,
        session_id=request.session_id,
        generation=1 if current is None else current.generation + 1,
        status=target,
        executor_types=request.executor_types,
        capacity=request.capacity,
        public_key=request.public_key,
        session_expires_at_ms=now + request.ttl_ms,
        registered_at_ms=now,
        updated_at_ms=now,
        version=1 if current is None else current.version + 1,
    )
    return SessionApplied(trigger, SessionCode.REGISTERED, current, record)


def _expire(current: SessionRecord, now: int) -> SessionDecision:
    trigger = SessionTrigger.EXPIRE
    target = next_session_status(current.status, trigger)
    if target is None:
        return SessionRefused(trigger, SESSION_REFUSALS[current.status])
    if current.session_expires_at_ms > now:
        return SessionRefused(trigger, SessionCode.NOT_EXPIRED)
    record = replace(current, status=target, updated_at_ms=now, version=current.version + 1)
    return SessionApplied(trigger, SessionCode.EXPIRED, current, record)


def _step(
    current: SessionRecord, request: _Named, target: WorkerSessionStatus, now: int
) -> SessionRecord:
    expires = current.session_expires_at_ms
    key = current.public_key
    if isinstance(request, HeartbeatSession | ResumeSession):
        expires = now + request.ttl_ms
    if isinstance(request, ResumeSession) and request.public_key is not None:
        key = request.public_key
    if target is WorkerSessionStatus.OFFLINE:
        expires = min(expires, now)  # a stopped session is over now, not at its old expiry
    return replace(
        current,
        status=target,
        public_key=key,
        session_expires_at_ms=expires,
        updated_at_ms=now,
        version=current.version + 1,
    )


# -- the grant target (§1.7 T1) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionLoad:
    """A session with its load: its `leased` leases not yet released."""

    record: SessionRecord
    load: int


def can_take_grant(slot: SessionLoad, executor_type: str, now: int) -> bool:
    """T1's Worker guard plus capacity: online (not draining, unexpired), advertises the
    executor type, and holds fewer leases than its capacity."""
    record = slot.record
    return (
        effective_status(record, now) is WorkerSessionStatus.ONLINE
        and executor_type in record.executor_types
        and slot.load < record.capacity
    )


def grant_target(executor_type: str, slots: Iterable[SessionLoad], now: int) -> SessionLoad | None:
    """The session that gets the next grant of `executor_type`, or None when no session can take
    one: the least loaded eligible session, ties to the smallest worker id [decision WS-5]."""
    eligible = [slot for slot in slots if can_take_grant(slot, executor_type, now)]
    return min(eligible, key=lambda s: (s.load, s.record.worker_id), default=None)


def grant_fits(record: SessionRecord, load_with_grant: int) -> bool:
    """Inside the grant's transaction: the session's `leased` leases, the new one counted, stay
    within its capacity (so dispatchers on several replicas never overfill a Worker)."""
    return load_with_grant <= record.capacity


def dispatch_executor_types(slots: Sequence[SessionLoad], now: int) -> tuple[str, ...]:
    """The executor types some session could take a grant of now, sorted (one scan each)."""
    types = {
        executor_type
        for slot in slots
        for executor_type in slot.record.executor_types
        if can_take_grant(slot, executor_type, now)
    }
    return tuple(sorted(types))
