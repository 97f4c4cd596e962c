"""The Worker kill matrix (issue 6 item 7, second half; SPEC §3.5, §3.7, §3.10-§3.13, §3.17
I-J1; INBOX-04, INBOX-05, INBOX-06, INBOX-34, INBOX-35, INBOX-36).

Each *case* runs real processes against one real control plane (an `EdgeStore` SQLite file),
one real journal (the file or the SQLite adapter) and real children:

1. the harness (the control plane's dispatcher) admits a Run;
2. it starts a Worker process (`python -m conformance.journal.kill_worker`, one `WorkerRuntime`)
   armed with the case's first kill point and waits for `ready`; only then does it grant the
   Run's lease to the Worker session of `conformance.journal.kill_worker` (with a random lease
   token kept in memory only), so that the lease's clock does not run while an interpreter
   starts, and delivers the offer through the process's stdin. Like a control plane, it then
   redelivers the Attempt's current lease as `lease_recovery` every 0.25 s while the lease is
   `leased` (the journal's lease version lags renewals and T4, and a completion uses the
   journal's version, §3.12), and runs the lease expiry scanner (§3.16) on the same cadence;
3. the process SIGKILLs itself at that boundary (or the harness SIGKILLs it after a random
   delay: `external:<ms>`); the harness requires a death by SIGKILL, at the announced point;
4. it restarts the Worker on the same directories and the same session, armed with the next
   kill point if the case has one, else unarmed; a restarted Worker must wait out the dead
   owner's stale journal lock (5 s window, the minimum W-4 allows), and is driven as in 2.;
5. once the Attempt is terminal on the control plane, it stops the last Worker (which releases
   the journal) and checks convergence:

- the Attempt's terminal status is one the case allows: `succeeded` (or `failed` for a child
  exiting non-zero, or a refused start), or `lost` where the spec defines it: the process died
  after `launching` and before any child existed, the restart wrote
  `recovery_required(launch_outcome_unknown)` and never called the Executor again (INBOX-05),
  and the lease expired;
- **zero second spawns** (I-J1, INBOX-04): the executor's own spawn journal (one fsynced line
  per `Executor.start()` call, written before the wrapper is spawned) has at most one line for
  the offer, and the child itself (which appends to a marker file when it runs) ran at most
  once;
- **zero lost completions**: a child that ran has its completion on the control plane, with
  its exit code (INBOX-34/35: receipt first, submit, journal, delete the receipt); `lost`
  implies that no child ran;
- the journal converged: `completion_acknowledged` for a completion, `start_failure_
  acknowledged` for a refused start, `recovery_required(launch_outcome_unknown)` for `lost`;
  no completion receipt is left behind;
- the lease token never appears in a Worker's argv, environment, stdout, stderr, the spawn
  journal or the report (S-1).

No wait of the harness assumes a speed (decision KM-10): a wait ends on the event it waits for
(`ready`, the announced `kill` line, the process's death, the Attempt terminal) or at a generous
deadline (`*_DEADLINE_S`), and an expired deadline fails the case with a message naming the wait,
the deadline and what the control plane and the Worker showed at that moment, never as an
outcome of the case.

`python -m conformance.journal.kill_matrix [--deep]` runs the matrix and prints the figures; the
test `tests/runners/worker/test_kill_matrix.py` runs `ci_cases()` on both adapters, and the
deep matrix (`deep_cases`: many external SIGKILLs at random delays, up to three per case) when
`QL3_KILL_MATRIX=deep`.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import os
import queue
import random
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from conformance.journal.kill_worker import EXECUTOR_TYPE, KillPoint, encode_delivery, session
from kernel import (
    AdmitRun,
    Applied,
    Attempt,
    DeliveryKind,
    GrantLease,
    JournalState,
    Offer,
    Profile,
    RecoveryReason,
    Secret,
)
from runners.edge.store import EdgeStore
from runners.engine import execute
from runners.passes import lease_expiry_page
from runners.worker.control_plane import offer_for
from runners.worker.journal.file import FileJournal
from runners.worker.journal.lock import JournalOwnership
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.posix.adapters import SpawnJournal
from runners.worker.posix.receipts import CompletionReceiptStore, ReceiptStoreError

__all__ = [
    "ADAPTERS",
    "Case",
    "CaseResult",
    "MatrixReport",
    "ci_cases",
    "deep_cases",
    "main",
    "run_case",
    "run_matrix",
    "sabotage_cases",
]

ADAPTERS: Final = ("file", "sqlite")
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
QUICK_S: Final = 0.3
SLOW_S: Final = 12.0
#: A lease long enough to outlive every restart of a case (each waits up to the 5 s window).
LEASE_MS: Final = 30_000
#: Cases that must end `lost` need the lease to expire, so it is short; it is granted only once
#: the first Worker is `ready` (its clock never covers an interpreter start), and it must outlive
#: the first Worker's way from the delivery to its armed boundary (about 0.1 s idle) and, for the
#: `forget-launching` teeth case, a restart's stale-lock wait (5 s) and its first redelivery.
#: 8 s granted before the Worker started expired under load before the first delivery (KM-10).
LOST_LEASE_MS: Final = 15_000
STALE_WINDOW_MS: Final = 5_000
#: The deadlines of the harness's waits (KM-10): each is many times what its wait takes on a
#: loaded machine, and its expiry fails the case with a message naming the wait.
ACQUIRE_TIMEOUT_S: Final = 60.0  # a restarted Worker's retries of JOURNAL_LOCKED (kill_worker)
READY_DEADLINE_S: Final = ACQUIRE_TIMEOUT_S + 60.0  # the start to `ready`
EXIT_DEADLINE_S: Final = 30.0  # a process that announced its kill or closed its output: its exit
BOUNDARY_DEADLINE_S: Final = 30.0  # the Attempt terminal to the armed boundary just after it
STOP_DEADLINE_S: Final = 60.0  # `stop` to the last Worker's exit
MISSING_EXECUTABLE: Final = "/nonexistent/ql3-kill-matrix/missing-executable"
EXTERNAL: Final = "external"
_TICK_S: Final = 0.25
_SUCCEEDED = frozenset({"succeeded"})
_LOST = frozenset({"lost"})


# -- cases -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Case:
    """One scenario: a kill per killed run (a `KillPoint` text, or `external:<ms>` for a
    harness-side SIGKILL `ms` after the delivery / the restart's `ready`), then one clean run.

    :param expect: the terminal Attempt statuses this case allows.
    :param child_s: how long the child sleeps; `refused`: argv names a missing executable
        (an explicit start refusal, nothing runs).
    """

    label: str
    kills: tuple[str, ...]
    expect: frozenset[str] = _SUCCEEDED
    child_s: float = QUICK_S
    exit_code: int = 0
    refused: bool = False
    lease_ms: int = LEASE_MS
    sabotage: str | None = None  # restarted Workers broken on purpose (the teeth tests)
    #: How long a run may take beyond the lease and the child before it "did not converge".
    slack_s: float = 40.0


def _case(label: str, *kills: str, **options: object) -> Case:
    return Case(label, kills, **options)  # type: ignore[arg-type]


def ci_cases(seed: int = 7) -> list[Case]:
    """Every journal state boundary, the executor and control-plane boundaries, a few double
    kills (the restart killed too) and a few external SIGKILLs at seeded random delays."""
    lost = {"expect": _LOST, "lease_ms": LOST_LEASE_MS}
    refused = {"expect": frozenset({"failed"}), "refused": True}
    cases = [
        _case("no kill (baseline)"),
        # -- the first start, every durable write of §3.5, and what lies between ----------------
        _case("before:accepted", "before:accepted"),
        _case("after:accepted", "after:accepted"),
        _case("before:starting_acknowledged", "before:starting_acknowledged"),
        _case("after:starting_acknowledged", "after:starting_acknowledged"),
        _case("before:launching", "before:launching"),
        _case("after:launching", "after:launching", **lost),
        _case("after:spawn_logged", "after:spawn_logged", **lost),
        _case("after:executor_start", "after:executor_start"),
        _case(
            "after:executor_start exit 3", "after:executor_start", expect={"failed"}, exit_code=3
        ),
        _case("before:started", "before:started"),
        _case("after:started", "after:started"),
        _case("before:running_acknowledged", "before:running_acknowledged"),
        _case("after:running_acknowledged", "after:running_acknowledged"),
        _case("before:lease_merged", "before:lease_merged"),
        _case("after:lease_merged", "after:lease_merged"),
        _case("after:complete", "after:complete"),
        _case("before:completion_acknowledged", "before:completion_acknowledged"),
        _case("after:completion_acknowledged", "after:completion_acknowledged"),
        # -- an explicit start refusal ----------------------------------------------------------
        _case("refused before:start_failed", "before:start_failed", refused=True, **lost),
        _case("refused after:start_failed", "after:start_failed", **refused),
        _case(
            "refused before:start_failure_acknowledged",
            "before:start_failure_acknowledged",
            **refused,
        ),
        _case(
            "refused after:start_failure_acknowledged",
            "after:start_failure_acknowledged",
            **refused,
        ),
        # -- the restart killed too ---------------------------------------------------------------
        _case(
            "after:launching, restart after:recovery_required",
            "after:launching",
            "after:recovery_required",
            **lost,
        ),
        _case(
            "after:executor_start, restart after:recovery_required",
            "after:executor_start",
            "after:recovery_required",
        ),
        _case(
            "after:executor_start, restart after:complete",
            "after:executor_start",
            "after:complete",
        ),
        _case(
            "after:running_acknowledged, restart after:lease_merged",
            "after:running_acknowledged",
            "after:lease_merged",
        ),
        _case(
            "slow: after:started, restart after:running_acknowledged",
            "after:started",
            "after:running_acknowledged",
            child_s=SLOW_S,
        ),
    ]
    rng = random.Random(seed)  # noqa: S311 (scheduling, not secrets)
    for index in range(3):
        delay = rng.randint(0, int((QUICK_S + 0.7) * 1000))
        cases.append(
            _case(
                f"external #{index + 1}",
                f"{EXTERNAL}:{delay}",
                expect=frozenset({"succeeded", "lost"}),
            )
        )
    return cases


def deep_cases(repetitions: int = 40, seed: int = 20240601) -> list[Case]:
    """The nightly matrix: up to three harness-side SIGKILLs per case at random delays, random
    child durations and exit codes; then the deterministic matrix once more."""
    rng = random.Random(seed)  # noqa: S311 (scheduling, not secrets)
    cases: list[Case] = []
    for index in range(repetitions):
        child_s = rng.choice((0.05, 0.3, 1.0, 2.5))
        exit_code = rng.choice((0, 0, 0, 3))
        kills = tuple(
            f"{EXTERNAL}:{rng.randint(0, int((child_s + 0.8) * 1000))}"
            for _ in range(rng.randint(1, 3))
        )
        outcome = "succeeded" if exit_code == 0 else "failed"
        cases.append(
            Case(
                f"deep #{index + 1} ({len(kills)} kills)",
                kills,
                expect=frozenset({outcome, "lost"}),
                child_s=child_s,
                exit_code=exit_code,
                lease_ms=60_000,
            )
        )
    return cases + ci_cases(seed)


def sabotage_cases() -> list[Case]:
    """Workers broken on purpose after the first kill (`kill_worker --sabotage`): the matrix
    must report a second spawn for one and a lost completion for the other."""
    short = {"lease_ms": LOST_LEASE_MS, "expect": frozenset({"succeeded", "lost"}), "slack_s": 5.0}
    return [
        _case(
            "teeth: forget-launching", "after:executor_start", sabotage="forget-launching", **short
        ),
        _case("teeth: blind-receipts", "after:executor_start", sabotage="blind-receipts", **short),
    ]


# -- the harness's control plane -------------------------------------------------------------------
def _now() -> int:
    return time.time_ns() // 1_000_000


class HarnessControlPlane:
    """The dispatcher's side of the shared control plane: admit, grant, offer, expire, read."""

    def __init__(self, path: Path) -> None:
        self.store = EdgeStore(path)

    def close(self) -> None:
        self.store.close()

    def admit(self, run_id: str, attempt_id: str) -> None:
        admitted = execute(
            self.store,
            AdmitRun(run_id, attempt_id, "proj", "task", 1, EXECUTOR_TYPE),
            _now(),
        )
        if not isinstance(admitted, Applied):
            raise RuntimeError(f"admit_run: {admitted.code}")

    def grant(self, run_id: str, attempt_id: str, token: Secret, duration_ms: int) -> None:
        granted = execute(
            self.store, GrantLease(run_id, attempt_id, session(), token, duration_ms), _now()
        )
        if not isinstance(granted, Applied):
            raise RuntimeError(f"grant_lease: {granted.code}")

    def offer(
        self,
        attempt_id: str,
        token: Secret,
        spec: dict[str, object],
        kind: DeliveryKind,
    ) -> Offer | None:
        """The offer for the Attempt's `leased` lease with its current version, else None."""
        with self.store.transaction() as tx:
            aggregate = tx.load_run_of_attempt(attempt_id)
        if aggregate is None or aggregate.leased_lease(attempt_id) is None:
            return None
        return offer_for(aggregate, attempt_id, token, spec, kind)

    def attempt(self, attempt_id: str) -> Attempt:
        with self.store.transaction() as tx:
            aggregate = tx.load_run_of_attempt(attempt_id)
        found = None if aggregate is None else aggregate.attempt(attempt_id)
        if found is None:
            raise RuntimeError("the Attempt is missing")
        return found

    def terminal(self, attempt_id: str) -> bool:
        return self.attempt(attempt_id).status.terminal

    def expire(self) -> None:
        """One page of the lease expiry scanner (§3.16), at the edge profile."""
        with contextlib.suppress(Exception):  # a failed item is processed again next tick
            lease_expiry_page(self.store, self.store, _now(), 16, None, profile=Profile.EDGE)


# -- one Worker process ----------------------------------------------------------------------------
class Waited(enum.StrEnum):
    """How a wait for a Worker's event ended."""

    SEEN = "seen"
    ENDED = "ended"  # the process's output ended first (it is dying or has exited)
    DEADLINE = "deadline"


class DriveEnd(enum.StrEnum):
    """How `_CaseRun._drive` ended."""

    DIED = "died"  # the Worker process is gone
    TERMINAL = "terminal"  # the Attempt is terminal on the control plane
    DEADLINE = "deadline"  # neither, by the case's drive deadline


class WorkerProcess:
    """A `kill_worker` child of the harness: its stdin (deliveries), its stdout (events)."""

    def __init__(self, command: list[str], stderr_path: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        self._stderr: IO[bytes] = stderr_path.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603 (our own module, argv list)
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO_ROOT,
            env=env,
        )
        self.events: list[dict[str, object]] = []
        self.lines: list[str] = []
        self._queue: queue.Queue[dict[str, object] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="kill-matrix-events", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "garbage"}
            if isinstance(event, dict):
                self.events.append(event)
                self._queue.put(event)
        self._queue.put(None)

    def wait_event(self, name: str, timeout_s: float) -> Waited:
        """Until `name` arrives (SEEN), the process's output ends (ENDED) or `timeout_s` has
        passed (DEADLINE)."""
        deadline = time.monotonic() + timeout_s
        if any(e.get("event") == name for e in self.events):
            return Waited.SEEN
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return Waited.DEADLINE
            try:
                event = self._queue.get(timeout=left)
            except queue.Empty:
                return Waited.DEADLINE
            if event is None:
                self._queue.put(None)
                return Waited.ENDED
            if event.get("event") == name:
                return Waited.SEEN

    def last_event(self) -> str:
        """The name of the last event the process wrote (names only: S-1)."""
        return str(self.events[-1].get("event")) if self.events else "none"

    def send(self, data: bytes) -> bool:
        stdin = self.proc.stdin
        if stdin is None or self.proc.poll() is not None:
            return False
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL this harness's own child (by its Popen, never by name)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once the process is gone and its last output line has been read
        (so a `kill` line written right before the SIGKILL is never missed)."""
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(timeout_s)
        return code

    def stop(self, timeout_s: float = STOP_DEADLINE_S) -> int | None:
        self.send(b"stop\n")
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        return self.wait(timeout_s)

    def close(self) -> None:
        self.kill()
        self.wait(EXIT_DEADLINE_S)
        self._reader.join(EXIT_DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.close()
        self._stderr.close()

    def fired(self) -> list[str]:
        return [str(e.get("point")) for e in self.events if e.get("event") == "kill"]


def _secret_in_process(pid: int, secret: str) -> list[str]:
    """Where the raw secret shows in the process's argv or environment (S-1)."""
    found: list[str] = []
    for name in ("cmdline", "environ"):
        try:
            data = Path(f"/proc/{pid}/{name}").read_bytes()
        except OSError:
            continue
        if secret.encode("utf-8") in data:
            found.append(f"/proc/<worker>/{name}")
    return found


# -- one case --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CaseResult:
    """What one case did and found (ids, states, counts: S-1)."""

    label: str
    adapter: str
    kills: tuple[str, ...]
    self_kills: int
    external_kills: int
    status: str
    exit_code: int | None
    journal_state: str | None
    recovery_reason: str | None
    spawn_lines: int
    child_runs: int
    receipt_left: bool
    lost_completion: bool
    paths: tuple[str, ...]
    failures: tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def duplicate_spawns(self) -> int:
        return max(self.spawn_lines - 1, 0) + max(self.child_runs - 1, 0)

    @property
    def outcome(self) -> str:
        reason = f"({self.recovery_reason})" if self.recovery_reason else ""
        return f"{self.status} / {self.journal_state}{reason}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _child_argv(case: Case, marker: Path) -> list[str]:
    if case.refused:
        return [MISSING_EXECUTABLE]
    program = (
        "import sys, time\n"
        "with open(sys.argv[1], 'a') as f:\n"
        "    f.write('ran\\n')\n"
        f"time.sleep({case.child_s!r})\n"
        f"sys.exit({case.exit_code!r})\n"
    )
    return [sys.executable, "-c", program, str(marker)]


def _expected_journal(status: str, case: Case) -> tuple[str, str | None]:
    if status == "lost":
        return JournalState.RECOVERY_REQUIRED.value, RecoveryReason.LAUNCH_OUTCOME_UNKNOWN.value
    if case.refused:
        return JournalState.START_FAILURE_ACKNOWLEDGED.value, None
    return JournalState.COMPLETION_ACKNOWLEDGED.value, None


def _read_journal(adapter: str, root: Path, offer_id: str) -> tuple[str | None, str | None, str]:
    ownership = JournalOwnership(root, stale_window_ms=STALE_WINDOW_MS)
    journal = FileJournal(root, ownership) if adapter == "file" else SqliteJournal(root, ownership)
    try:
        journal.acquire()
    except Exception as exc:  # the last Worker did not release: a failure of the case
        return None, None, f"journal not released ({type(exc).__name__})"
    try:
        record = journal.read(offer_id)
    finally:
        journal.release()
    if record is None:
        return None, None, "no journal record"
    reason = None if record.recovery_reason is None else record.recovery_reason.value
    return record.state.value, reason, ""


def _path_of(worker: WorkerProcess) -> str:
    """A short trace of how one restarted Worker moved the record (startup items, deliveries,
    recovery outcomes), consecutive duplicates dropped."""
    steps: list[str] = []
    revision: object = None
    for event in worker.events:
        kind = event.get("event")
        if kind == "delivery":
            moved, revision = event.get("revision") != revision, event.get("revision")
        if kind == "startup":
            actions, unsettled = event.get("recovery_actions"), event.get("recovery_failed")
            if not actions and event.get("status") == "ready":
                continue  # an empty journal, or nothing to recover
            step = f"startup:{event.get('status')}(actions {actions}, unsettled {unsettled})"
        elif kind == "delivery" and event.get("kind") == "rejected":
            step = f"deliver:rejected({event.get('code')})"
        elif kind == "delivery" and moved:
            step = f"deliver:{event.get('state')}"
        elif kind == "recovery":
            step = f"recover:{event.get('outcome')}"
        elif kind == "lease_merged":
            step = "merge"
        elif kind == "lease_lost":
            step = f"lease_lost:{event.get('result')}"
        elif kind == "kill":
            step = f"KILL@{event.get('point')}"
        else:
            continue
        if not steps or steps[-1] != step:
            steps.append(step)
    return " > ".join(steps) if steps else "-"


@dataclass
class _Dirs:
    root: Path
    control: Path = field(init=False)
    journal: Path = field(init=False)
    receipts: Path = field(init=False)
    spawns: Path = field(init=False)
    marker: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=False)
        self.control = self.root / "control.sqlite3"
        self.journal = self.root / "journal"
        self.receipts = self.root / "receipts"
        self.spawns = self.root / "spawns"
        self.marker = self.root / "child-ran.log"


def _worker_command(
    dirs: _Dirs, adapter: str, case: Case, point: str | None, *, restarted: bool
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "conformance.journal.kill_worker",
        "--control",
        str(dirs.control),
        "--journal",
        adapter,
        "--journal-root",
        str(dirs.journal),
        "--receipts",
        str(dirs.receipts),
        "--spawns",
        str(dirs.spawns),
        "--lease-duration-ms",
        str(case.lease_ms),
        "--stale-window-ms",
        str(STALE_WINDOW_MS),
        "--acquire-timeout-s",
        str(ACQUIRE_TIMEOUT_S),
    ]
    if point is not None:
        command += ["--kill-point", point]
    if restarted and case.sabotage is not None:
        command += ["--sabotage", case.sabotage]
    return command


def run_case(case: Case, adapter: str, base: Path) -> CaseResult:
    """One case end to end (module docstring)."""
    return _CaseRun(case, adapter, base).run()


class _CaseRun:
    """The state of one case while it runs; the lease token lives only here (a `Secret`)."""

    def __init__(self, case: Case, adapter: str, base: Path) -> None:
        self.began = time.monotonic()
        self.case = case
        self.adapter = adapter
        self.dirs = _Dirs(base / f"{adapter}-{_slug(case.label)}-{secrets.token_hex(3)}")
        self.token = Secret.of(secrets.token_urlsafe(32), "lease_token")
        run_id = f"run-km-{secrets.token_hex(4)}"
        self.attempt_id = f"{run_id}-a1"
        self.run_id = run_id
        self.spec: dict[str, object] = {
            "run_id": run_id,
            "attempt_id": self.attempt_id,
            "project_id": "proj",
            "task_id": "task",
            "task_revision": 1,
            "argv": _child_argv(case, self.dirs.marker),
        }
        self.offer_id = ""
        self.failures: list[str] = []
        self.paths: list[str] = []
        self.workers: list[WorkerProcess] = []
        self.self_kills = 0
        self.external_kills = 0
        self.granted_at: float | None = None
        self.control = HarnessControlPlane(self.dirs.control)

    def run(self) -> CaseResult:
        try:
            try:
                self._runs()
            except Exception as exc:  # a harness bug must fail the case, never hang the matrix
                self.failures.append(f"harness: {type(exc).__name__}")
            finally:
                for worker in self.workers:
                    worker.close()
            return self._verify()
        finally:
            self.control.close()

    def _runs(self) -> None:
        self.control.admit(self.run_id, self.attempt_id)
        plan: list[str | None] = [*self.case.kills, None]
        for index, kill in enumerate(plan):
            if not self._one_run(index, kill):
                return

    def _grant(self) -> Offer | None:
        """Grants the Run's lease now that the first Worker is `ready` (so the lease's clock does
        not run while an interpreter starts: KM-10) and returns the first offer."""
        case = self.case
        self.control.grant(self.run_id, self.attempt_id, self.token, case.lease_ms)
        self.granted_at = time.monotonic()
        first = self.control.offer(self.attempt_id, self.token, self.spec, DeliveryKind.NEW_CLAIM)
        if first is None:
            self.failures.append("run 0: the lease was no longer leased right after its grant")
            return None
        self.offer_id = first.offer_id
        return first

    def _situation(self, worker: WorkerProcess) -> str:
        """What the control plane and the Worker showed when a deadline expired (ids, states,
        codes and event names only: S-1)."""
        status = self.control.attempt(self.attempt_id).status.value
        lease = ""
        if self.granted_at is not None:
            ago = time.monotonic() - self.granted_at
            lease = f", its {self.case.lease_ms} ms lease granted {ago:.1f} s ago"
        codes = sorted(
            {
                str(e.get("code"))
                for e in worker.events
                if e.get("event") == "delivery" and e.get("kind") == "rejected"
            }
        )
        rejected = f", deliveries rejected with {', '.join(codes)}" if codes else ""
        return f"the Attempt is {status}{lease}{rejected}; the Worker's last event: " + (
            worker.last_event()
        )

    def _one_run(self, index: int, kill: str | None) -> bool:
        """One Worker process; False when the case cannot go on."""
        external = kill is not None and kill.startswith(EXTERNAL)
        point = None if kill is None or external else kill
        command = _worker_command(self.dirs, self.adapter, self.case, point, restarted=index > 0)
        worker = WorkerProcess(command, self.dirs.root / "worker.stderr")
        self.workers.append(worker)
        ready = worker.wait_event("ready", READY_DEADLINE_S)
        if ready is Waited.DEADLINE:
            self.paths.append(_path_of(worker))
            self.failures.append(
                f"run {index}: deadline: no `ready` within {READY_DEADLINE_S:.0f} s of the "
                f"Worker's start ({self._situation(worker)})"
            )
            return False
        if ready is Waited.SEEN:  # exec'd and started: its argv and environment are final
            for where in _secret_in_process(worker.pid, self.token.reveal()):
                self.failures.append(f"run {index}: lease token in {where}")
        elif worker.wait(EXIT_DEADLINE_S) is None:  # its output ended: it is dying
            self.paths.append(_path_of(worker))
            self.failures.append(
                f"run {index}: deadline: the Worker closed its output before `ready` and had "
                f"not exited {EXIT_DEADLINE_S:.0f} s later"
            )
            return False
        if index == 0 and ready is Waited.SEEN:
            first = self._grant()
            if first is None:
                return False
            worker.send(encode_delivery(first))
        delay = int(kill.split(":", 1)[1]) / 1000 if external and kill else None
        end, drive_s = self._drive(worker, kill_after=delay)
        self.paths.append(_path_of(worker))
        if kill is None:
            if end is DriveEnd.DEADLINE:
                self.failures.append(
                    f"run {index}: deadline: the Attempt was not terminal within the drive's "
                    f"{drive_s:.0f} s ({self._situation(worker)})"
                )
            elif end is DriveEnd.DIED and not self.control.terminal(self.attempt_id):
                self.failures.append(
                    f"run {index}: the last Worker died before the Attempt converged "
                    f"({self._situation(worker)})"
                )
            code = worker.stop()
            if code is None:
                self.failures.append(
                    f"run {index}: deadline: the last Worker had not exited "
                    f"{STOP_DEADLINE_S:.0f} s after `stop`"
                )
            elif code != 0:
                self.failures.append(
                    f"run {index}: the last Worker exited with {code} "
                    f"(last event: {worker.last_event()})"
                )
            self.paths[-1] = _path_of(worker)
            return True
        if end is DriveEnd.DEADLINE:
            self.failures.append(
                f"run {index}: deadline: {kill} not reached within the drive's {drive_s:.0f} s "
                f"({self._situation(worker)})"
            )
            return False
        # An armed boundary may lie just after the commit the harness saw (the journal write
        # that follows it): wait for the announcement, not for a guessed while.
        if (
            end is DriveEnd.TERMINAL
            and point is not None
            and not worker.fired()
            and worker.wait_event("kill", BOUNDARY_DEADLINE_S) is Waited.DEADLINE
        ):
            self.failures.append(
                f"run {index}: deadline: {kill} not reached {BOUNDARY_DEADLINE_S:.0f} s "
                f"after the Attempt became terminal ({self._situation(worker)})"
            )
            return False
        code = worker.wait(EXIT_DEADLINE_S)
        self.paths[-1] = _path_of(worker)
        if code is None:
            self.failures.append(
                f"run {index}: deadline: the Worker had not exited {EXIT_DEADLINE_S:.0f} s "
                f"after {'its announced kill' if worker.fired() else 'its output ended'} "
                f"({self._situation(worker)})"
            )
            return False
        if code != -signal.SIGKILL:
            self.failures.append(
                f"run {index}: {kill} did not kill the Worker (exit {code}, last event: "
                f"{worker.last_event()})"
            )
            return False
        if point is None:
            self.external_kills += 1
            return True
        self.self_kills += 1
        fired = worker.fired()
        if fired != [KillPoint.parse(point).text]:
            self.failures.append(f"run {index}: announced kill points {fired}, not {point}")
        return True

    def _drive(self, worker: WorkerProcess, *, kill_after: float | None) -> tuple[DriveEnd, float]:
        """Until the Worker dies or the Attempt is terminal, every 0.25 s: redeliver the
        Attempt's current lease as `lease_recovery` while it is `leased` and scan for expired
        leases, as a control plane does; SIGKILL the Worker `kill_after` seconds in for an
        external kill. Bounded by the case's drive deadline (the lease, the child and the
        slack); returns how it ended and that deadline in seconds."""
        control, attempt_id = self.control, self.attempt_id
        began = time.monotonic()
        limit_s = self.case.lease_ms / 1000 + self.case.child_s + self.case.slack_s
        deadline = began + limit_s
        next_tick = began + _TICK_S
        while time.monotonic() < deadline:
            now = time.monotonic()
            if kill_after is not None and now - began >= kill_after:
                worker.kill()
                kill_after = None
            if not worker.alive():
                return DriveEnd.DIED, limit_s
            if kill_after is None and control.terminal(attempt_id):
                return DriveEnd.TERMINAL, limit_s
            if now >= next_tick:
                next_tick = now + _TICK_S
                kind = DeliveryKind.LEASE_RECOVERY
                offer = control.offer(attempt_id, self.token, self.spec, kind)
                if offer is not None:
                    worker.send(encode_delivery(offer))
                control.expire()
            # A poll cadence, not a guess at a speed: every exit above is re-checked each time.
            time.sleep(0.01 if kill_after is not None else 0.05)
        if not worker.alive():
            return DriveEnd.DIED, limit_s
        return (DriveEnd.TERMINAL if control.terminal(attempt_id) else DriveEnd.DEADLINE), limit_s

    def _verify(self) -> CaseResult:
        case, dirs, failures = self.case, self.dirs, self.failures
        attempt = self.control.attempt(self.attempt_id)
        status = attempt.status.value
        spawns = SpawnJournal(dirs.spawns).entries()
        spawn_lines = sum(1 for entry in spawns if entry[0] == self.offer_id)
        if len(spawns) != spawn_lines:
            failures.append("the spawn journal names another offer")
        try:
            child_runs = len(dirs.marker.read_text().splitlines())
        except FileNotFoundError:
            child_runs = 0
        try:
            receipt_left = CompletionReceiptStore(dirs.receipts).read(self.attempt_id) is not None
        except ReceiptStoreError:
            receipt_left = True
        state, reason, problem = (None, None, "no offer")
        if self.offer_id:
            state, reason, problem = _read_journal(self.adapter, dirs.journal, self.offer_id)
        if problem:
            failures.append(problem)
        if status not in case.expect:
            failures.append(f"terminal status {status}, expected one of {sorted(case.expect)}")
        if spawn_lines > 1:
            failures.append(f"{spawn_lines} Executor.start() calls for one offer (I-J1)")
        if child_runs > 1:
            failures.append(f"the child ran {child_runs} times")
        if child_runs > spawn_lines:
            failures.append("a child ran without a spawn line")
        completed = "succeeded" if case.exit_code == 0 else "failed"
        lost_completion = child_runs > 0 and not (
            status == completed and attempt.exit_code == case.exit_code
        )
        if lost_completion:
            failures.append(f"lost completion: the child ran, the Attempt is {status}")
        if status == "lost" and (child_runs or receipt_left):
            failures.append("lost although a child ran")
        if receipt_left:
            failures.append("a completion receipt was left behind")
        expected = _expected_journal(status, case)
        if not problem and (state, reason) != expected:
            failures.append(f"journal {state}({reason}), expected {expected[0]}({expected[1]})")
        self._check_token_absent()
        return CaseResult(
            label=case.label,
            adapter=self.adapter,
            kills=case.kills,
            self_kills=self.self_kills,
            external_kills=self.external_kills,
            status=status,
            exit_code=attempt.exit_code,
            journal_state=state,
            recovery_reason=reason,
            spawn_lines=spawn_lines,
            child_runs=child_runs,
            receipt_left=receipt_left,
            lost_completion=lost_completion,
            paths=tuple(self.paths),
            failures=tuple(failures),
            seconds=time.monotonic() - self.began,
        )

    def _check_token_absent(self) -> None:
        """S-1: the lease token is in no output this case produced (the journal and the pipe
        are the only places it may be)."""
        raw = self.token.reveal()
        texts = [
            ("spawn journal", _text(self.dirs.spawns / "spawns.log")),
            ("worker stderr", _text(self.dirs.root / "worker.stderr")),
            ("child marker", _text(self.dirs.marker)),
            ("report", " ".join(self.paths)),
        ]
        texts += [("worker stdout", "\n".join(w.lines)) for w in self.workers]
        for where, text in texts:
            if raw in text:
                self.failures.append(f"lease token in the {where}")


def _text(path: Path) -> str:
    try:
        return path.read_text("utf-8", "replace")
    except FileNotFoundError:
        return ""


# -- the matrix ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MatrixReport:
    results: tuple[CaseResult, ...]
    seconds: float

    @property
    def kills(self) -> int:
        return sum(r.self_kills + r.external_kills for r in self.results)

    @property
    def self_kills(self) -> int:
        return sum(r.self_kills for r in self.results)

    @property
    def external_kills(self) -> int:
        return sum(r.external_kills for r in self.results)

    @property
    def duplicate_spawns(self) -> int:
        return sum(r.duplicate_spawns for r in self.results)

    @property
    def lost_completions(self) -> int:
        return sum(1 for r in self.results if r.lost_completion)

    @property
    def failures(self) -> list[str]:
        return [f"[{r.adapter}] {r.label}: {f}" for r in self.results for f in r.failures]

    @property
    def points(self) -> set[str]:
        """The self-kill boundaries the matrix killed at."""
        return {KillPoint.parse(k).text for r in self.results for k in r.kills if _internal(k)}

    @property
    def journal_states(self) -> set[str]:
        """The §3.4 states whose write boundary (before or after) was killed."""
        states = {s.value for s in JournalState}
        return {p.split(":", 1)[1] for p in self.points if p.split(":", 1)[1] in states}

    def summary(self) -> str:
        lines = [
            f"kill matrix: {len(self.results)} cases, {self.kills} SIGKILLs "
            f"({self.self_kills} self-kills at {len(self.points)} points, "
            f"{self.external_kills} external at random delays), {self.seconds:.1f} s",
            f"journal states killed at: {len(self.journal_states)}/{len(JournalState)} "
            f"({', '.join(sorted(self.journal_states))})",
            f"duplicate spawns: {self.duplicate_spawns}   lost completions: "
            f"{self.lost_completions}   failures: {len(self.failures)}",
            f"outcomes: {dict(Counter(r.outcome for r in self.results))}",
            "",
            f"{'adapter':7} {'case':58} {'kills':>5} {'spawn':>5} {'ran':>3}  outcome  |  recovery",
        ]
        for r in sorted(self.results, key=lambda r: (r.label, r.adapter)):
            lines.append(
                f"{r.adapter:7} {r.label[:58]:58} {r.self_kills + r.external_kills:>5} "
                f"{r.spawn_lines:>5} {r.child_runs:>3}  {r.outcome}  |  {' || '.join(r.paths)}"
            )
        lines += [f"FAIL {f}" for f in self.failures]
        return "\n".join(lines)

    def as_json(self) -> dict[str, object]:
        return {
            "cases": len(self.results),
            "kills": self.kills,
            "self_kills": self.self_kills,
            "external_kills": self.external_kills,
            "points": sorted(self.points),
            "journal_states": sorted(self.journal_states),
            "duplicate_spawns": self.duplicate_spawns,
            "lost_completions": self.lost_completions,
            "failures": self.failures,
            "seconds": round(self.seconds, 1),
            "results": [
                {
                    "adapter": r.adapter,
                    "case": r.label,
                    "kills": list(r.kills),
                    "outcome": r.outcome,
                    "spawn_lines": r.spawn_lines,
                    "child_runs": r.child_runs,
                    "recovery": list(r.paths),
                    "seconds": round(r.seconds, 1),
                }
                for r in self.results
            ],
        }


def _internal(kill: str) -> bool:
    return not kill.startswith(EXTERNAL)


def _estimate_s(case: Case) -> float:
    """A case's expected duration on an idle machine, to start the longest first (an ordering
    only: nothing waits on it): a stale-lock window per restart, or the lease's expiry for a
    case that must end `lost`, whichever is longer, plus the child."""
    restarts = len(case.kills) * (STALE_WINDOW_MS / 1000 + 1.0)
    expiry = case.lease_ms / 1000 if case.expect == _LOST else 0.0
    return max(restarts, expiry) + case.child_s


def run_matrix(
    cases: Iterable[Case],
    adapters: Sequence[str] = ADAPTERS,
    *,
    parallel: int = 12,
    base: Path | None = None,
) -> MatrixReport:
    """Every case on every adapter, `parallel` at a time (the stale-window waits overlap);
    the longest cases first."""
    began = time.monotonic()
    jobs = [(case, adapter) for case in cases for adapter in adapters]
    jobs.sort(key=lambda job: -_estimate_s(job[0]))
    with contextlib.ExitStack() as stack:
        if base is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ql3-kill-")))
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            futures = [pool.submit(run_case, case, adapter, base) for case, adapter in jobs]
            results = tuple(future.result() for future in futures)
    return MatrixReport(results, time.monotonic() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.journal.kill_matrix")
    parser.add_argument("--deep", action="store_true", help="the nightly randomized matrix")
    parser.add_argument("--repetitions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--parallel", type=int, default=12)
    parser.add_argument("--adapters", default=",".join(ADAPTERS))
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    adapters = tuple(a for a in args.adapters.split(",") if a)
    if args.deep:
        seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
        cases = deep_cases(args.repetitions, seed)
        print(f"deep kill matrix, seed {seed}")
    else:
        cases = ci_cases() if args.seed is None else ci_cases(args.seed)
    report = run_matrix(cases, adapters, parallel=args.parallel)
    print(report.summary())
    if args.json is not None:
        Path(args.json).write_text(json.dumps(report.as_json(), indent=2) + "\n")
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main())
