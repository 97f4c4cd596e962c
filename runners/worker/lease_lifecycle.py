"""The Worker lease lifecycle: one timer for all tracked leases (SPEC §3.15, §1.4 B-10).

A lease is tracked only once the receiver handed it over after `starting_acknowledged`
(§3.5 step 5). `tick(now_ms)` is the timer's body: every tracked lease whose last renewal is
one third of the duration old is renewed (T3) through the control-plane client, and the
latest version is kept for the receiver's running/failure ACK (§3.5 step 9). A rejected
renewal, or a lease found expired, stops the tracking and raises one synchronous
`on_lost(snapshot, reason)` notification; the notification performs no I/O itself (the
lease-loss coordinator, `runners.worker.lease_loss`, does the journal and controller work).
A `LEASE_VERSION_MISMATCH` that carries a newer version is not a loss: the lease is still
this Worker's, moved by its own renewal or running ACK whose answer was lost; the lifecycle
adopts that version and renews once more with it (found by `model_tests/worker_machine.py`).

`start()` runs `tick` on one daemon thread (never holding the process); tests and models call
`tick` directly with their own time. The lifecycle reads no journal and writes none.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from kernel.specs.codes import Code
from kernel.specs.limits import LEASE_DURATION_MAX_MS, LEASE_DURATION_MIN_MS
from kernel.worker.record import OfferLease
from runners.worker.ports import Clock, ControlPlaneClient, ControlPlaneUnavailable, LeaseAck


class LeaseLossReason(enum.StrEnum):
    """§3.15 `on_lost` reasons [decision: names]."""

    LEASE_EXPIRED = "lease_expired"
    FENCED = "fenced"
    WORKER_SESSION_REPLACED = "worker_session_replaced"
    WORKER_UNAVAILABLE = "worker_unavailable"
    INVALID_RENEWAL = "invalid_renewal"


_FENCED = frozenset(
    {
        Code.LEASE_MISSING,
        Code.LEASE_RUN_MISMATCH,
        Code.LEASE_GENERATION_MISMATCH,
        Code.LEASE_TOKEN_MISMATCH,
        Code.LEASE_NOT_LEASED,
        Code.LEASE_WORKER_MISMATCH,
    }
)
_SESSION = frozenset({Code.LEASE_WORKER_SESSION_MISMATCH, Code.LEASE_WORKER_GENERATION_MISMATCH})


def loss_reason(code: Code) -> LeaseLossReason:
    """The notification reason for a refused renewal."""
    if code is Code.LEASE_EXPIRED:
        return LeaseLossReason.LEASE_EXPIRED
    if code in _FENCED:
        return LeaseLossReason.FENCED
    if code in _SESSION:
        return LeaseLossReason.WORKER_SESSION_REPLACED
    if code is Code.WORKER_UNAVAILABLE:
        return LeaseLossReason.WORKER_UNAVAILABLE
    return LeaseLossReason.INVALID_RENEWAL


OnLost = Callable[[OfferLease, LeaseLossReason], None]


@dataclass(frozen=True, slots=True)
class TickResult:
    """One tick: counts only (S-1)."""

    renewed: int = 0
    lost: int = 0
    unavailable: int = 0


@dataclass(slots=True)
class _Tracked:
    lease: OfferLease
    renewed_at_ms: int


class WorkerLeaseLifecycle:
    """§3.15 (module docstring).

    :param duration_ms: the lease duration asked for on renewal (5 s..10 min).
    :param on_lost: the synchronous loss notification.
    """

    def __init__(
        self,
        client: ControlPlaneClient,
        *,
        duration_ms: int,
        on_lost: OnLost,
        clock: Clock | None = None,
    ) -> None:
        if type(duration_ms) is not int or not (
            LEASE_DURATION_MIN_MS <= duration_ms <= LEASE_DURATION_MAX_MS
        ):
            raise ValueError(
                f"lease duration must be {LEASE_DURATION_MIN_MS}..{LEASE_DURATION_MAX_MS} ms"
            )
        self._client = client
        self._duration_ms = duration_ms
        self._on_lost = on_lost
        self._clock = clock
        self._tracked: dict[str, _Tracked] = {}
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"WorkerLeaseLifecycle(tracked={len(self._tracked)})"

    @property
    def renew_interval_ms(self) -> int:
        """B-10: renew when one third of the duration has elapsed since the last renewal."""
        return self._duration_ms // 3

    # -- tracking ------------------------------------------------------------------------------
    def track(self, offer_id: str, lease: OfferLease, now_ms: int) -> None:
        """§3.5 step 5: start (or continue) tracking; a lower version never replaces a higher."""
        with self._lock:
            current = self._tracked.get(offer_id)
            if current is None or lease.version > current.lease.version:
                self._tracked[offer_id] = _Tracked(lease, now_ms)

    def observe(self, offer_id: str, ack: LeaseAck) -> None:
        """Keep the version an ACK returned (T4 moves the lease version too)."""
        if ack.version is None or ack.expires_at_ms is None:
            return
        with self._lock:
            current = self._tracked.get(offer_id)
            if current is not None and ack.version > current.lease.version:
                current.lease = replace(
                    current.lease, version=ack.version, expires_at_ms=ack.expires_at_ms
                )

    def current(self, offer_id: str) -> OfferLease | None:
        """The latest lease held for the offer (the receiver's ACK version, §3.5 step 9)."""
        with self._lock:
            tracked = self._tracked.get(offer_id)
            return None if tracked is None else tracked.lease

    def untrack(self, offer_id: str) -> None:
        with self._lock:
            self._tracked.pop(offer_id, None)

    def tracked(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._tracked))

    # -- the timer's body ---------------------------------------------------------------------
    def tick(self, now_ms: int) -> TickResult:
        """Renew every due lease once; notify and untrack the lost ones (serialised)."""
        renewed = lost = unavailable = 0
        with self._tick_lock:
            with self._lock:
                due = [
                    (offer_id, t.lease)
                    for offer_id, t in sorted(self._tracked.items())
                    if now_ms - t.renewed_at_ms >= self.renew_interval_ms
                    or t.lease.expires_at_ms <= now_ms
                ]
            for offer_id, lease in due:
                if lease.expires_at_ms <= now_ms:
                    self._lose(offer_id, lease, LeaseLossReason.LEASE_EXPIRED)
                    lost += 1
                    continue
                held = lease
                try:
                    ack = self._client.renew(held, self._duration_ms)
                    if (
                        ack.code is Code.LEASE_VERSION_MISMATCH
                        and ack.version is not None
                        and ack.version > held.version
                    ):
                        # The version check comes after every identity check of the fence
                        # (B-16): the lease is still ours, moved by a renewal or running ACK
                        # whose answer was lost. Adopt its version and renew once more with
                        # it, instead of reporting a loss (which would stop the process).
                        self.observe(offer_id, ack)
                        held = ack.lease_after(held)
                        ack = self._client.renew(held, self._duration_ms)
                except ControlPlaneUnavailable:
                    unavailable += 1  # try again next tick; the expiry check still applies
                    continue
                if ack.code is Code.APPLIED:
                    with self._lock:
                        tracked = self._tracked.get(offer_id)
                        if tracked is not None:
                            tracked.lease = ack.lease_after(tracked.lease)
                            tracked.renewed_at_ms = now_ms
                    renewed += 1
                else:
                    self._lose(offer_id, held, loss_reason(ack.code))
                    lost += 1
        return TickResult(renewed, lost, unavailable)

    def _lose(self, offer_id: str, lease: OfferLease, reason: LeaseLossReason) -> None:
        with self._lock:
            self._tracked.pop(offer_id, None)
        self._on_lost(lease, reason)

    # -- the one timer ------------------------------------------------------------------------
    def start(self) -> None:
        """One daemon thread ticking every tenth of the renew interval (never holds the
        process)."""
        if self._clock is None:
            raise ValueError("start() needs a clock")
        if self._thread is not None:
            return
        clock = self._clock
        interval_s = max(self.renew_interval_ms / 10_000, 0.05)

        def run() -> None:
            while not self._stop.wait(interval_s):
                self.tick(clock())

        self._thread = threading.Thread(target=run, name="ql3-worker-lease", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
