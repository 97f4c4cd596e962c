"""The runner mutation tier, cluster runner (issue 16 item 2): `qlk conform` alone catches every
planted bug of `cluster_mutants.py`, on the real PostgreSQL server.

Each mutant names the parts of `qlk conform` that must catch it (`modes`: the corpus replay,
guard mode, kill mode, terminate mode, the lock probe);
`test_qlk_conform_alone_catches_every_cluster_mutant` plants each one, runs every mode it names
(`tests/support/runner_mutants.py`: each mode as the CLI runs it, stopping at the first catch),
prints the catch rate past pytest's capture (`runner mutants: cluster 45/47 caught; survivors:
...`), and fails naming every survivor with the boundary trace or check it needs. A corpus and a
guard-mode mutant also go through `qlk conform --runner cluster` end to end, which must exit 1
saying why.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.run.cluster import CAPABILITIES, ClusterAdapter, make_cluster_adapter
from conformance.run.corpus import RUN_CORPUS
from tests.runners.cluster.cluster_mutants import BY_NAME, MUTANTS
from tests.support.runner_mutants import (
    MODES,
    RunnerMutant,
    assert_planted_and_undone,
    assert_well_formed,
    catch_rate_line,
    print_past_capture,
    verdict_of,
)


def test_every_kind_of_runner_bug_is_planted() -> None:
    assert BY_NAME.keys() == {m.name for m in MUTANTS}
    assert_well_formed(MUTANTS, "cluster", set(MODES))


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_the_edit_is_exact_planted_and_undone(
    mutant: RunnerMutant, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_planted_and_undone(mutant, monkeypatch)


@pytest.mark.slow  # every mutant against the modes that must catch it (~25 s)
def test_qlk_conform_alone_catches_every_cluster_mutant(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    def factory() -> ClusterAdapter:
        return make_cluster_adapter(pg_dsn)

    verdicts = [verdict_of(m, monkeypatch, factory, CAPABILITIES, dsn=pg_dsn) for m in MUTANTS]
    for verdict in verdicts:
        print(f"MUTANT {verdict.line()}")
    survivors = [v.survivor() for v in verdicts if not v.caught]
    seconds = sum(v.seconds for v in verdicts)
    print_past_capture(
        request.config,
        [f"{catch_rate_line({'cluster': verdicts})} ({seconds:.0f}s)", *survivors],
    )
    assert not survivors, "\n".join(survivors)


#: A mutant per part of `qlk conform` that runs in process, with the options that leave only
#: that part running (over a few named traces, so the check stays quick) and what it must say.
END_TO_END = (
    ("lost_lease_left_leased", ("--no-guards", "--no-kill"), "expected outcome"),
    ("update_lease_no_generation", ("--no-kill",), "].lease_generation: stale write accepted"),
)
SUBSET = (
    "LEASE-07-local-expiry-lost-and-release-in-one-step.jsonl",
    "LEASE-09-old-worker-fenced-after-lost-release.jsonl",
)


@pytest.mark.slow
@pytest.mark.parametrize("case", END_TO_END, ids=[e[0] for e in END_TO_END])
def test_qlk_conform_fails_on_a_mutant(
    case: tuple[str, tuple[str, ...], str],
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, options, says = case
    traces = tmp_path / "traces"
    traces.mkdir()
    for trace in SUBSET:
        shutil.copy(RUN_CORPUS / trace, traces / trace)
    argv = ["conform", "--quiet", "--runner", "cluster", "--dsn", pg_dsn]
    argv += ["--traces", str(traces), *options]
    clean = io.StringIO()
    assert main(argv, out=clean) == 0, clean.getvalue()  # the runner as shipped passes
    assert says not in clean.getvalue()
    BY_NAME[name].apply(monkeypatch)
    out = io.StringIO()
    assert main(argv, out=out) == 1
    assert says in out.getvalue()


@pytest.mark.slow
def test_qlk_conform_runs_the_lock_probe(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing `FOR UPDATE` is caught by `qlk conform --runner cluster` itself, every mode on
    (the lock probe is the only check that sees it: B-35), over one trace that grants a lease."""
    traces = tmp_path / "traces"
    traces.mkdir()
    trace = "LEASE-09-old-worker-fenced-after-lost-release.jsonl"
    shutil.copy(RUN_CORPUS / trace, traces / trace)
    argv = ["conform", "--quiet", "--runner", "cluster", "--dsn", pg_dsn, "--traces", str(traces)]
    clean = io.StringIO()
    assert main(argv, out=clean) == 0, clean.getvalue()
    BY_NAME["select_run_without_for_update"].apply(monkeypatch)
    out = io.StringIO()
    assert main(argv, out=out) == 1, out.getvalue()
    assert "did not block" in out.getvalue()
