"""One cluster dispatch call as a pure step machine (SPEC §1.7 T1, Appendix D-13; issue 17 item 1's
dispatch phase).

The runner (`runners/cluster/dispatch.py`) performs the port calls; this module decides. The call
walks the executor types some online Worker could take a grant of (sorted), and for each drives
the local dispatcher's own scan (`kernel.local_dispatch.dispatch_begin`/`dispatch_advance`: the
same D-13 keyset `(queued_at_ms, attempt_created_at_ms, attempt_id)`, the same page checks) over
`dispatch_candidates` of that type. For each candidate the kernel picks the target session
(`kernel.worker_registry.grant_target`) and names a `GrantTo`; the runner answers with the
outcome of T1 (`GrantAnswered`) or with `TargetRefused` when the grant's transaction found the
target gone, not online, or full (it rolled back: the candidate is offered to the next target).

Unlike the local dispatcher, an applied grant does not end the call: the inner scan moves on to
the next candidate (fed `CandidateSkipped`, which only advances it) until `grants` grants were
applied (`cluster_dispatch_grants`, §6.3 row [decision WS-6]) or every type's scan ended. A type's
scan ends when its source is exhausted, its page budget is read, its source is broken (the local
scan's refusals), or no session can take one more grant of it (`DISPATCH_NO_CAPACITY`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TypeAlias

from kernel.local_dispatch import (
    ActivateCandidate,
    CandidateSkipped,
    DispatchDone,
    DispatchKey,
    DispatchScan,
    PageRead,
    ReadDispatchPage,
    dispatch_advance,
    dispatch_begin,
)
from kernel.outcomes import Applied, Outcome, Rejected
from kernel.selection import Candidate
from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.worker_registry import (
    SessionLoad,
    SessionRecord,
    dispatch_executor_types,
    grant_target,
)

__all__ = [
    "NO_CAPACITY",
    "ClusterDispatchAction",
    "ClusterDispatchDone",
    "ClusterDispatchEnd",
    "ClusterDispatchEvent",
    "ClusterDispatchScan",
    "GrantAnswered",
    "GrantTo",
    "ReadGrantPage",
    "TargetRefused",
    "cluster_dispatch_advance",
    "cluster_dispatch_begin",
]

#: A type's scan ended because no session can take one more grant of it.
NO_CAPACITY = "DISPATCH_NO_CAPACITY"

#: T1 refusals that say the target session itself cannot take grants (changed since it was
#: read): it is dropped for the rest of the call.
_TARGET_UNUSABLE = frozenset({Code.WORKER_UNAVAILABLE, Code.EXECUTOR_TYPE_MISMATCH})


class ClusterDispatchEnd(enum.StrEnum):
    """Why one cluster dispatch call ended (stable codes)."""

    GRANT_LIMIT = "CLUSTER_DISPATCH_GRANT_LIMIT"  # `grants` grants applied
    SCANNED = "CLUSTER_DISPATCH_SCANNED"  # every executor type's scan ended


@dataclass(frozen=True, slots=True)
class ClusterDispatchScan:
    """Where one call is: the sessions and their loads, the types still to scan (the head is
    being scanned by `inner`), the grants so far, and each ended type with why."""

    paging: Paging
    grants: int
    observed_at_ms: int
    slots: tuple[SessionLoad, ...]
    types: tuple[str, ...]
    inner: DispatchScan | None = None
    granted: int = 0
    tried: int = 0
    ends: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ReadGrantPage:
    """Port call: one page of `dispatch_candidates(executor_type, limit, after)`."""

    executor_type: str
    limit: int
    after: DispatchKey | None


@dataclass(frozen=True, slots=True)
class GrantTo:
    """Port call: T1 (`GrantLease`) of this candidate's Attempt to `target`'s session, with its
    sealed offer, in one transaction."""

    executor_type: str
    candidate: Candidate[DispatchKey]
    target: SessionRecord


@dataclass(frozen=True, slots=True)
class ClusterDispatchDone:
    end: ClusterDispatchEnd
    granted: int
    tried: int
    ends: tuple[tuple[str, str], ...]


ClusterDispatchAction: TypeAlias = ReadGrantPage | GrantTo | ClusterDispatchDone


@dataclass(frozen=True, slots=True)
class GrantAnswered:
    candidate: Candidate[DispatchKey]
    worker_id: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class TargetRefused:
    """The grant's transaction found the target session gone, not online or full; it rolled
    back. The target is dropped for this call and the candidate tried with the next one."""

    candidate: Candidate[DispatchKey]
    worker_id: str


ClusterDispatchEvent: TypeAlias = PageRead | GrantAnswered | TargetRefused


def cluster_dispatch_begin(
    paging: Paging, grants: int, slots: tuple[SessionLoad, ...], observed_at_ms: int
) -> tuple[ClusterDispatchScan, ClusterDispatchAction]:
    """The first port call: the first page of the first executor type (or the end)."""
    types = dispatch_executor_types(slots, observed_at_ms)
    scan = ClusterDispatchScan(paging, grants, observed_at_ms, slots, types)
    return _next_type(scan)


def cluster_dispatch_advance(
    scan: ClusterDispatchScan, event: ClusterDispatchEvent
) -> tuple[ClusterDispatchScan, ClusterDispatchAction]:
    """The next port call after `event` (module docstring)."""
    current = scan.inner
    assert current is not None, "no scan in progress"
    if isinstance(event, PageRead):
        inner, action = dispatch_advance(current, event)
        return _drive(replace(scan, inner=inner), action)
    if isinstance(event, TargetRefused):
        scan = _drop(scan, event.worker_id)
        return _target(scan, event.candidate)
    outcome = event.outcome
    if isinstance(outcome, Applied):
        slots = tuple(
            SessionLoad(s.record, s.load + 1) if s.record.worker_id == event.worker_id else s
            for s in scan.slots
        )
        scan = replace(scan, slots=slots, granted=scan.granted + 1)
        if scan.granted >= scan.grants:
            return scan, _done(scan, ClusterDispatchEnd.GRANT_LIMIT)
    elif isinstance(outcome, Rejected) and outcome.code in _TARGET_UNUSABLE:
        scan = _drop(scan, event.worker_id)
    inner, action = dispatch_advance(current, CandidateSkipped(event.candidate))
    return _drive(replace(scan, inner=inner), action)


def _drop(scan: ClusterDispatchScan, worker_id: str) -> ClusterDispatchScan:
    return replace(scan, slots=tuple(s for s in scan.slots if s.record.worker_id != worker_id))


def _drive(
    scan: ClusterDispatchScan,
    action: ReadDispatchPage | ActivateCandidate | DispatchDone,
) -> tuple[ClusterDispatchScan, ClusterDispatchAction]:
    if isinstance(action, ReadDispatchPage):
        return scan, ReadGrantPage(scan.types[0], action.limit, action.after)
    if isinstance(action, ActivateCandidate):
        return _target(replace(scan, tried=scan.tried + 1), action.candidate)
    return _end_type(scan, action.end.value)


def _target(
    scan: ClusterDispatchScan, candidate: Candidate[DispatchKey]
) -> tuple[ClusterDispatchScan, ClusterDispatchAction]:
    executor_type = scan.types[0]
    chosen = grant_target(executor_type, scan.slots, scan.observed_at_ms)
    if chosen is None:
        return _end_type(scan, NO_CAPACITY)
    return scan, GrantTo(executor_type, candidate, chosen.record)


def _end_type(
    scan: ClusterDispatchScan, end: str
) -> tuple[ClusterDispatchScan, ClusterDispatchAction]:
    ended = replace(scan, ends=(*scan.ends, (scan.types[0], end)), types=scan.types[1:])
    return _next_type(ended)


def _next_type(scan: ClusterDispatchScan) -> tuple[ClusterDispatchScan, ClusterDispatchAction]:
    if not scan.types or scan.granted >= scan.grants:
        end = (
            ClusterDispatchEnd.GRANT_LIMIT
            if scan.granted >= scan.grants
            else ClusterDispatchEnd.SCANNED
        )
        return replace(scan, inner=None), _done(scan, end)
    inner, action = dispatch_begin(scan.paging)
    return _drive(replace(scan, inner=inner), action)


def _done(scan: ClusterDispatchScan, end: ClusterDispatchEnd) -> ClusterDispatchDone:
    return ClusterDispatchDone(end, scan.granted, scan.tried, scan.ends)
