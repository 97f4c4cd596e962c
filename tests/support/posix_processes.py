"""Real processes for the POSIX executor and receipt tests (issue 6 item 6).

`Launcher` starts commands through a real `PosixExecutor` and, on `close()`, SIGKILLs the process
group of every wrapper it still owns and reaps it: no test leaves a process behind. Only groups of
unreaped children are signalled, so a reused PID is never hit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kernel.identity import Secret, token_digest
from runners.worker.posix.executor import DurableHandle, LaunchSpec, PosixExecutor, ProcFs
from runners.worker.posix.receipts import CompletionReceiptStore, ReceiptRecordFacts

SLEEP_30 = (sys.executable, "-c", "import time; time.sleep(30)")
RUN_ID = "run-1"
STARTED_AT_MS = 1_700_000_000_000
SEQUENCE = 3


def exit_with(code: int) -> tuple[str, ...]:
    return (sys.executable, "-c", f"import sys; sys.exit({code})")


def fresh_token() -> Secret:
    return Secret.of(secrets.token_urlsafe(32), "callback_token")


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Polls `predicate` until it holds or `timeout_s` has passed: a generous bound (the
    processes waited for answer in milliseconds), so that a loaded machine is not a failure."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def proc_state(pid: int) -> str | None:
    """State letter of /proc/<pid>/stat, None when the PID does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rfind(")") + 2]


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(x) for x in path.read_text().split()]
    except FileNotFoundError:
        return []


class Launcher:
    """A `PosixExecutor` over a private receipts directory, with guaranteed cleanup."""

    def __init__(self, root: Path, proc: ProcFs | None = None) -> None:
        self.receipts = CompletionReceiptStore(root / "receipts")
        self.receipts.ensure_directory()
        self.executor = PosixExecutor(self.receipts, proc=proc)
        self.handles: list[DurableHandle] = []

    @staticmethod
    def spec(argv: tuple[str, ...], attempt_id: str, token: Secret | None = None) -> LaunchSpec:
        return LaunchSpec(
            argv=argv,
            run_id=RUN_ID,
            attempt_id=attempt_id,
            callback_sequence=SEQUENCE,
            callback_token=token if token is not None else fresh_token(),
            executor_started_at_ms=STARTED_AT_MS,
        )

    def start(self, spec: LaunchSpec) -> DurableHandle:
        handle = self.executor.start(spec)
        self.handles.append(handle)
        return handle

    def facts(self, spec: LaunchSpec) -> ReceiptRecordFacts:
        """The journal's view of `spec` (what the receiver wrote at `launching`)."""
        return ReceiptRecordFacts(
            run_id=spec.run_id,
            attempt_id=spec.attempt_id,
            executor_started_at_ms=spec.executor_started_at_ms,
            callback_sequence=spec.callback_sequence,
            callback_token_sha256=token_digest(spec.callback_token.reveal()),
        )

    def finish(self, handle: DurableHandle, timeout_s: float = 30.0) -> int:
        """Wait for the wrapper to exit (it publishes the receipt first) and reap it."""
        status = self.executor.wait(handle, timeout_s)
        assert status is not None, f"deadline: the wrapper had not exited within {timeout_s} s"
        return status

    def close(self) -> None:
        for handle in self.handles:
            if self.executor.owns(handle):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(handle.pid, signal.SIGKILL)
                self.executor.wait(handle, 5.0)
