"""The named trace of the lease expiry scanner (SPEC §3.16, INBOX-42), a run trace: the scanner
pages the Run store's `lease_expiry` source and expires each item with `expire_with_lease`, so a
`pass lease_expiry_page` step (`conformance.run.pages.ExpiryPass`) runs one call of it through
`runners.passes.lease_expiry_page` on every adapter that offers the `sources` capability.

    INBOX-42-expiry-scan-page-cursor-and-failure
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.run.faults import Fault, FaultKind
from conformance.run.pages import ExpiryPass
from conformance.run.trace import Trace
from kernel.specs.states import Profile
from model_tests.corpus.dsl import LEASE_MS, Scenario, ScenarioError, worker

NAME = "INBOX-42-expiry-scan-page-cursor-and-failure"
W = worker()


def _scan(
    s: Scenario,
    limit: int,
    after: list[Any] | None,
    expect: dict[str, Any],
    *,
    fail_candidate: int | None = None,
) -> dict[str, Any]:
    """One scanner call; its outcomes, cursor, `failed` and `has_more` must be `expect`."""
    fault = None
    if fail_candidate is not None:
        fault = Fault(FaultKind.IO_ERROR, at_candidate=fail_candidate)
    key = None if after is None else (int(after[0]), str(after[1]))
    result = s.recorder.page(ExpiryPass(limit, key, Profile.EDGE.value), s.now, fault)
    if result.kind != "page" or result.page != expect:
        raise ScenarioError(f"{NAME} step {len(s.recorder.steps)}: {result.page}, not {expect}")
    return result.page


def _build() -> Trace:
    s = Scenario(
        NAME,
        "INBOX-42: the expiry scanner (§3.16) processes one page per call in (expires_at_ms, "
        "attempt_id) order (two leases expiring at the same instant are taken by attempt id) "
        "and never a second page; a call whose second item's transaction fails returns the "
        "cursor of the contiguous successful prefix (failed, has_more), leaves the failed "
        "lease leased, and the next call from that cursor processes it again.",
    )
    expiries: dict[str, int] = {}
    # e1, e2, e3 granted one ms apart; e5 and e4 at one instant (the attempt id breaks the tie)
    for rid, tick in (("e1", 0), ("e2", 1), ("e3", 1), ("e5", 1), ("e4", 0)):
        s.tick(tick)
        aid = s.admit(rid)
        s.grant(rid, aid, W)
        lease = s.agg(rid).leased_lease(aid)
        assert lease is not None
        expiries[rid] = lease.expires_at_ms
    s.tick(LEASE_MS + 10)  # every lease expired

    def key(rid: str) -> list[Any]:
        return [expiries[rid], f"{rid}-a1"]

    def released(*rids: str) -> list[list[str]]:
        return [[f"{rid}-a1", "applied", "released"] for rid in rids]

    page = _scan(s, 2, None, {**_page(released("e1", "e2"), key("e2")), "has_more": True})
    page = _scan(
        s,
        2,
        page["cursor"],
        {"outcomes": released("e3"), "cursor": key("e3"), "failed": True, "has_more": True},
        fail_candidate=2,
    )
    assert s.agg("e4").leased_lease("e4-a1") is not None  # the failed item is still leased
    _scan(s, 2, page["cursor"], {**_page(released("e4", "e5"), key("e5")), "has_more": False})
    _scan(s, 2, key("e5"), {**_page([], key("e5")), "has_more": False})  # cursor kept
    return s.trace()


def _page(outcomes: list[list[str]], cursor: list[Any] | None) -> dict[str, Any]:
    return {"outcomes": outcomes, "cursor": cursor, "failed": False}


def scenarios() -> dict[str, Callable[[], Trace]]:
    """The expiry scanner's named trace, for `model_tests.corpus.scenarios.SCENARIOS`."""
    return {NAME: _build}
