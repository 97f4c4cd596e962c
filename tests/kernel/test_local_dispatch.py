"""The local claimed dispatcher's step machine (SPEC §1.8.3, ADR-0021 §5.5; RETRY-21, CAD-12).

`kernel.local_dispatch` decides one dispatcher call: which page to read, which candidate to
activate next, and when the call ends. These tests drive it the way `runners/local/dispatcher.py`
does (one port answer per action) and check what its docstring promises: at most one activation
per call (an `Applied` activation ends the call `ACTIVATED`), any other activation outcome or an
unpreparable candidate moves to the next candidate, no more pages than the budget's scan, and a
page whose last key does not advance past the previous cursor refused with
`DISPATCH_CURSOR_NOT_ADVANCING` before anything on it is tried.

The activation outcomes are the kernel's own answers to L1 (`activate_local` on reached
aggregates, `tests/support/recovery_fixtures.py`), and one property runs the machine against the
real selection oracle and real L1 transitions with concurrent interference.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    ActivateCandidate,
    ActivateLocal,
    ActivationAnswered,
    Applied,
    AttemptStatus,
    CancelReason,
    Candidate,
    CandidateSkipped,
    Code,
    DispatchAction,
    DispatchDone,
    DispatchEnd,
    DispatchEvent,
    DispatchKey,
    Outcome,
    Page,
    PageRead,
    Raced,
    ReadDispatchPage,
    Rejected,
    Replayed,
    RunAggregate,
    RunStatus,
    activate_local,
    apply,
    dispatch_advance,
    dispatch_begin,
)
from kernel.selection import local_dispatch_candidates
from kernel.specs import BUDGETS, HARD_LIMITS, Paging, Profile
from tests.support.recovery_fixtures import (
    LOCAL,
    T0,
    activate_cmd,
    admit,
    callback_digest,
    latest,
    request_cancel,
)


def _edge_scan() -> Paging:
    budget = BUDGETS[Profile.EDGE].claimed_dispatcher
    assert budget is not None
    return budget.scan


EDGE_SCAN = _edge_scan()
HARD_SCAN = HARD_LIMITS.claimed_dispatcher_scan
EMPTY: Page[DispatchKey] = Page((), False)


# -- the L1 answers, from the kernel itself --------------------------------------------------------
def _l1_outcomes() -> tuple[Applied, Raced, Rejected]:
    queued = admit("run-1", "a1", T0)
    applied = activate_local(queued, activate_cmd(queued), T0)
    assert isinstance(applied, Applied)
    # A second dispatcher got there first: the Attempt is `starting` now (RETRY-18).
    raced = activate_local(applied.aggregate, activate_cmd(queued), T0)
    assert isinstance(raced, Raced)
    # An intent arrived between the page read and L1.
    cancelled = request_cancel(queued, T0, CancelReason.USER)
    rejected = activate_local(cancelled, activate_cmd(queued), T0)
    assert rejected == Rejected(Code.CANCEL_REQUESTED)
    return applied, raced, rejected


APPLIED, RACED, REJECTED = _l1_outcomes()
REPLAYED = Replayed(Code.ALREADY_TERMINAL)
VERDICTS: dict[str, Outcome | None] = {
    "applied": APPLIED,
    "raced": RACED,
    "rejected": REJECTED,
    "replayed": REPLAYED,
    "skipped": None,  # the runner could not read the pinned ExecutionSpec: CandidateSkipped
}


def cand(i: int, queued_at: int | None = None) -> Candidate[DispatchKey]:
    return Candidate(
        f"r{i:03d}", f"a{i:03d}", (i if queued_at is None else queued_at, 0, f"a{i:03d}")
    )


def page(*indexes: int, has_more: bool) -> Page[DispatchKey]:
    return Page(tuple(cand(i) for i in indexes), has_more)


# -- a driver that performs the port calls the machine names ---------------------------------------
@dataclass
class Trace:
    actions: list[DispatchAction]
    events: list[DispatchEvent]

    @property
    def done(self) -> DispatchDone:
        last = self.actions[-1]
        assert isinstance(last, DispatchDone)
        return last

    @property
    def reads(self) -> list[ReadDispatchPage]:
        return [a for a in self.actions if isinstance(a, ReadDispatchPage)]

    @property
    def tried(self) -> list[Candidate[DispatchKey]]:
        return [a.candidate for a in self.actions if isinstance(a, ActivateCandidate)]

    @property
    def applied(self) -> list[Candidate[DispatchKey]]:
        return [
            e.candidate
            for e in self.events
            if isinstance(e, ActivationAnswered) and isinstance(e.outcome, Applied)
        ]


def drive(
    paging: Paging,
    pages: Sequence[Page[DispatchKey]],
    answer: Callable[[int, Candidate[DispatchKey]], DispatchEvent],
    max_steps: int = 10_000,
) -> Trace:
    """Run one call: the k-th page read answers `pages[k]` (then empty pages), the n-th
    activation (0-based) answers `answer(n, candidate)`."""
    scan, action = dispatch_begin(paging)
    trace = Trace([action], [])
    script = iter(pages)
    while not isinstance(action, DispatchDone):
        assert len(trace.events) < max_steps, "the dispatcher call does not end"
        event: DispatchEvent
        if isinstance(action, ReadDispatchPage):
            event = PageRead(next(script, EMPTY))
        else:
            event = answer(len(trace.tried) - 1, action.candidate)
        scan, action = dispatch_advance(scan, event)
        trace.events.append(event)
        trace.actions.append(action)
    return trace


def answering(
    *verdicts: str, default: str = "raced"
) -> Callable[[int, Candidate[DispatchKey]], DispatchEvent]:
    def answer(n: int, candidate: Candidate[DispatchKey]) -> DispatchEvent:
        outcome = VERDICTS[verdicts[n] if n < len(verdicts) else default]
        if outcome is None:
            return CandidateSkipped(candidate)
        return ActivationAnswered(candidate, outcome)

    return answer


# -- the first call --------------------------------------------------------------------------------
def test_the_edge_budget_is_one_page_of_eight() -> None:
    """§6.3 / ADR-0021 §5.5: edge and standalone scan 8 x 1, one activation per call."""
    for profile in (Profile.EDGE, Profile.STANDALONE):
        budget = BUDGETS[profile].claimed_dispatcher
        assert budget is not None
        assert budget.scan == Paging(8, 1)
        assert budget.activations_per_call == 1


def test_begin_reads_the_first_page_without_a_cursor() -> None:
    scan, action = dispatch_begin(EDGE_SCAN)
    assert action == ReadDispatchPage(8, None)
    assert scan.pages_read == 0
    assert scan.tried == 0
    _, hard = dispatch_begin(Paging(HARD_SCAN.page_size_max, 16))
    assert hard == ReadDispatchPage(64, None)


# -- one activation per call -----------------------------------------------------------------------
@pytest.mark.spec("CAD-12")
@pytest.mark.parametrize("position", range(8))
def test_an_applied_activation_ends_the_call_activated(position: int) -> None:
    """§1.8.3: the first activation the kernel applies ends the call; the candidates before it
    (raced, rejected, replayed or skipped) were tried, the ones after it never are."""
    before = ("raced", "rejected", "replayed", "skipped") * 2
    trace = drive(
        EDGE_SCAN,
        [page(*range(8), has_more=True)],
        answering(*before[:position], "applied", default="applied"),
    )
    assert trace.done == DispatchDone(DispatchEnd.ACTIVATED, position + 1, cand(position))
    assert trace.tried == [cand(i) for i in range(position + 1)]
    assert trace.applied == [cand(position)]
    assert len(trace.reads) == 1


def test_applied_twice_in_a_row_still_activates_only_the_first() -> None:
    trace = drive(EDGE_SCAN, [page(1, 2, 3, has_more=False)], answering(default="applied"))
    assert trace.done.end is DispatchEnd.ACTIVATED
    assert trace.done.activated == cand(1)
    assert trace.done.tried == 1
    assert trace.tried == [cand(1)]


@pytest.mark.parametrize("verdict", ["raced", "rejected", "replayed", "skipped"])
def test_a_candidate_not_activated_is_passed_and_the_scan_goes_on(verdict: str) -> None:
    """§1.8.3: any outcome but `Applied` (and an unreadable ExecutionSpec) moves to the next
    candidate in page order; the scan does not end on it."""
    trace = drive(
        EDGE_SCAN, [page(4, 5, 6, has_more=False)], answering(verdict, verdict, "applied")
    )
    assert trace.tried == [cand(4), cand(5), cand(6)]
    assert trace.done == DispatchDone(DispatchEnd.ACTIVATED, 3, cand(6))


def test_a_skipped_candidate_is_never_answered_as_activated() -> None:
    """A `CandidateSkipped` is not an activation: a call whose every candidate is skipped ends
    without one."""
    trace = drive(EDGE_SCAN, [page(1, 2, has_more=False)], answering(default="skipped"))
    assert trace.done == DispatchDone(DispatchEnd.EXHAUSTED, 2)
    assert trace.done.activated is None
    assert trace.applied == []


# -- the scan's pages ------------------------------------------------------------------------------
@pytest.mark.spec("CAD-12")
def test_the_edge_call_reads_one_page_and_stops_at_the_scan_limit() -> None:
    """8 x 1: eight candidates not activated on a page that says more exist end the call
    `SCAN_LIMIT` without reading a second page."""
    trace = drive(
        EDGE_SCAN,
        [page(*range(8), has_more=True), page(*range(8, 16), has_more=False)],
        answering(default="raced"),
    )
    assert trace.done == DispatchDone(DispatchEnd.SCAN_LIMIT, 8)
    assert trace.reads == [ReadDispatchPage(8, None)]
    assert trace.tried == [cand(i) for i in range(8)]


@pytest.mark.parametrize("size", [0, 1, 7, 8])
def test_a_last_page_ends_the_call_exhausted(size: int) -> None:
    """A page that says no more exist (or an empty page) ends the call `EXHAUSTED` once its
    candidates were tried, with no further read."""
    trace = drive(
        EDGE_SCAN,
        [page(*range(size), has_more=False), page(99, has_more=False)],
        answering(default="rejected"),
    )
    assert trace.done == DispatchDone(DispatchEnd.EXHAUSTED, size)
    assert len(trace.reads) == 1


def test_an_empty_page_that_claims_more_is_exhausted() -> None:
    """`has_more` on an empty page cannot be followed (no cursor): the call ends `EXHAUSTED`."""
    trace = drive(Paging(4, 3), [Page((), True), page(1, has_more=False)], answering("applied"))
    assert trace.done == DispatchDone(DispatchEnd.EXHAUSTED, 0)
    assert len(trace.reads) == 1


@pytest.mark.spec("CAD-12")
def test_later_pages_are_read_after_the_cursor_up_to_the_budget() -> None:
    """Pages are read with the page size as limit and the last key of the previous page as
    cursor, no more than `pages` of them."""
    paging = Paging(2, 3)
    trace = drive(
        paging,
        [page(1, 2, has_more=True), page(3, 4, has_more=True), page(5, 6, has_more=True)],
        answering(default="raced"),
    )
    assert trace.reads == [
        ReadDispatchPage(2, None),
        ReadDispatchPage(2, cand(2).key),
        ReadDispatchPage(2, cand(4).key),
    ]
    assert trace.done == DispatchDone(DispatchEnd.SCAN_LIMIT, 6)
    # A fourth page would have activated its candidate: it is never read.
    more = drive(
        paging,
        [
            page(1, 2, has_more=True),
            page(3, 4, has_more=True),
            page(5, 6, has_more=True),
            page(7, has_more=False),
        ],
        answering(*["raced"] * 6, default="applied"),
    )
    assert more.done == DispatchDone(DispatchEnd.SCAN_LIMIT, 6)
    assert len(more.reads) == 3
    assert more.applied == []


# -- RETRY-21: a cursor that does not advance ------------------------------------------------------
@pytest.mark.spec("RETRY-21")
@pytest.mark.parametrize("last", [1, 2], ids=["behind", "equal"])
def test_a_page_whose_cursor_does_not_advance_is_refused(last: int) -> None:
    """A second page whose last key is not after the first page's last key ends the call with
    `DISPATCH_CURSOR_NOT_ADVANCING`; nothing on that page is tried (not even the candidates
    that would be after the cursor), and no further page is read."""
    broken = Page((cand(7), cand(last)), True)
    trace = drive(
        Paging(2, 16),
        [page(1, 2, has_more=True), broken, page(8, 9, has_more=False)],
        answering(default="raced"),
    )
    assert trace.done == DispatchDone(DispatchEnd.CURSOR_NOT_ADVANCING, 2)
    assert trace.done.end.value == "DISPATCH_CURSOR_NOT_ADVANCING"
    assert trace.tried == [cand(1), cand(2)]
    assert len(trace.reads) == 2


@pytest.mark.spec("RETRY-21")
def test_a_source_repeating_its_page_cannot_make_the_dispatcher_loop() -> None:
    """A broken source that answers the same page to every cursor: the call ends after the
    second read, with the first page's candidates tried once each, whatever the budget."""
    same = page(1, 2, 3, has_more=True)
    trace = drive(Paging(3, HARD_SCAN.pages_max or 16), [same] * 100, answering(default="raced"))
    assert trace.done == DispatchDone(DispatchEnd.CURSOR_NOT_ADVANCING, 3)
    assert len(trace.reads) == 2
    assert trace.tried == [cand(1), cand(2), cand(3)]


@pytest.mark.spec("RETRY-21")
def test_an_advancing_cursor_is_compared_as_the_whole_keyset() -> None:
    """The keyset is `(queued_at_ms, attempt_created_at_ms, attempt_id)`: a later attempt id at
    the same times advances; an earlier queued time with a larger id does not."""
    first = Page((Candidate("r1", "a1", (5, 5, "m")),), True)
    ahead = Page((Candidate("r2", "a2", (5, 5, "n")),), False)
    behind = Page((Candidate("r3", "a3", (4, 9, "z")),), False)
    ok = drive(Paging(1, 4), [first, ahead], answering(default="raced"))
    assert ok.done == DispatchDone(DispatchEnd.EXHAUSTED, 2)
    refused = drive(Paging(1, 4), [first, behind], answering(default="raced"))
    assert refused.done == DispatchDone(DispatchEnd.CURSOR_NOT_ADVANCING, 1)


def test_the_first_page_and_empty_pages_are_never_refused() -> None:
    """There is no previous cursor before the first page, and an empty page has none: neither
    is a cursor that fails to advance."""
    trace = drive(Paging(2, 4), [page(3, 9, has_more=True), EMPTY], answering(default="raced"))
    assert trace.done == DispatchDone(DispatchEnd.EXHAUSTED, 2)


@pytest.mark.spec("RETRY-21")
def test_keys_out_of_order_within_a_page_are_refused_before_any_try() -> None:
    """A page is a keyset page (P-2): keys strictly increase within it and after the cursor;
    otherwise nothing of it is tried (a candidate could be tried twice in one call)."""
    trace = drive(Paging(2, 4), [page(9, 3, has_more=True)], answering(default="raced"))
    assert trace.done == DispatchDone(DispatchEnd.CURSOR_NOT_ADVANCING, 0)
    trace = drive(
        Paging(2, 4),
        [page(1, 2, has_more=True), page(2, 5, has_more=False)],
        answering(default="raced"),
    )
    assert trace.done == DispatchDone(DispatchEnd.CURSOR_NOT_ADVANCING, 2)


@pytest.mark.spec("CAD-12")
def test_a_page_larger_than_asked_is_refused_before_any_try() -> None:
    """A source answering more than the page size would take the call past its budget."""
    trace = drive(Paging(2, 4), [page(1, 2, 3, has_more=True)], answering(default="raced"))
    assert trace.done == DispatchDone(DispatchEnd.PAGE_OVERSIZED, 0)


# -- the machine under arbitrary sources and answers -----------------------------------------------
KEYS = st.tuples(st.integers(0, 6), st.integers(0, 2), st.sampled_from("abc"))


@st.composite
def scripts(
    draw: st.DrawFn, ordered: bool | None = None
) -> tuple[Paging, list[Page[DispatchKey]], list[str]]:
    """A paging within the hard limits, the pages a source answers (at most `page_size` items
    each, P-2; keys either increasing across the whole script, as a correct keyset source
    gives, or arbitrary, so cursors stall and go back), and one verdict per possible try."""
    paging = draw(
        st.sampled_from([EDGE_SCAN]) | st.builds(Paging, st.integers(1, 5), st.integers(1, 5))
    )
    if ordered is None:
        ordered = draw(st.booleans())
    pages: list[Page[DispatchKey]] = []
    n = 0
    for _ in range(draw(st.integers(1, paging.pages + 1))):
        full = draw(
            st.sampled_from([True, True, False])
        )  # mostly full pages, so later pages are read
        keys = draw(
            st.lists(KEYS, min_size=paging.page_size if full else 0, max_size=paging.page_size)
        )
        items = []
        for key in keys:
            items.append(Candidate(f"r{n}", f"a{n}", key))
            n += 1
        pages.append(Page(tuple(items), draw(st.sampled_from([True, True, True, False]))))
    if ordered:  # one global order, split back into the same page shapes
        flat = sorted(c.key for p in pages for c in p.items)
        flat = [(k[0] * 1000 + i, k[1], k[2]) for i, k in enumerate(flat)]  # strictly increasing
        keys_iter = iter(flat)
        pages = [
            Page(
                tuple(Candidate(c.run_id, c.attempt_id, next(keys_iter)) for c in p.items),
                p.has_more,
            )
            for p in pages
        ]
    # Some calls never see an applied activation; the others one now and then.
    others = draw(st.sampled_from([0, 2, 6]))
    passes = ["raced", "rejected", "replayed", "skipped"]
    verdicts = draw(
        st.lists(
            st.sampled_from(passes * others + ["applied"] if others else passes),
            min_size=paging.max_items,
            max_size=paging.max_items,
        )
    )
    return paging, pages, verdicts


@dataclass(frozen=True)
class Expected:
    end: DispatchEnd
    tried: int
    activated: Candidate[DispatchKey] | None
    cursors: tuple[DispatchKey | None, ...]  # the `after` of each page read


def reference(
    paging: Paging, pages: Sequence[Page[DispatchKey]], verdicts: Sequence[str]
) -> Expected:
    """§1.8.3 and the module docstring, written as a plain loop."""
    tried = 0
    cursor: DispatchKey | None = None
    cursors: list[DispatchKey | None] = []
    for index in range(paging.pages):
        got = pages[index] if index < len(pages) else EMPTY
        cursors.append(cursor)
        last = got.items[-1].key if got.items else None
        if len(got.items) > paging.page_size:
            return Expected(DispatchEnd.PAGE_OVERSIZED, tried, None, tuple(cursors))
        keys = [c.key for c in got.items]
        previous = [cursor] if cursor is not None else []
        chain = previous + keys
        if any(not later > earlier for earlier, later in itertools.pairwise(chain)):
            return Expected(DispatchEnd.CURSOR_NOT_ADVANCING, tried, None, tuple(cursors))
        for candidate in got.items:
            verdict = verdicts[tried]
            tried += 1
            if verdict == "applied":
                return Expected(DispatchEnd.ACTIVATED, tried, candidate, tuple(cursors))
        if not got.items or not got.has_more:
            return Expected(DispatchEnd.EXHAUSTED, tried, None, tuple(cursors))
        cursor = last
    return Expected(DispatchEnd.SCAN_LIMIT, tried, None, tuple(cursors))


@pytest.mark.spec("RETRY-21", "CAD-12")
@given(scripts())
def test_any_source_and_answers_end_within_the_budget(
    script: tuple[Paging, list[Page[DispatchKey]], list[str]],
) -> None:
    """For any page sequence (well-formed or with stalling cursors) and any activation
    outcomes: the call ends within `pages * page_size + pages` steps, reads at most `pages`
    pages of `page_size`, tries candidates in page order, activates at most one (the last one
    tried, iff an activation was applied), its `tried` counts exactly the candidates it handed
    out, and the result is the one the plain reading of §1.8.3 gives."""
    paging, pages, verdicts = script
    trace = drive(paging, pages, answering(*verdicts))
    done = trace.done
    # Termination within the bound; exactly one end, at the end.
    assert len(trace.events) <= paging.max_items + paging.pages
    assert [a for a in trace.actions if isinstance(a, DispatchDone)] == [done]
    # Pages: within the scan, each of `page_size`.
    assert 1 <= len(trace.reads) <= paging.pages
    assert all(r.limit == paging.page_size for r in trace.reads)
    # Candidates handed out are the pages' own, in order, each once per page read.
    read_pages = [e.page for e in trace.events if isinstance(e, PageRead)]
    offered = [c for p in read_pages for c in p.items]
    assert trace.tried == offered[: len(trace.tried)]
    assert done.tried == len(trace.tried) <= paging.max_items
    # At most one activation; ACTIVATED iff one was applied, and it is the last one tried.
    assert len(trace.applied) <= 1
    assert (done.end is DispatchEnd.ACTIVATED) == bool(trace.applied)
    if done.end is DispatchEnd.ACTIVATED:
        assert done.activated == trace.applied[0] == trace.tried[-1]
    else:
        assert done.activated is None
    # A refused page contributes nothing.
    if done.end in (DispatchEnd.CURSOR_NOT_ADVANCING, DispatchEnd.PAGE_OVERSIZED):
        assert trace.tried == [c for p in read_pages[:-1] for c in p.items]
    want = reference(paging, pages, verdicts)
    assert (done.end, done.tried, done.activated) == (want.end, want.tried, want.activated)
    assert tuple(r.after for r in trace.reads) == want.cursors


@pytest.mark.spec("RETRY-21")
@given(scripts(ordered=True))
def test_a_well_ordered_source_never_ends_with_a_stalled_cursor(
    script: tuple[Paging, list[Page[DispatchKey]], list[str]],
) -> None:
    """The refusal is only for broken sources: pages whose keys strictly increase across the
    call never end it `CURSOR_NOT_ADVANCING`."""
    paging, pages, verdicts = script
    keys = [c.key for p in pages for c in p.items]
    assert keys == sorted(set(keys))
    assert (
        drive(paging, pages, answering(*verdicts)).done.end is not DispatchEnd.CURSOR_NOT_ADVANCING
    )


# -- against the real source and the real L1 -------------------------------------------------------
INTERFERENCE = st.sampled_from(["none", "raced", "cancelled", "unreadable"])


@pytest.mark.spec("CAD-12")
@given(
    plan=st.lists(st.tuples(st.integers(0, 3), INTERFERENCE), max_size=14),
    paging=st.sampled_from([EDGE_SCAN, Paging(1, 3), Paging(3, 2), Paging(2, 4)]),
)
def test_one_call_over_real_runs_activates_the_first_activatable_one(
    plan: list[tuple[int, str]], paging: Paging
) -> None:
    """Local `queued` Runs admitted through the kernel, read through `local_dispatch_candidates`
    and activated through `activate_local` (L1) on the current aggregate. Between a page read
    and the activation another dispatcher may activate a candidate (`Raced`) or an intent may
    arrive (`Rejected`), or the runner cannot read its ExecutionSpec (skipped): the call
    activates exactly the first Run in keyset order that is none of these, within the scan,
    and no other Run changes because of it."""
    db: dict[str, RunAggregate] = {}
    interference: dict[str, str] = {}
    for i, (delay, what) in enumerate(plan):
        agg = admit(f"run-{i:02d}", f"att-{(7 * i) % 15:02d}", T0 + 10 * delay)
        db[agg.run.run_id] = agg
        interference[agg.run.run_id] = what
    before = dict(db)
    now = T0 + 1_000
    ours: list[str] = []

    scan, action = dispatch_begin(paging)
    steps = 0
    while not isinstance(action, DispatchDone):
        steps += 1
        assert steps <= paging.max_items + paging.pages
        event: DispatchEvent
        if isinstance(action, ReadDispatchPage):
            assert action.limit == paging.page_size
            event = PageRead(
                local_dispatch_candidates(db.values(), LOCAL, action.limit, action.after)
            )
        else:
            candidate = action.candidate
            run_id = candidate.run_id
            what = interference[run_id]
            if what == "unreadable":
                event = CandidateSkipped(candidate)
            else:
                if what == "raced":
                    db[run_id] = _activated(db[run_id], now)
                elif what == "cancelled":
                    db[run_id] = request_cancel(db[run_id], now, CancelReason.USER)
                assert candidate.attempt_id is not None
                command = ActivateLocal(
                    run_id=run_id,
                    attempt_id=candidate.attempt_id,
                    local_executor_type=LOCAL,
                    callback_sequence=1,
                    callback_token_sha256=callback_digest("ours"),
                )
                outcome = apply(db[run_id], command, now)
                if isinstance(outcome, Applied):
                    db[run_id] = outcome.aggregate
                    ours.append(run_id)
                else:
                    assert outcome in (Raced(Code.NOT_ELIGIBLE), Rejected(Code.CANCEL_REQUESTED))
                event = ActivationAnswered(candidate, outcome)
        scan, action = dispatch_advance(scan, event)

    order = [c.run_id for c in local_dispatch_candidates(before.values(), LOCAL, 64).items]
    within = order[: paging.max_items]
    fresh = [r for r in within if interference[r] == "none"]
    assert len(ours) <= 1
    if fresh:
        assert action.end is DispatchEnd.ACTIVATED
        assert action.activated is not None
        assert ours == [fresh[0]] == [action.activated.run_id]
        assert action.tried == within.index(fresh[0]) + 1
        stored = latest(db[fresh[0]])
        assert stored.status is AttemptStatus.STARTING
        assert db[fresh[0]].run.status is RunStatus.DISPATCHING
        assert stored.callback_token_sha256 == callback_digest("ours")
    else:
        assert ours == []
        assert action.tried == len(within)
        assert action.end is (
            DispatchEnd.SCAN_LIMIT if len(order) > paging.max_items else DispatchEnd.EXHAUSTED
        )
    # Only the tried candidates were touched (by us or by the interference).
    touched = {r for r in db if db[r] != before[r]}
    assert touched <= set(within[: action.tried])


def _activated(agg: RunAggregate, at: int) -> RunAggregate:
    """Another dispatcher's L1 on the same Attempt (its own callback digest)."""
    attempt = latest(agg)
    outcome = apply(
        agg,
        ActivateLocal(
            run_id=agg.run.run_id,
            attempt_id=attempt.attempt_id,
            local_executor_type=LOCAL,
            callback_sequence=1,
            callback_token_sha256=callback_digest("theirs"),
        ),
        at,
    )
    assert isinstance(outcome, Applied)
    return outcome.aggregate
