"""The cluster dispatch grant and its sealed offers (SPEC §1.7 T1, §3.2, Appendix D-13, E-2, E-8;
issue 17 item 1's dispatch phase).

`dispatch_grants(store)` is one bounded dispatch call of a scheduler cycle: it reads the sessions
that could take a grant (with their loads) at one database time, and performs the port calls the
kernel's `cluster_dispatch_begin`/`cluster_dispatch_advance` name: pages of `dispatch_candidates`
(`ClusterStore.local_dispatch_candidates`, D-13's keyset; a granted Attempt's Run is
`dispatching` and leaves the source) and, for each candidate, T1 (`GrantLease`) to the session
the kernel chose, with a fresh token (`secrets.token_urlsafe(32)`) and the E-2 default duration.

One grant is one transaction (`runners.engine.execute_observed`): the aggregate's locks, then
`resolve` re-reads the target's registry row last in D-7's order (`FOR UPDATE`, so dispatchers on
several replicas serialise on one session), the kernel decides T1 at database time, and `after`
counts the session's `leased` leases (the new one included; `kernel.grant_fits` decides) and
inserts the `worker_offers` row with the token *sealed* to the session's X25519 public key
(libsodium sealed box). The grant and its offer commit together or not at all. The raw token is
never stored or logged: the lease keeps its SHA-256 digest (the kernel's), the offer its sealed
box, which only the session's private key opens.

The Worker's side (E-8: it reads its own offers from the control-plane database):
`pending_offers(store, session, private_key, execution_spec_for, limit)` opens the session's
offers whose lease is still `leased` and builds each `Offer` with
`runners.worker.control_plane.offer_for`; `discard_offer` removes one the Worker journaled or
refused, and `discard_settled_offers` removes offers whose lease is no longer `leased`.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from kernel import (
    Applied,
    ClusterDispatchDone,
    ClusterDispatchEnd,
    Command,
    GrantAnswered,
    GrantLease,
    GrantTo,
    Outcome,
    PageRead,
    Run,
    Secret,
    SessionLoad,
    SessionRecord,
    TargetRefused,
    WorkerSession,
    check_limit,
    cluster_dispatch_advance,
    cluster_dispatch_begin,
    grant_fits,
)
from kernel.specs import (
    HARD_LIMITS,
    LEASE_DURATION_DEFAULT_MS,
    IntRange,
    Paging,
    Profile,
    budget_for,
    check_in_range,
)
from kernel.worker import Offer
from runners.cluster.clock import DatabaseClock, TransactionClock
from runners.cluster.named_sql import DISPATCH
from runners.cluster.session_rows import session_record, stored_view
from runners.cluster.store import ClusterStore, ClusterTransaction
from runners.engine import StorageTransaction, execute_observed
from runners.worker.control_plane import offer_for

__all__ = [
    "DISPATCH_SESSIONS_MAX",
    "DispatchGrantsReport",
    "PendingOffers",
    "discard_offer",
    "discard_settled_offers",
    "dispatch_grants",
    "pending_offers",
]

#: Sessions read per dispatch call [decision WS-7]: the journal capacity hard limit, by worker id.
DISPATCH_SESSIONS_MAX = 1024


class _TargetGone(Exception):
    """The grant's transaction found its target unknown or full: it rolls back (no lease, no
    offer) and the kernel hears `TargetRefused`."""


@dataclass(frozen=True, slots=True)
class DispatchGrantsReport:
    """One dispatch call: why it ended, grants applied, candidates tried, each executor type's
    end, and the grants as `(run_id, attempt_id, worker_id)` in the order they committed."""

    end: ClusterDispatchEnd
    granted: int
    tried: int
    ends: tuple[tuple[str, str], ...]
    grants: tuple[tuple[str, str, str], ...]


def _grants_limit(grants: int | None) -> int:
    if grants is None:
        configured = budget_for(Profile.CLUSTER).cluster_dispatch_grants
        assert configured is not None
        return configured
    return check_in_range(
        grants, IntRange(1, HARD_LIMITS.cluster_dispatch_grants_max), field="grants"
    )


def _sessions(store: ClusterStore, clock: TransactionClock) -> tuple[int, tuple[SessionLoad, ...]]:
    """One database time and every session that could take a grant then, with its load."""
    with store.connection() as conn:
        now = clock.now_ms(conn)
        rows = conn.execute(
            DISPATCH["dispatch_sessions"], {"observed_at_ms": now, "limit": DISPATCH_SESSIONS_MAX}
        ).fetchall()
    return now, tuple(SessionLoad(session_record(row), int(row[-1])) for row in rows)


def dispatch_grants(
    store: ClusterStore,
    *,
    grants: int | None = None,
    clock: TransactionClock | None = None,
    lease_duration_ms: int = LEASE_DURATION_DEFAULT_MS,
    fail_after_grant: Callable[[], None] | None = None,
) -> DispatchGrantsReport:
    """One bounded dispatch call (module docstring). `grants`: at most this many grants (the
    cluster budget's `cluster_dispatch_grants` by default, hard 64); one candidate page of that
    size per executor type. `fail_after_grant` is a test hook called inside each grant's
    transaction after its offer was written (raising rolls the grant and its offer back)."""
    limit = _grants_limit(grants)
    observe_clock: TransactionClock = DatabaseClock() if clock is None else clock
    now, slots = _sessions(store, observe_clock)
    scan, action = cluster_dispatch_begin(Paging(limit, 1), limit, slots, now)
    done: list[tuple[str, str, str]] = []
    while not isinstance(action, ClusterDispatchDone):
        if isinstance(action, GrantTo):
            candidate = action.candidate
            try:
                outcome = _grant(store, action, observe_clock, lease_duration_ms, fail_after_grant)
            except _TargetGone:
                scan, action = cluster_dispatch_advance(
                    scan, TargetRefused(candidate, action.target.worker_id)
                )
                continue
            if isinstance(outcome, Applied):
                assert candidate.attempt_id is not None
                done.append((candidate.run_id, candidate.attempt_id, action.target.worker_id))
            scan, action = cluster_dispatch_advance(
                scan, GrantAnswered(candidate, action.target.worker_id, outcome)
            )
        else:
            page = store.local_dispatch_candidates(action.executor_type, action.limit, action.after)
            scan, action = cluster_dispatch_advance(scan, PageRead(page))
    return DispatchGrantsReport(action.end, action.granted, action.tried, action.ends, tuple(done))


def _grant(
    store: ClusterStore,
    action: GrantTo,
    clock: TransactionClock,
    lease_duration_ms: int,
    fail_after_grant: Callable[[], None] | None,
) -> Outcome:
    candidate = action.candidate
    assert candidate.attempt_id is not None
    attempt_id = candidate.attempt_id
    token = Secret.of(secrets.token_urlsafe(32), "lease_token")
    held: list[SessionRecord] = []

    def resolve(tx: StorageTransaction, command: Command) -> Command:
        assert isinstance(tx, ClusterTransaction)
        assert isinstance(command, GrantLease)
        row = tx.connection.execute(
            DISPATCH["select_worker_session_for_grant"], {"worker_id": action.target.worker_id}
        ).fetchone()
        if row is None:
            raise _TargetGone
        record = session_record(row)
        held.append(record)
        return dataclasses.replace(command, worker=stored_view(record))

    def after(tx: StorageTransaction, outcome: Outcome) -> None:
        assert isinstance(tx, ClusterTransaction)
        assert isinstance(outcome, Applied)
        (record,) = held
        conn = tx.connection
        counted = conn.execute(
            DISPATCH["session_load"],
            {
                "worker_id": record.worker_id,
                "session_id": record.session_id,
                "generation": record.generation,
            },
        ).fetchone()
        assert counted is not None
        if not grant_fits(record, int(counted[0])):
            raise _TargetGone
        lease = outcome.aggregate.leased_lease(attempt_id)
        assert lease is not None
        sealed = SealedBox(PublicKey(record.public_key)).encrypt(token.reveal().encode("ascii"))
        conn.execute(
            DISPATCH["insert_worker_offer"],
            {
                "attempt_id": attempt_id,
                "lease_generation": lease.lease_generation,
                "worker_id": lease.worker_id,
                "worker_session_id": lease.worker_session_id,
                "worker_generation": lease.worker_generation,
                "sealed_token": bytes(sealed),
                "created_at_ms": lease.acquired_at_ms,
            },
        )
        if fail_after_grant is not None:
            fail_after_grant()

    command = GrantLease(
        run_id=candidate.run_id,
        attempt_id=attempt_id,
        worker=stored_view(action.target),
        lease_token=token,
        lease_duration_ms=lease_duration_ms,
    )

    def observe(tx: StorageTransaction) -> int:
        assert isinstance(tx, ClusterTransaction)
        return clock.now_ms(tx.connection)

    return execute_observed(store, command, observe, resolve=resolve, after=after)


# -- the Worker's read of its offers (E-8) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingOffers:
    """The session's offers that could be built, and the `(attempt_id, lease_generation)` of
    those that could not: a token this key does not open, a lease no longer `leased`, or an
    ExecutionSpec `execution_spec_for` did not give. `repr` never shows a token (S-1)."""

    offers: tuple[Offer, ...]
    unreadable: tuple[tuple[str, int], ...]


def _session_key(session: WorkerSession) -> dict[str, Any]:
    return {
        "worker_id": session.worker_id,
        "session_id": session.session_id,
        "generation": session.generation,
    }


def pending_offers(
    store: ClusterStore,
    session: WorkerSession,
    private_key: bytes,
    execution_spec_for: Callable[[Run, str], Mapping[str, object] | None],
    limit: int,
) -> PendingOffers:
    """At most `limit` offers of `session` whose lease is still `leased`, oldest first, each
    with its token opened by the session's X25519 `private_key` (§3.2). Reads only."""
    check_limit(limit)
    with store.connection() as conn:
        rows = conn.execute(
            DISPATCH["pending_worker_offers"], {**_session_key(session), "limit": limit}
        ).fetchall()
    box = SealedBox(PrivateKey(private_key))
    offers: list[Offer] = []
    unreadable: list[tuple[str, int]] = []
    for attempt_id, generation, sealed in rows:
        key = (str(attempt_id), int(generation))
        offer = _open(store, box, key, bytes(sealed), execution_spec_for)
        if offer is None:
            unreadable.append(key)
        else:
            offers.append(offer)
    return PendingOffers(tuple(offers), tuple(unreadable))


def _open(
    store: ClusterStore,
    box: SealedBox[PrivateKey],
    key: tuple[str, int],
    sealed: bytes,
    execution_spec_for: Callable[[Run, str], Mapping[str, object] | None],
) -> Offer | None:
    attempt_id, generation = key
    try:
        token = Secret.of(box.decrypt(sealed).decode("ascii"), "lease_token")
    except (CryptoError, UnicodeDecodeError, ValueError):
        return None
    with store.transaction() as tx:
        aggregate = tx.load_run_of_attempt(attempt_id)
    if aggregate is None:
        return None
    leased = aggregate.leased_lease(attempt_id)
    if leased is None or leased.lease_generation != generation:
        return None
    spec = execution_spec_for(aggregate.run, attempt_id)
    if spec is None:
        return None
    return offer_for(aggregate, attempt_id, token, spec)


def discard_offer(
    store: ClusterStore, session: WorkerSession, attempt_id: str, lease_generation: int
) -> bool:
    """Delete one offer of `session` (journaled or refused by the Worker); False if absent."""
    with store.connection() as conn:
        cursor = conn.execute(
            DISPATCH["delete_worker_offer"],
            {
                **_session_key(session),
                "attempt_id": attempt_id,
                "lease_generation": lease_generation,
            },
        )
        return cursor.rowcount == 1


def discard_settled_offers(store: ClusterStore, limit: int) -> int:
    """Delete at most `limit` offers whose lease is no longer `leased`; how many were."""
    check_limit(limit)
    with store.connection() as conn:
        return conn.execute(DISPATCH["delete_settled_worker_offers"], {"limit": limit}).rowcount
