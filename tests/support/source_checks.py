"""Checks that a store's candidate sources return exactly the pages of their oracle,
`kernel.selection` (SPEC §1.8.2, §1.8.3, §1.9, §2.2, §2.3, §3.16, P-1..P-6).

Store-independent: any `runners.sources.Sources` (the cluster runner's source tests use them;
the edge runner's test has the same checks inline). A page equals the oracle's when it has the
same items in the same order, the same Attempt ids and keys, and the same `has_more` (P-2);
a keyset source is walked page by page, each next page asked with the cursor the previous page
ends on (P-3), from no cursor, from a key the oracle returns, or from a key that ties an
oracle key on every column but one (so that every column of the keyset comparison decides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernel import Page, RunAggregate, selection
from runners.sources import Sources

#: A keyset source bound to a store, a world and a page size: cursor -> (store page, oracle page).
Paged = Callable[[Any], tuple[Page[Any], Page[Any]]]

#: How many pages a walk may take before it is called endless (64 Runs at a page of 1, and more).
MAX_PAGES = 200


def walk(source: Paged, start: Any) -> int:
    """Page from `start`, following the oracle's cursor until it says there is no more: every
    page of the store equals the oracle's (items, keys, `has_more`). Returns the pages read."""
    after = start
    for pages in range(1, MAX_PAGES + 1):
        got, want = source(after)
        assert got == want, f"after {after!r}"
        if not want.has_more:
            return pages
        after = want.cursor
    raise AssertionError("the oracle kept saying has_more")


def oracle_keys(source: Paged) -> list[Any]:
    """Every key of the oracle's whole ordered result, by walking it at the bound page size."""
    keys: list[Any] = []
    after = None
    for _ in range(MAX_PAGES):
        page = source(after)[1]
        keys.extend(c.key for c in page.items)
        if not page.has_more:
            return keys
        after = page.cursor
    raise AssertionError("the oracle kept saying has_more")


def _nudged(value: object) -> list[object]:
    """Values just below and just above `value` in the oracle's order, and for a text id ones
    whose order differs between code points and a linguistic collation (case, `_`)."""
    if isinstance(value, int):
        return [value - 1, value + 1]
    assert isinstance(value, str)
    return [value[:-1], value + "_", value + "0", value.swapcase(), "_" + value]


def tied_cursors(key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Cursors equal to `key` on every column but one, nudged on that one: each column of a
    keyset comparison `(c0, c1, ...) > (k0, k1, ...)` decides against one of them."""
    out: list[tuple[Any, ...]] = []
    for column, value in enumerate(key):
        out.extend((*key[:column], nudged, *key[column + 1 :]) for nudged in _nudged(value))
    return out


def cursor_choices(keys: Sequence[Any], synthetic: Any) -> list[Any]:
    """No cursor, each oracle key, each tied cursor of each key, and a key nobody has."""
    choices: list[Any] = [None, synthetic, *keys]
    for key in keys:
        choices.extend(tied_cursors(key))
    return choices


@dataclass(frozen=True, slots=True)
class KeysetSources:
    """The four keyset sources (P-3) of `store` and the oracle over `aggregates`, bound to the
    given parameters and a page size: each is a `Paged`."""

    store: Sources
    aggregates: Sequence[RunAggregate]
    observed_at_ms: int
    process_started_at_ms: int
    executor_type: str

    def expiry(self, size: int) -> Paged:
        """§3.16, key `(expires_at_ms, attempt_id)`."""

        def source(after: Any) -> tuple[Page[Any], Page[Any]]:
            at = self.observed_at_ms
            return (
                self.store.lease_expiry_candidates(at, size, after),
                selection.lease_expiry_candidates(self.aggregates, at, size, after),
            )

        return source

    def startup(self, size: int) -> Paged:
        """§2.2 local startup, key `(attempt_id,)`."""

        def source(after: Any) -> tuple[Page[Any], Page[Any]]:
            return (
                self.store.local_startup_candidates(size, after),
                selection.local_startup_candidates(self.aggregates, size, after),
            )

        return source

    def orphans(self, size: int) -> Paged:
        """§2.2 (B-30) orphaned `created` Runs, key `(created_at_ms, run_id)`."""

        def source(after: Any) -> tuple[Page[Any], Page[Any]]:
            at = self.process_started_at_ms
            return (
                self.store.orphaned_created_candidates(at, size, after),
                selection.orphaned_created_candidates(self.aggregates, at, size, after),
            )

        return source

    def dispatch(self, size: int) -> Paged:
        """§1.8.3 (D-13), key `(queued_at_ms or created_at_ms, attempt created_at_ms,
        attempt_id)`."""

        def source(after: Any) -> tuple[Page[Any], Page[Any]]:
            executor = self.executor_type
            return (
                self.store.local_dispatch_candidates(executor, size, after),
                selection.local_dispatch_candidates(self.aggregates, executor, size, after),
            )

        return source

    def all(self, size: int) -> dict[str, Paged]:
        return {
            "lease_expiry": self.expiry(size),
            "local_startup": self.startup(size),
            "orphaned_created": self.orphans(size),
            "local_dispatch": self.dispatch(size),
        }


def check_unpaged_sources(
    store: Sources, aggregates: Sequence[RunAggregate], observed_at_ms: int, size: int
) -> None:
    """The three sources without a cursor (lost retry §1.8.2, runtime recovery §2.3,
    cancellation convergence §1.9) return the oracle's page of `size` at `observed_at_ms`."""
    assert store.lost_retry_candidates(observed_at_ms, size) == selection.lost_retry_candidates(
        aggregates, observed_at_ms, size
    )
    assert store.runtime_recovery_candidates(
        observed_at_ms, size
    ) == selection.runtime_recovery_candidates(aggregates, observed_at_ms, size)
    assert store.cancel_convergence_candidates(size) == selection.cancel_convergence_candidates(
        aggregates, size
    )


def time_boundaries(aggregates: Sequence[RunAggregate], observed_at_ms: int) -> set[int]:
    """`observed_at_ms` and every time at which a row changes eligibility, with the
    millisecond before it: each policy's due time (§1.8.2) and each lease's expiry (§2.3,
    §3.16), where `<=` against `<` decides."""
    out = {observed_at_ms}
    for agg in aggregates:
        if agg.policy is not None and agg.policy.next_attempt_at_ms is not None:
            out |= {agg.policy.next_attempt_at_ms - 1, agg.policy.next_attempt_at_ms}
        out |= {x.expires_at_ms for x in agg.leases} | {x.expires_at_ms - 1 for x in agg.leases}
    return out
