"""The local application's launcher: the Worker's POSIX executor, launch wrapper and receipts,
used as they are (one implementation), plus the bookkeeping a local runtime needs (SPEC §1.7,
§2.1, Appendix D-1; ADR-0380 §3).

Files live beside the database (`LocalLayout`): `<db>.d/` (0700) holds `receipts/` (0700, the
wrapper publishes one 0600 receipt per Attempt), `logs/` (each Attempt's stdout and stderr, kept
until slow-cycle cleanup deletes it as the kernel's `log_cleanup_allowed` says: LR-13) and
`spawns.log`, the launcher registration: one fsynced line per start call, written *before* the
spawn (D-1: a `starting` Attempt without it never began; the kill matrix counts it to prove no
Attempt was ever spawned twice).

Completion notifications are in memory (O-2 step 1): the launcher remembers the Attempts it
started or adopted, and `finished()` names those whose process has ended (its own children are
reaped; an adopted one, started by an earlier process, is finished when its receipt exists).
Nothing here keeps a timer or a thread (FP-1).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from kernel import CancelReason, CompletionOutcome, LocalReceipt, Secret
from kernel.specs import StopResult
from kernel.task import TaskExecution
from runners.worker.posix.adapters import SpawnJournal
from runners.worker.posix.executor import (
    DurableHandle,
    HandleError,
    InspectionResult,
    LaunchSpec,
    PersistedExecutionController,
    PersistedExecutionInspector,
    PosixExecutor,
    ProbeFailed,
    SpawnAmbiguous,
    SpawnRefused,
    StopFailed,
)
from runners.worker.posix.receipts import (
    CompletionReceiptStore,
    Receipt,
    ReceiptStoreError,
)

__all__ = [
    "LaunchAmbiguous",
    "LaunchRefused",
    "Launched",
    "LocalLauncher",
    "LocalLayout",
]

#: The identity journal beside `spawns.log`: `<attempt_id> <handle>` per started wrapper.
IDENTITY_LOG = "identities.log"

#: An Attempt's log is `<attempt_id>.log` in `LocalLayout.logs`.
LOG_SUFFIX = ".log"

#: Exit code a refused spawn is reported with: the shell's "command not found" [decision LR-3].
REFUSED_EXIT_CODE = 127


@dataclass(frozen=True, slots=True)
class LocalLayout:
    """Where the local application keeps its files, beside the database file."""

    db: Path

    @property
    def root(self) -> Path:
        return self.db.with_name(self.db.name + ".d")

    @property
    def receipts(self) -> Path:
        return self.root / "receipts"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log_path(self, attempt_id: str) -> Path:
        return self.logs / f"{attempt_id}{LOG_SUFFIX}"

    def ensure(self) -> None:
        """Create the private directories (0700), refusing a path that is not a directory."""
        for directory in (self.root, self.logs):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
        CompletionReceiptStore(self.receipts).ensure_directory()


@dataclass(frozen=True, slots=True)
class Launched:
    handle: str


@dataclass(frozen=True, slots=True)
class LaunchRefused:
    """The command certainly never ran; a refusal receipt was published (LR-3)."""

    code: str


@dataclass(frozen=True, slots=True)
class LaunchAmbiguous:
    """The command may have started; nobody will start it again (EX-7, fail closed)."""

    code: str


@dataclass(slots=True)
class _Tracked:
    run_id: str
    attempt_id: str
    handle: DurableHandle | None
    own: bool = field(default=True)
    #: The process is known to have ended: reported by every `finished()` until forgotten.
    ended: bool = field(default=False)


def _stems_page(directory: Path, suffix: str, limit: int, after: str | None) -> list[str]:
    """At most `limit` names of the non-hidden, non-directory `*<suffix>` entries of
    `directory`, without the suffix, in name order after `after` (one scan of the directory)."""
    names = sorted(
        stem
        for entry in os.scandir(directory)
        if entry.name.endswith(suffix)
        and not entry.name.startswith(".")
        and not entry.is_dir(follow_symlinks=False)
        for stem in (entry.name[: -len(suffix)],)
        if stem and (after is None or stem > after)
    )
    return names[:limit]


class LocalLauncher:
    """Start, watch, stop and inspect local Attempts (module docstring)."""

    def __init__(self, layout: LocalLayout, *, executor: PosixExecutor | None = None) -> None:
        self.layout = layout
        self.receipts = CompletionReceiptStore(layout.receipts)
        self.spawns = SpawnJournal(layout.root)
        # [decision LR-9] Each wrapper's identity, durable before its command is sent.
        self.identities = SpawnJournal(layout.root, IDENTITY_LOG)
        self._executor = executor if executor is not None else PosixExecutor(self.receipts)
        self._inspector = PersistedExecutionInspector()
        self._controller = PersistedExecutionController()
        self._tracked: dict[str, _Tracked] = {}

    def __repr__(self) -> str:
        return f"LocalLauncher(tracked={len(self._tracked)})"

    # -- start ---------------------------------------------------------------------------------
    def launch(
        self,
        run_id: str,
        attempt_id: str,
        execution: TaskExecution,
        *,
        callback_sequence: int,
        token: Secret,
        started_at_ms: int,
    ) -> Launched | LaunchRefused | LaunchAmbiguous:
        """Register, then spawn, exactly once per call (the caller calls it once per L1)."""
        self.spawns.append(run_id, attempt_id)  # D-1: registration precedes the spawn
        try:
            spec = LaunchSpec(
                argv=execution.argv,
                run_id=run_id,
                attempt_id=attempt_id,
                callback_sequence=callback_sequence,
                callback_token=token,
                executor_started_at_ms=started_at_ms,
                cwd=execution.cwd,
                log_path=str(self.layout.log_path(attempt_id)),
                env=execution.env,
            )
        except ValueError:
            code = "SPEC_INVALID"
            return self._refused(
                run_id,
                attempt_id,
                code,
                callback_sequence=callback_sequence,
                token=token,
                started_at_ms=started_at_ms,
            )
        try:
            handle = self._executor.start(
                spec, on_identity=lambda found: self.identities.append(attempt_id, found.text)
            )
        except SpawnRefused as refused:
            return self._refused(
                run_id,
                attempt_id,
                refused.code,
                callback_sequence=callback_sequence,
                token=token,
                started_at_ms=started_at_ms,
            )
        except SpawnAmbiguous as ambiguous:
            return LaunchAmbiguous(ambiguous.code)
        self._tracked[attempt_id] = _Tracked(run_id, attempt_id, handle)
        return Launched(handle.text)

    def _refused(
        self,
        run_id: str,
        attempt_id: str,
        code: str,
        *,
        callback_sequence: int,
        token: Secret,
        started_at_ms: int,
    ) -> LaunchRefused:
        # The command never ran: say so with the Attempt's own capability, as a receipt, so that
        # L3 completes it `failed` now or startup recovery does after a crash [decision LR-3].
        receipt = Receipt(
            run_id=run_id,
            attempt_id=attempt_id,
            executor_started_at_ms=started_at_ms,
            callback_sequence=callback_sequence,
            outcome=CompletionOutcome.FAILED,
            exit_code=REFUSED_EXIT_CODE,
            finished_at_ms=started_at_ms,
            callback_token=token,
        )
        # Unpublished, the Attempt stays `starting` without a handle: startup recovery decides.
        with contextlib.suppress(ReceiptStoreError):
            self.receipts.publish(receipt)
        self._tracked[attempt_id] = _Tracked(run_id, attempt_id, None)
        return LaunchRefused(str(code))

    def adopt(self, run_id: str, attempt_id: str, handle_text: str | None) -> None:
        """Watch an Attempt started by an earlier process (startup recovery found it live, or
        its handle fact was lost): it is finished when its receipt exists."""
        try:
            handle = None if handle_text is None else DurableHandle.parse(handle_text)
        except HandleError:
            handle = None
        self._tracked[attempt_id] = _Tracked(run_id, attempt_id, handle, own=False)

    # -- completion notifications (O-2 step 1) -------------------------------------------------
    def finished(self) -> list[tuple[str, str]]:
        """`(run_id, attempt_id)` of tracked Attempts whose process ended or whose receipt is
        published, in start order, each reported again on every call until it is forgotten (so
        execution control can wait out the receipt grace, LR-4). Own children are reaped
        without blocking; an adopted one has ended when its receipt exists or its exact identity
        no longer runs."""
        done: list[tuple[str, str]] = []
        for tracked in self._tracked.values():
            if not tracked.ended:
                tracked.ended = self._has_ended(tracked)
            if tracked.ended:
                done.append((tracked.run_id, tracked.attempt_id))
        return done

    def _has_ended(self, tracked: _Tracked) -> bool:
        handle = tracked.handle
        if tracked.own and handle is not None and self._executor.owns(handle):
            return self._executor.wait(handle, 0) is not None
        if self._receipt_exists(tracked.attempt_id):
            return True
        if handle is None:
            return False  # nothing to inspect: only a receipt can say
        try:
            return self._inspector.inspect(handle.text) is not InspectionResult.RUNNING
        except ProbeFailed:
            return False  # unknown is not ended (fail closed); the next cycle looks again

    def forget(self, attempt_id: str) -> None:
        """The Attempt is settled (or needs startup recovery): stop watching it."""
        self._tracked.pop(attempt_id, None)

    @property
    def tracked(self) -> int:
        return len(self._tracked)

    def _receipt_exists(self, attempt_id: str) -> bool:
        return (self.layout.receipts / f"{attempt_id}.json").exists()

    # -- receipts --------------------------------------------------------------------------------
    def receipt(self, attempt_id: str) -> LocalReceipt | None:
        """The Attempt's receipt as the kernel sees it (token digested), or None.

        :raises ReceiptStoreError: unreadable or corrupt (never taken for absent).
        """
        found = self.receipts.read(attempt_id)
        return None if found is None else found.to_local_receipt()

    def receipt_sequence(self, attempt_id: str) -> int | None:
        found = self.receipts.read(attempt_id)
        return None if found is None else found.callback_sequence

    def delete_receipt(self, attempt_id: str) -> None:
        self.receipts.delete(attempt_id)

    def receipt_ids(self, limit: int, after: str | None = None) -> list[str]:
        """At most `limit` Attempt ids that have a receipt, in name order after `after` (a
        bounded page; the directory listing itself is one scan)."""
        return _stems_page(self.layout.receipts, ".json", limit, after)

    # -- logs -------------------------------------------------------------------------------------
    def log_ids(self, limit: int, after: str | None = None) -> list[str]:
        """At most `limit` Attempt ids that have a log (`<attempt>.log`, not a directory), in name
        order after `after` (a bounded page for slow-cycle cleanup, O-2 step 4; the directory
        listing itself is one scan)."""
        return _stems_page(self.layout.logs, LOG_SUFFIX, limit, after)

    def delete_log(self, attempt_id: str) -> None:
        """Delete the Attempt's log; a missing log is success (idempotent). Only the kernel's
        `log_cleanup_allowed` decides that it may go (decision LR-13).

        :raises ValueError: `attempt_id` is not a plain file-name stem.
        :raises OSError: the log could not be removed.
        """
        if not attempt_id or attempt_id.startswith(".") or "/" in attempt_id or "\0" in attempt_id:
            raise ValueError("not an Attempt id a log is named by")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.layout.log_path(attempt_id))

    def journaled_identity(self, attempt_id: str) -> str | None:
        """The wrapper identity journaled for the Attempt before its command was sent, or None
        (then the command never ran: LR-9). One start per Attempt, so at most one line."""
        found = [handle for attempt, handle in self.identities.entries() if attempt == attempt_id]
        return found[-1] if found else None

    # -- identity and stop -----------------------------------------------------------------------
    def inspect(self, handle_text: str) -> InspectionResult:
        return self._inspector.inspect(handle_text)

    def stop(self, handle_text: str, reason: CancelReason) -> StopResult | None:
        """A conclusive stop of the recorded handle, or None (nothing is written then; the next
        cycle tries again, §1.7)."""
        try:
            return self._controller.stop(handle_text, reason).conclusive
        except (StopFailed, HandleError):
            return None
