"""The journal trace corpus (SPEC §7, component `journal`): recorded from the reference journal.

    .venv/bin/python -m conformance.journal.corpus --write   # rewrite conformance/traces/journal
    .venv/bin/python -m conformance.journal.corpus --check   # compare only; exit 1 on drift
    qlk traces generate --component journal [--check]        # the same

Named scenarios (`SCENARIOS`, one or more per CONF item: `INBOX-15-...`) are written as
`<name>.jsonl` (`.jsonl.gz` when over 256 KiB: the paging and size traces); `generated/` holds
`WALK_COUNT` seeded random walks over the reference (`walk-<seed>.jsonl.gz`, seeds from
`WALK_SEED`). Every scenario checks the outcome it claims while it records (`ScenarioError`
otherwise), so a trace cannot silently stop showing what its name says.

Records come from the kernel (`journal_step` from a delivery, never assembled by hand); every
lease token is `trace_token(name)`, so traces hold only placeholders and digests.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from conformance.journal.reference import ReferenceWorld
from conformance.journal.replay import Performed, perform
from conformance.journal.trace import (
    CRASH_POINTS,
    DAMAGES,
    DEFAULT_CAPACITY,
    ERRNOS,
    IO_POINTS,
    JOURNAL_CORPUS,
    MUTATIONS,
    OWNERSHIP_COMMANDS,
    RECEIPT_TAMPERS,
    RECORD_MAX,
    RETENTION_COMMANDS,
    Alternative,
    JournalCommand,
    JournalConfig,
    JournalExpectation,
    JournalFault,
    JournalStep,
    JournalTrace,
    dumps,
    outcome_vector,
    project_record,
    projection_digest,
    receipt_trace_document,
    record_trace_document,
)
from conformance.run.corpus import read_text, trace_paths, write_text
from conformance.run.trace import TokenNames, TraceHeader, trace_token
from kernel import Rejected, WorkerSession, execution_spec_digest, offer_id
from kernel.specs import (
    HARD_LIMITS,
    RETENTION_ORDER,
    CompletionOutcome,
    DeliveryKind,
    JournalState,
    LeaseStatus,
    RecoveryReason,
    WorkerSessionStatus,
)
from kernel.worker import (
    CompletionAcknowledged,
    ControlPlaneAlreadyRunning,
    DeliveryAccepted,
    FailStartAcknowledged,
    HandleReturned,
    JournalApplied,
    JournalCorrupt,
    JournalEvent,
    JournalRecord,
    LaunchOutcomeUnknown,
    Offer,
    OfferCandidate,
    OfferLease,
    OfferWorker,
    PrepareFailed,
    PrepareSucceeded,
    RunningAcknowledged,
    StartingAcknowledged,
    decide_delivery,
    decode_record,
    encode_record,
    journal_step,
)
from runners.worker.journal.lock import DEFAULT_STALE_WINDOW_MS
from runners.worker.posix.receipts import Receipt

T0: Final = 1_000_000
WALK_SEED: Final = 6_000
WALK_COUNT: Final = 30
WALK_STEPS: Final = 24
GZIP_OVER: Final = 256 * 1024
FULL: Final = "JOURNAL_FULL"
EXISTS: Final = "JOURNAL_RECORD_EXISTS"
CONFLICT: Final = "JOURNAL_REVISION_CONFLICT"
CORRUPT: Final = "JOURNAL_CORRUPT"
TOO_LARGE: Final = "JOURNAL_RECORD_TOO_LARGE"
NOT_OWNED: Final = "JOURNAL_NOT_OWNED"
LOCKED: Final = "JOURNAL_LOCKED"
PERMISSIONS: Final = "JOURNAL_PERMISSIONS"
COMPROMISED: Final = "JOURNAL_COMPROMISED"
_WINDOW: Final = HARD_LIMITS.journal_stale_window_ms


class ScenarioError(AssertionError):
    """A scenario no longer shows what it claims (an expected outcome did not happen)."""


# -- records ---------------------------------------------------------------------------------
def offer(generation: int, *, argv: Sequence[str] = ("echo", "hello")) -> Offer:
    """The offer of Run `r<generation>` (one distinct offer id per generation >= 1); its lease
    token is `trace_token("lease-<generation>")`."""
    run, attempt = f"r{generation}", f"r{generation}-a1"
    lease = OfferLease(
        run_id=run,
        attempt_id=attempt,
        lease_generation=1,
        version=2,
        status=LeaseStatus.LEASED,
        worker_id="w1",
        worker_session_id="s1",
        worker_generation=1,
        lease_token=trace_token(f"lease-{generation}"),
        expires_at_ms=T0 + 30_000,
    )
    spec: dict[str, object] = {
        "run_id": run,
        "attempt_id": attempt,
        "project_id": "proj",
        "task_id": "task",
        "task_revision": 1,
        "argv": list(argv),
    }
    return Offer(
        offer_id=offer_id(attempt, 1, "w1", "s1", 1),
        execution_spec_digest=execution_spec_digest(spec),
        delivery_kind=DeliveryKind.NEW_CLAIM,
        candidate=OfferCandidate(run, attempt, "proj", "task", 1, "shell"),
        worker=OfferWorker("w1", "s1", 1),
        lease=lease,
        execution_spec=spec,
    )


def _applied(record: JournalRecord | None, event: JournalEvent, at_ms: int) -> JournalRecord:
    outcome = journal_step(record, event, at_ms)
    if not isinstance(outcome, JournalApplied) or outcome.record is None:
        raise ScenarioError(f"the kernel refused {type(event).__name__}: {outcome}")
    return outcome.record


#: The kernel paths a record can take (§3.6), after `accepted`.
PATHS: Final[dict[str, Callable[[OfferLease, int], tuple[JournalEvent, ...]]]] = {
    # accepted, starting_acknowledged, launching, started, running_acknowledged,
    # completion_acknowledged
    "completed": lambda lease, g: (
        StartingAcknowledged(_with_version(lease, 3)),
        PrepareSucceeded(1, trace_token(f"callback-{g}").digest(), T0 + 5),
        HandleReturned(f"posix:v1:boot:{4000 + g}:99"),
        RunningAcknowledged(),
        CompletionAcknowledged(),
    ),
    # accepted, starting_acknowledged, start_failed, start_failure_acknowledged
    "start_failed": lambda lease, g: (
        StartingAcknowledged(_with_version(lease, 3)),
        PrepareFailed("PREPARE_FAILED"),
        FailStartAcknowledged(),
    ),
    # accepted, recovery_required(control_plane_already_running)
    "recovery": lambda lease, g: (ControlPlaneAlreadyRunning(),),
}


def _with_version(lease: OfferLease, version: int) -> OfferLease:
    return OfferLease(
        lease.run_id,
        lease.attempt_id,
        lease.lease_generation,
        version,
        lease.status,
        lease.worker_id,
        lease.worker_session_id,
        lease.worker_generation,
        lease.lease_token,
        lease.expires_at_ms,
    )


def chain(
    generation: int, path: str = "completed", *, argv: Sequence[str] = ("echo", "hello")
) -> tuple[JournalRecord, ...]:
    """Revisions 0.. of one offer along a kernel path, one step per millisecond."""
    first = _applied(None, DeliveryAccepted(offer(generation, argv=argv)), T0)
    records = [first]
    for i, event in enumerate(PATHS[path](first.offer.lease, generation)):
        records.append(_applied(records[-1], event, T0 + i + 1))
    return tuple(records)


def sized(generation: int, size: int) -> JournalRecord:
    """Revision 0 of offer `generation` whose canonical bytes are exactly `size` long."""
    base = len(encode_record(chain(generation, argv=("echo", ""))[0]))
    if size < base:
        raise ValueError(f"size: at least {base}")
    record = chain(generation, argv=("echo", "x" * (size - base)))[0]
    assert len(encode_record(record)) == size
    return record


# -- faults ----------------------------------------------------------------------------------
def crash(at: str) -> JournalFault:
    """A crash at a neutral point: before commit (`start`, `write`, `sync`) or after
    (`publish`, `finish`: durable, the response lost)."""
    kind = next(k for k, points in CRASH_POINTS.items() if at in points)
    return JournalFault(kind, at=at)


def io_error(at: str, errno_name: str) -> JournalFault:
    return JournalFault("io_error", at=at, errno=errno_name)


# -- the recorder ----------------------------------------------------------------------------
class JournalRecorder:
    """Records a journal trace from the reference: each step is performed with
    `conformance.journal.replay.perform` (the replayer's own function) and kept with its full
    expectation. `expect` (an outcome: `ok`, a code, `invalid`, `crashed`) is checked."""

    def __init__(
        self,
        name: str,
        description: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        seed: int = 0,
    ) -> None:
        self.header = TraceHeader(
            name=name, component="journal", profile="worker", seed=seed, description=description
        )
        self.config = JournalConfig(capacity)
        self.world = ReferenceWorld(capacity)
        self.names = TokenNames()
        self.steps: list[JournalStep] = []
        self.aliases: dict[str, str] = {}
        self.capabilities: set[str] = set()
        self.closed = False

    # -- commands ----------------------------------------------------------------------------
    def _record_command(self, name: str, record: JournalRecord, **args: Any) -> JournalCommand:
        return JournalCommand(name, {"record": record_trace_document(record, self.names), **args})

    def create_command(self, record: JournalRecord) -> JournalCommand:
        return self._record_command("create", record)

    def replace_command(self, record: JournalRecord, expected: int) -> JournalCommand:
        return self._record_command("replace", record, expected_revision=expected)

    @staticmethod
    def remove_command(oid: str, expected: int) -> JournalCommand:
        return JournalCommand("remove", {"offer_id": oid, "expected_revision": expected})

    # -- steps -------------------------------------------------------------------------------
    def step(
        self,
        command: JournalCommand | None,
        fault: JournalFault | None = None,
        *,
        expect: str | None = None,
    ) -> Performed:
        if self.closed:
            raise ScenarioError("a concurrent step with several outcomes ends its trace")
        branching = command is not None and command.name in ("concurrent", "race_acquire")
        before = copy.deepcopy(self.world) if branching else None
        actual = perform(self.world, command, fault, self.aliases)
        projected = self.world.project()
        alternatives: tuple[Alternative, ...] = ()
        if before is not None and command is not None:
            alternatives = self._alternatives(before, command)
            if len(alternatives) > 1:
                self.closed = True
        self._capabilities(command, fault)
        outcome = actual.code if actual.kind == "error" else actual.kind
        if expect is not None and outcome != expect:
            raise ScenarioError(
                f"{self.header.name} step {len(self.steps) + 1}: expected {expect}, got {outcome}"
            )
        mutation = command is not None and command.name in MUTATIONS
        self.steps.append(
            JournalStep(
                step=len(self.steps) + 1,
                command=command,
                fault=fault,
                expect=JournalExpectation(
                    kind=actual.kind,
                    code=actual.code if actual.kind == "error" else None,
                    result=actual.result,
                    projection=projected,
                    digest=projection_digest(projected),
                    untouched=mutation
                    and fault is None
                    and actual.kind in ("error", "invalid")
                    and not actual.touched,
                    alternatives=alternatives,
                ),
            )
        )
        return actual

    def _capabilities(self, command: JournalCommand | None, fault: JournalFault | None) -> None:
        if fault is not None and fault.kind in ("crash_before_commit", "crash_after_commit"):
            self.capabilities.add("faults")
        if fault is not None and fault.kind == "io_error":
            self.capabilities.add("faults")
        if fault is not None and fault.kind == "corrupt":
            self.capabilities.add("corruption")
        if command is not None and command.name == "concurrent":
            self.capabilities.add("concurrency")
        if command is not None and (command.name == "race_acquire" or command.actor != "main"):
            self.capabilities.add("second_process")
        receipts = fault is not None and fault.what in RECEIPT_TAMPERS
        if (fault is not None and fault.kind in ("clock", "tamper") and not receipts) or (
            fault is not None and fault.stale_window_ms is not None
        ):
            self.capabilities.add("ownership")
        if command is not None and command.name in OWNERSHIP_COMMANDS:
            self.capabilities.add("ownership")
        if receipts or (command is not None and command.name in RETENTION_COMMANDS):
            self.capabilities.add("retention")

    def _alternatives(
        self, before: ReferenceWorld, command: JournalCommand
    ) -> tuple[Alternative, ...]:
        """Every serial order of the concurrent operations, grouped by the projection it
        leaves; the order as listed comes first (it is what the reference itself did)."""
        acquire = JournalCommand("acquire", {})
        actors: list[tuple[str, JournalCommand]] = (
            [("main", acquire), ("rival", acquire)]
            if command.name == "race_acquire"
            else [("main", c) for c in command.operations]
        )
        groups: dict[str, tuple[Any, list[tuple[str, ...]]]] = {}
        for order in itertools.permutations(range(len(actors))):
            world = copy.deepcopy(before)
            results: dict[int, Any] = {}
            for index in order:
                actor, operation = actors[index]
                results[index] = world.call(actor, operation, None)
            vector = outcome_vector([results[i] for i in range(len(actors))])
            projected = world.project()
            digest = projection_digest(projected)
            vectors = groups.setdefault(digest, (projected, []))[1]
            if vector not in vectors:
                vectors.append(vector)
        return tuple(Alternative(tuple(v), p, d) for d, (p, v) in groups.items())

    def acquire(self, actor: str = "main", *, expect: str | None = "ok") -> Performed:
        return self.step(JournalCommand("acquire", {}, actor), expect=expect)

    def release(self, actor: str = "main", *, expect: str | None = "ok") -> Performed:
        return self.step(JournalCommand("release", {}, actor), expect=expect)

    def create(
        self,
        record: JournalRecord,
        *,
        actor: str = "main",
        fault: JournalFault | None = None,
        expect: str | None = "ok",
    ) -> Performed:
        command = self.create_command(record)
        return self.step(JournalCommand("create", command.args, actor), fault, expect=expect)

    def replace(
        self,
        record: JournalRecord,
        expected: int,
        *,
        actor: str = "main",
        fault: JournalFault | None = None,
        expect: str | None = "ok",
    ) -> Performed:
        command = self.replace_command(record, expected)
        return self.step(JournalCommand("replace", command.args, actor), fault, expect=expect)

    def remove(
        self,
        oid: str,
        expected: int,
        *,
        actor: str = "main",
        fault: JournalFault | None = None,
        expect: str | None = "ok",
    ) -> Performed:
        command = self.remove_command(oid, expected)
        return self.step(JournalCommand("remove", command.args, actor), fault, expect=expect)

    def read(
        self,
        oid: str,
        *,
        actor: str = "main",
        expect: str | None = "ok",
        record: JournalRecord | bool | None = False,
    ) -> Performed:
        """`record`: the revision the read must return (None: no record; False: unchecked)."""
        done = self.step(JournalCommand("read", {"offer_id": oid}, actor), expect=expect)
        if record is not False:
            wanted = None if record is None or record is True else project_record(record)
            if done.result != wanted:
                raise ScenarioError(f"{self.header.name}: read returned another revision")
        return done

    def list(
        self,
        after: str | None,
        limit: int,
        *,
        actor: str = "main",
        expect: str | None = "ok",
        ids: Sequence[str] | None = None,
    ) -> Performed:
        """`ids`: the offer ids the page must hold, in order."""
        command = JournalCommand("list", {"after": after, "limit": limit}, actor)
        done = self.step(command, expect=expect)
        if ids is not None and [i["offer_id"] for i in done.result["items"]] != list(ids):
            raise ScenarioError(f"{self.header.name}: the page holds other records")
        return done

    def batch(self, commands: Sequence[JournalCommand], *, expect: Sequence[str]) -> Performed:
        done = self.step(JournalCommand("batch", {}, "main", tuple(commands)))
        if done.result != list(expect):
            raise ScenarioError(f"{self.header.name}: batch outcomes {done.result}")
        return done

    def concurrent(self, commands: Sequence[JournalCommand]) -> Performed:
        return self.step(JournalCommand("concurrent", {}, "main", tuple(commands)))

    def race_acquire(self) -> Performed:
        return self.step(JournalCommand("race_acquire", {}))

    def reopen(self, *, expect: str | None = "ok", stale_window_ms: int | None = None) -> Performed:
        return self.step(
            None, JournalFault("reopen", stale_window_ms=stale_window_ms), expect=expect
        )

    def advance(self, ms: int) -> Performed:
        return self.step(None, JournalFault("clock", ms=ms), expect="ok")

    def tamper(self, what: str) -> Performed:
        return self.step(None, JournalFault("tamper", what=what), expect="ok")

    def refresh(self, *, result: bool | None) -> Performed:
        """One tick of the main instance's refresh timer; `result`: what it must return (None:
        no timer runs)."""
        done = self.step(JournalCommand("refresh", {}), expect="ok")
        if done.result is not result:
            raise ScenarioError(f"{self.header.name}: refresh returned {done.result}")
        return done

    def timers(self, *, started: int, interval_ms: int | None) -> Performed:
        done = self.step(JournalCommand("timers", {}), expect="ok")
        wanted = {"started": started, "interval_ms": interval_ms, "threads": 0}
        if done.result != wanted:
            raise ScenarioError(f"{self.header.name}: timers {done.result}")
        return done

    def audit(self, page_size: int, pages: int, *, expect: str | None = "ok") -> Performed:
        command = JournalCommand("audit", {"page_size": page_size, "pages": pages})
        return self.step(command, expect=expect)

    def corrupt(self, oid: str, damage: str) -> Performed:
        return self.step(None, JournalFault("corrupt", offer_id=oid, damage=damage), expect="ok")

    def receipt(self, receipt: Receipt, *, expect: str | None = "ok") -> Performed:
        document = receipt_trace_document(receipt, self.names)
        return self.step(JournalCommand("receipt", {"receipt": document}), expect=expect)

    def retention(
        self,
        cursor: str | None,
        observed_at_ms: int,
        retention_ms: int,
        *,
        page_size: int = 16,
        delete_budget: int = 8,
        expect: str | None = "ok",
    ) -> Performed:
        """One §3.14 call; checked here against the page and delete bounds it was given."""
        args = {
            "cursor": cursor,
            "observed_at_ms": observed_at_ms,
            "retention_ms": retention_ms,
            "page_size": page_size,
            "delete_budget": delete_budget,
        }
        done = self.step(JournalCommand("retention", args), expect=expect)
        if done.kind == "ok" and (
            done.result["examined"] > page_size or len(done.result["deleted"]) > delete_budget
        ):
            raise ScenarioError(f"{self.header.name}: retention beyond its bounds {done.result}")
        return done

    def trace(self) -> JournalTrace:
        header = TraceHeader(
            name=self.header.name,
            component="journal",
            profile=self.header.profile,
            seed=self.header.seed,
            description=self.header.description,
            capabilities=tuple(sorted(self.capabilities)),
        )
        return JournalTrace(header, self.config, tuple(self.steps))


def _ids(records: Sequence[JournalRecord]) -> list[str]:
    return sorted(r.offer_id for r in records)


# -- named scenarios -------------------------------------------------------------------------
def inbox_02_stale_expected_revision() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-02-stale-expected-revision-changes-nothing",
        "INBOX-02: a replace or remove with a stale, skipping or ahead expected revision, or "
        "for an offer without a record, is JOURNAL_REVISION_CONFLICT and changes nothing; "
        "revisions grow by exactly one",
    )
    c, other = chain(1), chain(2)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    r.replace(c[1], 0)
    r.replace(c[2], 0, expect=CONFLICT)  # stale: the store holds revision 1
    r.replace(c[1], 0, expect=CONFLICT)  # the same revision again
    r.replace(c[3], 1, expect=CONFLICT)  # skips revision 2
    r.replace(c[3], 2, expect=CONFLICT)  # expected ahead of the store
    r.replace(other[1], 0, expect=CONFLICT)  # an offer without a record
    r.remove(oid, 0, expect=CONFLICT)  # stale remove
    r.remove(oid, 2, expect=CONFLICT)  # remove ahead
    r.create(c[0], expect=EXISTS)  # a second revision 0
    r.read(oid, record=c[1])
    for record in c[2:]:
        r.replace(record, record.revision - 1)
        r.replace(record, record.revision - 1, expect=CONFLICT)  # the write replayed
    r.read(oid, record=c[-1])
    r.list(None, 64, ids=[oid])
    return r.trace()


def inbox_15_crash_create() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-15-crash-at-every-create-step-leaves-last-durable-revision",
        "INBOX-15: a crash at every step of a create (before the temporary is written, after "
        "its write, after its fsync before link; after link, after the directory fsync) "
        "leaves, after restart, no record or the complete revision 0, never a partial file",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    for at in CRASH_POINTS["crash_before_commit"]:
        r.create(c[0], fault=crash(at), expect="crashed")
        r.reopen()
        r.read(oid, record=None)
        r.list(None, 64, ids=[])
    for at in CRASH_POINTS["crash_after_commit"]:
        r.create(c[0], fault=crash(at), expect="crashed")
        r.reopen()
        r.read(oid, record=c[0])
        r.remove(oid, 0)
    r.create(c[0])
    r.read(oid, record=c[0])
    return r.trace()


def inbox_15_crash_replace() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-15-crash-at-every-replace-step-leaves-last-durable-revision",
        "INBOX-15: a crash at every step of a replace (before the temporary, after its write, "
        "after its fsync before rename) leaves the previous revision after restart; a crash "
        "after rename leaves the new one; never a partial file",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    after = itertools.cycle(CRASH_POINTS["crash_after_commit"])
    for record in c[1:]:
        for at in CRASH_POINTS["crash_before_commit"]:
            r.replace(record, record.revision - 1, fault=crash(at), expect="crashed")
            r.reopen()
            r.read(oid, record=c[record.revision - 1])
        r.replace(record, record.revision - 1, fault=crash(next(after)), expect="crashed")
        r.reopen()
        r.read(oid, record=record)
    r.list(None, 64, ids=[oid])
    return r.trace()


def inbox_15_crash_remove() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-15-crash-during-remove-leaves-the-record-or-nothing",
        "INBOX-15: a crash before the unlink of a remove leaves the record; after the unlink "
        "(or after the directory fsync) the record is gone after restart; the other record "
        "is untouched",
    )
    c, keep = chain(1), chain(2)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    r.create(keep[0])
    r.replace(c[1], 0)
    r.remove(oid, 1, fault=crash("start"), expect="crashed")
    r.reopen()
    r.read(oid, record=c[1])
    r.remove(oid, 1, fault=crash("publish"), expect="crashed")
    r.reopen()
    r.read(oid, record=None)
    r.create(c[0])
    r.remove(oid, 0, fault=crash("finish"), expect="crashed")
    r.reopen()
    r.read(oid, record=None)
    r.read(keep[0].offer_id, record=keep[0])
    return r.trace()


def inbox_15_response_lost() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-15-crash-after-publish-the-retried-write-finds-the-durable-revision",
        "INBOX-15: after a crash once the create or replace was published (the response is "
        "lost), the restarted writer retrying the same write is refused (exists / revision "
        "conflict) and reads the durable revision",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0], fault=crash("publish"), expect="crashed")
    r.reopen()
    r.create(c[0], expect=EXISTS)
    r.read(oid, record=c[0])
    r.replace(c[1], 0, fault=crash("publish"), expect="crashed")
    r.reopen()
    r.replace(c[1], 0, expect=CONFLICT)
    r.read(oid, record=c[1])
    r.replace(c[2], 1, fault=crash("finish"), expect="crashed")
    r.reopen()
    r.replace(c[2], 1, expect=CONFLICT)
    r.replace(c[3], 2)
    r.read(oid, record=c[3])
    return r.trace()


def inbox_15_concurrent_one_offer() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-15-concurrent-creates-of-one-offer-yield-exactly-one-record",
        "INBOX-15: three concurrent creates of one offer id: exactly one succeeds, the others "
        "are JOURNAL_RECORD_EXISTS, one record; three concurrent replaces from one revision: "
        "exactly one succeeds",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.concurrent([r.create_command(c[0])] * 3)
    r.read(oid, record=c[0])
    r.concurrent([r.replace_command(c[1], 0)] * 3)
    r.read(oid, record=c[1])
    r.list(None, 64, ids=[oid])
    return r.trace()


def inbox_15_torn_records() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-15-a-torn-record-is-reported-corrupt-never-skipped-or-deleted",
        "INBOX-15 (F-9): a truncated, one byte short or empty record file is never taken for "
        "a record: read, list, replace and remove fail JOURNAL_CORRUPT, the bytes stay (also "
        "after restart), the other records are intact",
    )
    chains = [chain(g) for g in range(1, 5)]
    good = chains[0]
    r.acquire()
    for c in chains:
        r.create(c[0])
    for c, damage in zip(chains[1:], ("truncated", "one_byte_short", "empty"), strict=True):
        oid = c[0].offer_id
        r.corrupt(oid, damage)
        r.read(oid, expect=CORRUPT)
        r.list(None, 64, expect=CORRUPT)
        r.replace(c[1], 0, expect=CORRUPT)
        r.remove(oid, 0, expect=CORRUPT)
        r.create(c[0], expect=EXISTS)
        r.read(good[0].offer_id, record=good[0])
    r.reopen()
    r.list(None, 64, expect=CORRUPT)
    r.replace(good[1], 0)
    r.read(good[0].offer_id, record=good[1])
    return r.trace()


def inbox_17_full() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-17-full-whatever-the-states-nothing-evicted",
        "INBOX-17: at capacity 5, with records in accepted, launching, completion_acknowledged,"
        " start_failure_acknowledged and recovery_required, a create is JOURNAL_FULL (also "
        "after restart); nothing is evicted; room made by an explicit remove is used again",
        capacity=5,
    )
    setups = [(1, "completed", 0), (2, "completed", 2), (3, "completed", 5)]
    setups += [(4, "start_failed", 3), (5, "recovery", 1)]
    kept: list[JournalRecord] = []
    r.acquire()
    for generation, path, last in setups:
        c = chain(generation, path)
        r.create(c[0])
        for record in c[1 : last + 1]:
            r.replace(record, record.revision - 1)
        kept.append(c[last])
    extra = [chain(6)[0], chain(7)[0]]
    for record in extra:
        r.create(record, expect=FULL)
        r.read(record.offer_id, record=None)
    r.list(None, 64, ids=_ids(kept))
    r.reopen()
    r.create(extra[0], expect=FULL)
    final = kept[2]  # completion_acknowledged: removed explicitly (retention), never evicted
    r.remove(final.offer_id, final.revision)
    r.create(extra[0])
    r.create(extra[1], expect=FULL)
    r.list(None, 64, ids=_ids([*kept[:2], *kept[3:], extra[0]]))
    return r.trace()


def inbox_18_too_large() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-18-record-over-192-kib-refused-before-any-write",
        "INBOX-18: a record of 196,609 bytes or more is JOURNAL_RECORD_TOO_LARGE before any "
        "write (no temporary file, no write statement); exactly 196,608 bytes is stored; an "
        "oversized replace leaves the stored revision",
    )
    r.acquire()
    over = sized(1, RECORD_MAX + 1)
    r.create(over, expect=TOO_LARGE)
    r.create(sized(1, 200 * 1024), expect=TOO_LARGE)
    r.read(over.offer_id, record=None)
    exact = sized(1, RECORD_MAX)
    r.create(exact)
    grown = _applied(exact, StartingAcknowledged(_with_version(exact.offer.lease, 3)), T0 + 1)
    assert len(encode_record(grown)) > RECORD_MAX
    r.replace(grown, 0, expect=TOO_LARGE)
    r.list(None, 64, ids=[exact.offer_id])
    r.remove(exact.offer_id, 0)
    return r.trace()


def inbox_19_pages() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-19-pages-hold-at-most-64-in-ascending-order-exactly-once",
        "INBOX-19: 65 records: limit 64 gives 64 then 1 (has_more exact), every page ascending "
        "strictly after its cursor; limits 0 and 65 are refused; pages of 13 concatenate to "
        "every record exactly once",
        capacity=70,
    )
    records = [chain(g)[0] for g in range(1, 66)]
    ids = _ids(records)
    r.acquire()
    r.batch([r.create_command(x) for x in records], expect=["ok"] * len(records))
    r.list(None, 64, ids=ids[:64])
    r.list(ids[63], 64, ids=ids[64:])
    r.list(ids[-1], 64, ids=[])
    r.list(None, 65, expect="invalid")
    r.list(None, 0, expect="invalid")
    cursor: str | None = None
    for start in range(0, len(ids), 13):
        r.list(cursor, 13, ids=ids[start : start + 13])
        cursor = ids[start + 12] if start + 12 < len(ids) else ids[-1]
    r.list("0" * 64, 1, ids=ids[:1])
    r.list("f" * 64, 64, ids=[])
    return r.trace()


def inbox_19_changes_between_pages() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-19-concatenated-pages-list-every-unchanged-record-once",
        "INBOX-19: a walk in pages of 3 while records change between pages (one replaced, one "
        "removed, one created): every unchanged record is listed exactly once",
        capacity=10,
    )
    records = {g: chain(g) for g in range(1, 9)}
    ids = _ids([c[0] for c in records.values()])
    by_id = {c[0].offer_id: c for c in records.values()}
    r.acquire()
    for c in records.values():
        r.create(c[0])
    r.list(None, 3, ids=ids[:3])
    changed = by_id[ids[1]]
    r.replace(changed[1], 0)  # already listed: changed
    r.remove(ids[5], 0)  # not listed yet: removed
    r.create(chain(9)[0])
    r.list(ids[2], 3)
    r.list(None, 64)
    cursor: str | None = None
    while True:
        page = r.list(cursor, 3).result
        if not page["has_more"]:
            break
        cursor = page["cursor"]
    return r.trace()


def inbox_19_corrupt_pages() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-19-a-corrupt-record-fails-every-page-that-holds-it",
        "INBOX-19 (F-9): a record that is not JSON or breaks the schema is never skipped: "
        "every page holding it fails JOURNAL_CORRUPT, pages before it list the others, the "
        "record stays after restart",
        capacity=10,
    )
    chains = [chain(g) for g in range(1, 7)]
    ids = _ids([c[0] for c in chains])
    r.acquire()
    for c in chains:
        r.create(c[0])
    # The later one first, so that the pages before each damaged record hold only good ones.
    for target, damage in ((ids[4], "schema_violation"), (ids[1], "not_json")):
        r.corrupt(target, damage)
        position = ids.index(target)
        r.list(None, position, ids=ids[:position])
        r.list(None, position + 1, expect=CORRUPT)
        r.list(ids[position - 1], 1, expect=CORRUPT)
        r.list(target, 2, ids=ids[position + 1 : position + 3])
        r.read(target, expect=CORRUPT)
        r.remove(target, 0, expect=CORRUPT)
    r.reopen()
    r.read(ids[4], expect=CORRUPT)
    r.read(ids[0])
    r.list(None, 1, ids=ids[:1])
    r.list(None, 64, expect=CORRUPT)
    return r.trace()


def inbox_20_concurrent_creates() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-20-concurrent-creates-of-distinct-offers-never-exceed-capacity",
        "INBOX-20: at capacity 4 with 2 records, 4 concurrent creates of distinct offers: "
        "exactly 2 succeed, 2 are JOURNAL_FULL, 4 records, never more",
        capacity=4,
    )
    r.acquire()
    r.create(chain(1)[0])
    r.create(chain(2)[0])
    r.concurrent([r.create_command(chain(g)[0]) for g in range(3, 7)])
    return r.trace()


def inbox_20_remove_races_replace() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-20-remove-racing-replace-has-one-winner",
        "INBOX-20: a remove and a replace from the same revision, concurrently: exactly one "
        "wins, the other is JOURNAL_REVISION_CONFLICT, and the journal is what the winner left",
    )
    c = chain(1)
    r.acquire()
    r.create(c[0])
    r.replace(c[1], 0)
    r.concurrent([r.remove_command(c[0].offer_id, 1), r.replace_command(c[2], 1)])
    return r.trace()


def inbox_20_serial_order() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-20-remove-and-replace-in-either-order-are-revision-conditional",
        "INBOX-20: a replace then a remove from the old revision, or a remove then a replace: "
        "the second is JOURNAL_REVISION_CONFLICT and changes nothing",
    )
    a, b = chain(1), chain(2)
    r.acquire()
    r.create(a[0])
    r.create(b[0])
    r.replace(a[1], 0)
    r.remove(a[0].offer_id, 0, expect=CONFLICT)
    r.read(a[0].offer_id, record=a[1])
    r.remove(b[0].offer_id, 0)
    r.replace(b[1], 0, expect=CONFLICT)
    r.read(b[0].offer_id, record=None)
    return r.trace()


def inbox_21_without_acquire() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-21-without-acquire-every-operation-fails",
        "INBOX-21: before acquire() and after release() every read, list, create, replace and "
        "remove is JOURNAL_NOT_OWNED before any write; acquire() again takes over",
    )
    c = chain(1)
    oid = c[0].offer_id

    def refused() -> None:
        r.read(oid, expect=NOT_OWNED)
        r.list(None, 64, expect=NOT_OWNED)
        r.create(c[0], expect=NOT_OWNED)
        r.replace(c[1], 0, expect=NOT_OWNED)
        r.remove(oid, 0, expect=NOT_OWNED)

    refused()
    r.release(expect=NOT_OWNED)
    r.acquire()
    r.create(c[0])
    r.release()
    refused()
    r.release()  # a second release() does nothing
    r.acquire()
    r.read(oid, record=c[0])
    return r.trace()


def inbox_21_second_process() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-21-a-second-process-can-neither-read-nor-write-until-release",
        "INBOX-21: while this process owns the journal a second process fails acquire() "
        "(JOURNAL_LOCKED) and every operation (JOURNAL_NOT_OWNED); after release() it takes "
        "over, and then this process is the one locked out",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    r.acquire("rival", expect=LOCKED)
    r.read(oid, actor="rival", expect=NOT_OWNED)
    r.list(None, 64, actor="rival", expect=NOT_OWNED)
    r.create(chain(2)[0], actor="rival", expect=NOT_OWNED)
    r.replace(c[1], 0, actor="rival", expect=NOT_OWNED)
    r.remove(oid, 0, actor="rival", expect=NOT_OWNED)
    r.release()
    r.acquire("rival")
    r.read(oid, actor="rival", record=c[0])
    r.replace(c[1], 0, actor="rival")
    r.acquire(expect=LOCKED)
    r.read(oid, expect=NOT_OWNED)
    r.release("rival")
    r.acquire()
    r.read(oid, record=c[1])
    return r.trace()


def inbox_21_race() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-21-of-two-competing-owners-exactly-one-acquires",
        "INBOX-21: this process and a second one acquire() at once: exactly one wins, the "
        "loser is JOURNAL_LOCKED and its operations JOURNAL_NOT_OWNED; after the winner's "
        "release() the loser acquires; a second round the same",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.race_acquire()
    r.acquire("loser", expect=LOCKED)
    r.read(oid, actor="loser", expect=NOT_OWNED)
    r.create(c[0], actor="loser", expect=NOT_OWNED)
    r.create(c[0], actor="winner")
    r.release("winner")
    r.acquire("loser")
    r.read(oid, actor="loser", record=c[0])
    r.replace(c[1], 0, actor="loser")
    r.release("loser")
    r.race_acquire()
    r.read(oid, actor="loser", expect=NOT_OWNED)
    r.read(oid, actor="winner", record=c[1])
    r.release("winner")
    return r.trace()


def inbox_43_io_errors() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-43-enospc-eio-eacces-at-write-fsync-publish-keep-the-prior-revision",
        "INBOX-43: ENOSPC, EIO and EACCES at the write, the fsync and the publish (link, "
        "rename, unlink) of a create, replace and remove fail closed with JOURNAL_PERMISSIONS;"
        " the prior revision stays intact, no partial file is visible, the journal works on",
    )
    c, fresh = chain(1), chain(2)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    for at in IO_POINTS:
        for name in ERRNOS:
            r.create(fresh[0], fault=io_error(at, name), expect=PERMISSIONS)
            r.replace(c[1], 0, fault=io_error(at, name), expect=PERMISSIONS)
        r.read(oid, record=c[0])
        r.read(fresh[0].offer_id, record=None)
    for name in ERRNOS:
        r.remove(oid, 0, fault=io_error("publish", name), expect=PERMISSIONS)
    r.read(oid, record=c[0])
    r.replace(c[1], 0)
    r.create(fresh[0])
    r.list(None, 64, ids=_ids([c[0], fresh[0]]))
    return r.trace()


def _launching(generation: int) -> tuple[JournalRecord, ...]:
    """Revisions 0..3 of one offer: accepted, starting_acknowledged, launching (the `completed`
    path stops at the durable barrier, I-J2)."""
    return chain(generation)[:3]


def inbox_05_restart_finds_launching() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-05-a-restart-that-finds-launching-records-launch-outcome-unknown",
        "INBOX-05: a crash once the launching barrier is published leaves launching durable; "
        "the restarted receiver finds it and (the kernel's step for a launching record found "
        "with no in-process operation) writes recovery_required(launch_outcome_unknown) with "
        "the revision CAS, never a second launching or start; a stale retry is a conflict",
    )
    c = _launching(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    r.replace(c[1], 0)
    for at in CRASH_POINTS["crash_after_commit"]:
        r.replace(c[2], 1, fault=crash(at), expect="crashed")
        r.reopen()
        r.read(oid, record=c[2])
        if at != CRASH_POINTS["crash_after_commit"][-1]:
            r.remove(oid, 2)
            r.create(c[0])
            r.replace(c[1], 0)
    unknown = _applied(c[2], LaunchOutcomeUnknown(), T0 + 10)
    if (unknown.state, unknown.recovery_reason) != (
        JournalState.RECOVERY_REQUIRED,
        RecoveryReason.LAUNCH_OUTCOME_UNKNOWN,
    ):
        raise ScenarioError("INBOX-05: the kernel no longer records launch_outcome_unknown")
    r.replace(c[2], 1, expect=CONFLICT)  # the launching write retried: never a second barrier
    r.replace(unknown, 2)
    r.read(oid, record=unknown)
    r.replace(unknown, 2, expect=CONFLICT)
    r.reopen()
    r.read(oid, record=unknown)
    return r.trace()


def inbox_11_refused_deliveries_write_nothing() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-11-refused-deliveries-create-no-journal-record",
        "INBOX-11: for deliveries with an expired Run lease, a replaced session, an offline "
        "Worker or an expired session lease the receiver only reads (the offer's record, the "
        "first page) and the kernel refuses: no record is created; the same offer with live "
        "authority is then created as revision 0",
    )
    first = chain(1)[0]
    delivered = first.offer
    oid = first.offer_id
    now = T0 + 1_000
    refused = (
        (WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, T0 + 10**9), T0 + 30_000),
        (WorkerSession("w1", "s2", 1, WorkerSessionStatus.ONLINE, T0 + 10**9), now),
        (WorkerSession("w1", "s1", 1, WorkerSessionStatus.OFFLINE, T0 + 10**9), now),
        (WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, now), now),
    )
    r.acquire()
    r.create(chain(2)[0])
    for session, at in (*refused, refused[0]):
        found = r.read(oid, record=None)
        page = r.list(None, 64)
        decision = decide_delivery(
            delivered,
            None if found.result is None else first,
            session,
            records_held=len(page.result["items"]),
            capacity=DEFAULT_CAPACITY,
            observed_at_ms=at,
        )
        if not isinstance(decision, Rejected):
            raise ScenarioError(f"INBOX-11: the kernel accepted a delivery at {at}: {decision}")
    live = WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, T0 + 10**9)
    decision = decide_delivery(
        delivered, None, live, records_held=1, capacity=DEFAULT_CAPACITY, observed_at_ms=now
    )
    if isinstance(decision, Rejected):
        raise ScenarioError(f"INBOX-11: the live delivery was refused: {decision}")
    r.create(first)
    r.list(None, 64, ids=_ids([first, chain(2)[0]]))
    return r.trace()


def inbox_16_private_root() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-16-a-root-with-group-or-other-bits-is-refused",
        "INBOX-16: the root acquire() creates is 0700 and every record 0600 (every projection "
        "of every trace lists a record or root of another mode as a stray); a root given "
        "group bits (0750) is refused with JOURNAL_PERMISSIONS on acquire, before any lock or "
        "read; made 0700 again, acquire() succeeds and the records are intact",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    r.replace(c[1], 0)
    r.tamper("root_loosened")
    r.reopen(expect=PERMISSIONS)
    r.read(oid, expect=NOT_OWNED)
    r.acquire(expect=PERMISSIONS)
    r.acquire("rival", expect=PERMISSIONS)
    r.tamper("root_restored")
    r.acquire()
    r.read(oid, record=c[1])
    r.create(chain(2)[0])
    return r.trace()


def _compromised(r: JournalRecorder, c: Sequence[JournalRecord]) -> None:
    """Every operation of a compromised owner fails, acquire() and release() included, its
    timer is stopped, and nothing changes (W-6)."""
    oid = c[0].offer_id
    r.read(oid, expect=COMPROMISED)
    r.list(None, 64, expect=COMPROMISED)
    r.create(chain(9)[0], expect=COMPROMISED)
    r.replace(c[1], 0, expect=COMPROMISED)
    r.remove(oid, 0, expect=COMPROMISED)
    r.refresh(result=None)
    r.acquire(expect=COMPROMISED)
    r.release(expect=COMPROMISED)
    r.acquire(expect=COMPROMISED)


def inbox_22_compromised_for_good() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-22-a-removed-touched-or-unrefreshed-lock-compromises-the-owner-for-good",
        "INBOX-22: deleting the lock directory, moving its mtime, or letting more than the "
        "stale window pass since the last refresh makes the owner compromised: every "
        "operation, acquire() and release() fail JOURNAL_COMPROMISED, its timer stops, no "
        "re-acquire; only a new instance takes over (at once when the lock is gone, once it "
        "is stale otherwise)",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    r.tamper("lock_removed")
    _compromised(r, c)
    r.reopen()
    r.read(oid, record=c[0])
    r.tamper("lock_mtime_changed")
    r.refresh(result=False)
    _compromised(r, c)
    r.reopen(expect=LOCKED)  # the touched lock stays and is younger than the window
    r.advance(DEFAULT_STALE_WINDOW_MS)
    r.reopen()  # now older than the window: reclaimed
    r.read(oid, record=c[0])
    r.refresh(result=True)
    r.advance(DEFAULT_STALE_WINDOW_MS)
    r.read(oid, record=c[0])  # exactly the window since the refresh: still owned
    r.advance(1)
    _compromised(r, c)
    r.reopen()
    r.read(oid, record=c[0])
    return r.trace()


def inbox_23_stale_window() -> JournalTrace:
    low, high = _WINDOW.minimum, _WINDOW.maximum
    r = JournalRecorder(
        "INBOX-23-stale-window-bounds-half-window-refresh-and-stale-reclaim",
        f"INBOX-23: a stale window of {low - 1} or {high + 1} ms is rejected, {low} and {high} "
        "are taken; the one timer refreshes every half window and a refreshed owner outlives "
        "the window; a lock exactly the window old is live (JOURNAL_LOCKED), one ms older is "
        "reclaimed by a second process, and the old owner is then compromised",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.timers(started=1, interval_ms=DEFAULT_STALE_WINDOW_MS // 2)
    r.create(c[0])
    r.reopen(stale_window_ms=low - 1, expect="invalid")
    r.read(oid, expect=NOT_OWNED)
    r.reopen(stale_window_ms=high + 1, expect="invalid")
    r.reopen(stale_window_ms=high)
    r.timers(started=1, interval_ms=high // 2)
    r.reopen(stale_window_ms=low)
    r.timers(started=1, interval_ms=low // 2)
    for _ in range(4):  # four half windows: twice the window, refreshed every half
        r.advance(low // 2)
        r.refresh(result=True)
    r.read(oid, record=c[0])
    r.reopen()
    r.refresh(result=True)
    r.advance(DEFAULT_STALE_WINDOW_MS)
    r.acquire("rival", expect=LOCKED)  # exactly the window old: live
    r.advance(1)
    r.acquire("rival")  # one ms older: stale, reclaimed
    r.read(oid, actor="rival", record=c[0])
    r.read(oid, expect=COMPROMISED)
    r.acquire(expect=COMPROMISED)
    r.release("rival")
    r.reopen()
    r.read(oid, record=c[0])
    return r.trace()


def inbox_24_one_timer() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-24-one-refresh-timer-per-tenure-and-no-other-thread",
        "INBOX-24: constructing an instance starts nothing; acquire() starts exactly one "
        "timer (the refresh, every half window) and no thread; reads, writes, pages and "
        "refreshes start no other; release() stops it; a new tenure starts one more",
    )
    c = chain(1)
    r.timers(started=0, interval_ms=None)
    r.acquire()
    r.timers(started=1, interval_ms=DEFAULT_STALE_WINDOW_MS // 2)
    r.create(c[0])
    r.replace(c[1], 0)
    r.read(c[0].offer_id, record=c[1])
    r.list(None, 64, ids=[c[0].offer_id])
    r.refresh(result=True)
    r.acquire()
    r.timers(started=1, interval_ms=DEFAULT_STALE_WINDOW_MS // 2)
    r.release()
    r.refresh(result=None)
    r.timers(started=1, interval_ms=DEFAULT_STALE_WINDOW_MS // 2)
    r.acquire()
    r.timers(started=2, interval_ms=DEFAULT_STALE_WINDOW_MS // 2)
    return r.trace()


def inbox_27_audit_is_read_only() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-27-auditing-leaves-every-record-byte-identical",
        "INBOX-27: the startup auditor's scan (U-1..U-5) over records in every class, over "
        "several pages, returns the kernel's classification and leaves every stored byte as "
        "it was; a corrupt record fails the audit (AUDIT_JOURNAL_CORRUPT) and stays, "
        "undeleted and byte-identical; a budget that cannot cover the capacity is invalid",
        capacity=8,
    )
    r.acquire()
    completed, failed, recovery = chain(1), chain(2, "start_failed"), chain(3, "recovery")
    for records in (completed, failed, recovery, _launching(4), chain(5)[:5]):
        r.create(records[0])
        for record in records[1:]:
            r.replace(record, record.revision - 1)
    r.create(chain(6)[0])
    r.audit(16, 4)
    r.audit(2, 4)
    r.audit(2, 3, expect="invalid")  # 2 x 3 < capacity 8 (U-2)
    r.corrupt(chain(6)[0].offer_id, "not_json")
    r.audit(16, 4, expect="AUDIT_JOURNAL_CORRUPT")
    r.audit(1, 8, expect="AUDIT_JOURNAL_CORRUPT")
    r.reopen()
    r.audit(16, 4, expect="AUDIT_JOURNAL_CORRUPT")
    return r.trace()


def inbox_34_completion_write_after_submission() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-34-a-failed-completion-write-keeps-the-prior-revision-for-the-next-pass",
        "INBOX-34 (the journal's part of the Coordinator's order): after the submission, the "
        "completion_acknowledged write failing (ENOSPC, EIO, EACCES at write, fsync, publish) "
        "leaves running_acknowledged durable so the next pass resubmits; the write then "
        "succeeds once, a retried one is a conflict, and it survives a restart (final)",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    for record in c[1:-1]:
        r.replace(record, record.revision - 1)
    final = c[-1]
    if final.state is not JournalState.COMPLETION_ACKNOWLEDGED:
        raise ScenarioError("INBOX-34: the completed path ends elsewhere")
    for at in IO_POINTS:
        for name in ERRNOS:
            r.replace(final, final.revision - 1, fault=io_error(at, name), expect=PERMISSIONS)
            r.read(oid, record=c[-2])
    r.replace(final, final.revision - 1)
    r.replace(final, final.revision - 1, expect=CONFLICT)
    r.reopen()
    r.read(oid, record=final)
    return r.trace()


def inbox_35_replaced_worker_converges() -> JournalTrace:
    r = JournalRecorder(
        "INBOX-35-a-worker-replaced-before-its-completion-write-converges-after-restart",
        "INBOX-35 (the journal's part): the Worker dies at every point of its "
        "completion_acknowledged write before the commit; the replacement instance finds "
        "running_acknowledged, and its one write (after the control plane answered "
        "already_terminal) makes it completion_acknowledged; a write from an altered, stale "
        "revision is a conflict",
    )
    c = chain(1)
    oid = c[0].offer_id
    r.acquire()
    r.create(c[0])
    for record in c[1:-1]:
        r.replace(record, record.revision - 1)
    final = c[-1]
    for at in CRASH_POINTS["crash_before_commit"]:
        r.replace(final, final.revision - 1, fault=crash(at), expect="crashed")
        r.reopen()
        r.read(oid, record=c[-2])
    r.replace(final, final.revision - 2, expect=CONFLICT)
    r.replace(final, final.revision - 1)
    r.read(oid, record=final)
    return r.trace()


def _receipt(generation: int) -> Receipt:
    """The completion receipt of Run `r<generation>`'s Attempt, with the callback token whose
    digest the `completed` path journals (`trace_token("callback-<generation>")`)."""
    return Receipt(
        run_id=f"r{generation}",
        attempt_id=f"r{generation}-a1",
        executor_started_at_ms=T0 + 2,
        callback_sequence=1,
        outcome=CompletionOutcome.SUCCEEDED,
        exit_code=0,
        finished_at_ms=T0 + 4,
        callback_token=trace_token(f"callback-{generation}"),
    )


#: INBOX-39's journal: one Attempt per record, in every kind of state retention meets.
_RETENTION_WORLD: Final = (
    (1, "completed", None),
    (2, "start_failed", None),
    (3, "recovery", None),
    (4, "completed", 5),  # running_acknowledged: never eligible (INBOX-07)
    (5, "completed", 3),  # launching
    (6, "completed", None),
    (7, "completed", 1),  # accepted
    (8, "completed", None),
)


def inbox_39_terminal_retention() -> JournalTrace:
    minute = HARD_LIMITS.terminal_retention_ms.minimum
    r = JournalRecorder(
        "INBOX-39-retention-deletes-only-old-final-records-receipts-first-within-the-budget",
        "INBOX-39: the Worker's terminal retention (1 min..30 days, else rejected) deletes only "
        "completion_acknowledged and start_failure_acknowledged records strictly older than "
        "the retention, in page order, the receipt first (confirm the revision, delete the "
        "receipt, remove the record); at most the delete budget per call (the call stops "
        "there, the rest next call); a failed receipt cleanup keeps record and receipt; "
        "active, running_acknowledged and recovery_required records and their receipts stay",
    )
    chains = {g: chain(g, path)[:end] for g, path, end in _RETENTION_WORLD}
    r.acquire()
    for records in chains.values():
        r.create(records[0])
        for record in records[1:]:
            r.replace(record, record.revision - 1)
    for g in chains:  # every Attempt has a receipt, whatever its state: a wrong deletion shows
        r.receipt(_receipt(g))
    r.receipt(_receipt(1), expect="RECEIPT_EXISTS")
    finals = {g: c[-1] for g, c in chains.items() if c[-1].state in RETENTION_ORDER}
    acked = max(c[-1].updated_at_ms for c in chains.values())
    window = HARD_LIMITS.terminal_retention_ms
    for bad in (window.minimum - 1, window.maximum + 1):
        r.retention(None, acked + window.maximum * 2, bad, expect="invalid")
    for page, budget in ((0, 8), (65, 8), (16, 0), (16, 65)):
        r.retention(
            None, acked + 2 * minute, minute, page_size=page, delete_budget=budget, expect="invalid"
        )
    # Exactly the retention old is not older than it: nothing goes (start_failure_acknowledged
    # dates from its updated_at_ms, completion_acknowledged from completion_acknowledged_at_ms).
    oldest = min(finals.values(), key=lambda c: c.updated_at_ms)
    done = r.retention(None, oldest.updated_at_ms + minute, minute, page_size=64)
    if done.result["deleted"] or done.result["cursor"] is not None:
        raise ScenarioError("INBOX-39: a record exactly the retention old was deleted")
    done = r.retention(None, acked + minute, minute, page_size=64)
    if done.result["deleted"] != [oldest.offer_id]:
        raise ScenarioError(f"INBOX-39: one ms older, only {oldest.offer_id} goes")
    # A failed receipt cleanup keeps the record (and the receipt); the next pass deletes both.
    r.tamper("receipts_loosened")
    done = r.retention(None, acked + minute + 1, minute, page_size=64)
    if done.result["deleted"] or len(done.result["kept"]) != len(finals) - 1:
        raise ScenarioError("INBOX-39: a record went while its receipt could not be deleted")
    r.tamper("receipts_restored")
    # A small page and a budget of one: each call stops at its first deletion, the cursor
    # walks on, and at the end of the journal it resets to the start.
    cursor: str | None = None
    for _ in range(2 * len(chains)):
        done = r.retention(cursor, acked + minute + 1, minute, page_size=3, delete_budget=1)
        cursor = done.result["cursor"]
        if cursor is None:
            break
    else:
        raise ScenarioError("INBOX-39: the scan never reached the end of the journal")
    left = {c[0].offer_id: c[-1] for g, c in chains.items() if g not in finals}
    r.list(None, 64, ids=sorted(left))
    for g, records in chains.items():
        r.read(records[0].offer_id, record=None if g in finals else records[-1])
    done = r.retention(None, acked + window.maximum * 2, window.maximum, page_size=64)
    if done.result["deleted"] or done.result["examined"] != len(left):
        raise ScenarioError("INBOX-39: retention deleted an active or lease-lost record")
    return r.trace()


SCENARIOS: Final[dict[str, Callable[[], JournalTrace]]] = {
    "INBOX-02-stale-expected-revision-changes-nothing": inbox_02_stale_expected_revision,
    "INBOX-15-crash-at-every-create-step-leaves-last-durable-revision": inbox_15_crash_create,
    "INBOX-15-crash-at-every-replace-step-leaves-last-durable-revision": inbox_15_crash_replace,
    "INBOX-15-crash-during-remove-leaves-the-record-or-nothing": inbox_15_crash_remove,
    "INBOX-15-crash-after-publish-the-retried-write-finds-the-durable-revision": (
        inbox_15_response_lost
    ),
    "INBOX-15-concurrent-creates-of-one-offer-yield-exactly-one-record": (
        inbox_15_concurrent_one_offer
    ),
    "INBOX-15-a-torn-record-is-reported-corrupt-never-skipped-or-deleted": inbox_15_torn_records,
    "INBOX-17-full-whatever-the-states-nothing-evicted": inbox_17_full,
    "INBOX-18-record-over-192-kib-refused-before-any-write": inbox_18_too_large,
    "INBOX-19-pages-hold-at-most-64-in-ascending-order-exactly-once": inbox_19_pages,
    "INBOX-19-concatenated-pages-list-every-unchanged-record-once": (
        inbox_19_changes_between_pages
    ),
    "INBOX-19-a-corrupt-record-fails-every-page-that-holds-it": inbox_19_corrupt_pages,
    "INBOX-20-concurrent-creates-of-distinct-offers-never-exceed-capacity": (
        inbox_20_concurrent_creates
    ),
    "INBOX-20-remove-racing-replace-has-one-winner": inbox_20_remove_races_replace,
    "INBOX-20-remove-and-replace-in-either-order-are-revision-conditional": (inbox_20_serial_order),
    "INBOX-21-without-acquire-every-operation-fails": inbox_21_without_acquire,
    "INBOX-21-a-second-process-can-neither-read-nor-write-until-release": (inbox_21_second_process),
    "INBOX-21-of-two-competing-owners-exactly-one-acquires": inbox_21_race,
    "INBOX-43-enospc-eio-eacces-at-write-fsync-publish-keep-the-prior-revision": (
        inbox_43_io_errors
    ),
    "INBOX-05-a-restart-that-finds-launching-records-launch-outcome-unknown": (
        inbox_05_restart_finds_launching
    ),
    "INBOX-11-refused-deliveries-create-no-journal-record": (
        inbox_11_refused_deliveries_write_nothing
    ),
    "INBOX-16-a-root-with-group-or-other-bits-is-refused": inbox_16_private_root,
    "INBOX-22-a-removed-touched-or-unrefreshed-lock-compromises-the-owner-for-good": (
        inbox_22_compromised_for_good
    ),
    "INBOX-23-stale-window-bounds-half-window-refresh-and-stale-reclaim": inbox_23_stale_window,
    "INBOX-24-one-refresh-timer-per-tenure-and-no-other-thread": inbox_24_one_timer,
    "INBOX-27-auditing-leaves-every-record-byte-identical": inbox_27_audit_is_read_only,
    "INBOX-34-a-failed-completion-write-keeps-the-prior-revision-for-the-next-pass": (
        inbox_34_completion_write_after_submission
    ),
    "INBOX-35-a-worker-replaced-before-its-completion-write-converges-after-restart": (
        inbox_35_replaced_worker_converges
    ),
    "INBOX-39-retention-deletes-only-old-final-records-receipts-first-within-the-budget": (
        inbox_39_terminal_retention
    ),
}


# -- random walks ----------------------------------------------------------------------------
T = TypeVar("T")


class Chooser(Protocol):
    """Where a walk's choices come from: a seeded `random.Random` (the committed corpus) or a
    Hypothesis data object (tests/conformance/test_journal_conformance.py)."""

    def integer(self, low: int, high: int) -> int: ...


class RandomChooser:
    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)  # noqa: S311 - a reproducible walk, no secret

    def integer(self, low: int, high: int) -> int:
        return self._random.randint(low, high)


def _pick(chooser: Chooser, items: Sequence[T]) -> T:
    return items[chooser.integer(0, len(items) - 1)]


WALK_OFFERS: Final = 6
_MOVES: Final = (
    "create",
    "create",
    "replace",
    "replace",
    "replace",
    "remove",
    "remove",
    "stale",
    "read",
    "list",
    "crash",
    "crash",
    "io_error",
    "reopen",
    "corrupt",
    "concurrent",
)


def _stored(world: ReferenceWorld) -> dict[str, int | None]:
    """Offer id -> stored revision (None: corrupt) of the reference right now."""
    out: dict[str, int | None] = {}
    for oid, data in world.root.stored.items():
        try:
            out[oid] = decode_record(data, oid).revision
        except JournalCorrupt:
            out[oid] = None
    return out


def _walk_command(
    r: JournalRecorder, move: str, revisions: Sequence[JournalRecord], current: int | None
) -> JournalCommand | None:
    """The write a walk's move makes on one offer (None: the move is no write there)."""
    oid = revisions[0].offer_id
    stored = oid in r.world.root.stored
    following = None if current is None or current + 1 >= len(revisions) else revisions[current + 1]
    writes = ("replace", "crash", "io_error", "concurrent")
    if move == "create" or (move in writes and not stored):
        return r.create_command(revisions[0])
    if move in writes and following is not None:
        return r.replace_command(following, following.revision - 1)
    if move == "remove" and current is not None:
        return r.remove_command(oid, current)
    if move == "stale" and current is not None and current > 0:
        return r.replace_command(revisions[current], current - 1)
    return None


def _walk_write(r: JournalRecorder, chooser: Chooser, move: str, command: JournalCommand) -> None:
    if move == "concurrent":
        r.concurrent([command] * chooser.integer(2, 3))
    elif move == "crash":
        points = (*CRASH_POINTS["crash_before_commit"], *CRASH_POINTS["crash_after_commit"])
        done = r.step(command, crash(_pick(chooser, points)))
        if done.kind == "crashed":
            r.reopen()
    elif move == "io_error":
        point = _pick(chooser, IO_POINTS if command.name != "remove" else ("publish",))
        r.step(command, io_error(point, _pick(chooser, ERRNOS)))
    else:
        r.step(command)


def walk(chooser: Chooser, *, name: str, seed: int = 0, steps: int = WALK_STEPS) -> JournalTrace:
    """A random walk over the reference: mostly valid writes along the kernel's revisions, stale
    ones, reads, pages, crashes (each followed by a restart), I/O errors, restarts, at most
    one corruption and concurrent writes of one offer (never a step with several outcomes)."""
    capacity = chooser.integer(3, 6)
    r = JournalRecorder(
        name, "a seeded random walk over the reference journal", capacity=capacity, seed=seed
    )
    chains = {chain(g)[0].offer_id: chain(g) for g in range(1, WALK_OFFERS + 1)}
    ids = sorted(chains)
    corrupted = False
    r.acquire()
    for _ in range(steps):
        move = _pick(chooser, _MOVES)
        oid = _pick(chooser, ids)
        current = _stored(r.world).get(oid)
        command = _walk_command(r, move, chains[oid], current)
        if command is not None:
            _walk_write(r, chooser, move, command)
        elif move == "corrupt" and current is not None and not corrupted:
            corrupted = True
            r.corrupt(oid, _pick(chooser, DAMAGES))
        elif move == "reopen":
            r.reopen()
        elif move == "list":
            after = None if chooser.integer(0, 1) == 0 else _pick(chooser, ids)
            r.list(after, chooser.integer(1, 4), expect=None)
        else:
            r.read(oid, expect=None)
    cursor: str | None = None
    while True:
        page = r.list(cursor, 2, expect=None)
        if page.kind != "ok" or not page.result["has_more"]:
            break
        cursor = page.result["cursor"]
    return r.trace()


def generated() -> Iterator[tuple[str, JournalTrace]]:
    for index in range(WALK_COUNT):
        seed = WALK_SEED + index
        name = f"walk-{seed}"
        yield f"generated/{name}.jsonl.gz", walk(RandomChooser(seed), name=name, seed=seed)


def named() -> Iterator[tuple[str, JournalTrace]]:
    for name, build in SCENARIOS.items():
        trace = build()
        if trace.header.name != name:
            raise ScenarioError(f"{name}: the scenario records {trace.header.name}")
        text = dumps(trace)
        yield (f"{name}.jsonl.gz" if len(text) > GZIP_OVER else f"{name}.jsonl"), trace


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.journal.corpus", description=__doc__
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the corpus")
    mode.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    parser.add_argument("--root", type=Path, default=JOURNAL_CORPUS, help="corpus directory")
    args = parser.parse_args(argv)
    started = time.monotonic()
    expected: dict[str, str] = {}
    steps = 0
    for relative, trace in (*named(), *generated()):
        expected[relative] = dumps(trace)
        steps += len(trace.steps)
    root: Path = args.root
    present = {str(p.relative_to(root)): p for p in trace_paths(root)} if root.exists() else {}
    drift = sorted(
        rel
        for rel, text in expected.items()
        if rel not in present or read_text(present[rel]) != text
    )
    extra = sorted(set(present) - set(expected))
    summary = (
        f"{len(SCENARIOS)} named + {WALK_COUNT} generated journal traces, {steps} steps, "
        f"{time.monotonic() - started:.1f} s"
    )
    if args.check:
        for rel in drift:
            print(f"differs or missing: {rel}")
        for rel in extra:
            print(f"not produced by the generator: {rel}")
        print(f"journal corpus check: {summary}; {len(drift)} differ, {len(extra)} extra")
        return 1 if drift or extra else 0
    for rel in extra:
        present[rel].unlink()
    for rel in drift:
        write_text(root / rel, expected[rel])
    print(
        f"journal corpus written to {root}: {summary}; {len(drift)} rewritten, {len(extra)} removed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
