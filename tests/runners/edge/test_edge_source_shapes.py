"""The edge runner's candidate sources against their oracle, `kernel.selection`, on the
deterministic worlds of `tests/support/source_shapes.py` (SPEC §1.8.2, §1.8.3, §1.9, §2.2,
§2.3, §3.16, P-2, P-3, B-33, Appendix E-1), the checks the cluster runner's source test makes
on PostgreSQL: full pages of 64 with `has_more`, ties on every key column and every tied
cursor; every exclusion of every source deciding on the whole result; B-33's pristine rule
decided by each fact alone, a released lease row included. The random worlds are
`test_edge_sources.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runners.edge.store import EdgeStore
from tests.support.edge_worlds import persist_world
from tests.support.source_shapes import (
    PRISTINE_CASES,
    WORLDS,
    check_full_pages,
    check_pristine,
    check_whole_result,
    exclusion_world,
    pristine_world,
    shaped,
    spoiled,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeStore]:
    edge = EdgeStore(tmp_path_factory.mktemp("edge-source-shapes") / "shapes.sqlite3")
    yield edge
    edge.close()


@pytest.mark.spec("RETRY-07", "REC-01", "REC-07", "E-1")
@pytest.mark.parametrize("name", sorted(WORLDS))
def test_full_pages_and_ties_on_every_key_column(store: EdgeStore, name: str) -> None:
    """P-2 and P-3 on more than a page of 64, with ties on every key column and every tied
    cursor (`check_full_pages`)."""
    aggregates = shaped(name) + spoiled(name)
    persist_world(store, aggregates)
    check_full_pages(store, aggregates, name)


@pytest.mark.spec("RETRY-12", "REC-01", "REC-07", "E-1")
@pytest.mark.parametrize("name", sorted(WORLDS))
def test_every_exclusion_decides(store: EdgeStore, name: str) -> None:
    """Runs of the source's shape with one term made false each, and a few intact: the whole
    result is the oracle's, so a statement that drops or weakens any exclusion of the source
    returns a Run the oracle does not."""
    aggregates = exclusion_world(name)
    persist_world(store, aggregates)
    check_whole_result(store, aggregates, name)


@pytest.mark.spec("REC-01")
@pytest.mark.parametrize("fact", PRISTINE_CASES)
def test_pristine_is_decided_by_every_fact_alone(store: EdgeStore, fact: str | None) -> None:
    """§2.3 / B-33, with a released lease row as one more fact (the edge random test's
    pristine case has only the Attempt's facts)."""
    aggregates = pristine_world(fact)
    persist_world(store, aggregates)
    check_pristine(store, aggregates, fact)
