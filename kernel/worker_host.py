"""The Worker host's decisions (issue 17 item 3; SPEC §3.8 D-6..D-8, §3.10, Appendix E-2, E-6,
E-8; decisions WS-1, WH-1..WH-4).

The cluster Worker host (`runners.cluster.worker_host`) runs one `WorkerRuntime` in a process and
keeps its session in the registry. What it does next is decided here, never in the host:

- `session_requests(saved, register)`: which registry requests a process start tries, in order.
  A host that owns its predecessor's journal (the journal lock is taken first, E-2) and finds
  that predecessor's session saved beside it tries to resume that very session (WS-1: only then
  can a completion its predecessor's child produced be submitted, §3.11 "a new session never
  submits on behalf of an old one"); otherwise, or when the registry refuses the resume, it
  registers a new session (a new id, generation + 1).
- `heartbeat_due(...)`: renew the session lease once a third of its time has passed (two more
  renewals fit before it expires, so one slow cycle never loses the session).
- `drain_finished(records, now)`: SIGTERM drains (D-8: no new claim); the host stops once no
  journal record is owned work that can still progress by itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kernel.specs.journal import (
    FINAL_STATES,
    REPLAY,
    DeliveryKind,
    JournalState,
    ReplayAction,
)
from kernel.worker_registry import RegisterSession, ResumeSession, SessionRequest

__all__ = [
    "RETENTION_EVERY_NTH_CYCLE",
    "WORKER_HOST_CADENCE_MS",
    "SavedSession",
    "delivery_kind",
    "drain_finished",
    "heartbeat_due",
    "retention_due",
    "session_requests",
]


@dataclass(frozen=True, slots=True)
class SavedSession:
    """The session a host process registered or resumed, as saved beside its journal (with its
    private key, which this value never holds: `repr` shows ids only)."""

    worker_id: str
    session_id: str
    generation: int


def session_requests(
    saved: SavedSession | None, register: RegisterSession
) -> tuple[SessionRequest, ...]:
    """The registry requests a starting host tries in order until one is applied (WS-1): resume
    the saved session of the same Worker id, then register a new one."""
    if saved is None or saved.worker_id != register.worker_id:
        return (register,)
    resume = ResumeSession(
        register.worker_id,
        saved.session_id,
        saved.generation,
        register.ttl_ms,
        public_key=register.public_key,
    )
    return (resume, register)


def heartbeat_due(last_renewed_ms: int, now_ms: int, ttl_ms: int) -> bool:
    """Renew once a third of the session lease has passed since the last renewal (monotonic
    times of the host; the lease itself is the registry's, at database time)."""
    return now_ms - last_renewed_ms >= ttl_ms // 3


#: A record in one of these waits for an operator or a later redelivery, not for this host:
#: draining does not wait for it (WH-3).
_NOT_OWNED_WORK = FINAL_STATES | {JournalState.RECOVERY_REQUIRED}


def drain_finished(records: Iterable[tuple[JournalState, int]], now_ms: int) -> bool:
    """Whether a draining host may stop (WH-3): no journal record can still progress by itself.
    Each record is `(state, lease_expires_at_ms)` as the journal holds it; a record is done
    for the drain when it is final or `recovery_required`, or when its Run lease has expired
    (no renewal can revive it and no completion of it passes the fence: it waits for an exact
    replay, E-3, or the control plane's recovery, §2.3, neither of which needs this host)."""
    return all(
        state in _NOT_OWNED_WORK or expires_at_ms <= now_ms for state, expires_at_ms in records
    )


#: The host's one cadence (E-6: one timer drives the offer pull, the completion poll and, on
#: slow cycles, retention) [decision WH-1]: the lifecycle minimum (L-9), so an offer waits at
#: most a quarter second in the database.
WORKER_HOST_CADENCE_MS = 250
#: Retention (§3.14) runs on every n-th cycle only (once a second), when a retention is
#: configured (E-6). Its page deletes at most 8 records (ADR-0021 §5.3), and the journal holds at
#: most 64: once a second keeps a busy Worker's journal from filling with finished records.
RETENTION_EVERY_NTH_CYCLE = 4


def retention_due(ordinal: int, configured: bool) -> bool:
    """E-6: terminal retention on slow cycles (once a second), never unconfigured."""
    return configured and ordinal % RETENTION_EVERY_NTH_CYCLE == 0


#: §3.7 actions a redelivery performs that nothing else in the host would (the acknowledgements
#: and the start a transient control-plane failure interrupted) [decision WH-5].
_REDELIVER: frozenset[ReplayAction] = frozenset(
    {
        ReplayAction.REPLAY_STARTING_ACK,
        ReplayAction.CONTINUE_FIRST_START,
        ReplayAction.REPLAY_RUNNING_ACK,
        ReplayAction.REPLAY_FAIL_START,
    }
)


def delivery_kind(
    known: tuple[JournalState, int] | None, offered_version: int
) -> DeliveryKind | None:
    """How the host hands a pending offer (its lease still `leased`) to the receiver, or None
    for not at all [decision WH-5]: an offer the journal does not know is a `new_claim`; a known
    one is redelivered as `lease_recovery` (D-8: a draining Worker still takes it) when the
    control plane's lease version is newer than the record's (C-1 merges it: a restarted host
    learns the renewals its predecessor never merged, without which its completion would carry
    a stale version, §3.12) or when §3.7's replay of the record's state would do something (an
    acknowledgement or the first start a transient failure interrupted). `known` is the
    record's state and stored lease version. Anything else is left to the lease lifecycle and
    the completion poll: redelivering it every cycle would only re-lock its Run row."""
    if known is None:
        return DeliveryKind.NEW_CLAIM
    state, stored_version = known
    if offered_version > stored_version or REPLAY[state] in _REDELIVER:
        return DeliveryKind.LEASE_RECOVERY
    return None
