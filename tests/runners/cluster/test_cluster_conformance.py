"""The cluster runner through the conformance suite (issue 5 item 2, first part): every named
trace whose capabilities the cluster adapter declares replays on a real PostgreSQL server with
zero divergences, each in a schema of its own, and guard mode finds no stale write accepted.
(The whole corpus: `qlk conform --runner cluster --dsn $QL3_PG_DSN`.)"""

from __future__ import annotations

import functools
from pathlib import Path

import psycopg
import pytest

from conformance.report import run_corpus
from conformance.run.cluster import CAPABILITIES, make_cluster_adapter
from conformance.run.corpus import RUN_CORPUS, read_trace, spec_id_of, trace_paths
from conformance.run.guards import probe_every_write
from conformance.run.replay import replay

NAMED = [p for p in trace_paths(RUN_CORPUS) if p.parent == RUN_CORPUS]


@pytest.mark.slow  # every named trace on PostgreSQL, about 30 s
def test_every_applicable_named_trace_replays_without_divergence(pg_dsn: str) -> None:
    """Every named trace not replayed by `test_a_cluster_item_trace_replays_on_postgresql` below
    (together: every named trace, each once), the way `qlk conform --runner cluster --jobs 2`
    replays them: two worker processes, each trace in a fresh schema of its own."""
    rest = [path for path in NAMED if path not in CLUSTER_ONLY_PATHS]
    assert len(rest) + len(CLUSTER_ONLY_PATHS) == len(NAMED)
    summary = run_corpus(rest, "cluster", root=RUN_CORPUS, dsn=pg_dsn, jobs=JOBS)
    assert [o.path for o in summary.outcomes] == [p.name for p in rest]
    passed, not_applicable = [], []
    for outcome in summary.outcomes:
        result = outcome.result
        assert result.divergence is None, (outcome.path, result.divergence)
        if result.missing_capabilities:
            assert not set(result.missing_capabilities) <= CAPABILITIES
            not_applicable.append(outcome.path)
        else:
            assert result.status == "passed", (outcome.path, result.status)
            passed.append(outcome.path)
    assert not_applicable == []  # the cluster runner declares every capability of the corpus
    assert len(passed) == len(rest)
    assert any(name.startswith("RUN-06") for name in passed)
    assert any(name.startswith("LEASE-02") for name in passed)


#: The named traces of the cluster-only items, and of the items whose CONF trace must pass on
#: both runners (Appendix E-1, every profile), each a test that cites its SPEC id.
CLUSTER_ONLY = [
    pytest.param(path, marks=pytest.mark.spec(spec), id=path.stem)
    for path in NAMED
    if (
        (spec := spec_id_of(path.name)) in {"REC-01", "REC-02", "REC-03", "REC-13", "RETRY-17"}
        and "cluster" in read_trace(path).header.profile
    )
    or spec == "E-1"
]


@pytest.mark.parametrize("path", CLUSTER_ONLY)
def test_a_cluster_item_trace_replays_on_postgresql(pg_dsn: str, path: Path) -> None:
    """REC-01 / REC-02 (the §2.3 source: exactly the eligible rows, at most `limit`, exact
    `has_more`, no cursor), REC-03, REC-13 and RETRY-17 (cluster pages fail closed), and E-1
    (cancel while running, the lease expires, the next convergence ends the Run cancelled): the
    SQL of the cluster runner against the oracle, step by step."""
    result = replay(read_trace(path), functools.partial(make_cluster_adapter, pg_dsn))
    assert result.missing_capabilities == ()
    assert result.divergence is None, result.divergence
    assert result.steps == len(read_trace(path).steps)


CLUSTER_ONLY_PATHS = frozenset(p.values[0] for p in CLUSTER_ONLY if isinstance(p.values[0], Path))
#: Replay processes for the rest of the named corpus (`qlk conform --jobs`).
JOBS = 2


def test_the_cluster_item_traces_are_all_there() -> None:
    paths = [p.values[0] for p in CLUSTER_ONLY]
    ids = sorted({str(spec_id_of(path.name)) for path in paths if isinstance(path, Path)})
    assert len(paths) == len(CLUSTER_ONLY)
    assert ids == ["E-1", "REC-01", "REC-02", "REC-03", "REC-13", "RETRY-17"]


def test_guard_mode_finds_no_stale_write_accepted_by_the_cluster_store(pg_dsn: str) -> None:
    report = probe_every_write(
        functools.partial(make_cluster_adapter, pg_dsn), RUN_CORPUS, paths=NAMED
    )
    assert not report.not_applicable
    assert report.failures == []
    assert len(report.writes) >= 10, len(report.writes)
    assert report.probes >= 60, report.probes


def test_an_adapter_drops_its_schema_on_close(pg_dsn: str) -> None:
    adapter = make_cluster_adapter(pg_dsn)
    schema = adapter.store.schema
    assert adapter.project() == {
        "runs": [],
        "attempts": [],
        "policies": [],
        "leases": [],
        "events": [],
    }
    adapter.close()
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %(s)s", {"s": schema}
        ).fetchone()
    assert row == (0,)
