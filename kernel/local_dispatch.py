"""One call of the local claimed dispatcher as a pure step machine (SPEC §1.8.3, ADR-0021 §5.5;
RETRY-21, CAD-12).

The runner sequences ports; this module decides. `dispatch_begin` names the first page to read;
`dispatch_advance` takes the port's answer (a page of `local_dispatch_candidates`, or the
outcome of one L1 activation) and names the next port call or the end of the call:

- candidates are tried in page order (one whose pinned ExecutionSpec the runner cannot read is
  skipped before any activation: the spec is prepared before L1, §1.8.3); the first activation
  the kernel *applied* ends the call (one activation per call, §1.8.3); any other outcome
  (raced, rejected, replayed) moves to the next candidate;
- a page is read only within the budget's scan (`Paging(page size, pages)`; edge/standalone
  8 x 1, hard 64 x 16);
- the cursor must strictly advance between pages (the keyset is `(queued_at_ms,
  attempt_created_at_ms, attempt_id)`): a source that answers a page whose last key is not after
  the previous cursor ends the call with `DISPATCH_CURSOR_NOT_ADVANCING` and no activation from
  that page, so a broken source can never make the dispatcher loop.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from kernel.outcomes import Outcome
from kernel.selection import Candidate, Page
from kernel.specs.budgets import Paging
from kernel.specs.states import OutcomeKind

__all__ = [
    "ActivateCandidate",
    "ActivationAnswered",
    "CandidateSkipped",
    "DispatchAction",
    "DispatchDone",
    "DispatchEnd",
    "DispatchEvent",
    "DispatchHalf",
    "DispatchKey",
    "DispatchScan",
    "PageRead",
    "ReadDispatchPage",
    "activated_nothing",
    "dispatch_advance",
    "dispatch_begin",
    "shared_activation_order",
]

#: The keyset of the ordinary source, `(queued_at_ms, attempt_created_at_ms, attempt_id)`; the
#: Task half of D-15 pages `(admitted_at_ms, 0, attempt_id)` on the same machine.
DispatchKey: TypeAlias = tuple[int, int, str]


class Answer(Protocol):
    """Any kernel outcome: it has a kind."""

    @property
    def kind(self) -> OutcomeKind: ...


class DispatchEnd(enum.StrEnum):
    """Why one dispatcher call ended (stable codes)."""

    ACTIVATED = "DISPATCH_ACTIVATED"  # one Attempt activated: the caller launches it
    EXHAUSTED = "DISPATCH_NOTHING_TO_ACTIVATE"  # the source has no more candidates
    SCAN_LIMIT = "DISPATCH_SCAN_LIMIT"  # the budget's pages were read without an activation
    CURSOR_NOT_ADVANCING = "DISPATCH_CURSOR_NOT_ADVANCING"  # a broken source: refused
    PAGE_OVERSIZED = "DISPATCH_PAGE_OVERSIZED"  # more items than asked for: a broken source


@dataclass(frozen=True, slots=True)
class DispatchScan:
    """Where one call is: pages read, the cursor, the candidates of the page not yet tried."""

    paging: Paging
    pages_read: int = 0
    cursor: DispatchKey | None = None
    pending: tuple[Candidate[DispatchKey], ...] = ()
    has_more: bool = True
    tried: int = 0


@dataclass(frozen=True, slots=True)
class ReadDispatchPage:
    """Port call: one page of `local_dispatch_candidates(limit, after)`."""

    limit: int
    after: DispatchKey | None


@dataclass(frozen=True, slots=True)
class ActivateCandidate:
    """Port call: L1 (`activate_local`) for this candidate's Attempt."""

    candidate: Candidate[DispatchKey]


@dataclass(frozen=True, slots=True)
class DispatchDone:
    """The call is over; `activated` is the candidate to launch when `end` is ACTIVATED."""

    end: DispatchEnd
    tried: int
    activated: Candidate[DispatchKey] | None = None


DispatchAction: TypeAlias = ReadDispatchPage | ActivateCandidate | DispatchDone


@dataclass(frozen=True, slots=True)
class PageRead:
    page: Page[DispatchKey]


@dataclass(frozen=True, slots=True)
class ActivationAnswered:
    """The kernel's answer to one activation: L1's `Outcome`, or a Task Attempt's prepare
    (`kernel.workflow`, D-15); only its kind matters here."""

    candidate: Candidate[DispatchKey]
    outcome: Outcome | Answer


@dataclass(frozen=True, slots=True)
class CandidateSkipped:
    """The runner could not prepare the candidate (its pinned ExecutionSpec is unreadable), so
    nothing was activated: the next candidate is tried, and the Run stays `queued`."""

    candidate: Candidate[DispatchKey]


DispatchEvent: TypeAlias = PageRead | ActivationAnswered | CandidateSkipped


def dispatch_begin(paging: Paging) -> tuple[DispatchScan, DispatchAction]:
    """The first port call of a dispatcher call: the first page."""
    scan = DispatchScan(paging)
    return scan, ReadDispatchPage(paging.page_size, None)


def dispatch_advance(
    scan: DispatchScan, event: DispatchEvent
) -> tuple[DispatchScan, DispatchAction]:
    """The next port call after `event` (module docstring)."""
    if isinstance(event, CandidateSkipped):
        return _next(scan)
    if isinstance(event, ActivationAnswered):
        if event.outcome.kind is OutcomeKind.APPLIED:
            return scan, DispatchDone(DispatchEnd.ACTIVATED, scan.tried, event.candidate)
        return _next(scan)
    page = event.page
    # A source that answers more than the page size, or keys that do not strictly follow the
    # cursor and each other, is broken: the call ends before trying any of them (RETRY-21,
    # CAD-12: never more candidates than the budget, never one candidate twice).
    if len(page.items) > scan.paging.page_size:
        return scan, DispatchDone(DispatchEnd.PAGE_OVERSIZED, scan.tried)
    previous = scan.cursor
    for item in page.items:
        if previous is not None and not item.key > previous:
            return scan, DispatchDone(DispatchEnd.CURSOR_NOT_ADVANCING, scan.tried)
        previous = item.key
    cursor = page.cursor
    scan = DispatchScan(
        paging=scan.paging,
        pages_read=scan.pages_read + 1,
        cursor=cursor if cursor is not None else scan.cursor,
        pending=page.items,
        has_more=page.has_more and bool(page.items),
        tried=scan.tried,
    )
    return _next(scan)


def _next(scan: DispatchScan) -> tuple[DispatchScan, DispatchAction]:
    if scan.pending:
        head, *rest = scan.pending
        moved = DispatchScan(
            scan.paging, scan.pages_read, scan.cursor, tuple(rest), scan.has_more, scan.tried + 1
        )
        return moved, ActivateCandidate(head)
    if not scan.has_more:
        return scan, DispatchDone(DispatchEnd.EXHAUSTED, scan.tried)
    if scan.pages_read >= scan.paging.pages:
        return scan, DispatchDone(DispatchEnd.SCAN_LIMIT, scan.tried)
    return scan, ReadDispatchPage(scan.paging.page_size, scan.cursor)


class DispatchHalf(enum.StrEnum):
    """The two halves of the local dispatch phase (D-15): ordinary Runs and Task Attempts."""

    ORDINARY = "ordinary"
    TASK = "task"


def shared_activation_order(
    cycle_ordinal: int, activation_index: int
) -> tuple[DispatchHalf, DispatchHalf]:
    """D-15: ordinary and Task dispatch share the per-cycle activation budget. Each activation
    asks one half first and the other only if the first activated nothing (`activated_nothing`);
    which half goes first alternates with the cycle and the activation, so a steady stream of
    either kind never starves the other."""
    if (cycle_ordinal + activation_index) % 2 == 0:
        return DispatchHalf.ORDINARY, DispatchHalf.TASK
    return DispatchHalf.TASK, DispatchHalf.ORDINARY


def activated_nothing(end: DispatchEnd) -> bool:
    """Whether a dispatcher call left its activation unused (the other half may take it)."""
    return end is not DispatchEnd.ACTIVATED
