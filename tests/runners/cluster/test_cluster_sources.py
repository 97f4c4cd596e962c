"""The cluster runner's candidate sources against their oracle, `kernel.selection` (SPEC
§1.8.2, §1.8.3, §1.9, §2.2, §2.3, §3.16, P-1..P-6, Appendix E-1); the edge runner's
`test_edge_sources.py` makes the same checks on SQLite.

For random worlds persisted into a real PostgreSQL schema by the runner's own statements (any
rows the schema admits, `tests/support/source_worlds.py`, the worlds the edge test uses), each
of the seven sources of `runners/cluster/sql/sources.sql` returns exactly the oracle's page:
the same items in the same order, the same keys and cursor, the same `has_more`, for random
limits 1..64 and a limit of 1, at every time where a due time or an expiry decides (equal, one
ms before), and each keyset source walked from no cursor, an oracle key, a key tied with one
on every column but one, or a key nobody has. Deterministic worlds per source (100 Runs of its
selected shape, with ties on every key column, and up to 132 more each with one term of the
shape made false: owner, kind, intent, status, latest Attempt, executor, binding, lease) add
full pages of 64 with `has_more`, every exclusion deciding on the whole result, and every tied
cursor; the runtime recovery source's pristine rule (B-33) is decided by each binding fact
alone; a limit outside 1..64 is refused by every source (P-1).

The schema lives in a database kept for these tests whose default collation is ICU `en-US`,
as a production database's often is (`a` before `Z`, `_` before `-`), not code-point order:
the ids of the worlds mix case, `-` and `_`, so every `COLLATE "C"` of the source statements
(PG-6) is load-bearing here, and a text key compared without it disagrees with the oracle's
`str` order. The backdoor projection is checked there too (its rows in canonical order).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo

from conformance.run.projection import project
from kernel import Event, RunAggregate, selection
from kernel.selection import PageError
from kernel.specs.states import Actor, LeaseStatus
from runners.cluster.store import ClusterStore
from tests.support.source_checks import (
    KeysetSources,
    check_unpaged_sources,
    cursor_choices,
    oracle_keys,
    time_boundaries,
    walk,
)
from tests.support.source_shapes import (
    PRISTINE_CASES,
    WORLDS,
    check_full_pages,
    check_pristine,
    check_whole_result,
    exclusion_world,
    lease_of,
    pristine_world,
    shaped,
    spoiled,
)
from tests.support.source_worlds import EXECUTORS, TIED_TIMES, TIMES, world, world_effects

#: The database's default collation: linguistic, not code-point order (see the docstring).
ICU_LOCALE = "en-US"


@dataclass(frozen=True, slots=True)
class SourceDatabase:
    """Where the module's schema lives: `dsn`, and whether its default collation orders text
    differently from code points (False when the server cannot make an ICU database)."""

    dsn: str
    linguistic: bool
    why_not: str = ""


#: The server's database for these tests, made once and kept: dropping a database makes the
#: server checkpoint (seconds on a busy machine); each module run has a schema of its own in it.
ICU_DATABASE = "ql3_sources_icu_en_us"


@pytest.fixture(scope="module")
def database(pg_dsn: str) -> SourceDatabase:
    """`ICU_DATABASE`, whose default collation is ICU `en-US`, made if missing; the server's
    own database when it cannot make one (a server built without ICU), which
    `test_the_database_collation_is_not_code_point_order` reports."""
    create = sql.SQL(
        "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu "
        "ICU_LOCALE {} LOCALE 'C'"
    ).format(sql.Identifier(ICU_DATABASE), sql.Literal(ICU_LOCALE))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (ICU_DATABASE,)
        ).fetchone()
        if exists is None:
            try:
                admin.execute(create)
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                pass  # made meanwhile by a concurrent test run: the same database
            except psycopg.Error as exc:
                return SourceDatabase(pg_dsn, False, f"{type(exc).__name__}: {exc}".strip())
    return SourceDatabase(make_conninfo(pg_dsn, dbname=ICU_DATABASE), True)


@pytest.fixture(scope="module")
def store(database: SourceDatabase) -> Iterator[ClusterStore]:
    """One schema for the module (Hypothesis runs many examples against it)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    cluster = ClusterStore(database.dsn, name, create_schema=True)
    try:
        yield cluster
    finally:
        cluster.close()
        with psycopg.connect(database.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def persist(
    store: ClusterStore,
    aggregates: list[RunAggregate],
    events: dict[str, list[Event]] | None = None,
) -> None:
    """Replace the schema's rows with `aggregates` (and `events`), written by the runner's own
    statements. Events play no part in any source (and the random worlds' payloads may hold a
    NUL, which PostgreSQL text refuses), so the source tests write none."""
    with store.transaction() as tx:
        for table in ("events", "run_dispatch_leases", "run_retry_policies", "attempts", "runs"):
            tx.connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
        for effect in world_effects(aggregates, events):
            tx.execute(effect)


def test_the_database_collation_is_not_code_point_order(
    store: ClusterStore, database: SourceDatabase
) -> None:
    """The premise that makes `COLLATE "C"` testable here: the schema's text columns order
    `Z` after `a` and `-` after `_` (code points put them the other way round)."""
    if not database.linguistic:
        why = f"the server cannot make an ICU {ICU_LOCALE} database ({database.why_not})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}: under CI=true the collation checks must run")
        pytest.skip(why)
    with store.connection() as conn:
        row = conn.execute("SELECT 'Z' < 'a', '-' < '_', 'Z' < 'a' COLLATE \"C\"").fetchone()
    assert row == (False, False, True)


# -- random worlds ---------------------------------------------------------------------------
#: Random ids for cursors nobody has, from the worlds' alphabets and beyond.
PROBE_IDS = st.text("abcrxyzBRZ_-019", max_size=6)
KEY_PARTS = st.tuples(TIMES, TIMES, PROBE_IDS)


@pytest.mark.slow  # a PostgreSQL round trip per query, about 200 per example: 5 to 10 s
@pytest.mark.spec("RETRY-07", "RETRY-12", "RETRY-15", "REC-01", "REC-07", "E-1")
@given(
    data=world() | world(TIED_TIMES),
    observed=TIMES,
    limit=st.integers(1, 3) | st.integers(1, 64),
    started=TIMES,
    executor=st.sampled_from(EXECUTORS),
    probe=KEY_PARTS,
    pick=st.integers(0, 10_000),
)
def test_each_sql_source_returns_exactly_the_oracle_page(
    store: ClusterStore,
    *,
    data: tuple[list[RunAggregate], dict[str, list[Event]]],
    observed: int,
    limit: int,
    started: int,
    executor: str,
    probe: tuple[int, int, str],
    pick: int,
) -> None:
    aggregates, _events = data
    persist(store, aggregates)
    assert store.project() == project(aggregates, {})

    for at in sorted(time_boundaries(aggregates, observed)):
        check_unpaged_sources(store, aggregates, at, limit)
        assert store.lease_expiry_candidates(at, limit) == selection.lease_expiry_candidates(
            aggregates, at, limit
        )
    for at in {started} | {agg.run.created_at_ms + d for agg in aggregates for d in (0, 1)}:
        assert store.orphaned_created_candidates(
            at, limit
        ) == selection.orphaned_created_candidates(aggregates, at, limit)

    sources = KeysetSources(store, aggregates, observed, started, executor)
    synthetic = {
        "lease_expiry": (probe[0], probe[2]),
        "local_startup": (probe[2],),
        "orphaned_created": (probe[0], probe[2]),
        "local_dispatch": probe,
    }
    for size in (limit, 1):  # a page of 1 makes `has_more` and every cursor count
        check_unpaged_sources(store, aggregates, observed, size)
        for turn, (name, source) in enumerate(sources.all(size).items()):
            choices = cursor_choices(oracle_keys(source), synthetic[name])
            walk(source, choices[(pick + 7 * turn) % len(choices)])


# -- deterministic worlds (tests/support/source_shapes.py) -----------------------------------
@pytest.mark.spec("RETRY-07", "REC-01", "REC-07", "E-1")
@pytest.mark.parametrize("name", sorted(WORLDS))
def test_full_pages_and_ties_on_every_key_column(store: ClusterStore, name: str) -> None:
    """P-2 and P-3 on more than a page of 64, with ties on every key column and every tied
    cursor (`check_full_pages`)."""
    aggregates = shaped(name) + spoiled(name)
    persist(store, aggregates)
    check_full_pages(store, aggregates, name)


@pytest.mark.spec("RETRY-12", "REC-01", "REC-07", "E-1")
@pytest.mark.parametrize("name", sorted(WORLDS))
def test_every_exclusion_decides(store: ClusterStore, name: str) -> None:
    """Runs of the source's shape with one term made false each, and a few intact: the whole
    result is the oracle's, so a statement that drops or weakens any exclusion of the source
    returns a Run the oracle does not."""
    aggregates = exclusion_world(name)
    persist(store, aggregates)
    check_whole_result(store, aggregates, name)


@pytest.mark.spec("REC-01")
@pytest.mark.parametrize("fact", PRISTINE_CASES)
def test_pristine_is_decided_by_every_fact_alone(store: ClusterStore, fact: str | None) -> None:
    """§2.3 / B-33: a `claimed` Attempt is pristine (never a recovery candidate) only when no
    binding, offer, start or callback fact is set and it has no lease row of any status; each
    one alone makes it a candidate, in SQL as in the oracle."""
    aggregates = pristine_world(fact)
    persist(store, aggregates)
    check_pristine(store, aggregates, fact)


@pytest.mark.parametrize("limit", [0, 65, -1])
def test_a_limit_outside_1_to_64_is_refused_like_the_oracle(
    store: ClusterStore, limit: int
) -> None:
    """P-1, for every source, before any statement runs."""
    calls: list[Callable[[], object]] = [
        lambda: store.lost_retry_candidates(0, limit),
        lambda: store.runtime_recovery_candidates(0, limit),
        lambda: store.lease_expiry_candidates(0, limit, (0, "a")),
        lambda: store.local_startup_candidates(limit),
        lambda: store.orphaned_created_candidates(0, limit),
        lambda: store.cancel_convergence_candidates(limit),
        lambda: store.local_dispatch_candidates("local", limit, (0, 0, "a")),
    ]
    for call in calls:
        with pytest.raises(PageError):
            call()
    with pytest.raises(PageError):
        selection.cancel_convergence_candidates([], limit)


# -- the backdoor projection -----------------------------------------------------------------
def test_the_backdoor_projection_lists_rows_in_code_point_order(store: ClusterStore) -> None:
    """SPEC §7: the projection's rows come sorted by primary key in the canonical order,
    the `str` order of `conformance.run.projection.project`, whatever the database's default
    collation is. Regression: `projection.sql` sorted by the default collation, so on an
    ICU/`en_US` database Run `a1` came before Run `Z1`, and every list of the projection was
    out of the canonical order."""
    ids = ("Z1", "a1", "_1", "-1", "B", "b")  # code points: - B Z _ a b; en-US: _ - a b B Z
    aggregates = [shaped("lost_retry")[2 * n] for n in range(len(ids))]  # retry_wait, with a policy
    aggregates = [
        RunAggregate(
            dataclasses.replace(agg.run, run_id=run_id),
            tuple(
                dataclasses.replace(a, run_id=run_id, attempt_id=f"{run_id}-{a.number}")
                for a in agg.attempts
            ),
            dataclasses.replace(agg.policy, run_id=run_id) if agg.policy else None,
            (),
        )
        for run_id, agg in zip(ids, aggregates, strict=True)
    ]
    aggregates = [
        dataclasses.replace(agg, leases=(lease_of(agg.attempts[0], LeaseStatus.RELEASED, 0),))
        for agg in aggregates
    ]
    events = {
        agg.run.run_id: [
            Event(
                f"evt:{agg.run.run_id}:1", agg.run.run_id, 1, "run.queued", Actor.RECONCILER,
                f"d:{agg.run.run_id}", 1, None, None, None, (("k", 1),),
            )
        ]
        for agg in aggregates
    }  # fmt: skip
    persist(store, aggregates, events)
    projected = store.project()
    assert [r["run_id"] for r in projected["runs"]] == sorted(ids)
    assert projected == project(aggregates, events)
