"""The journal port contract (SPEC §3.1, §3.9 F-2..F-9, W-1): what every `JournalStore` adapter
must do, whatever it stores in (a directory, a SQLite file).

Adapter-neutral: each check is a function `check(adapter, path)` taking a `ContractAdapter` (a
factory of ready, owned stores plus, optionally, raw access to the stored bytes) and a path that
does not exist yet, inside a fresh temporary directory (the file adapter uses it as its root, the
SQLite adapter as or beside its database file).
`tests/runners/worker/journal/test_journal_contract.py` runs
every check in `CONTRACT` against every adapter. Records come from the kernel
(`tests/support/journal_fixtures.py`), never assembled by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from kernel.specs.codes import Code
from kernel.worker.codec import encode_record
from kernel.worker.record import JournalRecord
from runners.worker.journal.port import JournalError, JournalStore
from tests.support.journal_fixtures import (
    CALLBACK_TOKEN,
    LEASE_TOKEN,
    accepted,
    accepted_offer,
    oversized,
    revisions,
)


class StoreFactory(Protocol):
    """A store at `path`. `owned=True`: ownership acquired, ready for every operation;
    `owned=False`: ownership never acquired (W-1). The test module releases what it made."""

    def __call__(self, path: Path, *, capacity: int = 64, owned: bool = True) -> JournalStore: ...


class RawAccess(Protocol):
    """Stored bytes of one offer, bypassing the adapter (to plant corruption, F-9)."""

    def read(self, path: Path, offer_id: str) -> bytes | None: ...

    def write(self, path: Path, offer_id: str, data: bytes) -> None: ...


@dataclass(frozen=True)
class ContractAdapter:
    name: str
    make_store: StoreFactory
    raw: RawAccess | None = None


def _code(action: Callable[[], object]) -> Code:
    with pytest.raises(JournalError) as caught:
        action()
    error = caught.value
    for secret in (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line"):  # INBOX-44
        assert secret not in str(error)
        assert secret not in error.reason
    return error.code


def _all(store: JournalStore) -> list[JournalRecord]:
    records: list[JournalRecord] = []
    cursor: str | None = None
    while True:
        page = store.list(cursor, 64)
        records.extend(page.records)
        if not page.has_more:
            return records
        cursor = page.cursor


# -- create / read -----------------------------------------------------------------------------
def check_create_then_read(adapter: ContractAdapter, path: Path) -> None:
    store = adapter.make_store(path)
    record = accepted()
    assert store.read(record.offer_id) is None
    store.create(record)
    assert store.read(record.offer_id) == record
    assert store.read(accepted_offer(2).offer_id) is None
    assert _all(store) == [record]


def check_stored_bytes_are_the_canonical_encoding(adapter: ContractAdapter, path: Path) -> None:
    """Both adapters hold byte-identical records (kernel.worker.codec); the raw callback token
    is never among them (I-J5)."""
    if adapter.raw is None:
        pytest.skip("no raw access to the stored bytes")
    store = adapter.make_store(path)
    chain = revisions()
    store.create(chain[0])
    assert adapter.raw.read(path, chain[0].offer_id) == encode_record(chain[0])
    for record in chain[1:]:
        store.replace(record, record.revision - 1)
        stored = adapter.raw.read(path, record.offer_id)
        assert stored == encode_record(record)
        assert CALLBACK_TOKEN.encode() not in stored


def check_a_second_create_of_one_offer_is_refused(adapter: ContractAdapter, path: Path) -> None:
    store = adapter.make_store(path)
    chain = revisions()
    store.create(chain[0])
    store.replace(chain[1], 0)
    assert _code(lambda: store.create(chain[0])) is Code.JOURNAL_RECORD_EXISTS
    assert store.read(chain[0].offer_id) == chain[1]


# -- replace / remove (revision CAS) --------------------------------------------------------
def check_replace_walks_revisions_by_one(adapter: ContractAdapter, path: Path) -> None:
    store = adapter.make_store(path)
    chain = revisions()
    store.create(chain[0])
    for record in chain[1:]:
        store.replace(record, record.revision - 1)
        assert store.read(record.offer_id) == record
    assert _all(store) == [chain[-1]]


def check_a_stale_or_skipping_replace_changes_nothing(adapter: ContractAdapter, path: Path) -> None:
    """INBOX-02 (CONF): a stale expected revision, a revision that is not expected + 1, or an
    offer without a record are `JOURNAL_REVISION_CONFLICT` and change nothing."""
    store = adapter.make_store(path)
    chain = revisions()
    store.create(chain[0])
    store.replace(chain[1], 0)
    before = adapter.raw.read(path, chain[0].offer_id) if adapter.raw else None
    attempts: list[Callable[[], object]] = [
        lambda: store.replace(chain[2], 0),  # stale: stored is 1
        lambda: store.replace(chain[1], 0),  # the same revision again
        lambda: store.replace(chain[3], 1),  # skips a revision
        lambda: store.replace(chain[2], 2),  # expected ahead of the store
        lambda: store.replace(revisions(2)[1], 0),  # another offer, no record
    ]
    for attempt in attempts:
        assert _code(attempt) is Code.JOURNAL_REVISION_CONFLICT
        assert store.read(chain[0].offer_id) == chain[1]
        if adapter.raw is not None:
            assert adapter.raw.read(path, chain[0].offer_id) == before
    assert _all(store) == [chain[1]]


def check_remove_is_revision_conditional(adapter: ContractAdapter, path: Path) -> None:
    store = adapter.make_store(path)
    chain = revisions()
    other = accepted_offer(2)
    store.create(chain[0])
    store.create(other)
    store.replace(chain[1], 0)
    assert _code(lambda: store.remove(chain[0].offer_id, 0)) is Code.JOURNAL_REVISION_CONFLICT
    assert _code(lambda: store.remove(chain[0].offer_id, 2)) is Code.JOURNAL_REVISION_CONFLICT
    assert store.read(chain[0].offer_id) == chain[1]
    store.remove(chain[0].offer_id, 1)
    assert store.read(chain[0].offer_id) is None
    assert _code(lambda: store.remove(chain[0].offer_id, 1)) is Code.JOURNAL_REVISION_CONFLICT
    assert _all(store) == [other]
    store.create(chain[0])  # a removed offer's id may be published again (revision 0)
    assert store.read(chain[0].offer_id) == chain[0]


# -- capacity and size -----------------------------------------------------------------------
def check_capacity_fails_closed_and_evicts_nothing(adapter: ContractAdapter, path: Path) -> None:
    """INBOX-17: at capacity `JOURNAL_FULL` whatever the states (final ones included); every
    record stays; room made by an explicit remove can be used again."""
    capacity = 4
    store = adapter.make_store(path, capacity=capacity)
    kept: dict[str, JournalRecord] = {}
    for generation, last in enumerate((0, 2, 4, 5), start=1):  # accepted .. completion_ack
        chain = revisions(generation)
        store.create(chain[0])
        for record in chain[1 : last + 1]:
            store.replace(record, record.revision - 1)
        kept[chain[last].offer_id] = chain[last]
    assert len(kept) == capacity
    for extra in (accepted_offer(capacity + 1), accepted_offer(capacity + 2)):
        with pytest.raises(JournalError) as caught:
            store.create(extra)
        assert caught.value.code is Code.JOURNAL_FULL
        assert store.read(extra.offer_id) is None
    assert {r.offer_id: r for r in _all(store)} == kept
    first = min(kept)
    store.remove(first, kept[first].revision)
    store.create(accepted_offer(capacity + 1))
    assert len(_all(store)) == capacity


def check_capacity_outside_1_to_1024_is_rejected(adapter: ContractAdapter, path: Path) -> None:
    for capacity in (0, -1, 1025, 4096):
        with pytest.raises(ValueError, match="capacity"):
            adapter.make_store(path, capacity=capacity, owned=False)
    for capacity in (1, 1024):
        adapter.make_store(path, capacity=capacity, owned=False)


def check_an_oversized_record_is_refused_and_nothing_stored(
    adapter: ContractAdapter, path: Path
) -> None:
    """INBOX-18 / F-2: over 196,608 bytes is `JOURNAL_RECORD_TOO_LARGE`; nothing is stored."""
    store = adapter.make_store(path)
    big = oversized()
    assert len(encode_record(big)) > 196_608
    assert _code(lambda: store.create(big)) is Code.JOURNAL_RECORD_TOO_LARGE
    assert store.read(big.offer_id) is None
    assert _all(store) == []


# -- list ------------------------------------------------------------------------------------
def check_pages_are_ascending_and_complete(adapter: ContractAdapter, path: Path) -> None:
    """INBOX-19 / F-8: at most `limit` per page, ascending offer id strictly after the cursor,
    cursor = the last offer id, `has_more` exact; concatenated pages list every record once."""
    store = adapter.make_store(path, capacity=70)
    made = [accepted_offer(g) for g in range(1, 70)]
    for record in made:
        store.create(record)
    expected = sorted(r.offer_id for r in made)
    for limit in (1, 7, 64):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = store.list(cursor, limit)
            ids = [r.offer_id for r in page.records]
            assert len(ids) <= limit
            assert ids == sorted(ids)
            assert cursor is None or all(i > cursor for i in ids)
            assert page.cursor == (ids[-1] if ids else cursor)  # empty: stays where it was
            seen.extend(ids)
            assert page.has_more == (len(seen) < len(expected))
            if not page.has_more:
                break
            cursor = page.cursor
        assert seen == expected
    last = store.list(expected[-1], 64)
    assert (last.records, last.cursor, last.has_more) == ((), expected[-1], False)


def check_an_empty_journal_lists_nothing(adapter: ContractAdapter, path: Path) -> None:
    page = adapter.make_store(path).list(None, 64)
    assert (page.records, page.cursor, page.has_more) == ((), None, False)


def check_a_limit_outside_1_to_64_is_refused(adapter: ContractAdapter, path: Path) -> None:
    """F-8 limits. The file adapter raises `ValueError` (FJ-8); the contract accepts a
    `JournalError` too, so an adapter may treat it as a refused operation."""
    store = adapter.make_store(path)
    store.create(accepted())
    for limit in (0, -1, 65, 1000):
        with pytest.raises((ValueError, JournalError)):
            store.list(None, limit)


# -- ownership (W-1) -------------------------------------------------------------------------
def check_without_ownership_every_operation_fails(adapter: ContractAdapter, path: Path) -> None:
    store = adapter.make_store(path, owned=False)
    record = accepted()
    for action in (
        lambda: store.create(record),
        lambda: store.read(record.offer_id),
        lambda: store.list(None, 64),
        lambda: store.replace(revisions()[1], 0),
        lambda: store.remove(record.offer_id, 0),
    ):
        assert _code(action) is Code.JOURNAL_NOT_OWNED


# -- corruption (F-9) --------------------------------------------------------------------------
def _damaged(record: JournalRecord) -> dict[str, bytes]:
    data = encode_record(record)
    return {
        "truncated": data[: len(data) // 2],
        "one_byte_short": data[:-1],
        "not_json": b"\xff\xfe not json",
        "another_offer": encode_record(accepted_offer(9)),
        "not_an_object": b"[]",
    }


def check_corrupt_stored_bytes_are_reported_never_touched(
    adapter: ContractAdapter, path: Path
) -> None:
    """F-9: damaged bytes make read, list, replace and remove fail `JOURNAL_CORRUPT`; the bytes
    are left exactly as they were (never repaired, skipped or deleted)."""
    if adapter.raw is None:
        pytest.skip("no raw access to the stored bytes")
    raw = adapter.raw
    store = adapter.make_store(path)
    chain = revisions()
    store.create(chain[0])
    for kind, data in _damaged(chain[0]).items():
        raw.write(path, chain[0].offer_id, data)
        for action in (
            lambda: store.read(chain[0].offer_id),
            lambda: store.list(None, 64),
            lambda: store.replace(chain[1], 0),
            lambda: store.remove(chain[0].offer_id, 0),
        ):
            assert _code(action) is Code.JOURNAL_CORRUPT, kind
            assert raw.read(path, chain[0].offer_id) == data, kind


CONTRACT: tuple[Callable[[ContractAdapter, Path], None], ...] = (
    check_create_then_read,
    check_stored_bytes_are_the_canonical_encoding,
    check_a_second_create_of_one_offer_is_refused,
    check_replace_walks_revisions_by_one,
    check_a_stale_or_skipping_replace_changes_nothing,
    check_remove_is_revision_conditional,
    check_capacity_fails_closed_and_evicts_nothing,
    check_capacity_outside_1_to_1024_is_rejected,
    check_an_oversized_record_is_refused_and_nothing_stored,
    check_pages_are_ascending_and_complete,
    check_an_empty_journal_lists_nothing,
    check_a_limit_outside_1_to_64_is_refused,
    check_without_ownership_every_operation_fails,
    check_corrupt_stored_bytes_are_reported_never_touched,
)

#: The SPEC ids each check covers (the test module marks them).
CONTRACT_SPEC_IDS: dict[str, tuple[str, ...]] = {
    "check_a_stale_or_skipping_replace_changes_nothing": ("INBOX-02",),
    "check_capacity_fails_closed_and_evicts_nothing": ("INBOX-17",),
    "check_capacity_outside_1_to_1024_is_rejected": ("INBOX-17",),
    "check_an_oversized_record_is_refused_and_nothing_stored": ("INBOX-18",),
    "check_pages_are_ascending_and_complete": ("INBOX-19",),
    "check_without_ownership_every_operation_fails": ("INBOX-21",),
    "check_corrupt_stored_bytes_are_reported_never_touched": ("INBOX-44",),
}
