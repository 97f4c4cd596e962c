"""The launch wrapper: the process `PosixExecutor.start()` really spawns (issue 6 item 6; SPEC
§3.5 steps 6-8, §3.11, §4.7, D-12).

Run as `python -P -m runners.worker.posix.launch_wrapper` in a new session (its own process group),
it

1. reads one payload from **stdin** (a pipe from the executor, closed after writing): the
   command's argv and resolved executable, cwd, optional log file, the receipts directory, the
   Attempt identity (run id, attempt id), the callback sequence, `executor_started_at_ms` and the
   raw completion callback token. The token never travels through argv or the environment, so it
   is not in `ps`, `/proc/<pid>/cmdline` or `/proc/<pid>/environ` of the wrapper or the command
   (S-1, EX-6);
2. spawns the command (argv list, never a shell) with stdin from `/dev/null` and stdout/stderr to
   the log file or `/dev/null`, in the wrapper's process group;
3. answers on **stdout** with exactly one handshake line: `started` once the command exists, or
   `refused <CODE>` when it could not be started (nothing ran: an explicit start refusal, §3.5);
   then stdout is pointed at `/dev/null`, so a vanished executor cannot hurt the wrapper;
4. waits for the command and publishes the completion receipt atomically
   (`CompletionReceiptStore.publish`): run id, attempt id, the executor start time it was given
   (the same value as the handle, D-12), callback sequence, outcome for the exit status, exit
   code, `finished_at_ms` and the token (RV-1..RV-5, decisions EX-1, EX-2).

SIGTERM, SIGINT and SIGHUP are caught by a no-op handler: the controller signals the whole group
(§3.15 step 6), the command gets the signal itself, and the wrapper stays alive to record how it
ended. The handlers do not survive `exec`, so the command sees default dispositions.

The wrapper writes only fixed codes to stderr (`launch_wrapper: <CODE>`), never payload content.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Final

from kernel import PORTABLE_ID_RE, Secret
from runners.worker.posix.receipts import (
    CompletionReceiptStore,
    Receipt,
    ReceiptStoreError,
    ReceiptWriteError,
    outcome_for_exit_code,
)

__all__ = [
    "HANDSHAKE_MAX_BYTES",
    "HANDSHAKE_REFUSED",
    "HANDSHAKE_STARTED",
    "PAYLOAD_MAX_BYTES",
    "WRAPPER_MODULE",
    "PayloadError",
    "WrapperExit",
    "WrapperPayload",
    "decode_payload",
    "encode_payload",
    "main",
]

WRAPPER_MODULE: Final = "runners.worker.posix.launch_wrapper"
PAYLOAD_VERSION: Final = 1
#: An argv larger than this is refused before any process exists (the kernel's ARG_MAX is 2 MiB).
PAYLOAD_MAX_BYTES: Final = 1 << 20
HANDSHAKE_STARTED: Final = b"started"
HANDSHAKE_REFUSED: Final = b"refused"
HANDSHAKE_MAX_BYTES: Final = 256
_INT64_MAX: Final = 2**63 - 1
_PAYLOAD_FIELDS: Final = frozenset(
    {
        "v",
        "argv",
        "executable",
        "cwd",
        "log_path",
        "receipts_dir",
        "run_id",
        "attempt_id",
        "callback_sequence",
        "executor_started_at_ms",
        "callback_token",
    }
)


class WrapperExit(enum.IntEnum):
    """The wrapper's own exit status (the command's status is in the receipt)."""

    RECEIPT_PUBLISHED = 0
    REFUSED = 70  # handshake `refused <CODE>`: the command never ran
    RECEIPT_FAILED = 71  # the command ran and ended, but no receipt could be published
    INTERNAL_ERROR = 72


class PayloadError(ValueError):
    """A malformed payload; the message is `launch payload: invalid (<reason>)`, no content."""

    reason: str

    def __init__(self, reason: str) -> None:
        super().__init__(f"launch payload: invalid ({reason})")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WrapperPayload:
    """What the executor hands the wrapper on stdin. `repr` omits argv (a command line, S-1);
    the token is a `Secret`."""

    argv: tuple[str, ...] = field(repr=False)
    executable: str = field(repr=False)
    cwd: str | None
    log_path: str | None
    receipts_dir: str
    run_id: str
    attempt_id: str
    callback_sequence: int
    executor_started_at_ms: int
    callback_token: Secret


def encode_payload(payload: WrapperPayload) -> bytes:
    """UTF-8 JSON of the payload, raw token included: it only ever goes into the wrapper's stdin.

    :raises PayloadError: `too_large`, `not_utf8`.
    """
    document = {
        "v": PAYLOAD_VERSION,
        "argv": list(payload.argv),
        "executable": payload.executable,
        "cwd": payload.cwd,
        "log_path": payload.log_path,
        "receipts_dir": payload.receipts_dir,
        "run_id": payload.run_id,
        "attempt_id": payload.attempt_id,
        "callback_sequence": payload.callback_sequence,
        "executor_started_at_ms": payload.executor_started_at_ms,
        "callback_token": payload.callback_token.reveal(),
    }
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=True)
    data = text.encode("ascii")
    if len(data) > PAYLOAD_MAX_BYTES:
        raise PayloadError("too_large")
    return data


def _str(document: dict[str, object], name: str) -> str:
    value = document[name]
    if not isinstance(value, str) or not value or "\0" in value:
        raise PayloadError(f"bad_{name}")
    return value


def _optional_str(document: dict[str, object], name: str) -> str | None:
    return None if document[name] is None else _str(document, name)


def _int(document: dict[str, object], name: str, low: int) -> int:
    value = document[name]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= _INT64_MAX:
        raise PayloadError(f"bad_{name}")
    return value


def _loads(data: bytes) -> object:
    """Parsed JSON, or None for anything unparsable. Never raises (no chained document)."""
    try:
        return json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None


def decode_payload(data: bytes) -> WrapperPayload:
    """Strictly decode a payload.

    :raises PayloadError: with a field reason; never the content.
    """
    if len(data) > PAYLOAD_MAX_BYTES:
        raise PayloadError("too_large")
    document = _loads(data)
    if not isinstance(document, dict) or set(document) != _PAYLOAD_FIELDS:
        raise PayloadError("not_a_payload")
    if document["v"] != PAYLOAD_VERSION or isinstance(document["v"], bool):
        raise PayloadError("bad_version")
    argv = document["argv"]
    if (
        not isinstance(argv, list)
        or not argv
        or not all(isinstance(a, str) and "\0" not in a for a in argv)
    ):
        raise PayloadError("bad_argv")
    executable = _str(document, "executable")
    receipts_dir = _str(document, "receipts_dir")
    if not os.path.isabs(executable) or not os.path.isabs(receipts_dir):
        raise PayloadError("relative_path")
    run_id = _str(document, "run_id")
    attempt_id = _str(document, "attempt_id")
    if PORTABLE_ID_RE.fullmatch(run_id) is None:
        raise PayloadError("bad_run_id")
    if PORTABLE_ID_RE.fullmatch(attempt_id) is None:
        raise PayloadError("bad_attempt_id")
    token_text = document["callback_token"]
    if not isinstance(token_text, str):
        raise PayloadError("bad_callback_token")
    token = _secret(token_text)
    if token is None:
        raise PayloadError("bad_callback_token")
    return WrapperPayload(
        argv=tuple(str(a) for a in argv),
        executable=executable,
        cwd=_optional_str(document, "cwd"),
        log_path=_optional_str(document, "log_path"),
        receipts_dir=receipts_dir,
        run_id=run_id,
        attempt_id=attempt_id,
        callback_sequence=_int(document, "callback_sequence", 1),
        executor_started_at_ms=_int(document, "executor_started_at_ms", 0),
        callback_token=token,
    )


def _secret(value: str) -> Secret | None:
    try:
        return Secret.of(value, "callback_token")
    except ValueError:
        return None


# -- the wrapper process ----------------------------------------------------------------------


def _read_stdin(stream: IO[bytes]) -> bytes:
    # One byte over the bound is enough to know the payload is too large.
    return stream.read(PAYLOAD_MAX_BYTES + 1)


def _handshake(line: bytes) -> None:
    # OSError: the executor is gone (crashed or timed out). If the command already runs, the
    # receipt is what matters now; if it was refused, nothing ran either way.
    with contextlib.suppress(OSError):
        os.write(1, line + b"\n")
    # Nothing may write to the handshake pipe again; the executor stops reading after one line.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _diagnose(code: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"launch_wrapper: {code}\n".encode("ascii"))


def _survive(signum: int, frame: FrameType | None) -> None:
    """No-op: the group signal reaches the command directly; the wrapper outlives it to record
    the exit status (module docstring)."""


def _open_output(log_path: str | None) -> int:
    if log_path is None:
        return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    return os.open(
        log_path,
        os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )


def _spawn(payload: WrapperPayload, output: int) -> subprocess.Popen[bytes] | str:
    """The running command, or the refusal code when it could not be started."""
    try:
        return subprocess.Popen(  # noqa: S603 (argv list, no shell; the executor resolved it)
            list(payload.argv),
            executable=payload.executable,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            cwd=payload.cwd,
            close_fds=True,
            restore_signals=True,
        )
    except FileNotFoundError:
        # The executable (or the cwd) vanished after the executor's preflight check.
        return "EXECUTABLE_NOT_FOUND"
    except PermissionError:
        return "EXECUTABLE_NOT_PERMITTED"
    except OSError:
        return "SPAWN_FAILED"


def run(stdin: IO[bytes]) -> WrapperExit:
    """The wrapper's whole life (module docstring); `main` is this with the process's stdin."""
    try:
        payload = decode_payload(_read_stdin(stdin))
    except PayloadError:
        _handshake(HANDSHAKE_REFUSED + b" PAYLOAD_INVALID")
        return WrapperExit.REFUSED
    store = CompletionReceiptStore(payload.receipts_dir)
    try:
        # Checked before the command runs: a receipt that could never be published would turn
        # a completed command into "exited without receipt".
        store.check_directory(ReceiptWriteError)
    except ReceiptStoreError:
        _handshake(HANDSHAKE_REFUSED + b" RECEIPTS_DIRECTORY_INVALID")
        return WrapperExit.REFUSED
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _survive)
    try:
        output = _open_output(payload.log_path)
    except OSError:
        _handshake(HANDSHAKE_REFUSED + b" LOG_OPEN_FAILED")
        return WrapperExit.REFUSED
    try:
        child = _spawn(payload, output)
    finally:
        os.close(output)
    if isinstance(child, str):
        _handshake(HANDSHAKE_REFUSED + b" " + child.encode("ascii"))
        return WrapperExit.REFUSED
    _handshake(HANDSHAKE_STARTED)
    exit_code = child.wait()
    receipt = Receipt(
        run_id=payload.run_id,
        attempt_id=payload.attempt_id,
        # D-12: exactly the value written at `launching` and carried by the handle.
        executor_started_at_ms=payload.executor_started_at_ms,
        callback_sequence=payload.callback_sequence,
        outcome=outcome_for_exit_code(exit_code),
        exit_code=exit_code,
        finished_at_ms=time.time_ns() // 1_000_000,
        callback_token=payload.callback_token,
    )
    try:
        store.publish(receipt)
    except ReceiptStoreError as error:
        _diagnose(error.code.value)
        return WrapperExit.RECEIPT_FAILED
    return WrapperExit.RECEIPT_PUBLISHED


def main() -> int:
    try:
        return int(run(sys.stdin.buffer))
    except Exception:
        # A fixed code only: a traceback could quote a payload-derived value.
        _diagnose("INTERNAL_ERROR")
        return int(WrapperExit.INTERNAL_ERROR)


if __name__ == "__main__":
    sys.exit(main())
