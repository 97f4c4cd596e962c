"""Completion receipts on a POSIX host: the file store and the authenticator (SPEC §2.1, §3.11
RV-1..RV-5, §3.12 step 4, §3.14; issue 6 item 6).

A *completion receipt* is the immutable fact "the process launched for this Attempt ended with
this exit code", written by the launch wrapper (`runners.worker.posix.launch_wrapper`) once the
command
has exited, and read back by recovery before any process probe (receipt first, O-8).

What a receipt holds, and why (docs/decisions.md EX-1): RV-5 compares "the 32-byte SHA-256 of the
*receipt token* with the stored digest", and L3 says the SHA-256 is "computed by the runner; the
kernel sees only the digest". So the receipt carries the raw completion callback token, and the
authenticator digests it. A receipt holding only the digest would prove nothing: the digest sits
in the journal (`callback_token_sha256`), and anyone able to read that could forge a receipt.
Holding the token makes a receipt file a capability, so:

- the directory is `0700` and every receipt `0600`, owned by the effective uid (as the journal,
  §3.9 F-1); anything else is refused on read and on write;
- the token is a `kernel.identity.Secret` in memory (redacted `repr`), never logged, and no error
  message or exception context of this module contains receipt bytes (S-1);
- the journal still stores only the digest (§3.3, I-J5: that rule is about the journal).

Layout: `<root>/<attempt_id>.json`, one canonical JSON object per file. The attempt id is a
portable identity (§0.4), so it never widens the path. Temporary files start with a dot.

Publishing (`CompletionReceiptStore.publish`, EX-2): temporary file in the same directory opened
with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode `0600`, write, `fsync`, then `link()` to the final
name and unlink the temporary, then `fsync` the directory. `link()` rather than `rename()`
because the receipt is immutable (§2.1): a second publish for the same Attempt fails
(`RECEIPT_EXISTS`) instead of replacing the first fact. A crash leaves either no receipt or a
complete one (plus at most a leftover temporary, which is never read as a receipt).

Reading never "repairs": a truncated, unparsable, oversized or wrongly permissioned file is a
typed `ReceiptCorrupt` / `ReceiptReadError`, never accepted and never deleted (issue 6 item 4).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kernel import (
    PORTABLE_ID_RE,
    LocalReceipt,
    Secret,
    digests_equal,
    is_sha256_hex,
    token_digest,
)
from kernel.specs import CompletionOutcome
from kernel.worker import ReceiptCheck

__all__ = [
    "RECEIPT_MAX_BYTES",
    "RECEIPT_SCHEMA_VERSION",
    "CompletionReceiptStore",
    "Receipt",
    "ReceiptAuthenticator",
    "ReceiptConflict",
    "ReceiptCorrupt",
    "ReceiptDeleteError",
    "ReceiptErrorCode",
    "ReceiptReadError",
    "ReceiptRecordFacts",
    "ReceiptStoreError",
    "ReceiptValidation",
    "ReceiptWriteError",
    "decode_receipt",
    "encode_receipt",
    "outcome_for_exit_code",
]

RECEIPT_SCHEMA_VERSION: Final = 1
#: A receipt is a few hundred bytes; anything above this is not one of ours (EX-3).
RECEIPT_MAX_BYTES: Final = 4096
_SUFFIX: Final = ".json"
_TMP_SUFFIX: Final = ".tmp"
_FIELDS: Final = frozenset(
    {
        "schema_version",
        "run_id",
        "attempt_id",
        "executor_started_at_ms",
        "callback_sequence",
        "outcome",
        "exit_code",
        "finished_at_ms",
        "callback_token",
    }
)
_OUTCOMES: Final = frozenset(outcome.value for outcome in CompletionOutcome)
_INT64_MAX: Final = 2**63 - 1
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1


class ReceiptErrorCode(enum.StrEnum):
    """Stable codes of receipt store errors (low sensitivity, S-1)."""

    RECEIPT_READ_FAILED = "RECEIPT_READ_FAILED"
    RECEIPT_CORRUPT = "RECEIPT_CORRUPT"
    RECEIPT_PERMISSIONS = "RECEIPT_PERMISSIONS"
    RECEIPT_WRITE_FAILED = "RECEIPT_WRITE_FAILED"
    RECEIPT_EXISTS = "RECEIPT_EXISTS"
    RECEIPT_DELETE_FAILED = "RECEIPT_DELETE_FAILED"
    RECEIPT_ATTEMPT_ID_INVALID = "RECEIPT_ATTEMPT_ID_INVALID"


class ReceiptStoreError(Exception):
    """A receipt store failure: `code` (ReceiptErrorCode) and a short stable `reason`.

    The message is `"completion receipt: <code> (<reason>)"` and never carries receipt bytes, a
    token or a path component other than fixed words (S-1). Raised outside `except` blocks so no
    `__context__` (an OSError, a JSONDecodeError holding the document) rides along.
    """

    code: ReceiptErrorCode
    reason: str

    def __init__(self, code: ReceiptErrorCode, reason: str) -> None:
        super().__init__(f"completion receipt: {code.value} ({reason})")
        self.code = code
        self.reason = reason

    def __reduce__(self) -> tuple[type[ReceiptStoreError], tuple[ReceiptErrorCode, str]]:
        return (type(self), (self.code, self.reason))


class ReceiptReadError(ReceiptStoreError):
    """Reading failed (I/O, permissions, or a corrupt file): recovery's `receipt_read_failed`
    (§2.1 step 1, §3.11 step 2), which stops evaluation before any process probe."""


class ReceiptCorrupt(ReceiptReadError):
    """A receipt file exists but is not a well-formed receipt (truncated, not JSON, wrong fields,
    too large, not a regular file): code `RECEIPT_CORRUPT`. Reported, never accepted, never
    deleted."""


def _corrupt(reason: str) -> ReceiptCorrupt:
    return ReceiptCorrupt(ReceiptErrorCode.RECEIPT_CORRUPT, reason)


class ReceiptWriteError(ReceiptStoreError):
    """Publishing failed; nothing was published (a leftover temporary is never read)."""


class ReceiptDeleteError(ReceiptStoreError):
    """Deleting an existing receipt failed; the receipt is still there (§3.12: retry later)."""


def outcome_for_exit_code(exit_code: int) -> CompletionOutcome:
    """The completion outcome the wrapper reports for an exit status (EX-4): `succeeded` for 0,
    `failed` for anything else, including death by a signal (a negative code, Python's
    convention). `cancelled` and `timed_out` are decided by execution control (L4, L5), which
    knows why it stopped the process; the wrapper does not."""
    return CompletionOutcome.SUCCEEDED if exit_code == 0 else CompletionOutcome.FAILED


@dataclass(frozen=True, slots=True)
class Receipt:
    """One completion receipt (§3.11 RV-1..RV-5): what the wrapper observed and the token that
    proves it was launched with this Attempt's callback capability.

    `repr` shows ids, times, sequence, outcome and exit code only; the token is a `Secret`.
    """

    run_id: str
    attempt_id: str
    executor_started_at_ms: int
    callback_sequence: int
    outcome: CompletionOutcome
    exit_code: int
    finished_at_ms: int
    callback_token: Secret

    def __post_init__(self) -> None:
        # Direct construction is validated as strictly as decoding: a Receipt value is always
        # one that could have been read back from a file.
        reason = _receipt_reason(self)
        if reason is not None:
            raise ValueError(f"receipt: invalid ({reason})")

    def token_sha256(self) -> str:
        """The SHA-256 of the receipt token, the only form the kernel sees (L3)."""
        return token_digest(self.callback_token.reveal())

    def to_local_receipt(self) -> LocalReceipt:
        """The kernel's L3 view: the token replaced by its digest."""
        return LocalReceipt(
            run_id=self.run_id,
            attempt_id=self.attempt_id,
            callback_sequence=self.callback_sequence,
            token_sha256=self.token_sha256(),
            outcome=self.outcome,
            started_at_ms=self.executor_started_at_ms,
            exit_code=self.exit_code,
        )


def _plain_int(value: object, low: int, high: int) -> bool:
    # bool is an int in Python; a `true` in a receipt is not a sequence number.
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _portable(value: object) -> bool:
    return isinstance(value, str) and PORTABLE_ID_RE.fullmatch(value) is not None


def _receipt_reason(receipt: Receipt) -> str | None:
    # Typed as object: the annotations say what a caller should pass, not what it did.
    outcome: object = receipt.outcome
    token: object = receipt.callback_token
    if not _portable(receipt.run_id):
        return "bad_run_id"
    if not _portable(receipt.attempt_id):
        return "bad_attempt_id"
    if not _plain_int(receipt.executor_started_at_ms, 0, _INT64_MAX):
        return "bad_executor_started_at_ms"
    if not _plain_int(receipt.callback_sequence, 1, _INT64_MAX):
        return "bad_callback_sequence"
    if not isinstance(outcome, CompletionOutcome):
        return "bad_outcome"
    if not _plain_int(receipt.exit_code, _INT32_MIN, _INT32_MAX):
        return "bad_exit_code"
    if not _plain_int(receipt.finished_at_ms, 0, _INT64_MAX):
        return "bad_finished_at_ms"
    if not isinstance(token, Secret):
        return "bad_callback_token"
    return None


# -- encoding -------------------------------------------------------------------------------


def encode_receipt(receipt: Receipt) -> bytes:
    """Canonical JSON (sorted keys, no whitespace) plus a newline. Contains the raw token."""
    document = {
        "schema_version": RECEIPT_SCHEMA_VERSION,
        "run_id": receipt.run_id,
        "attempt_id": receipt.attempt_id,
        "executor_started_at_ms": receipt.executor_started_at_ms,
        "callback_sequence": receipt.callback_sequence,
        "outcome": receipt.outcome.value,
        "exit_code": receipt.exit_code,
        "finished_at_ms": receipt.finished_at_ms,
        "callback_token": receipt.callback_token.reveal(),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("ascii") + b"\n"


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    document: dict[str, object] = {}
    for key, value in pairs:
        if key in document:
            raise _DuplicateKey
        document[key] = value
    return document


def _parse_json(data: bytes) -> tuple[object, str | None]:
    """(document, None) or (None, reason). Never raises: the caller raises outside any handler,
    so a JSONDecodeError (whose `doc` is the whole file, token included) is never chained."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not_utf8"
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates), None
    except _DuplicateKey:
        return None, "duplicate_key"
    except (json.JSONDecodeError, RecursionError):
        return None, "not_json"


def decode_receipt(data: bytes) -> Receipt:
    """Strictly decode receipt bytes.

    :raises ReceiptCorrupt: reasons `too_large`, `not_utf8`, `not_json` (including truncation),
        `duplicate_key`, `not_an_object`, `missing_field`, `unknown_field`,
        `bad_schema_version`, `bad_<field>`. The message never contains the bytes.
    """
    if len(data) > RECEIPT_MAX_BYTES:
        raise _corrupt("too_large")
    document, reason = _parse_json(data)
    if reason is not None:
        raise _corrupt(reason)
    if not isinstance(document, dict):
        raise _corrupt("not_an_object")
    keys = set(document)
    if not keys >= _FIELDS:
        raise _corrupt("missing_field")
    if keys != _FIELDS:
        raise _corrupt("unknown_field")
    if not _plain_int(document["schema_version"], 1, 1):
        raise _corrupt("bad_schema_version")
    outcome_text = document["outcome"]
    if not isinstance(outcome_text, str) or outcome_text not in _OUTCOMES:
        raise _corrupt("bad_outcome")
    token = _secret_or_none(document["callback_token"])
    if token is None:
        raise _corrupt("bad_callback_token")
    return Receipt(
        run_id=_id_field(document, "run_id"),
        attempt_id=_id_field(document, "attempt_id"),
        executor_started_at_ms=_int_field(document, "executor_started_at_ms", 0, _INT64_MAX),
        callback_sequence=_int_field(document, "callback_sequence", 1, _INT64_MAX),
        outcome=CompletionOutcome(outcome_text),
        exit_code=_int_field(document, "exit_code", _INT32_MIN, _INT32_MAX),
        finished_at_ms=_int_field(document, "finished_at_ms", 0, _INT64_MAX),
        callback_token=token,
    )


def _id_field(document: dict[str, object], name: str) -> str:
    value = document[name]
    if not isinstance(value, str) or PORTABLE_ID_RE.fullmatch(value) is None:
        raise _corrupt(f"bad_{name}")
    return value


def _int_field(document: dict[str, object], name: str, low: int, high: int) -> int:
    value = document[name]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        # bool is an int in Python; a `true` in a receipt is not a sequence number.
        raise _corrupt(f"bad_{name}")
    return value


def _secret_or_none(value: object) -> Secret | None:
    if not isinstance(value, str):
        return None
    try:
        return Secret.of(value, "callback_token")
    except ValueError:
        return None


# -- the file store ---------------------------------------------------------------------------


def _private_directory_reason(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "directory_is_symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "not_a_directory"
    if info.st_uid != os.geteuid():
        return "directory_foreign_owner"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return "directory_mode"
    return None


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as error:
        # §3.9 F-6: a file system without directory fsync keeps restart consistency; power-loss
        # durability is then best effort.
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


class CompletionReceiptStore:
    """Receipts under one private directory (`0700`, files `0600`), addressed by Attempt ID.

    Read and delete are the ports of the Reconciler (read) and the Coordinator / retention
    (delete, §3.12 step 4, §3.14); `publish` is the launch wrapper's. The store holds no open
    file, timer or cache: every call goes to the file system (a receipt may appear at any time,
    written by a wrapper in another process).
    """

    __slots__ = ("_root",)

    def __init__(self, root: Path | str) -> None:
        path = Path(root)
        if not path.is_absolute():
            # A relative root would follow the process's cwd (the wrapper runs elsewhere).
            raise ValueError("receipt directory must be an absolute path")
        self._root = path

    def __repr__(self) -> str:
        return f"CompletionReceiptStore({str(self._root)!r})"

    @property
    def root(self) -> Path:
        return self._root

    # -- directory ----------------------------------------------------------------------------

    def ensure_directory(self) -> None:
        """Create the directory with mode `0700` when missing (the parent must exist); refuse
        a symlink, a non-directory, another owner or any group/other permission bit.

        :raises ReceiptStoreError: `RECEIPT_PERMISSIONS` or `RECEIPT_WRITE_FAILED`.
        """
        failed: str | None = None
        try:
            os.mkdir(self._root, 0o700)
            # mkdir's mode is masked by the umask; 0700 must hold whatever the umask is.
            os.chmod(self._root, 0o700, follow_symlinks=False)
        except FileExistsError:
            pass
        except OSError:
            failed = "mkdir_failed"
        if failed is not None:
            raise ReceiptWriteError(ReceiptErrorCode.RECEIPT_WRITE_FAILED, failed)
        self.check_directory(ReceiptStoreError)

    def check_directory(self, error: type[ReceiptStoreError] = ReceiptReadError) -> None:
        """Verify the directory is private (F-1 rules); raise `error` (`RECEIPT_PERMISSIONS`,
        or `RECEIPT_READ_FAILED` when it cannot be examined)."""
        code = ReceiptErrorCode.RECEIPT_PERMISSIONS
        reason: str | None
        try:
            info = os.lstat(self._root)
        except FileNotFoundError:
            reason = "directory_missing"
        except OSError:
            code, reason = ReceiptErrorCode.RECEIPT_READ_FAILED, "directory_stat_failed"
        else:
            reason = _private_directory_reason(info)
        if reason is not None:
            raise error(code, reason)

    def _path(self, attempt_id: str, error: type[ReceiptStoreError]) -> Path:
        if not _portable(attempt_id):
            # §0.4: only a portable identity may name a file; anything else could widen it.
            raise error(ReceiptErrorCode.RECEIPT_ATTEMPT_ID_INVALID, "attempt_id")
        return self._root / f"{attempt_id}{_SUFFIX}"

    # -- read ---------------------------------------------------------------------------------

    def read(self, attempt_id: str) -> Receipt | None:
        """The receipt of `attempt_id`, or None when there is none (§3.11 step 1).

        The content's own run/attempt ids are *not* compared here: that is RV-1, the
        authenticator's job, so a misplaced receipt is a conflict and not an absence.

        :raises ReceiptReadError: `RECEIPT_READ_FAILED` (I/O), `RECEIPT_PERMISSIONS` (directory
            or file not private, a symlink, another owner), `RECEIPT_ATTEMPT_ID_INVALID`.
        :raises ReceiptCorrupt: the file is not a well-formed receipt.
        """
        path = self._path(attempt_id, ReceiptReadError)
        self.check_directory(ReceiptReadError)
        data, failure = _read_private_file(path)
        if failure is not None:
            raise failure
        if data is None:
            return None
        return decode_receipt(data)

    # -- delete -------------------------------------------------------------------------------

    def delete(self, attempt_id: str) -> None:
        """Delete the receipt of `attempt_id`; a missing receipt is success (idempotent,
        §3.14). The directory is fsynced so a deletion that returned stays deleted.

        :raises ReceiptDeleteError: `RECEIPT_DELETE_FAILED`, `RECEIPT_PERMISSIONS`,
            `RECEIPT_ATTEMPT_ID_INVALID`.
        """
        path = self._path(attempt_id, ReceiptDeleteError)
        self.check_directory(ReceiptDeleteError)
        failed = False
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError:
            failed = True
        if failed:
            raise ReceiptDeleteError(ReceiptErrorCode.RECEIPT_DELETE_FAILED, "unlink_failed")
        try:
            _fsync_directory(self._root)
        except OSError:
            failed = True
        if failed:
            raise ReceiptDeleteError(ReceiptErrorCode.RECEIPT_DELETE_FAILED, "fsync_failed")

    # -- publish ------------------------------------------------------------------------------

    def publish(self, receipt: Receipt) -> None:
        """Publish `receipt` atomically under its attempt id (module docstring, EX-2).

        :raises ReceiptWriteError: `RECEIPT_EXISTS` (a receipt for this Attempt is already
            published; it is left untouched), `RECEIPT_PERMISSIONS`, `RECEIPT_WRITE_FAILED`.
        """
        final = self._path(receipt.attempt_id, ReceiptWriteError)
        self.check_directory(ReceiptWriteError)
        data = encode_receipt(receipt)
        temporary = self._root / f".{receipt.attempt_id}.{secrets.token_hex(8)}{_TMP_SUFFIX}"
        failure = _write_temporary(temporary, data)
        if failure is None:
            failure = _link_final(temporary, final)
        _unlink_quietly(temporary)
        if failure is not None:
            raise failure
        try:
            _fsync_directory(self._root)
        except OSError:
            failure = ReceiptWriteError(ReceiptErrorCode.RECEIPT_WRITE_FAILED, "fsync_directory")
        if failure is not None:
            raise failure

    def discard_temporaries(self) -> int:
        """Remove leftover temporaries of interrupted publishes (never published, so no fact is
        lost; they hold a token, so they should not linger). Returns how many were removed."""
        self.check_directory(ReceiptWriteError)
        removed = 0
        for entry in os.scandir(self._root):
            if entry.name.startswith(".") and entry.name.endswith(_TMP_SUFFIX):
                _unlink_quietly(Path(entry.path))
                removed += 1
        return removed


def _read_private_file(path: Path) -> tuple[bytes | None, ReceiptReadError | None]:
    """(bytes, None), (None, None) when absent, or (None, error). Never raises."""
    try:
        # O_NOFOLLOW: a symlink planted at a receipt name is refused (ELOOP), not followed.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, None
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None, ReceiptReadError(ReceiptErrorCode.RECEIPT_PERMISSIONS, "file_is_symlink")
        return None, ReceiptReadError(ReceiptErrorCode.RECEIPT_READ_FAILED, "open_failed")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, _corrupt("not_regular_file")
        if info.st_uid != os.geteuid():
            return None, ReceiptReadError(ReceiptErrorCode.RECEIPT_PERMISSIONS, "file_owner")
        if stat.S_IMODE(info.st_mode) & 0o077:
            return None, ReceiptReadError(ReceiptErrorCode.RECEIPT_PERMISSIONS, "file_mode")
        chunks: list[bytes] = []
        size = 0
        while size <= RECEIPT_MAX_BYTES:
            chunk = os.read(fd, RECEIPT_MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), None
    except OSError:
        return None, ReceiptReadError(ReceiptErrorCode.RECEIPT_READ_FAILED, "read_failed")
    finally:
        os.close(fd)


def _write_temporary(path: Path, data: bytes) -> ReceiptWriteError | None:
    try:
        fd = os.open(
            path,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return ReceiptWriteError(ReceiptErrorCode.RECEIPT_WRITE_FAILED, "create_temporary")
    try:
        # The O_CREAT mode is masked by the umask; 0600 exactly, whatever the umask is.
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError:
        return ReceiptWriteError(ReceiptErrorCode.RECEIPT_WRITE_FAILED, "write_temporary")
    finally:
        os.close(fd)
    return None


def _link_final(temporary: Path, final: Path) -> ReceiptWriteError | None:
    try:
        os.link(temporary, final, follow_symlinks=False)
    except FileExistsError:
        return ReceiptWriteError(ReceiptErrorCode.RECEIPT_EXISTS, "already_published")
    except OSError:
        return ReceiptWriteError(ReceiptErrorCode.RECEIPT_WRITE_FAILED, "link_failed")
    return None


def _unlink_quietly(path: Path) -> None:
    # Best effort: a leftover temporary is never read as a receipt (dot name, .tmp).
    with contextlib.suppress(OSError):
        os.unlink(path)


# -- the authenticator ------------------------------------------------------------------------


class ReceiptConflict(enum.StrEnum):
    """Why a receipt does not validate against the record (§3.11 RV-1..RV-5), first failing
    rule wins. `rule` names the SPEC rule; `check` is what the Reconciler is told."""

    RUN_ATTEMPT_MISMATCH = "run_attempt_mismatch"  # RV-1
    START_TIME_MISSING = "start_time_missing"  # RV-2: the record has no executor start time
    START_TIME_MISMATCH = "start_time_mismatch"  # RV-2
    CALLBACK_PAIR_MISSING = "callback_pair_missing"  # RV-3: an older record cannot authenticate
    SEQUENCE_MISMATCH = "sequence_mismatch"  # RV-4
    TOKEN_MISMATCH = "token_mismatch"  # noqa: S105 (RV-5; a code, not a secret)

    @property
    def rule(self) -> str:
        return _RULES[self]

    @property
    def check(self) -> ReceiptCheck:
        """The port's answer to the Reconciler (§3.11, EX-5): a receipt that contradicts the
        record's facts (RV-1, RV-2, RV-4) is a `CONFLICT`; one that cannot be authenticated
        (RV-3: the record has no callback pair; RV-5: the token's digest differs) is
        `UNAUTHENTICATED`. The kernel maps these to `receipt_conflict` /
        `receipt_unauthenticated` (`kernel.worker.reconciler.after_receipt`)."""
        if self in (ReceiptConflict.CALLBACK_PAIR_MISSING, ReceiptConflict.TOKEN_MISMATCH):
            return ReceiptCheck.UNAUTHENTICATED
        return ReceiptCheck.CONFLICT


_RULES: Final = {
    ReceiptConflict.RUN_ATTEMPT_MISMATCH: "RV-1",
    ReceiptConflict.START_TIME_MISSING: "RV-2",
    ReceiptConflict.START_TIME_MISMATCH: "RV-2",
    ReceiptConflict.CALLBACK_PAIR_MISSING: "RV-3",
    ReceiptConflict.SEQUENCE_MISMATCH: "RV-4",
    ReceiptConflict.TOKEN_MISMATCH: "RV-5",
}


@dataclass(frozen=True, slots=True)
class ReceiptRecordFacts:
    """The persisted facts a receipt is validated against (§3.3: the journal record's Run and
    Attempt, `executor_started_at_ms` and the callback pair). Fields the record lacks are None;
    an incomplete pair is kept as given and simply fails RV-3."""

    run_id: str
    attempt_id: str
    executor_started_at_ms: int | None
    callback_sequence: int | None
    callback_token_sha256: str | None

    def __post_init__(self) -> None:
        if not _portable(self.run_id) or not _portable(self.attempt_id):
            raise ValueError("record facts: invalid (bad_id)")
        if self.executor_started_at_ms is not None and not _plain_int(
            self.executor_started_at_ms, 0, _INT64_MAX
        ):
            raise ValueError("record facts: invalid (bad_executor_started_at_ms)")
        if self.callback_sequence is not None and not _plain_int(
            self.callback_sequence, 1, _INT64_MAX
        ):
            raise ValueError("record facts: invalid (bad_callback_sequence)")
        if self.callback_token_sha256 is not None and not (
            isinstance(self.callback_token_sha256, str)
            and is_sha256_hex(self.callback_token_sha256)
        ):
            raise ValueError("record facts: invalid (bad_callback_token_sha256)")


@dataclass(frozen=True, slots=True)
class ReceiptValidation:
    """`ok` or the first conflict; carries no receipt content (S-1)."""

    conflict: ReceiptConflict | None = None

    @property
    def ok(self) -> bool:
        return self.conflict is None


_VALID: Final = ReceiptValidation()


class ReceiptAuthenticator:
    """Validates a receipt against the record (§3.11 step 2, RV-1..RV-5; §2.1 step 1).

    Stateless and pure (no I/O). RV-5 digests the receipt token with `kernel.identity.
    token_digest` and compares the two 64-hex digests with `digests_equal`
    (`hmac.compare_digest`): the comparison time does not depend on where they differ.
    """

    __slots__ = ()

    def validate(self, receipt: Receipt, record: ReceiptRecordFacts) -> ReceiptValidation:
        # RV-1
        if receipt.run_id != record.run_id or receipt.attempt_id != record.attempt_id:
            return ReceiptValidation(ReceiptConflict.RUN_ATTEMPT_MISMATCH)
        # RV-2: a record without the start time cannot validate any receipt.
        if record.executor_started_at_ms is None:
            return ReceiptValidation(ReceiptConflict.START_TIME_MISSING)
        if receipt.executor_started_at_ms != record.executor_started_at_ms:
            return ReceiptValidation(ReceiptConflict.START_TIME_MISMATCH)
        # RV-3: both halves of the pair, or the record is an older one that cannot authenticate.
        if record.callback_sequence is None or record.callback_token_sha256 is None:
            return ReceiptValidation(ReceiptConflict.CALLBACK_PAIR_MISSING)
        # RV-4
        if receipt.callback_sequence != record.callback_sequence:
            return ReceiptValidation(ReceiptConflict.SEQUENCE_MISMATCH)
        # RV-5: constant time over the 32-byte digests (as 64 hex characters).
        if not digests_equal(receipt.token_sha256(), record.callback_token_sha256):
            return ReceiptValidation(ReceiptConflict.TOKEN_MISMATCH)
        return _VALID
