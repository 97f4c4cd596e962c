"""The file journal adapter (SPEC §3.9 F-1..F-12, W-1; ADR-0021 §4): the edge `JournalStore`.

Layout
    One private root (`0700`, F-1, checked by `JournalOwnership.acquire()`) holding one file
    `<offer_id>.json` (`0600`) per offer (F-2) with the canonical bytes of
    `kernel.worker.codec.encode_record`, the ownership lock `.owner.lock/` and, transiently,
    temporaries `.tmp-<32 hex>` (the lock module's `TEMPORARY_PREFIX`, removed by F-12 after
    the next acquire). The bytes hold the lease token: a record file is a capability.

Writes (F-3..F-5), serialized by one mutation lock per owner (F-10)
    create   temporary (`O_CREAT | O_EXCL | O_NOFOLLOW`, `fchmod 0600` whatever the umask),
             write, `fsync`, close, `link()` to the final name (exists: `JOURNAL_RECORD_EXISTS`),
             unlink the temporary, `fsync` the directory.
    replace  read and decode the stored revision, compare (`JOURNAL_REVISION_CONFLICT`), then
             temporary as above and `rename()` over the final name, `fsync` the directory.
    remove   read and compare the stored revision, `unlink`, `fsync` the directory.
    A crash at any step leaves the previous complete file or the next complete one; what is left
    behind is a temporary, never listed and deleted after the next acquire.
    Size (F-2) and capacity (F-7, never evicting) are checked before anything is written.
    A directory `fsync` the file system does not support (F-6: EINVAL, ENOTSUP) is skipped.

Failures (docs/decisions.md FJ-1..FJ-9)
    Every failure is a `JournalError` with a `JOURNAL_*` code and a fixed reason (a step name,
    an errno name, a codec field name), never a record value or token (S-1, INBOX-44). An OS
    error while writing is `JOURNAL_PERMISSIONS` with `<step>:<ERRNO>` (the SPEC has no I/O code;
    as in the lock module, J-7). Ownership failures keep their codes (`JOURNAL_NOT_OWNED`,
    `JOURNAL_LOCKED`, `JOURNAL_COMPROMISED`, `JOURNAL_PERMISSIONS`).
    A stored file that is not a record (bad bytes, schema, name, mode, owner, type, symlink,
    size) is `JOURNAL_CORRUPT` (F-9): reported, never skipped, repaired or deleted.

Ownership (W-1)
    Every operation first calls `ownership.require_owned()`, and mutations verify again right
    before they publish (link, rename, unlink). Without an `ownership` argument the journal makes
    its own `JournalOwnership(root)` and does not acquire it: construction does no I/O (L-1), the
    inbox lifecycle calls `acquire()` and `release()`. The adapter has no thread, timer, watcher
    or connection of its own (F-11); the only timer is the ownership's refresh.

Tests reach every OS call of a mutation through `_Os` (the fault-injection seam, INBOX-43).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

from kernel.specs import Code, check_in_range
from kernel.worker import JournalCorrupt, JournalRecord, decode_record
from runners.worker.journal.common import (
    CAPACITY_RANGE,
    DEFAULT_CAPACITY,
    PAGE_RANGE,
    RECORD_MAX,
    check_offer_id,
    encode_for_write,
    ownership_error,
    require_owned,
)
from runners.worker.journal.lock import (
    FILE_MODE,
    LOCK_DIR_NAME,
    TEMPORARY_PREFIX,
    JournalOwnership,
    JournalOwnershipError,
    is_leftover_temporary,
    is_stale_lock_name,
)
from runners.worker.journal.port import JournalError, JournalPage

__all__ = [
    "DEFAULT_CAPACITY",
    "RECORD_SUFFIX",
    "TEMPORARY_NAME_PREFIX",
    "FileJournal",
    "is_record_name",
    "record_name",
]


RECORD_SUFFIX: Final = ".json"
#: F-3/F-4 temporaries: `.tmp-<32 hex>`; the leading dot makes them F-12 leftovers, never listed.
TEMPORARY_NAME_PREFIX: Final = f"{TEMPORARY_PREFIX}tmp-"
_RECORD_NAME: Final = re.compile(r"[0-9a-f]{64}\.json")
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: a FIFO planted under a record name must not block the reader (it is corrupt).
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: F-6: a directory fsync the file system does not support is skipped.
_DIR_FSYNC_UNSUPPORTED: Final = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def record_name(offer_id: str) -> str:
    """F-2: the file name of an offer's record."""
    return f"{offer_id}{RECORD_SUFFIX}"


def is_record_name(name: str) -> bool:
    """A root entry name that can hold a record: 64 lowercase hex digits and `.json`."""
    return _RECORD_NAME.fullmatch(name) is not None


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "OSError")


def _io(step: str, exc: OSError) -> JournalError:
    """FJ-6: an OS failure of a journal step, named by step and errno only."""
    return JournalError(Code.JOURNAL_PERMISSIONS, f"{step}:{_errno_name(exc)}")


def _corrupt(reason: str) -> JournalError:
    return JournalError(Code.JOURNAL_CORRUPT, reason)


class _Os:
    """Every OS call a mutation makes, one method per step (INBOX-43's fault-injection seam).

    The default is the real `os` functions. A test subclass may raise `OSError(errno.ENOSPC)`
    at a chosen step, or a non-`OSError` exception to stand for a crash: the adapter cleans up
    only after `OSError`, so after a simulated crash the root looks as a killed process left it.
    """

    def open_temporary(self, path: Path) -> int:
        return os.open(path, _TEMP_FLAGS, FILE_MODE)

    def fchmod(self, fd: int, mode: int) -> None:
        os.fchmod(fd, mode)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def link(self, source: Path, target: Path) -> None:
        os.link(source, target, follow_symlinks=False)

    def rename(self, source: Path, target: Path) -> None:
        os.rename(source, target)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def fsync_directory(self, path: Path) -> None:
        fd = os.open(path, _DIR_FLAGS)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_T = TypeVar("_T")


class SteppedOs(_Os):
    """`_Os` with every call routed through `_at(step, call)`, `step` being the method's
    name: the one base of the fault seams (the adapter tests, the journal conformance
    replayer), which override `_at` only."""

    def _at(self, step: str, call: Callable[[], _T]) -> _T:
        del step
        return call()

    def open_temporary(self, path: Path) -> int:
        return self._at("open_temporary", lambda: _Os.open_temporary(self, path))

    def fchmod(self, fd: int, mode: int) -> None:
        self._at("fchmod", lambda: _Os.fchmod(self, fd, mode))

    def write(self, fd: int, data: memoryview) -> int:
        return self._at("write", lambda: _Os.write(self, fd, data))

    def fsync(self, fd: int) -> None:
        self._at("fsync", lambda: _Os.fsync(self, fd))

    def close(self, fd: int) -> None:
        self._at("close", lambda: _Os.close(self, fd))

    def link(self, source: Path, target: Path) -> None:
        self._at("link", lambda: _Os.link(self, source, target))

    def rename(self, source: Path, target: Path) -> None:
        self._at("rename", lambda: _Os.rename(self, source, target))

    def unlink(self, path: Path) -> None:
        self._at("unlink", lambda: _Os.unlink(self, path))

    def fsync_directory(self, path: Path) -> None:
        self._at("fsync_directory", lambda: _Os.fsync_directory(self, path))


#: F-10: one mutation lock per owner, shared by every `FileJournal` built on that owner.
_MUTATION_LOCKS: weakref.WeakKeyDictionary[JournalOwnership, threading.Lock] = (
    weakref.WeakKeyDictionary()
)
_MUTATION_LOCKS_GUARD = threading.Lock()


def _mutation_lock(owner: JournalOwnership) -> threading.Lock:
    with _MUTATION_LOCKS_GUARD:
        lock = _MUTATION_LOCKS.get(owner)
        if lock is None:
            lock = _MUTATION_LOCKS[owner] = threading.Lock()
        return lock


class FileJournal:
    """The edge offer journal in one directory (`JournalStore`); see the module docstring."""

    def __init__(
        self,
        root: Path,
        ownership: JournalOwnership | None = None,
        *,
        capacity: int = DEFAULT_CAPACITY,
        _os: _Os | None = None,
    ) -> None:
        root = Path(root)
        if not root.is_absolute():
            raise ValueError("journal root: must be an absolute path (F-1)")
        self._capacity = check_in_range(capacity, CAPACITY_RANGE, field="capacity")
        if ownership is None:
            ownership = JournalOwnership(root)
        elif ownership.root != root:
            raise ValueError("ownership: must be the ownership of this journal root")
        self._root = root
        self._ownership = ownership
        self._os = _Os() if _os is None else _os
        self._mutations = _mutation_lock(ownership)

    # -- views and ownership -------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self._root

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def ownership(self) -> JournalOwnership:
        return self._ownership

    def __repr__(self) -> str:
        return f"FileJournal(root={str(self._root)!r}, capacity={self._capacity})"

    def acquire(self) -> None:
        """W-2/W-3 and F-1, F-12 through the ownership; failures as `JournalError`."""
        try:
            self._ownership.acquire()
        except JournalOwnershipError as exc:
            raise ownership_error(exc) from None

    def release(self) -> None:
        """W-7 through the ownership; failures as `JournalError`."""
        try:
            self._ownership.release()
        except JournalOwnershipError as exc:
            raise ownership_error(exc) from None

    def _require_owned(self) -> None:
        """W-1: first thing in every operation (and again before a mutation publishes)."""
        require_owned(self._ownership)

    # -- JournalStore: reads (concurrent) ----------------------------------------------------

    def read(self, offer_id: str) -> JournalRecord | None:
        self._require_owned()
        return self._load(check_offer_id(offer_id))

    def list(self, after: str | None, limit: int) -> JournalPage:
        """F-8: up to `limit` records after the cursor `after` (None: from the start).

        `limit` outside 1..64 or a cursor that is not an offer id is a `ValueError` (a caller's
        bug, FJ-8), raised before anything is read. The next cursor is the last listed offer id,
        or `after` itself on an empty page. Every root entry is checked by name (F-9); the
        records of the page are read and decoded in full.
        """
        self._require_owned()
        check_in_range(limit, PAGE_RANGE, field="limit")
        if after is not None:
            check_offer_id(after)
        later = sorted(oid for oid in self._offer_ids() if after is None or oid > after)
        records: list[JournalRecord] = []
        for oid in later[:limit]:
            record = self._load(oid)
            if record is not None:  # removed since the scan: no longer a record (FJ-3)
                records.append(record)
        cursor = records[-1].offer_id if records else after  # FJ-8: never back to the start
        return JournalPage(tuple(records), cursor, len(later) > limit)

    # -- JournalStore: mutations (one at a time per owner) -----------------------------------

    def create(self, record: JournalRecord) -> None:
        self._require_owned()
        if record.revision != 0:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "create_requires_revision_0")
        data = self._encode(record)
        name = record_name(record.offer_id)
        with self._mutations:
            present = self._offer_ids()
            if record.offer_id in present:
                raise JournalError(Code.JOURNAL_RECORD_EXISTS, "exists")
            if len(present) >= self._capacity:
                raise JournalError(Code.JOURNAL_FULL, "capacity")
            temporary = self._write_temporary(data)
            self._publish(temporary, name, create=True)

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        self._require_owned()
        if type(expected_revision) is not int or record.revision != expected_revision + 1:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "revision_not_expected_plus_1")
        data = self._encode(record)
        with self._mutations:
            stored = self._load(record.offer_id)
            if stored is None:
                raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "missing")
            if stored.revision != expected_revision:
                raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "stored_revision")
            temporary = self._write_temporary(data)
            self._publish(temporary, record_name(record.offer_id), create=False)

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self._require_owned()
        check_offer_id(offer_id)
        with self._mutations:
            stored = self._load(offer_id)
            if stored is None:
                raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "missing")
            if type(expected_revision) is not int or stored.revision != expected_revision:
                raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "stored_revision")
            self._require_owned()
            try:
                self._os.unlink(self._root / record_name(offer_id))
            except OSError as exc:
                raise _io("unlink", exc) from None
            self._sync_directory()

    # -- steps ---------------------------------------------------------------------------------

    @staticmethod
    def _encode(record: JournalRecord) -> bytes:
        return encode_for_write(record)

    def _entries(self) -> Iterator[tuple[str, bool]]:
        try:
            with os.scandir(self._root) as entries:
                found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except OSError as exc:
            raise _io("scan", exc) from None
        yield from found

    def _offer_ids(self) -> set[str]:
        """The offer ids with a file in the root; any entry that is neither a record name, the
        lock, a stale lock nor a temporary file makes this `JOURNAL_CORRUPT` (F-8, F-9, FJ-1)."""
        found: set[str] = set()
        for name, is_dir in self._entries():
            if name == LOCK_DIR_NAME or is_stale_lock_name(name):
                continue
            if is_leftover_temporary(name):
                if is_dir:  # a dot-directory is no temporary file (J-8): not ours
                    raise _corrupt("unexpected_entry")
                continue
            if not is_record_name(name):
                raise _corrupt("name")
            found.add(name[: -len(RECORD_SUFFIX)])
        return found

    def _load(self, offer_id: str) -> JournalRecord | None:
        """The stored revision, `None` if there is no file, else `JOURNAL_CORRUPT` (F-9)."""
        path = self._root / record_name(offer_id)
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _corrupt("symlink") from None
            raise _io("open", exc) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _corrupt("not_a_regular_file")
            if st.st_uid != os.geteuid():
                raise _corrupt("owner")
            if stat.S_IMODE(st.st_mode) != FILE_MODE:
                raise _corrupt("mode")
            if not 0 < st.st_size <= RECORD_MAX:
                raise _corrupt("size")
            chunks: list[bytes] = []
            total = 0
            while total <= RECORD_MAX:
                chunk = os.read(fd, RECORD_MAX + 1 - total)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        except OSError as exc:
            raise _io("read", exc) from None
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if not 0 < len(data) <= RECORD_MAX:
            raise _corrupt("size")
        try:
            return decode_record(data, offer_id)
        except JournalCorrupt as exc:
            raise _corrupt(exc.field) from None

    def _write_temporary(self, data: bytes) -> Path:
        """A complete, fsynced `0600` temporary holding `data` (F-3, F-4); on an OS error it is
        removed again and nothing is visible."""
        temporary = self._root / f"{TEMPORARY_NAME_PREFIX}{secrets.token_hex(16)}"
        step = "open"
        try:
            fd = self._os.open_temporary(temporary)
        except OSError as exc:
            raise _io(step, exc) from None
        closed = False
        try:
            step = "fchmod"
            self._os.fchmod(fd, FILE_MODE)  # F-1: whatever the umask took away
            step = "write"
            view = memoryview(data)
            while view:
                view = view[self._os.write(fd, view) :]
            step = "fsync"
            self._os.fsync(fd)
            step = "close"
            closed = True
            self._os.close(fd)
        except OSError as exc:
            if not closed:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._discard(temporary)
            raise _io(step, exc) from None
        return temporary

    def _discard(self, temporary: Path) -> None:
        """Best effort; a temporary left behind is an F-12 leftover, never listed."""
        with contextlib.suppress(OSError):
            self._os.unlink(temporary)

    def _publish(self, temporary: Path, name: str, *, create: bool) -> None:
        """F-3 `link` + unlink of the temporary, or F-4 `rename`; then the directory fsync."""
        target = self._root / name
        try:
            self._require_owned()  # the last moment a lost lock can still stop the write
        except JournalError:
            self._discard(temporary)
            raise
        try:
            if create:
                self._os.link(temporary, target)
            else:
                self._os.rename(temporary, target)
        except FileExistsError:
            self._discard(temporary)
            raise JournalError(Code.JOURNAL_RECORD_EXISTS, "exists") from None
        except OSError as exc:
            self._discard(temporary)
            raise _io("link" if create else "rename", exc) from None
        if create:
            # FJ-5: the record is published; a temporary that cannot be unlinked is a leftover
            # hard link to it, removed by F-12 after the next acquire, never listed.
            self._discard(temporary)
        self._sync_directory()

    def _sync_directory(self) -> None:
        """F-5/F-6: fsync the root; unsupported is skipped; any other failure is reported
        (the change is already visible: FJ-5)."""
        try:
            self._os.fsync_directory(self._root)
        except OSError as exc:
            if exc.errno in _DIR_FSYNC_UNSUPPORTED:
                return
            raise _io("fsync_directory", exc) from None
