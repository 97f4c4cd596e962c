"""The Worker lease lifecycle: one timer for all tracked leases (SPEC §3.15, §1.4 B-10).

A lease is tracked only once the receiver handed it over after `starting_acknowledged`
(§3.5 step 5). `tick(now_ms)` is the timer's body: for every tracked lease the kernel
(`kernel.worker.lease_lifecycle`) says whether it is due for renewal (T3), expired, or neither,
and after each renewal whether it was renewed, must be renewed once more with an adopted newer
version (decision WM-8), or is lost; a loss stops the tracking and raises one synchronous
`on_lost(snapshot, reason)` notification, which performs no I/O itself (the lease-loss
coordinator, `runners.worker.lease_loss`, does the journal and controller work). The latest
version is kept for the receiver's running/failure ACK (§3.5 step 9).

`start()` runs `tick` on one daemon thread (never holding the process); tests and models call
`tick` directly with their own time. The lifecycle reads no journal and writes none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from kernel.specs import LEASE_DURATION_MAX_MS, LEASE_DURATION_MIN_MS
from kernel.worker import (
    Expired,
    LeaseAck,
    LeaseLossReason,
    Lost,
    OfferLease,
    Renew,
    RenewAgain,
    Renewed,
    Unanswered,
    after_renewal,
    due,
    loss_reason,
    observed,
    renew_interval_ms,
    tracks,
)
from runners.worker.ports import Clock, ControlPlaneClient, ControlPlaneUnavailable

__all__ = ["LeaseLossReason", "OnLost", "TickResult", "WorkerLeaseLifecycle", "loss_reason"]

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
        return renew_interval_ms(self._duration_ms)

    # -- tracking ------------------------------------------------------------------------------
    def track(self, offer_id: str, lease: OfferLease, now_ms: int) -> None:
        """§3.5 step 5: start (or continue) tracking; a lower version never replaces a higher."""
        with self._lock:
            current = self._tracked.get(offer_id)
            if tracks(None if current is None else current.lease, lease):
                self._tracked[offer_id] = _Tracked(lease, now_ms)

    def observe(self, offer_id: str, ack: LeaseAck) -> None:
        """Keep the version an ACK returned (T4 moves the lease version too)."""
        with self._lock:
            current = self._tracked.get(offer_id)
            if current is not None:
                current.lease = observed(current.lease, ack)

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
        """One pass over the tracked leases, as the kernel decides (serialised)."""
        renewed = lost = unavailable = 0
        with self._tick_lock:
            with self._lock:
                steps = [
                    (offer_id, due(t.lease, t.renewed_at_ms, now_ms, self._duration_ms))
                    for offer_id, t in sorted(self._tracked.items())
                ]
            for offer_id, step in steps:
                if isinstance(step, Expired):
                    self._lose(offer_id, Lost(step.lease, LeaseLossReason.LEASE_EXPIRED))
                    lost += 1
                elif isinstance(step, Renew):
                    outcome = self._renew(offer_id, step.lease)
                    if isinstance(outcome, Renewed):
                        with self._lock:
                            tracked = self._tracked.get(offer_id)
                            if tracked is not None:
                                tracked.lease = outcome.answer.lease_after(tracked.lease)
                                tracked.renewed_at_ms = now_ms
                        renewed += 1
                    elif isinstance(outcome, Lost):
                        self._lose(offer_id, outcome)
                        lost += 1
                    else:
                        unavailable += 1  # next tick; the expiry check still applies
        return TickResult(renewed, lost, unavailable)

    def _renew(self, offer_id: str, lease: OfferLease) -> Renewed | Lost | Unanswered:
        outcome = after_renewal(lease, self._ask(lease), adopted=False)
        if isinstance(outcome, RenewAgain):
            self.observe(offer_id, outcome.answer)
            final = after_renewal(outcome.lease, self._ask(outcome.lease), adopted=True)
            assert not isinstance(final, RenewAgain)  # the kernel adopts at most once
            return final
        return outcome

    def _ask(self, lease: OfferLease) -> LeaseAck | None:
        try:
            return self._client.renew(lease, self._duration_ms)
        except ControlPlaneUnavailable:
            return None

    def _lose(self, offer_id: str, lost: Lost) -> None:
        with self._lock:
            self._tracked.pop(offer_id, None)
        self._on_lost(lost.lease, lost.reason)

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
