"""The file journal adapter (SPEC §3.9 F-1..F-12, W-1; ADR-0021 §4) on real directories.

Faults go through the adapter's `_Os` seam (`FaultyOs`): an `OSError` with a chosen errno, or a
`SimulatedCrash` standing for the process dying at that point (the adapter cleans up only after
an `OSError`, so the root is left as a killed process would leave it). A "restart" releases the
crashed owner's lock (what a stale reclaim would do) and acquires with a new `FileJournal`,
whose F-12 pass removes the leftover temporaries. Records come from the kernel
(`tests/support/journal_fixtures.py`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.specs.codes import Code
from kernel.specs.journal_ownership import OwnershipState
from kernel.worker.codec import encode_record
from kernel.worker.record import JournalRecord
from runners.worker.journal.file import (
    TEMPORARY_NAME_PREFIX,
    FileJournal,
    SteppedOs,
    is_record_name,
    record_name,
)
from runners.worker.journal.lock import LOCK_DIR_NAME, JournalOwnership
from runners.worker.journal.port import JournalError, JournalStore
from tests.support.journal_fixtures import (
    CALLBACK_TOKEN,
    LEASE_TOKEN,
    accepted,
    accepted_offer,
    accepted_with_padding,
    oversized,
    revisions,
)

ROOT_DIR = Path(__file__).resolve().parents[4]
RECORD_MAX = 196_608
NOBODY = 65534
CREATE_STEPS = (
    "open_temporary",
    "fchmod",
    "write",
    "fsync",
    "close",
    "link",
    "unlink",
    "fsync_directory",
)
REPLACE_STEPS = ("open_temporary", "fchmod", "write", "fsync", "close", "rename", "fsync_directory")


class SimulatedCrash(Exception):
    """The process dies here (not an `OSError`: the adapter runs no cleanup for it)."""


T = TypeVar("T")


class FaultyOs(SteppedOs):
    """The real OS calls, with one fault at the `nth` call of `step`, `before` or `after` it:
    `hook()` runs, then `error` is raised. Every step is recorded in `calls`."""

    def __init__(
        self,
        step: str | None = None,
        *,
        when: str = "before",
        error: BaseException | None = None,
        hook: Callable[[], None] | None = None,
        nth: int = 1,
    ) -> None:
        self.step, self.when, self.error, self.hook, self.nth = step, when, error, hook, nth
        self.calls: list[str] = []

    def _fire(self) -> None:
        if self.hook is not None:
            self.hook()
        if self.error is not None:
            raise self.error

    def _at(self, step: str, call: Callable[[], T]) -> T:
        self.calls.append(step)
        hit = step == self.step and self.calls.count(step) == self.nth
        if hit and self.when == "before":
            self._fire()
        result = call()
        if hit and self.when == "after":
            self._fire()
        return result


# -- fixtures and helpers --------------------------------------------------------------------
@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "journal"  # missing: acquire() creates it


MakeJournal = Callable[..., FileJournal]


@pytest.fixture
def make() -> Iterator[MakeJournal]:
    """`make(root, acquire=True, **kwargs)`: a FileJournal with its own (real) ownership; every
    one still owned is released afterwards (stopping its refresh thread)."""
    made: list[FileJournal] = []

    def make(root: Path, *, acquire: bool = True, **kwargs: object) -> FileJournal:
        journal = FileJournal(root, **kwargs)  # type: ignore[arg-type]
        made.append(journal)
        if acquire:
            journal.acquire()
        return journal

    yield make
    for journal in made:
        if journal.ownership.state is OwnershipState.OWNED:
            with contextlib.suppress(JournalError):
                journal.release()


def _error(action: Callable[[], object]) -> JournalError:
    with pytest.raises(JournalError) as caught:
        action()
    error = caught.value
    for secret in (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line"):  # INBOX-44
        assert secret not in str(error)
        assert secret not in repr(error)
    return error


def _code(action: Callable[[], object]) -> Code:
    return _error(action).code


def _entries(root: Path) -> list[str]:
    return sorted(os.listdir(root))


def _visible(root: Path) -> list[str]:
    """What a reader of the directory could take for a record (no dot-names)."""
    return [name for name in _entries(root) if not name.startswith(".")]


def _snapshot(root: Path) -> dict[str, tuple[int, int, int, int, bytes]]:
    """Every root entry but the lock: (inode, mode, uid, mtime_ns, bytes), links not followed."""
    found: dict[str, tuple[int, int, int, int, bytes]] = {}
    for name in _entries(root):
        if name == LOCK_DIR_NAME:
            continue
        path = root / name
        st = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
        found[name] = (st.st_ino, st.st_mode, st.st_uid, st.st_mtime_ns, data)
    return found


def _restart(root: Path, crashed: FileJournal, make: MakeJournal, **kwargs: object) -> FileJournal:
    """The crashed process is gone: its lock is cleared (as a stale reclaim would) and a new
    journal acquires, removing the leftover temporaries (F-12)."""
    crashed.release()
    return make(root, **kwargs)


def _all(store: JournalStore) -> list[JournalRecord]:
    records: list[JournalRecord] = []
    cursor: str | None = None
    while True:
        page = store.list(cursor, 64)
        records.extend(page.records)
        if not page.has_more:
            return records
        cursor = page.cursor


# -- INBOX-15: one record per offer; crash at any step ------------------------------------------
@pytest.mark.spec("INBOX-15")
@pytest.mark.parametrize("shared_owner", [False, True], ids=["one-journal", "two-journals"])
def test_concurrent_creates_of_one_offer_yield_exactly_one_record(
    root: Path, make: MakeJournal, shared_owner: bool
) -> None:
    """8 threads create the same offer at a barrier (on one journal, or on two journals built on
    one owner): exactly one succeeds, the others get JOURNAL_RECORD_EXISTS."""
    first = make(root)
    journals = [first, FileJournal(root, first.ownership)] if shared_owner else [first]
    record = accepted()
    threads_n = 8
    barrier = threading.Barrier(threads_n)
    outcomes: list[str] = []

    def create(journal: FileJournal) -> None:
        barrier.wait(10)
        try:
            journal.create(record)
        except JournalError as exc:
            outcomes.append(exc.code.value)
        else:
            outcomes.append("created")

    threads = [
        threading.Thread(target=create, args=(journals[i % len(journals)],))
        for i in range(threads_n)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["JOURNAL_RECORD_EXISTS"] * (threads_n - 1) + ["created"]
    assert _entries(root) == sorted([LOCK_DIR_NAME, record_name(record.offer_id)])
    assert first.read(record.offer_id) == record


def _crash_cases(steps: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(step, when) for step in steps for when in ("before", "after")]


@pytest.mark.spec("INBOX-15")
@pytest.mark.parametrize(("step", "when"), _crash_cases(CREATE_STEPS))
def test_a_crash_at_any_step_of_create_leaves_no_record_or_the_complete_one(
    root: Path, make: MakeJournal, step: str, when: str
) -> None:
    record = accepted()
    other = accepted_offer(2)
    journal = make(root, _os=FaultyOs(step, when=when, error=SimulatedCrash()))
    FileJournal(root, journal.ownership).create(other)  # an unrelated record stays as it is
    with pytest.raises(SimulatedCrash):
        journal.create(record)
    published = CREATE_STEPS.index(step) > CREATE_STEPS.index("link") or (
        step == "link" and when == "after"
    )
    expected = [other, record] if published else [other]
    expected.sort(key=lambda r: r.offer_id)
    # Before the restart: nothing partial is visible, temporaries are never listed.
    assert _visible(root) == sorted(record_name(r.offer_id) for r in expected)
    assert _all(journal) == expected
    fresh = _restart(root, journal, make)
    assert _entries(root) == sorted([LOCK_DIR_NAME, *(record_name(r.offer_id) for r in expected)])
    assert _all(fresh) == expected
    for r in expected:
        assert (root / record_name(r.offer_id)).read_bytes() == encode_record(r)
    if not published:  # the offer can be published after the restart
        fresh.create(record)
        assert fresh.read(record.offer_id) == record


@pytest.mark.spec("INBOX-15")
@pytest.mark.parametrize(("step", "when"), _crash_cases(REPLACE_STEPS))
def test_a_crash_at_any_step_of_replace_leaves_the_last_durable_revision(
    root: Path, make: MakeJournal, step: str, when: str
) -> None:
    chain = revisions()
    journal = make(root)
    journal.create(chain[0])
    journal.replace(chain[1], 0)
    crashing = FileJournal(
        root, journal.ownership, _os=FaultyOs(step, when=when, error=SimulatedCrash())
    )
    with pytest.raises(SimulatedCrash):
        crashing.replace(chain[2], 1)
    renamed = REPLACE_STEPS.index(step) > REPLACE_STEPS.index("rename") or (
        step == "rename" and when == "after"
    )
    durable = chain[2] if renamed else chain[1]
    name = record_name(durable.offer_id)
    assert _visible(root) == [name]
    assert (root / name).read_bytes() == encode_record(durable)
    assert journal.read(durable.offer_id) == durable
    fresh = _restart(root, journal, make)
    assert _entries(root) == sorted([LOCK_DIR_NAME, name])
    assert fresh.read(durable.offer_id) == durable
    following = chain[durable.revision + 1]
    fresh.replace(following, durable.revision)  # the chain continues from the durable revision
    assert fresh.read(durable.offer_id) == following


@pytest.mark.spec("INBOX-15")
@pytest.mark.parametrize(("step", "when"), _crash_cases(("unlink", "fsync_directory")))
def test_a_crash_during_remove_leaves_the_record_or_nothing(
    root: Path, make: MakeJournal, step: str, when: str
) -> None:
    record = accepted()
    journal = make(root)
    journal.create(record)
    crashing = FileJournal(
        root, journal.ownership, _os=FaultyOs(step, when=when, error=SimulatedCrash())
    )
    with pytest.raises(SimulatedCrash):
        crashing.remove(record.offer_id, 0)
    gone = step == "fsync_directory" or when == "after"
    fresh = _restart(root, journal, make)
    assert fresh.read(record.offer_id) == (None if gone else record)
    assert _entries(root) == (
        [LOCK_DIR_NAME] if gone else [LOCK_DIR_NAME, record_name(record.offer_id)]
    )


# -- INBOX-43: ENOSPC / EIO / EACCES fail closed --------------------------------------------------
FAULT_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EACCES)


@pytest.mark.spec("INBOX-43")
@pytest.mark.parametrize("code", FAULT_ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("step", ["open_temporary", "fchmod", "write", "fsync", "close", "link"])
def test_an_os_error_during_create_fails_closed_with_nothing_visible(
    root: Path, make: MakeJournal, step: str, code: int
) -> None:
    other = accepted_offer(2)
    journal = make(root, _os=FaultyOs(step, error=OSError(code, os.strerror(code))))
    FileJournal(root, journal.ownership).create(other)
    before = _snapshot(root)
    error = _error(lambda: journal.create(accepted()))
    assert error.code is Code.JOURNAL_PERMISSIONS
    assert error.reason == f"{step.removesuffix('_temporary')}:{errno.errorcode[code]}"
    assert _snapshot(root) == before  # no temporary left, the other record untouched
    assert journal.read(accepted().offer_id) is None
    assert _all(journal) == [other]


@pytest.mark.spec("INBOX-43", "INBOX-02")
@pytest.mark.parametrize("code", FAULT_ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("step", ["open_temporary", "fchmod", "write", "fsync", "close", "rename"])
def test_an_os_error_during_replace_keeps_the_prior_revision_byte_identical(
    root: Path, make: MakeJournal, step: str, code: int
) -> None:
    chain = revisions()
    journal = make(root)
    journal.create(chain[0])
    journal.replace(chain[1], 0)
    before = _snapshot(root)
    faulty = FileJournal(
        root, journal.ownership, _os=FaultyOs(step, error=OSError(code, os.strerror(code)))
    )
    error = _error(lambda: faulty.replace(chain[2], 1))
    assert error.code is Code.JOURNAL_PERMISSIONS
    assert error.reason.endswith(f":{errno.errorcode[code]}")
    assert _snapshot(root) == before
    assert journal.read(chain[0].offer_id) == chain[1]
    journal.replace(chain[2], 1)  # nothing was consumed: the same write succeeds afterwards


@pytest.mark.spec("INBOX-43")
@pytest.mark.parametrize("code", FAULT_ERRNOS, ids=errno.errorcode.get)
def test_an_os_error_at_unlink_during_remove_keeps_the_record(
    root: Path, make: MakeJournal, code: int
) -> None:
    record = accepted()
    journal = make(root)
    journal.create(record)
    before = _snapshot(root)
    faulty = FileJournal(
        root, journal.ownership, _os=FaultyOs("unlink", error=OSError(code, os.strerror(code)))
    )
    assert _code(lambda: faulty.remove(record.offer_id, 0)) is Code.JOURNAL_PERMISSIONS
    assert _snapshot(root) == before


@pytest.mark.spec("INBOX-43")
@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOTSUP], ids=errno.errorcode.get)
def test_an_unsupported_directory_fsync_is_skipped(
    root: Path, make: MakeJournal, code: int
) -> None:
    """F-6: the file system cannot fsync a directory: every mutation goes on."""
    chain = revisions()
    faulty = FaultyOs("fsync_directory", error=OSError(code, os.strerror(code)))
    journal = make(root, _os=faulty)
    journal.create(chain[0])
    faulty.nth = 2
    journal.replace(chain[1], 0)
    faulty.nth = 3
    journal.remove(chain[0].offer_id, 1)
    assert faulty.calls.count("fsync_directory") == 3
    assert _entries(root) == [LOCK_DIR_NAME]


@pytest.mark.spec("INBOX-43")
@pytest.mark.parametrize("operation", ["create", "replace", "remove"])
def test_a_failed_directory_fsync_is_reported_and_the_change_is_complete(
    root: Path, make: MakeJournal, operation: str
) -> None:
    """FJ-5: after link/rename/unlink the change is visible; an EIO on the directory fsync is
    reported (durability unknown) and what is visible is the complete next state."""
    chain = revisions()
    journal = make(root)
    if operation != "create":
        journal.create(chain[0])
    faulty = FileJournal(
        root, journal.ownership, _os=FaultyOs("fsync_directory", error=OSError(errno.EIO, "x"))
    )
    actions: dict[str, Callable[[], None]] = {
        "create": lambda: faulty.create(chain[0]),
        "replace": lambda: faulty.replace(chain[1], 0),
        "remove": lambda: faulty.remove(chain[0].offer_id, 0),
    }
    error = _error(actions[operation])
    assert (error.code, error.reason) == (Code.JOURNAL_PERMISSIONS, "fsync_directory:EIO")
    after = {"create": chain[0], "replace": chain[1], "remove": None}[operation]
    assert journal.read(chain[0].offer_id) == after
    assert not [n for n in _entries(root) if n.startswith(TEMPORARY_NAME_PREFIX)]


@pytest.mark.spec("INBOX-43")
def test_a_temporary_that_cannot_be_unlinked_after_the_link_is_a_hidden_leftover(
    root: Path, make: MakeJournal
) -> None:
    """FJ-5: the record is published; the temporary (a second link to it) is never listed and
    is removed after the next acquire (F-12)."""
    record = accepted()
    journal = make(root, _os=FaultyOs("unlink", error=OSError(errno.EIO, "x")))
    journal.create(record)
    assert len([n for n in _entries(root) if n.startswith(TEMPORARY_NAME_PREFIX)]) == 1
    assert _all(journal) == [record]
    fresh = _restart(root, journal, make)
    assert _entries(root) == [LOCK_DIR_NAME, record_name(record.offer_id)]
    assert (root / record_name(record.offer_id)).stat().st_nlink == 1
    assert fresh.read(record.offer_id) == record


# -- INBOX-02 (CONF): a stale replace changes nothing ------------------------------------------
@pytest.mark.spec("INBOX-02")
@pytest.mark.parametrize(
    ("new", "expected"),
    [(2, 0), (1, 0), (3, 1), (2, 2), (3, 2), (0, -1)],
    ids=["stale", "same-revision", "skips", "ahead", "ahead-by-one", "revision-0"],
)
def test_a_replace_with_a_wrong_revision_leaves_the_file_byte_identical(
    root: Path, make: MakeJournal, new: int, expected: int
) -> None:
    chain = revisions()
    journal = make(root)
    journal.create(chain[0])
    journal.replace(chain[1], 0)
    before = _snapshot(root)
    counting = FaultyOs()
    faulty = FileJournal(root, journal.ownership, _os=counting)
    assert _code(lambda: faulty.replace(chain[new], expected)) is Code.JOURNAL_REVISION_CONFLICT
    assert _snapshot(root) == before
    assert counting.calls == []  # not even a temporary was written
    assert _code(lambda: faulty.remove(chain[0].offer_id, 0)) is Code.JOURNAL_REVISION_CONFLICT
    assert _snapshot(root) == before
    assert counting.calls == []


@pytest.mark.spec("INBOX-02")
def test_create_publishes_only_revision_0(root: Path, make: MakeJournal) -> None:
    journal = make(root)
    assert _code(lambda: journal.create(revisions()[1])) is Code.JOURNAL_REVISION_CONFLICT
    assert _entries(root) == [LOCK_DIR_NAME]


# -- INBOX-16: 0700 root, 0600 records, whatever the umask ------------------------------------
@pytest.mark.spec("INBOX-16")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o777])
def test_root_is_0700_and_every_record_0600_whatever_the_umask(
    root: Path, make: MakeJournal, umask: int
) -> None:
    chain = revisions()
    old = os.umask(umask)
    try:
        journal = make(root)
        journal.create(chain[0])
        assert stat.S_IMODE((root / record_name(chain[0].offer_id)).stat().st_mode) == 0o600
        journal.replace(chain[1], 0)
        temporaries: list[int] = []

        def look() -> None:
            for name in _entries(root):
                if name.startswith(TEMPORARY_NAME_PREFIX):
                    temporaries.append(stat.S_IMODE((root / name).stat().st_mode))

        peeking = FileJournal(root, journal.ownership, _os=FaultyOs("write", hook=look))
        peeking.replace(chain[2], 1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert temporaries == [0o600]
    for name in _visible(root):
        st = (root / name).stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_nlink) == (0o600, os.geteuid(), 1)


@pytest.mark.spec("INBOX-16")
@pytest.mark.parametrize("mode", [0o750, 0o705, 0o755, 0o777, 0o710])
def test_a_root_with_group_or_other_bits_is_refused(
    root: Path, make: MakeJournal, mode: int
) -> None:
    root.mkdir()
    root.chmod(mode)
    journal = make(root, acquire=False)
    assert _code(journal.acquire) is Code.JOURNAL_PERMISSIONS
    assert _code(lambda: journal.read(accepted().offer_id)) is Code.JOURNAL_NOT_OWNED
    assert _entries(root) == []
    assert stat.S_IMODE(root.stat().st_mode) == mode  # refused, never chmod-ed


@pytest.mark.spec("INBOX-16")
def test_a_root_of_another_owner_or_a_symlink_is_refused(
    root: Path, tmp_path: Path, make: MakeJournal
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    root.mkdir(mode=0o700)
    os.chown(root, NOBODY, NOBODY)
    assert _code(make(root, acquire=False).acquire) is Code.JOURNAL_PERMISSIONS
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _code(make(link, acquire=False).acquire) is Code.JOURNAL_PERMISSIONS
    assert list(real.iterdir()) == []


# -- INBOX-17: capacity ------------------------------------------------------------------------
@pytest.mark.spec("INBOX-17")
def test_the_default_capacity_is_64_and_a_full_journal_evicts_nothing(
    root: Path, make: MakeJournal
) -> None:
    journal = make(root)
    assert journal.capacity == 64
    finals = [revisions(g) for g in (1, 2, 3)]  # final and active states among the 64
    for chain in finals:
        journal.create(chain[0])
        for record in chain[1:]:
            journal.replace(record, record.revision - 1)
    for generation in range(4, 65):
        journal.create(accepted_offer(generation))
    before = _snapshot(root)
    for generation in (65, 66, 200):
        error = _error(functools.partial(journal.create, accepted_offer(generation)))
        assert error.code is Code.JOURNAL_FULL
    assert _snapshot(root) == before
    assert len(_all(journal)) == 64
    # A known offer is never a new record: at capacity it is still JOURNAL_RECORD_EXISTS.
    assert _code(lambda: journal.create(accepted_offer(10))) is Code.JOURNAL_RECORD_EXISTS
    assert [r.state.value for r in _all(journal) if r.revision == 5] == [
        "completion_acknowledged"
    ] * 3


@pytest.mark.spec("INBOX-17")
@pytest.mark.parametrize("capacity", [0, -1, 1025, 10_000, True, 64.0, "64"])
def test_a_capacity_outside_1_to_1024_is_rejected_at_construction(
    root: Path, capacity: object
) -> None:
    with pytest.raises(ValueError, match="capacity"):
        FileJournal(root, capacity=capacity)  # type: ignore[arg-type]
    assert not root.exists()  # construction does no I/O


@pytest.mark.spec("INBOX-17")
def test_capacity_1024_is_accepted_and_counted_by_files(root: Path, make: MakeJournal) -> None:
    journal = make(root, capacity=1024)
    assert journal.capacity == 1024
    small = make(root.parent / "small", capacity=1)
    small.create(accepted())
    assert _code(lambda: small.create(accepted_offer(2))) is Code.JOURNAL_FULL
    small.remove(accepted().offer_id, 0)
    small.create(accepted_offer(2))


# -- INBOX-18: size ----------------------------------------------------------------------------
@pytest.mark.spec("INBOX-18")
def test_a_record_over_192_kib_is_refused_before_any_file_is_written(
    root: Path, make: MakeJournal
) -> None:
    counting = FaultyOs()
    journal = make(root, _os=counting)
    chain = revisions()
    journal.create(chain[0])
    counting.calls.clear()
    before = _snapshot(root)
    big = oversized()
    assert len(encode_record(big)) > RECORD_MAX
    assert _code(lambda: journal.create(big)) is Code.JOURNAL_RECORD_TOO_LARGE
    assert counting.calls == []
    assert _snapshot(root) == before
    assert len(_entries(root)) == 2  # the lock and the one record


@pytest.mark.spec("INBOX-18")
def test_exactly_192_kib_is_accepted_one_byte_more_is_not(root: Path, make: MakeJournal) -> None:
    base = len(encode_record(accepted_with_padding(0)))
    at_limit = accepted_with_padding(RECORD_MAX - base)
    over = accepted_with_padding(RECORD_MAX - base + 1)
    assert (len(encode_record(at_limit)), len(encode_record(over))) == (RECORD_MAX, RECORD_MAX + 1)
    journal = make(root)
    assert _code(lambda: journal.create(over)) is Code.JOURNAL_RECORD_TOO_LARGE
    assert _entries(root) == [LOCK_DIR_NAME]
    journal.create(at_limit)
    assert journal.read(at_limit.offer_id) == at_limit


# -- INBOX-19: paging --------------------------------------------------------------------------
_RECORDS = [accepted_offer(g) for g in range(1, 141)]


@pytest.mark.spec("INBOX-19")
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(count=st.integers(0, 140), limit=st.integers(1, 64))
def test_concatenated_pages_list_every_record_exactly_once_in_order(count: int, limit: int) -> None:
    with tempfile.TemporaryDirectory() as parent:
        root = Path(parent) / "journal"
        journal = FileJournal(root, capacity=1024)
        journal.acquire()
        try:
            for record in _RECORDS[:count]:
                journal.create(record)
            # a temporary file and the lock are in the root too; they are never listed
            fd = os.open(root / f"{TEMPORARY_NAME_PREFIX}planted", os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
            seen: list[str] = []
            cursor: str | None = None
            pages = 0
            while True:
                page = journal.list(cursor, limit)
                pages += 1
                ids = [r.offer_id for r in page.records]
                assert len(ids) <= limit
                assert ids == sorted(ids)
                assert cursor is None or all(i > cursor for i in ids)
                seen.extend(ids)
                assert page.has_more == (len(seen) < count)
                if not page.has_more:
                    break
                assert page.cursor == ids[-1]
                cursor = page.cursor
            assert seen == sorted(r.offer_id for r in _RECORDS[:count])
            assert pages == max(1, -(-count // limit))
        finally:
            journal.release()


@pytest.mark.spec("INBOX-19")
@pytest.mark.parametrize("limit", [0, -1, 65, True, 1.0])
def test_a_limit_outside_1_to_64_is_a_value_error(
    root: Path, make: MakeJournal, limit: object
) -> None:
    journal = make(root)
    with pytest.raises(ValueError, match="limit"):
        journal.list(None, limit)  # type: ignore[arg-type]


@pytest.mark.spec("INBOX-19")
@pytest.mark.parametrize("cursor", ["", "zz", "A" * 64, "a" * 63, "../" + "a" * 61])
def test_a_cursor_or_offer_id_that_is_not_64_hex_is_a_value_error(
    root: Path, make: MakeJournal, cursor: str
) -> None:
    journal = make(root)
    with pytest.raises(ValueError, match="offer_id"):
        journal.list(cursor, 64)
    with pytest.raises(ValueError, match="offer_id"):
        journal.read(cursor)
    with pytest.raises(ValueError, match="offer_id"):
        journal.remove(cursor, 0)


# -- INBOX-20: concurrent mutations --------------------------------------------------------------
@pytest.mark.spec("INBOX-20")
@pytest.mark.parametrize("shared_owner", [False, True], ids=["one-journal", "two-journals"])
def test_concurrent_creates_of_distinct_offers_never_exceed_capacity(
    root: Path, make: MakeJournal, shared_owner: bool
) -> None:
    capacity = 10
    first = make(root, capacity=capacity)
    journals = [first, FileJournal(root, first.ownership, capacity=capacity)]
    if not shared_owner:
        journals = [first]
    offers = [accepted_offer(g) for g in range(1, 41)]
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    guard = threading.Lock()

    def worker(index: int) -> None:
        journal = journals[index % len(journals)]
        barrier.wait(10)
        for record in offers[index::8]:
            try:
                journal.create(record)
            except JournalError as exc:
                outcome = exc.code.value
            else:
                outcome = "created"
            with guard:
                outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes.count("created") == capacity
    assert outcomes.count("JOURNAL_FULL") == len(offers) - capacity
    assert len(_visible(root)) == capacity
    assert len(_all(first)) == capacity


def _race(actions: dict[str, Callable[[], None]]) -> dict[str, str]:
    """Start every action at one barrier; each one's outcome ("ok" or its code)."""
    barrier = threading.Barrier(len(actions))
    results: dict[str, str] = {}

    def run(name: str, action: Callable[[], None]) -> None:
        barrier.wait(10)
        try:
            action()
        except JournalError as exc:
            results[name] = exc.code.value
        else:
            results[name] = "ok"

    threads = [threading.Thread(target=run, args=item) for item in actions.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.spec("INBOX-20")
def test_a_remove_racing_a_replace_has_one_winner_and_a_matching_state(
    root: Path, make: MakeJournal
) -> None:
    """F-10: whichever runs first wins and the other sees the changed revision; never both,
    never neither, and the stored state is the winner's."""
    journal = make(root)
    for generation in range(1, 31):
        chain = revisions(generation)
        journal.create(chain[0])
        journal.replace(chain[1], 0)
        results = _race(
            {
                "replace": functools.partial(journal.replace, chain[2], 1),
                "remove": functools.partial(journal.remove, chain[0].offer_id, 1),
            }
        )
        stored = journal.read(chain[0].offer_id)
        if results["replace"] == "ok":
            assert results == {"replace": "ok", "remove": "JOURNAL_REVISION_CONFLICT"}
            assert stored == chain[2]
        else:
            assert results == {"replace": "JOURNAL_REVISION_CONFLICT", "remove": "ok"}
            assert stored is None


@pytest.mark.spec("INBOX-20")
def test_reads_run_while_a_mutation_is_in_flight(root: Path, make: MakeJournal) -> None:
    """F-10: mutations queue behind each other; reads do not wait for them."""
    chain = revisions()
    journal = make(root)
    journal.create(chain[0])
    in_fsync = threading.Event()
    go_on = threading.Event()

    def hold() -> None:
        in_fsync.set()
        assert go_on.wait(10)

    slow = FileJournal(root, journal.ownership, _os=FaultyOs("fsync", hook=hold))
    writer = threading.Thread(target=slow.replace, args=(chain[1], 0))
    writer.start()
    try:
        assert in_fsync.wait(10)
        assert journal.read(chain[0].offer_id) == chain[0]  # not blocked by the mutation
        assert _all(journal) == [chain[0]]
        queued: list[str] = []

        def create_another() -> None:
            journal.create(accepted_offer(2))
            queued.append("created")

        other = threading.Thread(target=create_another)
        other.start()
        other.join(0.2)
        assert queued == []  # the second mutation waits for the first
    finally:
        go_on.set()
        writer.join(10)
    other.join(10)
    assert queued == ["created"]
    assert journal.read(chain[0].offer_id) == chain[1]


# -- F-9: corruption is reported, never skipped or deleted ------------------------------------
def _plant_truncated(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.write_bytes(encode_record(record)[:-9])
    return path


def _plant_bad_json(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.write_bytes(b'{"revision": 0, ')
    return path


def _plant_wrong_mode(mode: int) -> Callable[[Path, JournalRecord], Path]:
    def plant(root: Path, record: JournalRecord) -> Path:
        path = root / record_name(record.offer_id)
        path.chmod(mode)
        return path

    return plant


def _plant_symlink(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    elsewhere = root.parent / "elsewhere.json"
    shutil.copy2(path, elsewhere)
    path.unlink()
    path.symlink_to(elsewhere)
    return path


def _plant_other_owner(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    os.chown(path, NOBODY, NOBODY)
    return path


def _plant_directory(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.unlink()
    path.mkdir(mode=0o700)
    return path


def _plant_fifo(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.unlink()
    os.mkfifo(path, 0o600)
    return path


def _plant_empty(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.write_bytes(b"")
    return path


def _plant_too_big(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.write_bytes(encode_record(record) + b" " * RECORD_MAX)
    return path


def _plant_under_another_name(root: Path, record: JournalRecord) -> Path:
    path = root / record_name(record.offer_id)
    path.write_bytes(encode_record(accepted_offer(9)))
    return path


CORRUPTIONS: dict[str, Callable[[Path, JournalRecord], Path]] = {
    "truncated": _plant_truncated,
    "bad-json": _plant_bad_json,
    "mode-0644": _plant_wrong_mode(0o644),
    "mode-0400": _plant_wrong_mode(0o400),
    "mode-0700": _plant_wrong_mode(0o700),
    "symlink": _plant_symlink,
    "other-owner": _plant_other_owner,
    "directory": _plant_directory,
    "fifo": _plant_fifo,
    "empty": _plant_empty,
    "over-192-kib": _plant_too_big,
    "filed-under-another-offer": _plant_under_another_name,
}


@pytest.mark.spec("INBOX-44")
@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_a_corrupt_record_fails_every_operation_and_is_left_untouched(
    root: Path, make: MakeJournal, kind: str
) -> None:
    if kind == "other-owner" and os.geteuid() != 0:
        pytest.skip("needs root to chown")
    chain = revisions()
    journal = make(root)
    journal.create(chain[0])
    healthy = accepted_offer(2)
    journal.create(healthy)
    CORRUPTIONS[kind](root, chain[0])
    before = _snapshot(root)
    oid = chain[0].offer_id
    for action in (
        lambda: journal.read(oid),
        lambda: journal.list(None, 64),
        lambda: journal.replace(chain[1], 0),
        lambda: journal.remove(oid, 0),
    ):
        assert _code(action) is Code.JOURNAL_CORRUPT, kind
        assert _snapshot(root) == before
    assert journal.read(healthy.offer_id) == healthy  # reading another offer still works
    fresh = _restart(root, journal, make)  # F-12 removes temporaries only: never a record
    assert _snapshot(root) == before
    assert _code(lambda: fresh.read(oid)) is Code.JOURNAL_CORRUPT


@pytest.mark.spec("INBOX-44")
@pytest.mark.parametrize(
    "name",
    [
        "notes.txt",
        "A" * 64 + ".json",
        "a" * 63 + ".json",
        "a" * 64 + ".json.bak",
        "a" * 64,
        "a" * 64 + ".JSON",
    ],
)
def test_an_entry_with_a_wrong_name_makes_list_and_create_fail_and_stays(
    root: Path, make: MakeJournal, name: str
) -> None:
    assert not is_record_name(name)
    journal = make(root)
    record = accepted()
    journal.create(record)
    stray = root / name
    stray.write_bytes(encode_record(record))
    stray.chmod(0o600)
    before = _snapshot(root)
    assert _code(lambda: journal.list(None, 64)) is Code.JOURNAL_CORRUPT
    assert _code(lambda: journal.create(accepted_offer(2))) is Code.JOURNAL_CORRUPT
    assert _snapshot(root) == before
    assert journal.read(record.offer_id) == record


@pytest.mark.spec("INBOX-44")
def test_a_dot_directory_is_no_temporary_and_is_reported(root: Path, make: MakeJournal) -> None:
    journal = make(root)
    (root / ".unexpected").mkdir(mode=0o700)
    assert _code(lambda: journal.list(None, 64)) is Code.JOURNAL_CORRUPT
    assert (root / ".unexpected").is_dir()


# -- W-1: ownership before every operation -----------------------------------------------------
_SECOND_PROCESS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from runners.worker.journal.file import FileJournal
    from runners.worker.journal.port import JournalError

    root, offer_id = Path(sys.argv[1]), sys.argv[2]
    journal = FileJournal(root)
    out = {}
    for name, action in [
        ("acquire", journal.acquire),
        ("read", lambda: journal.read(offer_id)),
        ("list", lambda: journal.list(None, 64)),
        ("remove", lambda: journal.remove(offer_id, 0)),
    ]:
        try:
            result = action()
        except JournalError as exc:
            out[name] = exc.code.value
        else:
            out[name] = "ok" if name != "read" else getattr(result, "revision", None)
    if out["acquire"] == "ok":
        journal.release()
    print(json.dumps(out))
    """
)


def _second_process(root: Path, offer_id: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _SECOND_PROCESS, str(root), offer_id],
        cwd=ROOT_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


@pytest.mark.spec("INBOX-21")
def test_a_second_process_can_neither_read_nor_write(root: Path, make: MakeJournal) -> None:
    journal = make(root)
    record = accepted()
    journal.create(record)
    before = _snapshot(root)
    assert _second_process(root, record.offer_id) == {
        "acquire": "JOURNAL_LOCKED",
        "read": "JOURNAL_NOT_OWNED",
        "list": "JOURNAL_NOT_OWNED",
        "remove": "JOURNAL_NOT_OWNED",
    }
    assert _snapshot(root) == before
    journal.release()
    assert _second_process(root, record.offer_id) == {  # after release() it takes over
        "acquire": "ok",
        "read": 0,
        "list": "ok",
        "remove": "ok",
    }
    assert _entries(root) == []


@pytest.mark.spec("INBOX-21")
def test_without_an_ownership_argument_the_journal_makes_one_and_waits_for_acquire(
    root: Path,
) -> None:
    journal = FileJournal(root)
    assert isinstance(journal.ownership, JournalOwnership)
    assert journal.ownership.root == root
    assert not root.exists()  # construction does no I/O (L-1)
    record = accepted()
    assert _code(lambda: journal.create(record)) is Code.JOURNAL_NOT_OWNED
    assert not root.exists()
    journal.acquire()
    try:
        journal.create(record)
        assert journal.read(record.offer_id) == record
    finally:
        journal.release()
    assert _code(lambda: journal.read(record.offer_id)) is Code.JOURNAL_NOT_OWNED
    with pytest.raises(ValueError, match="ownership"):
        FileJournal(root, JournalOwnership(root.parent / "elsewhere"))
    with pytest.raises(ValueError, match="absolute"):
        FileJournal(Path("relative/journal"))


@pytest.mark.spec("INBOX-22")
def test_a_compromised_owner_fails_every_operation_and_writes_nothing(
    root: Path, make: MakeJournal
) -> None:
    chain = revisions()
    journal = make(root)
    journal.create(chain[0])
    lock = root / LOCK_DIR_NAME
    st = lock.stat()
    os.utime(lock, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # W-5: the mtime is not ours
    before = _snapshot(root)
    for action in (
        lambda: journal.read(chain[0].offer_id),
        lambda: journal.list(None, 64),
        lambda: journal.create(accepted_offer(2)),
        lambda: journal.replace(chain[1], 0),
        lambda: journal.remove(chain[0].offer_id, 0),
        journal.acquire,
        journal.release,
    ):
        assert _code(action) is Code.JOURNAL_COMPROMISED
    assert _snapshot(root) == before


@pytest.mark.spec("INBOX-22")
@pytest.mark.parametrize("operation", ["create", "replace"])
def test_ownership_lost_while_writing_stops_the_publish(
    root: Path, make: MakeJournal, operation: str
) -> None:
    """The ownership is verified again right before link/rename: a lock taken away while the
    temporary was written leaves the journal as it was, temporary removed."""
    chain = revisions()
    journal = make(root)
    if operation == "replace":
        journal.create(chain[0])
    before = _snapshot(root)

    def take_the_lock_away() -> None:
        shutil.rmtree(root / LOCK_DIR_NAME)

    faulty = FileJournal(root, journal.ownership, _os=FaultyOs("fsync", hook=take_the_lock_away))
    action = (
        (lambda: faulty.create(chain[0]))
        if operation == "create"
        else (lambda: faulty.replace(chain[1], 0))
    )
    assert _code(action) is Code.JOURNAL_COMPROMISED
    assert _snapshot(root) == before


@pytest.mark.spec("INBOX-24")
def test_the_journal_starts_no_thread_of_its_own(root: Path, make: MakeJournal) -> None:
    """F-11: the only thread is the ownership's refresh timer."""
    before = set(threading.enumerate())
    journal = make(root)
    started = set(threading.enumerate()) - before
    assert [t.name for t in started] == ["ql3-journal-refresh"]
    chain = revisions()
    journal.create(chain[0])
    for record in chain[1:]:
        journal.replace(record, record.revision - 1)
    journal.list(None, 64)
    journal.read(chain[0].offer_id)
    journal.remove(chain[0].offer_id, 5)
    assert set(threading.enumerate()) - before == started
    assert "FileJournal(" in repr(journal)
    assert LEASE_TOKEN.reveal() not in repr(journal)
