"""The boundary-generated Run corpus (issue 16 item 1, `model_tests.corpus.boundaries`): every
boundary derived from the selection oracle has a committed trace (or the kernel provably cannot
reach it), each trace is what its builder records, and the derivation follows the oracle."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import pytest

from conformance.run.corpus import RUN_CORPUS, read_text, read_trace
from conformance.run.pages import SourceQuery
from conformance.run.trace import dumps
from kernel.specs.properties import PROPERTIES
from kernel.specs.states import Profile
from model_tests.corpus import boundaries
from model_tests.corpus.scenarios import SCENARIOS

SOURCE_SPECS = ("RETRY-07", "RETRY-12", "RETRY-13", "RETRY-15", "REC-01", "REC-02", "REC-07")
REPORT = boundaries.coverage()
COVERED = [row for rows in REPORT.values() for row in rows if row.status == "covered"]


@pytest.mark.spec(*SOURCE_SPECS, "REC-12", "E-1", "LEASE-07", "RETRY-18")
def test_every_derived_boundary_of_every_source_has_a_trace_or_is_unreachable() -> None:
    uncovered = [
        f"{row.boundary.source} {row.boundary.name}: {row.detail}"
        for rows in REPORT.values()
        for row in rows
        if row.status == "uncovered"
    ]
    assert uncovered == []
    assert boundaries.extra_builders() == []
    assert set(REPORT) == set(boundaries.ORACLES)
    # Only the non-runtime owner of sources whose states a legacy Run cannot reach is exempt.
    unreachable = {
        (row.boundary.source, row.boundary.name)
        for rows in REPORT.values()
        for row in rows
        if row.status == "unreachable"
    }
    assert {name for _, name in unreachable} == {"exclude-non-runtime-owner"}
    assert all(
        "NOT_RUNTIME_OWNED" in r.detail
        for rows in REPORT.values()
        for r in rows
        if r.status == "unreachable"
    )


def test_the_derivation_reads_the_oracle_terms_times_keys_and_pages() -> None:
    """The boundary list follows `kernel.selection`: the time instants where a source compares
    with an observation time, one order boundary per key column, a cursor boundary per column
    for the sources that take `after`, and the three page edges everywhere."""
    names = {s: {b.name for b in boundaries.enumerate_boundaries(s)} for s in boundaries.ORACLES}
    timed = {"lost_retry", "runtime_recovery", "lease_expiry", "orphaned_created"}
    for source, found in names.items():
        assert {"page-exactly-full", "page-full-plus-one", "page-empty"} <= found
        has_time = {"time-equal", "time-one-ms-before", "time-one-ms-after"} <= found
        assert has_time == (source in timed), source
    assert {n for n in names["local_dispatch"] if n.startswith(("order-", "cursor-"))} == {
        "order-queued", "order-created_at_ms", "order-attempt_id",
        "cursor-queued", "cursor-created_at_ms", "cursor-attempt_id",
    }  # fmt: skip
    assert not any(n.startswith("cursor-") for n in names["lost_retry"])
    assert "order-class" in names["lost_retry"]
    assert "order-class" in names["runtime_recovery"]
    # where the oracle has no exclusion, the boundary pins that the source keeps such Runs
    assert "not-excluded-workflow" in names["lease_expiry"]
    assert "not-excluded-workflow" in names["local_dispatch"]
    assert "requires-cancel-intent" in names["cancel_convergence"]
    assert "exclude-cancel-intent" in names["lost_retry"]


def test_a_condition_the_oracle_gains_is_reported_uncovered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new eligibility term in an oracle appears as a boundary without a trace: the coverage
    report fails until someone writes its builder."""
    namespace: dict[str, Any] = {}
    source = textwrap.dedent(
        """
        def lost_retry_candidates(aggregates, observed_at_ms, limit):
            def select(agg):
                if not is_lost_retry_eligible(agg) or agg.run.priority_band > 3:
                    return None
                return Candidate(agg.run.run_id, None, (agg.run.created_at_ms, agg.run.run_id))
            return _page(aggregates, select, limit)
        """
    )
    exec(compile(source, "<oracle>", "exec"), namespace)  # noqa: S102 (a test fixture)
    fake = namespace["lost_retry_candidates"]
    original = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda f: source if f is fake else original(f))
    monkeypatch.setitem(boundaries.ORACLES, "lost_retry", (fake, Profile.EDGE))
    rows = {r.boundary.name: r for r in boundaries.coverage()["lost_retry"]}
    gained = [r for name, r in rows.items() if name.startswith("unmapped:")]
    assert [r.status for r in gained] == ["uncovered"]
    assert "priority_band" in gained[0].boundary.name
    assert rows["order-created_at_ms"].status == "uncovered"  # a key column with no trace
    assert ("lost_retry", "order-class") in boundaries.extra_builders()


@pytest.mark.parametrize("row", COVERED, ids=lambda r: r.detail)
def test_a_boundary_trace_is_committed_as_recorded_and_queries_its_source(row: Any) -> None:
    name = row.detail
    assert name in SCENARIOS
    assert name.split("-boundary-")[0] in PROPERTIES
    path = RUN_CORPUS / f"{name}.jsonl"
    assert read_text(path) == dumps(SCENARIOS[name]())
    queried = {s.page.source for s in read_trace(path).steps if isinstance(s.page, SourceQuery)}
    assert queried == {row.boundary.source}
