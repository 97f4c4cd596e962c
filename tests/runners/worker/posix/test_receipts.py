"""Completion receipts written by the real launch wrapper, read back by the store and validated
by the authenticator (issue 6 item 6; SPEC §2.1, §3.11 RV-1..RV-5, §3.12 step 4, §3.14).

RV tests start from a receipt the wrapper really published (module fixture) and change one
persisted fact each: one test per rule.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.identity import Secret, token_digest
from kernel.specs.states import CompletionOutcome
from kernel.worker.reconciler import ReceiptCheck
from runners.worker.posix.executor import PersistedExecutionInspector
from runners.worker.posix.receipts import (
    RECEIPT_MAX_BYTES,
    CompletionReceiptStore,
    Receipt,
    ReceiptAuthenticator,
    ReceiptConflict,
    ReceiptCorrupt,
    ReceiptDeleteError,
    ReceiptErrorCode,
    ReceiptReadError,
    ReceiptRecordFacts,
    ReceiptStoreError,
    ReceiptWriteError,
    decode_receipt,
    encode_receipt,
)
from tests.support.posix_processes import (
    RUN_ID,
    SEQUENCE,
    STARTED_AT_MS,
    Launcher,
    exit_with,
    fresh_token,
)

AUTH = ReceiptAuthenticator()


@dataclasses.dataclass(frozen=True)
class Published:
    """A receipt the wrapper published for a real command, and the journal's facts for it."""

    store: CompletionReceiptStore
    receipt: Receipt
    facts: ReceiptRecordFacts
    token: Secret


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    launcher = Launcher(tmp_path_factory.mktemp("published"))
    try:
        token = fresh_token()
        spec = launcher.spec(exit_with(0), "att-published", token)
        handle = launcher.start(spec)
        assert launcher.finish(handle) == 0
        receipt = launcher.receipts.read("att-published")
        assert receipt is not None
        yield Published(launcher.receipts, receipt, launcher.facts(spec), token)
    finally:
        launcher.close()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


# -- the wrapper's receipt --------------------------------------------------------------------


def test_the_wrapper_publishes_a_receipt_the_authenticator_accepts(published: Published) -> None:
    receipt = published.receipt
    assert receipt.run_id == RUN_ID
    assert receipt.attempt_id == "att-published"
    assert receipt.executor_started_at_ms == STARTED_AT_MS  # D-12: the handle's value
    assert receipt.callback_sequence == SEQUENCE
    assert receipt.outcome is CompletionOutcome.SUCCEEDED
    assert receipt.exit_code == 0
    assert receipt.finished_at_ms > 0
    assert receipt.callback_token == published.token
    assert AUTH.validate(receipt, published.facts).ok
    # The kernel's L3 view carries only the digest.
    local = receipt.to_local_receipt()
    assert local.token_sha256 == token_digest(published.token.reveal())
    assert local.started_at_ms == STARTED_AT_MS


def test_a_failing_command_has_a_failed_receipt_with_its_exit_code(launcher: Launcher) -> None:
    spec = launcher.spec(exit_with(3), "att-exit-3")
    handle = launcher.start(spec)
    assert launcher.finish(handle) == 0
    receipt = launcher.receipts.read("att-exit-3")
    assert receipt is not None
    assert receipt.outcome is CompletionOutcome.FAILED
    assert receipt.exit_code == 3
    assert AUTH.validate(receipt, launcher.facts(spec)).ok
    assert PersistedExecutionInspector().inspect(handle.text) == "exited"


def test_receipts_are_0600_in_a_0700_directory_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)  # would give the directory 0500 and the file 0400
    try:
        launcher = Launcher(tmp_path)
        try:
            handle = launcher.start(launcher.spec(exit_with(0), "att-modes"))
            assert launcher.finish(handle) == 0
        finally:
            launcher.close()
    finally:
        os.umask(old)
    root = launcher.receipts.root
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o700
    names = os.listdir(root)
    assert names == ["att-modes.json"]  # no temporary left behind
    info = os.lstat(root / "att-modes.json")
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    assert info.st_nlink == 1  # the temporary's link is gone


# -- RV-1..RV-5 (one test per rule) -------------------------------------------------------------


@pytest.mark.spec("INBOX-30")
@pytest.mark.parametrize(
    "changes",
    [{"run_id": "run-other"}, {"attempt_id": "att-other"}],
    ids=["run", "attempt"],
)
def test_rv1_another_run_or_attempt_is_a_conflict(
    published: Published, changes: dict[str, str]
) -> None:
    facts = dataclasses.replace(published.facts, **changes)  # type: ignore[arg-type]
    result = AUTH.validate(published.receipt, facts)
    assert result.conflict is ReceiptConflict.RUN_ATTEMPT_MISMATCH
    assert result.conflict.rule == "RV-1"
    assert result.conflict.check is ReceiptCheck.CONFLICT


@pytest.mark.spec("INBOX-30")
def test_rv2_another_or_a_missing_start_time_is_a_conflict(published: Published) -> None:
    later = dataclasses.replace(published.facts, executor_started_at_ms=STARTED_AT_MS + 1)
    result = AUTH.validate(published.receipt, later)
    assert result.conflict is ReceiptConflict.START_TIME_MISMATCH
    assert result.conflict.check is ReceiptCheck.CONFLICT
    missing = dataclasses.replace(published.facts, executor_started_at_ms=None)
    result = AUTH.validate(published.receipt, missing)
    assert result.conflict is ReceiptConflict.START_TIME_MISSING
    assert result.conflict.rule == "RV-2"


@pytest.mark.spec("INBOX-30", "INBOX-31")
@pytest.mark.parametrize(
    "changes",
    [
        {"callback_sequence": None, "callback_token_sha256": None},
        {"callback_sequence": None},
        {"callback_token_sha256": None},
    ],
    ids=["no-pair", "no-sequence", "no-digest"],
)
def test_rv3_a_record_without_the_callback_pair_never_authenticates(
    published: Published, changes: dict[str, None]
) -> None:
    facts = dataclasses.replace(published.facts, **changes)  # type: ignore[arg-type]
    result = AUTH.validate(published.receipt, facts)
    assert not result.ok
    assert result.conflict is ReceiptConflict.CALLBACK_PAIR_MISSING
    assert result.conflict.rule == "RV-3"
    assert result.conflict.check is ReceiptCheck.UNAUTHENTICATED


@pytest.mark.spec("INBOX-30")
def test_rv4_another_callback_sequence_is_a_conflict(published: Published) -> None:
    facts = dataclasses.replace(published.facts, callback_sequence=SEQUENCE + 1)
    result = AUTH.validate(published.receipt, facts)
    assert result.conflict is ReceiptConflict.SEQUENCE_MISMATCH
    assert result.conflict.rule == "RV-4"
    assert result.conflict.check is ReceiptCheck.CONFLICT


@pytest.mark.spec("INBOX-30")
def test_rv5_another_token_is_a_conflict(published: Published) -> None:
    forged = dataclasses.replace(published.receipt, callback_token=fresh_token())
    result = AUTH.validate(forged, published.facts)
    assert result.conflict is ReceiptConflict.TOKEN_MISMATCH
    assert result.conflict.rule == "RV-5"
    assert result.conflict.check is ReceiptCheck.UNAUTHENTICATED
    # The journal's digest itself is no capability: a receipt cannot carry it as its token
    # (64 hex characters *are* token-shaped), but its digest is not the digest.
    digest = published.facts.callback_token_sha256
    assert digest is not None
    replayed = dataclasses.replace(published.receipt, callback_token=Secret.of(digest, "t"))
    assert AUTH.validate(replayed, published.facts).conflict is ReceiptConflict.TOKEN_MISMATCH


def test_the_first_failing_rule_wins(published: Published) -> None:
    everything_wrong = ReceiptRecordFacts("run-x", "att-x", None, None, None)
    assert AUTH.validate(published.receipt, everything_wrong).conflict is (
        ReceiptConflict.RUN_ATTEMPT_MISMATCH
    )


def test_a_misplaced_receipt_is_read_and_then_a_conflict_not_an_absence(
    published: Published, tmp_path: Path
) -> None:
    store = CompletionReceiptStore(tmp_path / "r")
    store.ensure_directory()
    store.publish(published.receipt)
    os.link(store.root / "att-published.json", store.root / "att-elsewhere.json")
    moved = store.read("att-elsewhere")
    assert moved is not None
    facts = dataclasses.replace(published.facts, attempt_id="att-elsewhere")
    assert AUTH.validate(moved, facts).conflict is ReceiptConflict.RUN_ATTEMPT_MISMATCH


# -- corruption and read errors ---------------------------------------------------------------


def _plant(store: CompletionReceiptStore, attempt_id: str, data: bytes) -> Path:
    path = store.root / f"{attempt_id}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def _valid_document(published: Published) -> dict[str, object]:
    document: dict[str, object] = json.loads(encode_receipt(published.receipt))
    return document


@pytest.fixture
def store(tmp_path: Path) -> CompletionReceiptStore:
    store = CompletionReceiptStore(tmp_path / "receipts")
    store.ensure_directory()
    return store


@pytest.mark.spec("INBOX-44")
def test_a_truncated_receipt_is_a_typed_corruption_and_stays(
    published: Published, store: CompletionReceiptStore
) -> None:
    data = encode_receipt(published.receipt)
    path = _plant(store, "att-truncated", data[: len(data) // 2])
    with pytest.raises(ReceiptCorrupt) as raised:
        store.read("att-truncated")
    error = raised.value
    assert isinstance(error, ReceiptReadError)  # recovery: receipt_read_failed, no probe
    assert error.code is ReceiptErrorCode.RECEIPT_CORRUPT
    assert error.reason == "not_json"
    # Never silently deleted, and nothing of the file in the error or its context (S-1).
    assert path.read_bytes() == data[: len(data) // 2]
    assert error.__context__ is None
    assert error.__cause__ is None
    for text in (str(error), repr(error)):
        assert published.token.reveal() not in text
        assert published.token.reveal()[:16] not in text


def _corrupt_documents(published: Published) -> list[tuple[str, bytes, str]]:
    base = _valid_document(published)

    def variant(**changes: object) -> bytes:
        return json.dumps({**base, **changes}).encode()

    without_exit = {k: v for k, v in base.items() if k != "exit_code"}
    duplicated = encode_receipt(published.receipt)[:-2] + b',"exit_code":1}'
    return [
        ("empty", b"", "not_json"),
        ("not-utf8", b"\xff\xfe", "not_utf8"),
        ("array", b"[]", "not_an_object"),
        ("missing", json.dumps(without_exit).encode(), "missing_field"),
        ("extra", variant(note="x"), "unknown_field"),
        ("duplicate", duplicated, "duplicate_key"),
        ("schema", variant(schema_version=2), "bad_schema_version"),
        ("outcome", variant(outcome="lost"), "bad_outcome"),
        ("bool-sequence", variant(callback_sequence=True), "bad_callback_sequence"),
        ("zero-sequence", variant(callback_sequence=0), "bad_callback_sequence"),
        ("float-time", variant(finished_at_ms=1.5), "bad_finished_at_ms"),
        ("path-id", variant(attempt_id="../x"), "bad_attempt_id"),
        ("short-token", variant(callback_token="abc"), "bad_callback_token"),  # noqa: S106
        ("too-large", b" " * (RECEIPT_MAX_BYTES + 1), "too_large"),
    ]


def test_every_kind_of_malformed_receipt_is_reported_never_accepted(
    published: Published, store: CompletionReceiptStore
) -> None:
    for number, (label, data, reason) in enumerate(_corrupt_documents(published)):
        attempt_id = f"att-bad-{number}"
        path = _plant(store, attempt_id, data)
        with pytest.raises(ReceiptCorrupt) as raised:
            store.read(attempt_id)
        assert raised.value.reason == reason, label
        assert raised.value.__context__ is None, label
        assert path.exists(), label
        with pytest.raises(ReceiptCorrupt):
            decode_receipt(data)


def test_a_receipt_with_loose_permissions_or_a_symlink_is_refused(
    published: Published, store: CompletionReceiptStore, tmp_path: Path
) -> None:
    data = encode_receipt(published.receipt)
    loose = _plant(store, "att-loose", data)
    loose.chmod(0o644)
    with pytest.raises(ReceiptReadError) as raised:
        store.read("att-loose")
    assert raised.value.code is ReceiptErrorCode.RECEIPT_PERMISSIONS

    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(data)
    elsewhere.chmod(0o600)
    (store.root / "att-link.json").symlink_to(elsewhere)
    with pytest.raises(ReceiptReadError) as raised:
        store.read("att-link")
    assert raised.value.code is ReceiptErrorCode.RECEIPT_PERMISSIONS
    assert raised.value.reason == "file_is_symlink"

    (store.root / "att-dir.json").mkdir()
    with pytest.raises(ReceiptCorrupt) as corrupt:
        store.read("att-dir")
    assert corrupt.value.reason == "not_regular_file"


def test_a_public_or_symlinked_directory_is_refused(tmp_path: Path) -> None:
    public = tmp_path / "public"
    public.mkdir(mode=0o755)
    public.chmod(0o755)
    with pytest.raises(ReceiptStoreError) as raised:
        CompletionReceiptStore(public).ensure_directory()
    assert raised.value.code is ReceiptErrorCode.RECEIPT_PERMISSIONS
    with pytest.raises(ReceiptReadError):
        CompletionReceiptStore(public).read("att-1")

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    alias = tmp_path / "alias"
    alias.symlink_to(private)
    with pytest.raises(ReceiptReadError) as raised:
        CompletionReceiptStore(alias).read("att-1")
    assert raised.value.reason == "directory_is_symlink"
    with pytest.raises(ValueError, match="absolute"):
        CompletionReceiptStore("relative/receipts")


def test_an_io_error_while_reading_is_a_typed_read_error(
    published: Published, store: CompletionReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plant(store, "att-eio", encode_receipt(published.receipt))

    def failing_read(fd: int, size: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "read", failing_read)
    with pytest.raises(ReceiptReadError) as raised:
        store.read("att-eio")
    assert raised.value.code is ReceiptErrorCode.RECEIPT_READ_FAILED
    assert not isinstance(raised.value, ReceiptCorrupt)


@pytest.mark.parametrize("attempt_id", ["../escape", ".hidden", "a/b", "", "x" * 37, "a\n"])
def test_only_a_portable_attempt_id_names_a_receipt(
    store: CompletionReceiptStore, attempt_id: str
) -> None:
    for call in (store.read, store.delete):
        with pytest.raises(ReceiptStoreError) as raised:
            call(attempt_id)
        assert raised.value.code is ReceiptErrorCode.RECEIPT_ATTEMPT_ID_INVALID


# -- publish and delete -------------------------------------------------------------------------


def test_a_missing_receipt_reads_as_none_and_delete_is_idempotent(
    published: Published, store: CompletionReceiptStore
) -> None:
    assert store.read("att-published") is None
    store.delete("att-published")  # missing is success (§3.14)
    store.publish(published.receipt)
    assert store.read("att-published") == published.receipt
    store.delete("att-published")
    assert store.read("att-published") is None
    store.delete("att-published")
    assert os.listdir(store.root) == []


def test_a_failed_delete_is_typed_and_keeps_the_receipt(
    published: Published, store: CompletionReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.publish(published.receipt)

    def failing_unlink(path: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "unlink", failing_unlink)
    with pytest.raises(ReceiptDeleteError) as raised:
        store.delete("att-published")
    assert raised.value.code is ReceiptErrorCode.RECEIPT_DELETE_FAILED
    monkeypatch.undo()
    assert store.read("att-published") == published.receipt


def test_a_published_receipt_is_immutable(
    published: Published, store: CompletionReceiptStore
) -> None:
    store.publish(published.receipt)
    first = (store.root / "att-published.json").read_bytes()
    other = dataclasses.replace(published.receipt, exit_code=9, outcome=CompletionOutcome.FAILED)
    with pytest.raises(ReceiptWriteError) as raised:
        store.publish(other)
    assert raised.value.code is ReceiptErrorCode.RECEIPT_EXISTS
    assert (store.root / "att-published.json").read_bytes() == first
    assert os.listdir(store.root) == ["att-published.json"]


@pytest.mark.parametrize("failing", ["write", "fsync", "link"])
def test_a_failed_publish_leaves_no_receipt_and_no_temporary(
    published: Published,
    store: CompletionReceiptStore,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    def enospc(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, failing, enospc)
    with pytest.raises(ReceiptWriteError) as raised:
        store.publish(published.receipt)
    assert raised.value.code is ReceiptErrorCode.RECEIPT_WRITE_FAILED
    monkeypatch.undo()
    assert os.listdir(store.root) == []
    assert store.read("att-published") is None


def test_leftover_temporaries_are_never_read_and_can_be_discarded(
    published: Published, store: CompletionReceiptStore
) -> None:
    leftover = store.root / ".att-published.0123456789abcdef.tmp"
    leftover.write_bytes(encode_receipt(published.receipt))
    assert store.read("att-published") is None
    assert store.discard_temporaries() == 1
    assert os.listdir(store.root) == []


# -- S-1 ----------------------------------------------------------------------------------------


@pytest.mark.spec("INBOX-44")
def test_no_receipt_value_or_error_shows_the_token(published: Published) -> None:
    raw = published.token.reveal()
    values: list[object] = [
        published.receipt,
        published.facts,
        published.store,
        AUTH.validate(published.receipt, published.facts),
        AUTH.validate(
            dataclasses.replace(published.receipt, callback_token=fresh_token()), published.facts
        ),
        published.receipt.to_local_receipt(),
    ]
    for value in values:
        assert raw not in repr(value)
        assert raw not in str(value)
    with pytest.raises(ValueError, match="receipt: invalid") as raised:
        dataclasses.replace(published.receipt, attempt_id=raw + "/")
    assert raw not in str(raised.value)
    # The file itself does hold the token: it is the capability RV-5 checks (decision EX-1).
    assert raw.encode() in encode_receipt(published.receipt)
