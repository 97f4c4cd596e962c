"""The journal engine: every Worker write is "the kernel's journal step, then the revision CAS"
(issue 14 item 2), as every Run write goes through `runners/engine.py`.

`JournalEngine(journal, clock)` is the only place a Worker path creates, replaces or removes a
journal record:

- `publish(offer)`: `journal_step(None, DeliveryAccepted(offer))`, then `create` (F-3);
- `write(record, event)`: `journal_step(record, event)`, then `replace(new, record.revision)`
  (F-4); a `Replayed` step writes nothing and answers the record as it is;
- `remove(record)`: `journal_step(record, RetentionDelete())` must say "delete" (§3.6: only a
  final record has that row), then `remove(offer_id, record.revision)` (F-5);
- `read(offer_id)`: the current revision (`Found`) or the journal's code (`ReadFailed`).

Each answers a value, never raises: `Written(record)` / `Removed(offer_id)`, or
`WriteFailed(code, refused)`, where `refused` says the kernel refused the step and `code` is
the kernel's or the journal's stable code (a revision conflict is `JOURNAL_REVISION_CONFLICT`).
What happens next after a failure is the caller's kernel step, not this module's. The time of
each step is the runner's clock, never behind the record's last revision (`observation_ms`).
"""

from __future__ import annotations

from collections.abc import Callable

from kernel import Rejected, Replayed
from kernel.specs import Code
from kernel.worker import (
    DeliveryAccepted,
    Found,
    JournalApplied,
    JournalEvent,
    JournalRecord,
    Offer,
    ReadFailed,
    Removed,
    RetentionDelete,
    WriteFailed,
    Written,
    journal_step,
    observation_ms,
)
from runners.worker.journal.port import JournalError, JournalStore

__all__ = ["JournalEngine"]


class JournalEngine:
    """See the module docstring. Holds no state but its journal and clock."""

    __slots__ = ("_clock", "_journal")

    def __init__(self, journal: JournalStore, clock: Callable[[], int]) -> None:
        self._journal = journal
        self._clock = clock

    def __repr__(self) -> str:
        return "JournalEngine()"

    def read(self, offer_id: str) -> Found | ReadFailed:
        try:
            return Found(self._journal.read(offer_id))
        except JournalError as exc:
            return ReadFailed(exc.code)

    def publish(self, offer: Offer) -> Written | WriteFailed:
        step = journal_step(None, DeliveryAccepted(offer), self._clock())
        if not isinstance(step, JournalApplied) or step.record is None:
            code = step.code if isinstance(step, Rejected | Replayed) else Code.OFFER_INVALID
            return WriteFailed(code, refused=True)
        try:
            self._journal.create(step.record)
        except JournalError as exc:
            return WriteFailed(exc.code)
        return Written(step.record)

    def write(
        self, record: JournalRecord, event: JournalEvent, *, clock_ms: int | None = None
    ) -> Written | WriteFailed:
        now = observation_ms(record, self._clock() if clock_ms is None else clock_ms)
        step = journal_step(record, event, now)
        if isinstance(step, Replayed):
            return Written(record)
        if isinstance(step, Rejected):
            return WriteFailed(step.code, refused=True)
        if step.record is None:  # a deletion is `remove`'s, never a write's
            return WriteFailed(Code.JOURNAL_TRANSITION_INVALID, refused=True)
        try:
            self._journal.replace(step.record, record.revision)
        except JournalError as exc:
            return WriteFailed(exc.code)
        return Written(step.record)

    def remove(
        self, record: JournalRecord, *, clock_ms: int | None = None
    ) -> Removed | WriteFailed:
        now = observation_ms(record, self._clock() if clock_ms is None else clock_ms)
        step = journal_step(record, RetentionDelete(), now)
        if not isinstance(step, JournalApplied) or step.record is not None:
            return WriteFailed(step.code, refused=True)
        try:
            self._journal.remove(record.offer_id, record.revision)
        except JournalError as exc:
            return WriteFailed(exc.code)
        return Removed(record.offer_id)
