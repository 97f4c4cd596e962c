"""The Worker lease lifecycle's decisions, pure (SPEC §3.15, §1.4 B-10; decision WM-8).

The lifecycle (`runners/worker/lease_lifecycle.py`) owns one timer and a map of tracked
leases; what it does with them is decided here:

- `due(lease, renewed_at_ms, now_ms, duration_ms)`: a lease whose expiry has passed is lost
  (`lease_expired`) without asking anyone; one whose last renewal is a third of the duration old
  is renewed (B-10); any other waits.
- `after_renewal(held, answer, adopted)`: an applied renewal keeps the returned version and
  expiry; a `LEASE_VERSION_MISMATCH` that carries a newer version is not a loss (decision WM-8:
  the version check comes after every identity check of the fence, B-16, so the lease is still
  this Worker's, moved by its own renewal or running ACK whose answer was lost): adopt that
  version and renew once more; any other refusal is a loss with the reason `LOSS_REASONS` names
  for its code (`invalid_renewal` for a code it does not name); an unreachable control plane
  changes nothing until the next tick (the expiry check still applies then).
- `tracks(current, lease)`: a lower version never replaces a higher one; `observed(lease,
  answer)`: an ACK's newer version is kept (T4 moves the lease version too).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kernel.specs.codes import Code
from kernel.worker.record import LeaseAck, OfferLease

__all__ = [
    "LOSS_REASONS",
    "Expired",
    "LeaseLossReason",
    "Lost",
    "Renew",
    "RenewAgain",
    "Renewed",
    "Unanswered",
    "after_renewal",
    "due",
    "loss_reason",
    "observed",
    "renew_interval_ms",
    "tracks",
]


class LeaseLossReason(enum.StrEnum):
    """§3.15 `on_lost` reasons [decision: names]."""

    LEASE_EXPIRED = "lease_expired"
    FENCED = "fenced"
    WORKER_SESSION_REPLACED = "worker_session_replaced"
    WORKER_UNAVAILABLE = "worker_unavailable"
    INVALID_RENEWAL = "invalid_renewal"


#: §3.15: the loss reason of a refused renewal, by the control plane's code; any other code is
#: `invalid_renewal`.
LOSS_REASONS: Final[Mapping[Code, LeaseLossReason]] = MappingProxyType(
    {
        Code.LEASE_EXPIRED: LeaseLossReason.LEASE_EXPIRED,
        Code.LEASE_MISSING: LeaseLossReason.FENCED,
        Code.LEASE_RUN_MISMATCH: LeaseLossReason.FENCED,
        Code.LEASE_GENERATION_MISMATCH: LeaseLossReason.FENCED,
        Code.LEASE_TOKEN_MISMATCH: LeaseLossReason.FENCED,
        Code.LEASE_NOT_LEASED: LeaseLossReason.FENCED,
        Code.LEASE_WORKER_MISMATCH: LeaseLossReason.FENCED,
        Code.LEASE_WORKER_SESSION_MISMATCH: LeaseLossReason.WORKER_SESSION_REPLACED,
        Code.LEASE_WORKER_GENERATION_MISMATCH: LeaseLossReason.WORKER_SESSION_REPLACED,
        Code.WORKER_UNAVAILABLE: LeaseLossReason.WORKER_UNAVAILABLE,
    }
)


def loss_reason(code: Code) -> LeaseLossReason:
    """The notification reason for a refused renewal."""
    return LOSS_REASONS.get(code, LeaseLossReason.INVALID_RENEWAL)


def renew_interval_ms(duration_ms: int) -> int:
    """B-10: renew when one third of the duration has elapsed since the last renewal."""
    return duration_ms // 3


@dataclass(frozen=True, slots=True)
class Renew:
    """Ask the control plane to renew `lease` (T3)."""

    lease: OfferLease


@dataclass(frozen=True, slots=True)
class Expired:
    """The lease expired: lose it (`lease_expired`) without a renewal."""

    lease: OfferLease


def due(
    lease: OfferLease, renewed_at_ms: int, now_ms: int, duration_ms: int
) -> Renew | Expired | None:
    """What one tick does with one tracked lease (`None`: nothing yet)."""
    if lease.expires_at_ms <= now_ms:
        return Expired(lease)
    if now_ms - renewed_at_ms >= renew_interval_ms(duration_ms):
        return Renew(lease)
    return None


@dataclass(frozen=True, slots=True)
class Renewed:
    """Keep the version and expiry the control plane returned; the renewal time is now."""

    answer: LeaseAck


@dataclass(frozen=True, slots=True)
class RenewAgain:
    """WM-8: adopt the newer version (`lease`) and renew once more with it."""

    lease: OfferLease
    answer: LeaseAck


@dataclass(frozen=True, slots=True)
class Lost:
    """Stop tracking and notify `on_lost(lease, reason)`."""

    lease: OfferLease
    reason: LeaseLossReason


@dataclass(frozen=True, slots=True)
class Unanswered:
    """The control plane could not be asked: try again next tick."""


def after_renewal(
    held: OfferLease, answer: LeaseAck | None, *, adopted: bool
) -> Renewed | RenewAgain | Lost | Unanswered:
    """The renewal's answer (`None`: the control plane was unreachable). `adopted`: this is
    already the one renewal after adopting a newer version."""
    if answer is None:
        return Unanswered()
    if answer.code is Code.APPLIED:
        return Renewed(answer)
    if (
        answer.code is Code.LEASE_VERSION_MISMATCH
        and not adopted
        and answer.version is not None
        and answer.version > held.version
    ):
        return RenewAgain(answer.lease_after(held), answer)
    return Lost(held, loss_reason(answer.code))


def tracks(current: OfferLease | None, lease: OfferLease) -> bool:
    """§3.5 step 5: start (or continue) tracking `lease`; a lower or equal version never
    replaces the one held."""
    return current is None or lease.version > current.version


def observed(lease: OfferLease, answer: LeaseAck) -> OfferLease:
    """The lease after an ACK's answer: its newer version and expiry, if it carries one."""
    if answer.version is None or answer.expires_at_ms is None or answer.version <= lease.version:
        return lease
    return answer.lease_after(lease)
