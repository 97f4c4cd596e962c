"""Child processes for the SQLite journal tests (`test_sqlite_journal.py`), started with "spawn".

They live in an importable module (not the test module) so that a spawned interpreter finds them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

from runners.worker.journal.port import JournalError
from runners.worker.journal.sqlite import SqliteJournal
from tests.support.journal_fixtures import revisions

WAIT_S = 20.0


def _code(call: Callable[[], object]) -> str:
    try:
        call()
    except JournalError as exc:
        return exc.code.value
    return "ok"


def outsider(root: str, results: Queue[tuple[str, str]], released: Event) -> None:
    """W-1: a second process tries every operation while the parent owns the journal, then (after
    the parent released) acquires and reads."""
    journal = SqliteJournal(Path(root))
    rev = revisions()
    oid = rev[0].offer_id
    results.put(("acquire", _code(journal.acquire)))
    results.put(("read", _code(lambda: journal.read(oid))))
    results.put(("list", _code(lambda: journal.list(None, 8))))
    results.put(("create", _code(lambda: journal.create(rev[0]))))
    results.put(("replace", _code(lambda: journal.replace(rev[2], 1))))
    results.put(("remove", _code(lambda: journal.remove(oid, 1))))
    if not released.wait(WAIT_S):
        results.put(("after", "timeout"))
        return
    journal.acquire()
    record = journal.read(oid)
    results.put(("after", "none" if record is None else f"revision:{record.revision}"))
    journal.release()


def crash_in_transaction(root: str, operation: str, step: str, reached: Event) -> None:
    """Acquire; for `replace`/`remove` create revision 0 first; then run `operation` with a hook
    that blocks at `step` (holding `BEGIN IMMEDIATE`, or just after `COMMIT`) until the parent
    SIGKILLs this process."""
    armed = False

    def hook(at: str, conn: sqlite3.Connection) -> None:
        if armed and at == step:
            reached.set()
            time.sleep(3600)

    journal = SqliteJournal(Path(root), fault_hook=hook)
    journal.acquire()
    rev = revisions()
    if operation != "create":
        journal.create(rev[0])
    armed = True
    if operation == "create":
        journal.create(rev[0])
    elif operation == "replace":
        journal.replace(rev[1], 0)
    else:
        journal.remove(rev[0].offer_id, 0)
    reached.set()  # pragma: no cover - the parent kills this process at the step
