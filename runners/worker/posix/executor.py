"""A real POSIX executor with durable process identities (issue 6 item 6; SPEC §3.5 steps 7-8,
§3.11 step 3, §3.15 step 6, §2.1, D-12).

- `PosixExecutor.start(spec)` spawns the launch wrapper (`runners.worker.posix.launch_wrapper`) in
a new
  session, so the wrapper leads its own process group and the command runs inside it. The
  command is an argv list, never a shell string. The Attempt's callback token and identity go to
  the wrapper through a stdin pipe, never argv or the environment (S-1). The result is a
  `DurableHandle`: boot id + PID + the process start time in clock ticks since boot
  (`/proc/<pid>/stat` field 22), plus the `executor_started_at_ms` the receiver fixed at
  `launching` (D-12). A reused PID has another start time and a reboot has another boot id, so
  neither is mistaken for the process that was started.
- `PersistedExecutionInspector.inspect(handle_text)` reports `running`, `exited`, `invalid`,
  `identity_mismatch` or `unsupported` (§3.11 step 3), or raises `ProbeFailed`.
- `PersistedExecutionController.stop(handle_text, reason)` re-parses and re-verifies the identity
  itself right before it signals the group (§3.15 step 6) and never signals a process whose
  identity does not match.

Start results (§3.5): a `SpawnRefused(code)` is an explicit refusal, raised only when the
command certainly never ran (checked before any process exists, or refused by the wrapper's
handshake before it spawned anything); the receiver writes `start_failed`. Everything else that
goes wrong once the wrapper exists is `SpawnAmbiguous(code)`: the command may have started, the
receiver writes `recovery_required(launch_outcome_unknown)` and never retries (EX-7).

Nothing here reads a clock or keeps a timer; the only state is the executor's map of its own
unreaped children (so they can be reaped, never to decide anything about identity).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kernel import PORTABLE_ID_RE, Secret
from kernel.specs import CancelReason, StopResult
from runners.worker.posix.launch_wrapper import (
    HANDSHAKE_MAX_BYTES,
    HANDSHAKE_REFUSED,
    HANDSHAKE_STARTED,
    WRAPPER_MODULE,
    PayloadError,
    WrapperPayload,
    encode_payload,
)
from runners.worker.posix.receipts import CompletionReceiptStore, ReceiptStoreError

__all__ = [
    "HANDLE_KIND",
    "HANDLE_MAX_LENGTH",
    "DurableHandle",
    "HandleError",
    "HandleErrorCode",
    "InspectionResult",
    "LaunchSpec",
    "PersistedExecutionController",
    "PersistedExecutionInspector",
    "PosixExecutor",
    "ProbeFailed",
    "ProcFs",
    "ProcStat",
    "SpawnAmbiguous",
    "SpawnAmbiguousCode",
    "SpawnError",
    "SpawnRefusalCode",
    "SpawnRefused",
    "StopFailed",
    "StopOutcome",
]

# -- durable handle ---------------------------------------------------------------------------

HANDLE_KIND: Final = "posix"
HANDLE_VERSION: Final = "v1"
HANDLE_MAX_LENGTH: Final = 128
# Linux PID_MAX_LIMIT (2^22); a larger PID cannot exist, so a handle naming one is corrupt.
_PID_MAX: Final = 1 << 22
_TICKS_MAX: Final = 2**64 - 1  # starttime is an unsigned long long
_MS_MAX: Final = 2**63 - 1
_BOOT_ID: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_BOOT_ID_RE: Final = re.compile(_BOOT_ID, re.ASCII)
# Canonical decimal only (no sign, no leading zero), so one handle has exactly one text form.
_HANDLE_RE: Final = re.compile(
    rf"posix:v1:(?P<boot>{_BOOT_ID}):(?P<pid>[1-9][0-9]{{0,9}})"
    r":(?P<ticks>0|[1-9][0-9]{0,19}):(?P<ms>0|[1-9][0-9]{0,18})",
    re.ASCII,
)


class HandleErrorCode(enum.StrEnum):
    NOT_A_STRING = "HANDLE_NOT_A_STRING"
    TOO_LONG = "HANDLE_TOO_LONG"
    UNSUPPORTED_KIND = "HANDLE_UNSUPPORTED_KIND"  # not a `posix:` handle
    UNSUPPORTED_VERSION = "HANDLE_UNSUPPORTED_VERSION"  # `posix:` but not `v1`
    MALFORMED = "HANDLE_MALFORMED"
    OUT_OF_RANGE = "HANDLE_OUT_OF_RANGE"


class HandleError(ValueError):
    """An unparsable durable handle. The message is `executor handle: invalid (<code>)` and never
    contains the text (it may be anything, even a token pasted by mistake)."""

    code: HandleErrorCode

    def __init__(self, code: HandleErrorCode) -> None:
        super().__init__(f"executor handle: invalid ({code.value})")
        self.code = code

    def __reduce__(self) -> tuple[type[HandleError], tuple[HandleErrorCode]]:
        return (HandleError, (self.code,))


@dataclass(frozen=True, slots=True)
class DurableHandle:
    """The durable identity of a started wrapper process (§3.3 `executor_handle`).

    Text form `posix:v1:<boot_id>:<pid>:<start_ticks>:<started_at_ms>` (EX-8): `boot_id` from
    `/proc/sys/kernel/random/boot_id`, `start_ticks` = `/proc/<pid>/stat` field 22, and
    `started_at_ms` = the `executor_started_at_ms` stamped into handle and receipt (D-12; it is
    carried, not verified: the kernel cannot see it). The wrapper is the session and process
    group leader, so the PID is also the process group id.
    """

    boot_id: str
    pid: int
    start_ticks: int
    started_at_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.boot_id, str) or _BOOT_ID_RE.fullmatch(self.boot_id) is None:
            raise HandleError(HandleErrorCode.MALFORMED)
        for value, low, high in (
            (self.pid, 1, _PID_MAX),
            (self.start_ticks, 0, _TICKS_MAX),
            (self.started_at_ms, 0, _MS_MAX),
        ):
            if not isinstance(value, int) or isinstance(value, bool):
                raise HandleError(HandleErrorCode.MALFORMED)
            if not low <= value <= high:
                raise HandleError(HandleErrorCode.OUT_OF_RANGE)

    @property
    def text(self) -> str:
        """The stable string form stored in the journal."""
        return (
            f"{HANDLE_KIND}:{HANDLE_VERSION}:{self.boot_id}:{self.pid}"
            f":{self.start_ticks}:{self.started_at_ms}"
        )

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: object) -> DurableHandle:
        """Strictly parse the text form; `parse(h.text) == h` and `parse(t).text == t`.

        :raises HandleError: with a `HandleErrorCode`; never any other exception.
        """
        if not isinstance(text, str):
            raise HandleError(HandleErrorCode.NOT_A_STRING)
        if len(text) > HANDLE_MAX_LENGTH:
            raise HandleError(HandleErrorCode.TOO_LONG)
        if not text.startswith(f"{HANDLE_KIND}:"):
            raise HandleError(HandleErrorCode.UNSUPPORTED_KIND)
        if not text.startswith(f"{HANDLE_KIND}:{HANDLE_VERSION}:"):
            raise HandleError(HandleErrorCode.UNSUPPORTED_VERSION)
        match = _HANDLE_RE.fullmatch(text)
        if match is None:
            raise HandleError(HandleErrorCode.MALFORMED)
        return cls(
            boot_id=match["boot"],
            pid=int(match["pid"]),
            start_ticks=int(match["ticks"]),
            started_at_ms=int(match["ms"]),
        )


# -- /proc ------------------------------------------------------------------------------------


class ProbeFailed(Exception):
    """/proc could not be read for a reason other than "no such process" (§3.11 step 3 "probe
    error"): the caller's evidence is `unknown(probe_failed)`, never `exited`."""

    reason: str

    def __init__(self, reason: str) -> None:
        super().__init__(f"process probe failed ({reason})")
        self.reason = reason

    @property
    def code(self) -> str:
        return "probe_failed"


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of `/proc/<pid>/stat` this module uses (proc(5))."""

    state: str  # field 3
    pgrp: int  # field 5
    session: int  # field 6
    start_ticks: int  # field 22

    @property
    def exited(self) -> bool:
        # Z: zombie (exited, not yet reaped); X/x: dead. Both have finished running.
        return self.state in ("Z", "X", "x")


def parse_proc_stat(text: str) -> ProcStat:
    """Parse a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
    itself contain spaces and parentheses, so the fields are counted from the *last* `)`.

    :raises ProbeFailed: `stat_malformed`.
    """
    close = text.rfind(")")
    rest = text[close + 2 :].split() if close >= 0 else []
    # rest[0] is field 3; field n is rest[n - 3].
    if len(rest) < 20 or len(rest[0]) != 1:
        raise ProbeFailed("stat_malformed")
    try:
        return ProcStat(
            state=rest[0],
            pgrp=int(rest[2]),
            session=int(rest[3]),
            start_ticks=int(rest[19]),
        )
    except ValueError:
        pass
    raise ProbeFailed("stat_malformed")


@dataclass(frozen=True, slots=True)
class ProcFs:
    """Read access to a procfs mount (default `/proc`; tests point it elsewhere to simulate a
    platform without one)."""

    root: Path = Path("/proc")

    def boot_id(self) -> str | None:
        """The current boot id, or None when this platform has none (no procfs: `unsupported`).

        :raises ProbeFailed: the file exists but cannot be read or is malformed.
        """
        path = self.root / "sys" / "kernel" / "random" / "boot_id"
        reason: str | None = None
        text = ""
        try:
            text = path.read_text(encoding="ascii").strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError):
            reason = "boot_id_unreadable"
        if reason is None and _BOOT_ID_RE.fullmatch(text) is None:
            reason = "boot_id_malformed"
        if reason is not None:
            raise ProbeFailed(reason)
        return text

    def stat(self, pid: int) -> ProcStat | None:
        """The stat of `pid`, or None when no such process exists.

        :raises ProbeFailed: any other read error, or a malformed file.
        """
        path = self.root / str(pid) / "stat"
        failed = False
        text = ""
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            # ESRCH: the process vanished while the file was being read.
            return None
        except OSError:
            failed = True
        if failed:
            raise ProbeFailed("stat_unreadable")
        return parse_proc_stat(text)


# -- inspector --------------------------------------------------------------------------------


class InspectionResult(enum.StrEnum):
    """§3.11 step 3 outcomes of inspecting a durable handle (a probe error is `ProbeFailed`)."""

    RUNNING = "running"
    EXITED = "exited"
    INVALID = "invalid"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNSUPPORTED = "unsupported"


def _probe(handle: DurableHandle, proc: ProcFs) -> tuple[InspectionResult, ProcStat | None]:
    boot_id = proc.boot_id()
    if boot_id is None:
        return InspectionResult.UNSUPPORTED, None
    if boot_id != handle.boot_id:
        # EX-9: the handle is from another boot (or, out of scope, another host). Such a process
        # cannot be the one running here under that PID; fail closed rather than guess `exited`.
        return InspectionResult.IDENTITY_MISMATCH, None
    found = proc.stat(handle.pid)
    if found is None:
        return InspectionResult.EXITED, None
    if found.start_ticks != handle.start_ticks:
        # The PID was reused by another process: not ours, whatever its state.
        return InspectionResult.IDENTITY_MISMATCH, found
    if found.exited:
        return InspectionResult.EXITED, found
    return InspectionResult.RUNNING, found


class PersistedExecutionInspector:
    """Inspects a persisted durable handle (§3.11 step 3, §2.1 step 2). Read-only: it has no way
    to start, signal or remove anything."""

    __slots__ = ("_proc",)

    def __init__(self, proc: ProcFs | None = None) -> None:
        self._proc = proc if proc is not None else ProcFs()

    def inspect(self, handle_text: str) -> InspectionResult:
        """:raises ProbeFailed: /proc could not be read (never reported as `exited`)."""
        try:
            handle = DurableHandle.parse(handle_text)
        except HandleError:
            return InspectionResult.INVALID
        result, _ = _probe(handle, self._proc)
        return result


# -- controller -------------------------------------------------------------------------------


class StopOutcome(enum.StrEnum):
    """§3.15 step 6 results of `stop()`; only the first two are conclusive (L4/L5, §3.15)."""

    TERMINATION_REQUESTED = "termination_requested"
    ALREADY_EXITED = "already_exited"
    IDENTITY_MISMATCH = "identity_mismatch"
    INVALID = "invalid"
    UNSUPPORTED = "unsupported"

    @property
    def conclusive(self) -> StopResult | None:
        """The kernel's `StopResult` for L4/L5, or None for a stop that must not be submitted."""
        if self is StopOutcome.TERMINATION_REQUESTED:
            return StopResult.TERMINATION_REQUESTED
        if self is StopOutcome.ALREADY_EXITED:
            return StopResult.ALREADY_EXITED
        return None


class StopFailed(Exception):
    """The controller could neither verify nor signal (probe error, signal refused): §3.15 step
    6 "if the controller raises, write nothing" so the stop can be retried."""

    reason: str

    def __init__(self, reason: str) -> None:
        super().__init__(f"stop failed ({reason})")
        self.reason = reason


class PersistedExecutionController:
    """Stops the process group of a persisted durable handle (§3.15 step 6, L4/L5).

    It takes the handle *text*, re-parses it and re-verifies boot id, PID, start time and that
    the PID still leads its own process group, immediately before `os.killpg(pid, SIGTERM)`.
    No in-process handle map is consulted, so a restarted Worker stops exactly what its journal
    names, and a reused PID is never signalled.

    Residual window (EX-10): between the verification read and `killpg` the verified leader could
    exit, be reaped, every member of its group end, and a new process take the same PID *and*
    make itself a group leader. Linux does not reuse a PID while any process still uses it as a
    process group id, so all of that has to happen within microseconds; no portable API closes it
    for a whole group.
    """

    __slots__ = ("_proc", "_signal")

    def __init__(self, proc: ProcFs | None = None, signal_number: int = signal.SIGTERM) -> None:
        self._proc = proc if proc is not None else ProcFs()
        self._signal = signal_number

    def stop(self, handle_text: str, reason: CancelReason) -> StopOutcome:
        """:raises StopFailed: a probe error or a refused signal (nothing was verified as
        stopped; write nothing)."""
        if not isinstance(reason, CancelReason):
            raise ValueError("stop reason must be a CancelReason")
        try:
            handle = DurableHandle.parse(handle_text)
        except HandleError:
            return StopOutcome.INVALID
        failure: str | None = None
        try:
            result, found = _probe(handle, self._proc)
        except ProbeFailed as error:
            failure = error.reason
        if failure is not None:
            raise StopFailed(failure)
        if result is InspectionResult.UNSUPPORTED:
            return StopOutcome.UNSUPPORTED
        if result is InspectionResult.IDENTITY_MISMATCH:
            return StopOutcome.IDENTITY_MISMATCH
        if result is InspectionResult.EXITED:
            return StopOutcome.ALREADY_EXITED
        assert found is not None  # RUNNING always carries the stat it was decided on
        if found.pgrp != handle.pid:
            # Not the group leader we started (the wrapper is a session leader): signalling
            # the group would hit processes we cannot identify.
            return StopOutcome.IDENTITY_MISMATCH
        try:
            os.killpg(handle.pid, self._signal)
        except ProcessLookupError:
            # Gone between the verification and the signal.
            return StopOutcome.ALREADY_EXITED
        except OSError as error:
            failure = errno.errorcode.get(error.errno or 0, "signal_failed")
        if failure is not None:
            raise StopFailed(failure)
        return StopOutcome.TERMINATION_REQUESTED


# -- executor ---------------------------------------------------------------------------------


class SpawnRefusalCode(enum.StrEnum):
    """Explicit start refusals (§3.5 "Executor.start() explicitly refuses"): the command never
    ran. The value is the low-sensitivity `start_failure_code` of §3.3."""

    SPEC_INVALID = "SPEC_INVALID"
    EXECUTABLE_NOT_FOUND = "EXECUTABLE_NOT_FOUND"
    EXECUTABLE_NOT_PERMITTED = "EXECUTABLE_NOT_PERMITTED"
    CWD_INVALID = "CWD_INVALID"
    RECEIPTS_DIRECTORY_INVALID = "RECEIPTS_DIRECTORY_INVALID"
    PLATFORM_UNSUPPORTED = "PLATFORM_UNSUPPORTED"
    PAYLOAD_INVALID = "PAYLOAD_INVALID"
    WRAPPER_SPAWN_FAILED = "WRAPPER_SPAWN_FAILED"
    IDENTITY_UNREADABLE = "IDENTITY_UNREADABLE"
    IDENTITY_NOT_RECORDED = "IDENTITY_NOT_RECORDED"
    LOG_OPEN_FAILED = "LOG_OPEN_FAILED"
    SPAWN_FAILED = "SPAWN_FAILED"


class SpawnAmbiguousCode(enum.StrEnum):
    """Failures after the payload reached the wrapper: the command may have started."""

    PAYLOAD_WRITE_FAILED = "PAYLOAD_WRITE_FAILED"
    HANDSHAKE_TIMEOUT = "HANDSHAKE_TIMEOUT"
    HANDSHAKE_BROKEN = "HANDSHAKE_BROKEN"


class SpawnError(Exception):
    """Base of the executor's start errors; `code` is stable and low-sensitivity."""

    code: str

    def __init__(self, code: SpawnRefusalCode | SpawnAmbiguousCode) -> None:
        super().__init__(f"executor start: {type(self).__name__} ({code.value})")
        self.code = code.value


class SpawnRefused(SpawnError):
    """Explicit refusal: certainly nothing ran (write `start_failed`, §3.5)."""

    def __init__(self, code: SpawnRefusalCode) -> None:
        super().__init__(code)
        self.refusal = code


class SpawnAmbiguous(SpawnError):
    """Not a refusal: the outcome is unknown (write `recovery_required(launch_outcome_unknown)`,
    §3.5 [decision]; never retried)."""

    def __init__(self, code: SpawnAmbiguousCode) -> None:
        super().__init__(code)
        self.ambiguity = code


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What to launch for one Attempt (the in-memory execution context of §3.5 step 7).

    `repr` shows the ids, sequence and start time only: argv is a command line and the token a
    `Secret` (S-1).
    """

    argv: tuple[str, ...] = field(repr=False)
    run_id: str
    attempt_id: str
    callback_sequence: int
    callback_token: Secret
    executor_started_at_ms: int
    cwd: str | None = field(default=None, repr=False)
    log_path: str | None = field(default=None, repr=False)
    #: Environment additions over the executor's environment (a task's `env`); never the token.
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        reason = _spec_reason(self)
        if reason is not None:
            raise ValueError(f"launch spec: invalid ({reason})")


def _spec_reason(spec: LaunchSpec) -> str | None:
    argv: object = spec.argv
    token: object = spec.callback_token
    if (
        not isinstance(argv, tuple)
        or not argv
        or not all(isinstance(a, str) and "\0" not in a for a in argv)
        or not argv[0]
    ):
        return "argv"
    for name, value in (("run_id", spec.run_id), ("attempt_id", spec.attempt_id)):
        if not isinstance(value, str) or PORTABLE_ID_RE.fullmatch(value) is None:
            return name
    for name, number, low in (
        ("callback_sequence", spec.callback_sequence, 1),
        ("executor_started_at_ms", spec.executor_started_at_ms, 0),
    ):
        if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= _MS_MAX:
            return name
    if not isinstance(token, Secret):
        return "callback_token"
    for pair in spec.env:
        if (
            not isinstance(pair, tuple)
            or len(pair) != 2
            or not all(isinstance(part, str) and "\0" not in part for part in pair)
            or not pair[0]
            or "=" in pair[0]
        ):
            return "env"
    for name, path in (("cwd", spec.cwd), ("log_path", spec.log_path)):
        if path is not None and (not isinstance(path, str) or not os.path.isabs(path)):
            return name
    return None


def _resolve_executable(spec: LaunchSpec, search_path: str | None) -> str:
    """The absolute path the wrapper will exec, checked now so that a missing or non-executable
    command is an explicit refusal before any process exists.

    :raises SpawnRefused: `EXECUTABLE_NOT_FOUND`, `EXECUTABLE_NOT_PERMITTED`, `CWD_INVALID`.
    """
    if spec.cwd is not None and not os.path.isdir(spec.cwd):
        raise SpawnRefused(SpawnRefusalCode.CWD_INVALID)
    name = spec.argv[0]
    if "/" in name:
        candidate = os.path.join(spec.cwd or os.getcwd(), name)
    else:
        found = shutil.which(name, path=search_path)
        if found is None:
            raise SpawnRefused(SpawnRefusalCode.EXECUTABLE_NOT_FOUND)
        candidate = found
    candidate = os.path.abspath(candidate)
    try:
        info = os.stat(candidate)
    except FileNotFoundError:
        raise SpawnRefused(SpawnRefusalCode.EXECUTABLE_NOT_FOUND) from None
    except OSError:
        raise SpawnRefused(SpawnRefusalCode.EXECUTABLE_NOT_PERMITTED) from None
    if not stat.S_ISREG(info.st_mode) or not os.access(candidate, os.X_OK):
        raise SpawnRefused(SpawnRefusalCode.EXECUTABLE_NOT_PERMITTED)
    return candidate


def _read_handshake(fd: int, timeout_s: float) -> tuple[bytes, bool]:
    """(bytes up to the first newline, timed_out). Bounded in size and time."""
    deadline = time.monotonic() + timeout_s
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in data and len(data) <= HANDSHAKE_MAX_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return data, True
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, HANDSHAKE_MAX_BYTES)
            if not chunk:
                break
            data += chunk
    return data.split(b"\n", 1)[0], False


_WRAPPER_REFUSALS: Final = {
    code.value.encode("ascii"): code
    for code in (
        SpawnRefusalCode.PAYLOAD_INVALID,
        SpawnRefusalCode.RECEIPTS_DIRECTORY_INVALID,
        SpawnRefusalCode.LOG_OPEN_FAILED,
        SpawnRefusalCode.EXECUTABLE_NOT_FOUND,
        SpawnRefusalCode.EXECUTABLE_NOT_PERMITTED,
        SpawnRefusalCode.SPAWN_FAILED,
    )
}


class PosixExecutor:
    """`Executor.start()` on a POSIX host with procfs (module docstring).

    :param receipts: where the wrapper publishes the completion receipt; its directory must
        exist and be private (`CompletionReceiptStore.ensure_directory`).
    :param env: the command's environment (default: this process's); it never contains the
        token, which travels on stdin.
    :param handshake_timeout_s: how long to wait for the wrapper's `started`/`refused` line.
    :param wrapper_stderr: the wrapper's (and only the wrapper's) stderr, where it writes fixed
        codes; `None` inherits this process's.
    """

    __slots__ = (
        "_children",
        "_env",
        "_handshake_timeout_s",
        "_proc",
        "_python",
        "_receipts",
        "_wrapper_stderr",
    )

    def __init__(
        self,
        receipts: CompletionReceiptStore,
        *,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        proc: ProcFs | None = None,
        handshake_timeout_s: float = 10.0,
        wrapper_stderr: int | None = subprocess.DEVNULL,
    ) -> None:
        if not 0 < handshake_timeout_s <= 60:
            raise ValueError("handshake_timeout_s must be in (0, 60]")
        self._receipts = receipts
        self._env = dict(env) if env is not None else None
        self._python = python
        self._proc = proc if proc is not None else ProcFs()
        self._handshake_timeout_s = handshake_timeout_s
        self._wrapper_stderr = wrapper_stderr
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def __repr__(self) -> str:
        return f"PosixExecutor(receipts={self._receipts!r}, children={len(self._children)})"

    def start(
        self, spec: LaunchSpec, *, on_identity: Callable[[DurableHandle], None] | None = None
    ) -> DurableHandle:
        """Start `spec` exactly once and return its durable handle (§3.5 step 8).

        `on_identity`, when given, receives the wrapper's durable identity after the wrapper
        exists and *before* the payload is sent, so before anything can run: a caller that
        records it durably knows that an Attempt with no recorded identity never ran (the local
        launcher's identity journal, decision LR-9). If it raises, the wrapper is ended and the
        start is refused (`IDENTITY_NOT_RECORDED`).

        :raises SpawnRefused: the command certainly never ran.
        :raises SpawnAmbiguous: the command may have started; do not retry.
        """
        self.reap()
        env = self._env if self._env is not None else dict(os.environ)
        if spec.env:
            env = {**env, **dict(spec.env)}
        executable = _resolve_executable(spec, env.get("PATH", os.defpath))
        try:
            self._receipts.check_directory()
        except ReceiptStoreError:
            raise SpawnRefused(SpawnRefusalCode.RECEIPTS_DIRECTORY_INVALID) from None
        boot_id = self._proc.boot_id()
        if boot_id is None:
            raise SpawnRefused(SpawnRefusalCode.PLATFORM_UNSUPPORTED)
        try:
            payload = encode_payload(
                WrapperPayload(
                    argv=spec.argv,
                    executable=executable,
                    cwd=spec.cwd,
                    log_path=spec.log_path,
                    receipts_dir=str(self._receipts.root),
                    run_id=spec.run_id,
                    attempt_id=spec.attempt_id,
                    callback_sequence=spec.callback_sequence,
                    executor_started_at_ms=spec.executor_started_at_ms,
                    callback_token=spec.callback_token,
                )
            )
        except PayloadError:
            raise SpawnRefused(SpawnRefusalCode.PAYLOAD_INVALID) from None
        process = self._spawn_wrapper(env)
        try:
            return self._launch(process, payload, boot_id, spec.executor_started_at_ms, on_identity)
        finally:
            for stream in (process.stdin, process.stdout):
                if stream is not None and not stream.closed:
                    stream.close()

    def _spawn_wrapper(self, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        try:
            # -P: the wrapper's cwd is never put on sys.path, so nothing there can shadow the
            # `runners` package; cwd "/" holds no mount busy. The command gets its own cwd.
            return subprocess.Popen(  # noqa: S603 (fixed argv, no shell)
                [self._python, "-P", "-m", WRAPPER_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._wrapper_stderr,
                cwd="/",
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            # Popen raises only when the wrapper could not be forked or exec'd: nothing ran.
            raise SpawnRefused(SpawnRefusalCode.WRAPPER_SPAWN_FAILED) from None

    def _launch(
        self,
        process: subprocess.Popen[bytes],
        payload: bytes,
        boot_id: str,
        started_at_ms: int,
        on_identity: Callable[[DurableHandle], None] | None = None,
    ) -> DurableHandle:
        assert process.stdin is not None
        assert process.stdout is not None
        # The wrapper is our unreaped child: its PID names it until we wait for it, so this
        # read cannot see another process. Read before the payload goes out: until then the
        # wrapper cannot know what to run, so a failure here is still a clean refusal.
        try:
            found = self._proc.stat(process.pid)
        except ProbeFailed:
            found = None
        if found is None:
            self._abandon(process)
            raise SpawnRefused(SpawnRefusalCode.IDENTITY_UNREADABLE)
        handle = DurableHandle(boot_id, process.pid, found.start_ticks, started_at_ms)
        if on_identity is not None:
            try:
                on_identity(handle)
            except Exception:  # not recorded: nothing may run that recovery could not find
                self._abandon(process)
                raise SpawnRefused(SpawnRefusalCode.IDENTITY_NOT_RECORDED) from None
        try:
            process.stdin.write(payload)
            process.stdin.close()
        except OSError:
            self._abandon(process)
            raise SpawnAmbiguous(SpawnAmbiguousCode.PAYLOAD_WRITE_FAILED) from None
        line, timed_out = _read_handshake(process.stdout.fileno(), self._handshake_timeout_s)
        if line == HANDSHAKE_STARTED:
            self._children[process.pid] = process
            return handle
        refusal = self._refusal(line)
        if refusal is not None and not timed_out:
            # The wrapper spawned nothing and exits by itself; reap it (bounded) before saying
            # so, so that a refused start leaves no process behind.
            try:
                process.wait(timeout=self._handshake_timeout_s)
            except subprocess.TimeoutExpired:
                self._abandon(process)
            raise SpawnRefused(refusal)
        # No trustworthy answer: the command may run. Nobody will ever hold a handle for it, so
        # end the whole group we own (EX-7); the outcome stays unknown.
        self._abandon(process)
        if timed_out:
            raise SpawnAmbiguous(SpawnAmbiguousCode.HANDSHAKE_TIMEOUT)
        raise SpawnAmbiguous(SpawnAmbiguousCode.HANDSHAKE_BROKEN)

    @staticmethod
    def _refusal(line: bytes) -> SpawnRefusalCode | None:
        prefix = HANDSHAKE_REFUSED + b" "
        if not line.startswith(prefix):
            return None
        return _WRAPPER_REFUSALS.get(line[len(prefix) :])

    @staticmethod
    def _abandon(process: subprocess.Popen[bytes]) -> None:
        """SIGKILL the process group of our own unreaped child and reap it. Safe without any
        identity check: an unreaped child's PID (and so its group id) cannot be reused."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def owns(self, handle: DurableHandle) -> bool:
        """Whether `handle` names a wrapper this executor started and has not reaped yet (so
        its PID, and its process group id, cannot have been reused)."""
        return handle.pid in self._children

    def wait(self, handle: DurableHandle, timeout_s: float) -> int | None:
        """Wait for (and reap) a wrapper this executor started; its exit status, or None when it
        is still running after `timeout_s` or is not this executor's child (a handle from a
        previous Worker process). Never needed for correctness: recovery uses receipts and
        `/proc`, not this."""
        process = self._children.get(handle.pid)
        if process is None:
            return None
        try:
            status = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        del self._children[handle.pid]
        return status

    def reap(self) -> int:
        """Reap every wrapper of this executor that has exited (so none lingers as a zombie);
        returns how many were reaped."""
        done = [pid for pid, process in self._children.items() if process.poll() is not None]
        for pid in done:
            del self._children[pid]
        return len(done)
