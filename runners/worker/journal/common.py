"""What both journal adapters check the same way (SPEC §3.9 F-2, F-7, F-8, W-1): the capacity
default and ranges, offer ids as arguments, the bytes of a revision before any write, and
ownership failures as journal errors. One place, so the file and SQLite adapters cannot drift
apart on a bound or a code."""

from __future__ import annotations

import re
from typing import Final

from kernel.specs import HARD_LIMITS, Code, IntRange, Profile, budget_for
from kernel.worker import JournalCorrupt, JournalRecord, decode_record, encode_record
from runners.worker.journal.lock import JournalOwnership, JournalOwnershipError
from runners.worker.journal.port import JournalError


def _default_capacity() -> int:
    capacity = budget_for(Profile.EDGE).journal_capacity
    if capacity is None:  # pragma: no cover - §6.3 gives edge a journal
        raise RuntimeError("the edge budget has no journal capacity")
    return capacity


#: F-7: 64, from the §6.3 edge budget; configurable 1..`HARD_LIMITS.journal_capacity_max` (1024).
DEFAULT_CAPACITY: Final = _default_capacity()
CAPACITY_RANGE: Final = IntRange(1, HARD_LIMITS.journal_capacity_max)
#: F-2: a serialized record is at most 192 KiB (196,608 bytes).
RECORD_MAX: Final = HARD_LIMITS.journal_record_size_max_bytes
#: F-8: a list page holds 1..64 records.
PAGE_RANGE: Final = IntRange(1, HARD_LIMITS.journal_list_page_max)
_OFFER_ID: Final = re.compile(r"[0-9a-f]{64}")


def check_offer_id(value: object, field: str = "offer_id") -> str:
    """An offer id argument: 64 lowercase hex digits (a caller's bug otherwise)."""
    if not isinstance(value, str) or _OFFER_ID.fullmatch(value) is None:
        raise ValueError(f"{field}: must be 64 lowercase hex digits")
    return value


def encode_for_write(record: JournalRecord) -> bytes:
    """F-2 size first (`JOURNAL_RECORD_TOO_LARGE`, before anything is written); then the bytes
    must decode to the record, so nothing is ever written that a later read calls corrupt."""
    data = encode_record(record)
    if len(data) > RECORD_MAX:
        raise JournalError(Code.JOURNAL_RECORD_TOO_LARGE, "record_size")
    try:
        decode_record(data, record.offer_id)
    except JournalCorrupt as exc:
        raise ValueError(f"record: not a valid revision ({exc.field})") from None
    return data


def ownership_error(exc: JournalOwnershipError) -> JournalError:
    """An ownership failure as the journal reports it: the same code and reason."""
    return JournalError(exc.code, exc.reason)


def require_owned(ownership: JournalOwnership) -> None:
    """W-1: held, uncompromised ownership first in every operation (I-J6)."""
    try:
        ownership.require_owned()
    except JournalOwnershipError as exc:
        raise ownership_error(exc) from None
