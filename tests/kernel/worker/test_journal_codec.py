"""The journal record codec (SPEC §3.3, F-2, F-9): one canonical form, strict decoding."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.specs.codes import Code
from kernel.worker.codec import JournalCorrupt, decode_record, encode_record, record_document
from kernel.worker.journal import JournalApplied, JournalEvent, journal_step
from kernel.worker.record import JournalRecord
from tests.support.journal_fixtures import CALLBACK_TOKEN, LEASE_TOKEN, T0, accepted, events


def _reach(sequence: list[JournalEvent]) -> list[JournalRecord]:
    record = accepted()
    seen = [record]
    for i, event in enumerate(sequence):
        outcome = journal_step(record, event, T0 + i + 1)
        if isinstance(outcome, JournalApplied) and outcome.record is not None:
            record = outcome.record
            seen.append(record)
    return seen


@pytest.mark.spec("INBOX-02")
@given(st.lists(events(), max_size=15))
def test_every_reachable_revision_round_trips_byte_for_byte(sequence: list[JournalEvent]) -> None:
    for record in _reach(sequence):
        data = encode_record(record)
        back = decode_record(data, record.offer_id)
        assert back == record
        assert encode_record(back) == data
        assert CALLBACK_TOKEN.encode() not in data  # only the digest is ever stored (I-J5)


def _mutated(change: object) -> bytes:
    document = record_document(accepted())
    assert callable(change)
    change(document)
    return json.dumps(document).encode()


CORRUPTIONS = {
    "not-json": b'{"revision": ',
    "truncated": encode_record(accepted())[:-7],
    "not-an-object": b"[]",
    "missing-member": _mutated(lambda d: d.pop("state")),
    "unknown-member": _mutated(lambda d: d.update(extra=1)),
    "wrong-type": _mutated(lambda d: d.update(revision="0")),
    "bool-is-not-int": _mutated(lambda d: d.update(revision=True)),
    "unknown-state": _mutated(lambda d: d.update(state="spawned")),
    "rule-broken": _mutated(lambda d: d.update(executor_handle="posix:v1:x:1:1:1")),
    "bad-token": _mutated(lambda d: d["offer"]["lease"].update(lease_token="short")),  # noqa: S106
    "nested-unknown": _mutated(lambda d: d["offer"]["candidate"].update(x=1)),
    "offer-id-not-derived": _mutated(lambda d: d["offer"].update(offer_id="e" * 64)),
}


@pytest.mark.spec("INBOX-44")
@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_a_corrupt_record_is_reported_with_a_field_and_no_value(kind: str) -> None:
    """F-9: every kind of damage is `JOURNAL_CORRUPT`; the message names a field, never shows
    a token or a value of the record (INBOX-44)."""
    with pytest.raises(JournalCorrupt) as caught:
        decode_record(CORRUPTIONS[kind])
    assert caught.value.code is Code.JOURNAL_CORRUPT
    text = str(caught.value)
    assert LEASE_TOKEN.reveal() not in text
    assert "secret-command-line" not in text


def test_a_record_filed_under_another_name_is_corrupt() -> None:
    with pytest.raises(JournalCorrupt, match="filed_under_another_name"):
        decode_record(encode_record(accepted()), "f" * 64)
