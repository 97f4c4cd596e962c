"""The journal conformance suite (SPEC §7, component `journal`; issue 6 item 4): every journal
trace replays with no divergence on the file adapter (a real directory) and the SQLite adapter
(a real database file), a planted adapter bug is reported at the step that shows it with a
field-level diff, the codec is strict and round-trips, the corpus is exactly what its generator
writes, and no trace or report holds a raw token."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runners.worker.retention as worker_retention
from conformance.cli import main as qlk
from conformance.journal.corpus import (
    SCENARIOS,
    JournalRecorder,
    chain,
    crash,
    walk,
)
from conformance.journal.corpus import main as corpus_main
from conformance.journal.replay import (
    ADAPTERS,
    FileBinding,
    Instance,
    JournalBinding,
    JournalTraceResult,
    SqliteBinding,
    journal_trace_paths,
    read_journal_trace,
    replay,
    world_factory,
)
from conformance.journal.trace import (
    JOURNAL_CORPUS,
    JournalFault,
    JournalTrace,
    TraceJournal,
    dumps,
    loads,
    projection_digest,
    show_lines,
)
from conformance.run.corpus import read_text, spec_id_of
from conformance.run.trace import TraceFormatError, canonical, trace_token
from conformance.run.trace import loads as load_run_trace
from kernel.specs import JournalState, RetentionStep
from kernel.specs.codes import Code
from kernel.specs.properties import PROPERTIES
from kernel.worker.codec import encode_record
from kernel.worker.record import JournalRecord
from kernel.worker.retention import RetentionPlan, plan_page
from runners.worker.journal.file import FileJournal
from runners.worker.journal.port import JournalError, JournalPage

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads(
    (ROOT / "conformance" / "run" / "trace.schema.json").read_text(encoding="utf-8")
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
PATHS = journal_trace_paths()
NAMED = [p for p in PATHS if p.parent == JOURNAL_CORPUS]
GENERATED = [p for p in PATHS if p.parent != JOURNAL_CORPUS]
#: The CONF items of SPEC §3.18 / D-16 this suite covers with named traces.
COVERED: tuple[str, ...] = ("INBOX-02", "INBOX-15", "INBOX-17", "INBOX-18", "INBOX-19")
COVERED += ("INBOX-20", "INBOX-21", "INBOX-43", "INBOX-05", "INBOX-11", "INBOX-16", "INBOX-22")
COVERED += ("INBOX-23", "INBOX-24", "INBOX-27", "INBOX-34", "INBOX-35", "INBOX-39")


def _relative(path: Path) -> str:
    return str(path.relative_to(JOURNAL_CORPUS))


def _param(path: Path) -> Any:
    spec = spec_id_of(_relative(path))
    marks = [pytest.mark.spec(spec)] if spec is not None else []
    return pytest.param(path, marks=marks, id=_relative(path))


def _trace(name: str) -> JournalTrace:
    path = next(p for p in NAMED if p.name.startswith(f"{name}.jsonl"))
    return read_journal_trace(path)


def _passed(result: JournalTraceResult, trace: JournalTrace) -> None:
    assert result.divergence is None, result.divergence.render()
    assert result.status == "passed"
    assert result.steps == len(trace.steps)
    assert result.faults == sum(1 for s in trace.steps if s.fault is not None)


# -- every trace on both adapters ------------------------------------------------------------
@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize("path", [_param(p) for p in PATHS])
def test_every_journal_trace_passes_on_both_adapters(
    path: Path, adapter: str, tmp_path: Path
) -> None:
    """The property a named trace states (its description, starting with its SPEC id; a
    generated one: a seeded walk) holds on the adapter: after every step the outcome, the
    result, the before-any-write claim, the reason of an injected I/O error and the full
    projection read through the backdoor equal the reference's."""
    trace = read_journal_trace(path)
    _passed(replay(trace, world_factory(adapter, tmp_path)), trace)
    assert list(tmp_path.iterdir()) == []  # every world removed its temporary root


@pytest.mark.parametrize("path", [_param(p) for p in PATHS])
def test_every_journal_trace_passes_on_the_reference_it_was_recorded_from(path: Path) -> None:
    """The oracle replays its own traces (the replayer and the recorder share `perform`)."""
    trace = read_journal_trace(path)
    _passed(replay(trace, world_factory("reference")), trace)


def test_every_covered_conf_item_has_a_named_trace_that_says_so() -> None:
    """SPEC §7: a named trace's file name starts with its property id; its header names it and
    its description starts with it; the corpus has the named traces and 30 seeded walks."""
    ids = {spec_id_of(_relative(p)) for p in NAMED}
    assert set(COVERED) <= ids
    for path in NAMED:
        trace = read_journal_trace(path)
        item = spec_id_of(_relative(path))
        assert item is not None
        assert item in PROPERTIES
        assert "CONF" in PROPERTIES[item].kind
        assert trace.header.name == path.name.split(".jsonl")[0]
        assert trace.header.description.startswith(item)
        assert trace.header.component == "journal"
    assert len(NAMED) == len(SCENARIOS)
    assert len(GENERATED) == 30


@pytest.mark.slow
def test_the_corpus_is_exactly_what_its_generator_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m conformance.journal.corpus --check`: every file equals a fresh recording,
    none missing, none extra; `qlk traces generate --component journal --check` is the same."""
    assert corpus_main(["--check"]) == 0, capsys.readouterr().out
    assert qlk(["traces", "generate", "--component", "journal", "--check"]) == 0
    assert "0 differ, 0 extra" in capsys.readouterr().out


# -- codec -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [_param(p) for p in PATHS])
def test_every_trace_round_trips_and_every_line_matches_the_schema(path: Path) -> None:
    text = read_text(path)
    assert dumps(loads(text)) == text
    for line in text.splitlines():
        VALIDATOR.validate(json.loads(line))


class DataChooser:
    """A walk's choices drawn by Hypothesis."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, low: int, high: int) -> int:
        return self._data.draw(st.integers(low, high))


@settings(max_examples=25)
@given(st.data())
def test_random_walks_round_trip_exactly(data: st.DataObject) -> None:
    """`loads(dumps(t)) == t` and dumping again gives the same bytes, for Hypothesis-driven
    walks over the reference (crashes, I/O errors, corruption, concurrency, restarts)."""
    trace = walk(DataChooser(data), name="hypothesis-walk", steps=16)
    text = dumps(trace)
    assert loads(text) == trace
    assert dumps(loads(text)) == text


@pytest.mark.spec("INBOX-15", "INBOX-43")
@settings(max_examples=12)
@given(st.data())
def test_random_walks_replay_identically_on_both_adapters(data: st.DataObject) -> None:
    """Hypothesis-driven walks (writes, stale writes, crashes at every point followed by a
    restart, ENOSPC/EIO/EACCES, corruption, concurrent writes of one offer) recorded from the
    reference replay with no divergence on the file and the SQLite adapter."""
    trace = walk(DataChooser(data), name="hypothesis-walk", steps=12)
    for adapter in ADAPTERS:
        _passed(replay(trace, world_factory(adapter)), trace)


def _small_trace() -> str:
    r = JournalRecorder("small", "a small trace", capacity=4)
    c = chain(1)
    r.acquire()
    r.create(c[0])
    r.replace(c[1], 0)
    r.create(chain(2)[0], fault=crash("write"), expect="crashed")
    r.reopen()
    r.read(c[0].offer_id)
    return dumps(r.trace())


def _mutated(line: int, change: Callable[[dict[str, Any]], None], *, digest: bool = False) -> str:
    lines = _small_trace().splitlines()
    obj = json.loads(lines[line - 1])
    change(obj)
    if digest:
        obj["expect"]["digest"] = projection_digest(obj["expect"]["projection"])
    lines[line - 1] = canonical(obj)
    return "\n".join(lines) + "\n"


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            obj = obj[key]
        obj[last] = value

    return change


def _raw_token(obj: dict[str, Any]) -> None:
    obj["command"]["args"]["record"]["offer"]["lease"]["lease_token"] = trace_token("x").reveal()


def _state(obj: dict[str, Any]) -> None:
    obj["command"]["args"]["record"]["state"] = "running_acknowledged"


def _swap_steps(text: str) -> str:
    lines = text.splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    return "\n".join(lines) + "\n"


_CRASH = {"kind": "crash_after_commit", "at": "publish"}
MALFORMED: list[tuple[str, Callable[[], str], int, str]] = [
    ("header member", lambda: _mutated(1, _set("extra", 1)), 1, "extra"),
    ("config member", lambda: _mutated(1, _set("config.window", 5)), 1, "config.window"),
    ("capacity", lambda: _mutated(1, _set("config.capacity", 1025)), 1, "config.capacity"),
    ("component", lambda: _mutated(1, _set("component", "run")), 1, "component"),
    ("step member", lambda: _mutated(2, _set("query", {})), 2, "query"),
    ("operation", lambda: _mutated(3, _set("command.name", "truncate")), 3, "command.name"),
    ("argument", lambda: _mutated(3, _set("command.args.fsync", True)), 3, "command.args.fsync"),
    ("actor", lambda: _mutated(3, _set("command.actor", "third")), 3, "command.actor"),
    ("raw token", lambda: _mutated(3, _raw_token), 3, "command.args.record"),
    ("invalid record", lambda: _mutated(3, _state), 3, "command.args.record"),
    ("fault kind", lambda: _mutated(5, _set("fault.kind", "power_cut")), 5, "fault.kind"),
    ("crash point", lambda: _mutated(5, _set("fault.at", "publish")), 5, "fault.at"),
    ("fault member", lambda: _mutated(5, _set("fault.errno", "EIO")), 5, "fault.errno"),
    ("read fault", lambda: _mutated(7, _set("fault", _CRASH)), 7, "fault"),
    ("expect member", lambda: _mutated(3, _set("expect.page", {})), 3, "expect.page"),
    ("expect kind", lambda: _mutated(3, _set("expect.kind", "applied")), 3, "expect.kind"),
    ("digest", lambda: _mutated(3, _set("expect.projection.strays", ["x"])), 3, "expect.digest"),
    (
        "projection member",
        lambda: _mutated(3, _set("expect.projection.x", []), digest=True),
        3,
        "expect.projection.x",
    ),
    ("order", lambda: _swap_steps(_small_trace()), 3, "step"),
    ("not json", lambda: _small_trace() + "{no\n", 8, "json"),
]


@pytest.mark.parametrize(
    ("make", "line", "field"), [pytest.param(m, ln, f, id=i) for i, m, ln, f in MALFORMED]
)
def test_malformed_journal_traces_name_line_and_field(
    make: Callable[[], str], line: int, field: str
) -> None:
    """Strict decoding: unknown members, a raw token where a placeholder belongs, a record that
    is not a valid revision, a fault where none can be, a tampered projection or steps out of
    order are refused with the line and the field."""
    with pytest.raises(TraceFormatError) as caught:
        loads(make())
    assert caught.value.line == line
    assert caught.value.field == field


def test_the_two_codecs_refuse_each_others_traces() -> None:
    """A run trace is no journal trace and a journal trace no run trace (header component)."""
    with pytest.raises(TraceFormatError) as caught:
        load_run_trace(_small_trace())
    assert (caught.value.line, caught.value.field) == (1, "component")
    run_trace = read_text(
        ROOT / "conformance/traces/run/LEASE-10-tokens-stored-only-as-digests.jsonl"
    )
    with pytest.raises(TraceFormatError) as caught:
        loads(run_trace)
    assert (caught.value.line, caught.value.field) == (1, "component")


def test_a_journal_step_with_an_unknown_member_fails_the_schema() -> None:
    step = json.loads(_small_trace().splitlines()[2])
    VALIDATOR.validate(step)
    step["expect"]["page"] = {}
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(step)


# -- planted divergences -------------------------------------------------------------------
class _Delegate:
    """A journal that forwards everything to a real adapter; mutants override one method."""

    def __init__(self, inner: TraceJournal) -> None:
        self.inner = inner

    def create(self, record: JournalRecord) -> None:
        self.inner.create(record)

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        self.inner.replace(record, expected_revision)

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self.inner.remove(offer_id, expected_revision)

    def read(self, offer_id: str) -> JournalRecord | None:
        return self.inner.read(offer_id)

    def list(self, after: str | None, limit: int) -> JournalPage:
        return self.inner.list(after, limit)

    def acquire(self) -> None:
        self.inner.acquire()

    def release(self) -> None:
        self.inner.release()


class DropsReplace(_Delegate):
    """Acknowledges a replace and writes nothing."""

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        return None


class SkipsCorrupt(_Delegate):
    """Skips what it cannot decode (F-9 forbids it): a corrupt page comes back empty."""

    def list(self, after: str | None, limit: int) -> JournalPage:
        try:
            return self.inner.list(after, limit)
        except JournalError as exc:
            if exc.code is not Code.JOURNAL_CORRUPT:
                raise
            return JournalPage((), after, False)


class Evicts(_Delegate):
    """Makes room at capacity by removing the first record (F-7 forbids it)."""

    def create(self, record: JournalRecord) -> None:
        try:
            self.inner.create(record)
        except JournalError as exc:
            if exc.code is not Code.JOURNAL_FULL:
                raise
            victim = self.inner.list(None, 1).records[0]
            self.inner.remove(victim.offer_id, victim.revision)
            self.inner.create(record)


class WritesFirst(_Delegate):
    """Writes (and discards) a temporary before its size check (F-2: checked before any write)."""

    def create(self, record: JournalRecord) -> None:
        journal = cast(FileJournal, self.inner)
        journal._discard(journal._write_temporary(encode_record(record)))
        journal.create(record)


class _Mutant:
    def __init__(self, inner: Instance, store: TraceJournal) -> None:
        self._inner = inner
        self._store = store

    @property
    def store(self) -> TraceJournal:
        return self._store

    @property
    def touched(self) -> bool:
        return self._inner.touched

    @property
    def fired(self) -> bool:
        return self._inner.fired

    def arm(self, operation: str, fault: JournalFault | None) -> None:
        self._inner.arm(operation, fault)

    def close(self) -> None:
        self._inner.close()


class MutantBinding:
    """A real adapter binding whose instances are wrapped by a mutant (the backdoor is the
    real one: the projection shows what the mutant really stored)."""

    def __init__(
        self,
        base: JournalBinding,
        wrap: Callable[[TraceJournal], TraceJournal] = lambda store: store,
        *,
        capacity: int | None = None,
        reason: str | None = None,
    ) -> None:
        self.base = base
        self.wrap = wrap
        self.capacity = capacity
        self.reason = reason
        self.name = f"mutant-{base.name}"
        self.spec = base.spec
        # No `ownership`: a mutant instance takes no clock or timers (those traces are then
        # not applicable to it, never passed).
        self.capabilities = base.capabilities - {"ownership"}

    def open(self, root: Path, capacity: int) -> Instance:
        inner = self.base.open(root, self.capacity or capacity)
        return _Mutant(inner, self.wrap(inner.store))

    def stored(self, root: Path) -> tuple[list[tuple[str, bytes, int | None]], list[str]]:
        return self.base.stored(root)

    def write_raw(self, root: Path, offer_id: str, data: bytes) -> None:
        self.base.write_raw(root, offer_id, data)

    def expected_reason(self, operation: str, fault: JournalFault) -> str | None:
        found = self.base.expected_reason(operation, fault)
        return self.reason if found is not None and self.reason is not None else found


BASES: list[JournalBinding] = [FileBinding(), SqliteBinding()]


def _first(trace: JournalTrace, name: str, kind: str, code: str | None = None) -> int:
    return next(
        s.step
        for s in trace.steps
        if s.command is not None
        and s.command.name == name
        and (s.expect.kind, s.expect.code) == (kind, code)
    )


def _diverged(trace: JournalTrace, binding: JournalBinding, tmp_path: Path) -> Any:
    result = replay(trace, world_factory(binding, tmp_path))
    assert result.status == "diverged"
    assert result.divergence is not None
    return result.divergence


@pytest.mark.spec("INBOX-02")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_a_replace_dropped_silently_diverges_at_that_step_with_the_field_diff(
    base: JournalBinding, tmp_path: Path
) -> None:
    """An adapter that acknowledges a replace but keeps the old revision is caught at the first
    replace: same outcome, but the projection shows the revision and state it did not write."""
    trace = _trace("INBOX-02-stale-expected-revision-changes-nothing")
    divergence = _diverged(trace, MutantBinding(base, DropsReplace), tmp_path)
    assert divergence.step == _first(trace, "replace", "ok")
    assert (divergence.expected, divergence.actual) == (("ok", None), ("ok", None))
    label = f"records[{chain(1)[0].offer_id[:12]}]"
    assert f"{label}.record.revision: expected 1, got 0" in divergence.projection_diff
    assert (
        f"{label}.record.state: expected 'starting_acknowledged', got 'accepted'"
        in divergence.projection_diff
    )
    rendered = divergence.render()
    assert f"step {divergence.step} (replace) diverged" in rendered


@pytest.mark.spec("INBOX-19")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_an_adapter_that_skips_a_corrupt_record_diverges_at_the_first_such_page(
    base: JournalBinding, tmp_path: Path
) -> None:
    """F-9: a page holding a corrupt record must fail JOURNAL_CORRUPT; one that silently
    leaves it out is reported at that list step, expected error against actual ok."""
    trace = _trace("INBOX-19-a-corrupt-record-fails-every-page-that-holds-it")
    divergence = _diverged(trace, MutantBinding(base, SkipsCorrupt), tmp_path)
    assert divergence.step == _first(trace, "list", "error", "JOURNAL_CORRUPT")
    assert divergence.expected == ("error", "JOURNAL_CORRUPT")
    assert divergence.actual == ("ok", None)


@pytest.mark.spec("INBOX-17")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_an_adapter_that_evicts_at_capacity_diverges_with_the_missing_record(
    base: JournalBinding, tmp_path: Path
) -> None:
    trace = _trace("INBOX-17-full-whatever-the-states-nothing-evicted")
    divergence = _diverged(trace, MutantBinding(base, Evicts), tmp_path)
    assert divergence.step == _first(trace, "create", "error", "JOURNAL_FULL")
    assert divergence.actual == ("ok", None)
    assert any(line.endswith(": missing") for line in divergence.projection_diff)
    assert any(line.endswith(": unexpected record") for line in divergence.projection_diff)


@pytest.mark.spec("INBOX-20")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_concurrent_outcomes_that_no_serial_order_gives_are_a_divergence(
    base: JournalBinding, tmp_path: Path
) -> None:
    """An adapter built without the trace's capacity lets all four concurrent creates succeed:
    no serial order of the four at capacity 4 with 2 records gives that."""
    trace = _trace("INBOX-20-concurrent-creates-of-distinct-offers-never-exceed-capacity")
    divergence = _diverged(trace, MutantBinding(base, capacity=1024), tmp_path)
    assert divergence.step == len(trace.steps)
    assert divergence.actual_result == ["ok", "ok", "ok", "ok"]
    assert "the outcomes match no serial order of the concurrent operations" in divergence.notes


@pytest.mark.spec("INBOX-18")
def test_writing_before_the_size_check_breaks_the_before_any_write_claim(tmp_path: Path) -> None:
    """F-2: the projection cannot see a discarded temporary; the `untouched` expectation does."""
    trace = _trace("INBOX-18-record-over-192-kib-refused-before-any-write")
    divergence = _diverged(trace, MutantBinding(FileBinding(), WritesFirst), tmp_path)
    assert divergence.step == _first(trace, "create", "error", "JOURNAL_RECORD_TOO_LARGE")
    assert divergence.actual == divergence.expected == ("error", "JOURNAL_RECORD_TOO_LARGE")
    assert divergence.projection_diff == ()
    assert divergence.notes == (
        "refused only after reaching a write point (expected: before any write)",
    )


@pytest.mark.spec("INBOX-43")
def test_an_injected_fault_reported_under_another_reason_is_a_divergence(tmp_path: Path) -> None:
    """The SQLite adapter must name the SQLite error of the fault (SQLITE_IOERR_WRITE for EIO
    at the write); a binding that expects SQLITE_FULL for everything sees the difference."""
    trace = _trace("INBOX-43-enospc-eio-eacces-at-write-fsync-publish-keep-the-prior-revision")
    divergence = _diverged(trace, MutantBinding(SqliteBinding(), reason="SQLITE_FULL"), tmp_path)
    eio = next(s for s in trace.steps if s.fault is not None and s.fault.errno == "EIO")
    assert divergence.step == eio.step
    assert divergence.notes == (
        "the injected fault should be reported as 'SQLITE_FULL', got 'SQLITE_IOERR_WRITE'",
    )


class PublishesEarly(MutantBinding):
    """Stands for an adapter that publishes before its fsync: a crash between the fsync and
    the publish finds the record already published."""

    def open(self, root: Path, capacity: int) -> Instance:
        instance = self.base.open(root, capacity)
        return _EarlyPublish(instance, instance.store)


class _EarlyPublish(_Mutant):
    def arm(self, operation: str, fault: JournalFault | None) -> None:
        if fault is not None and fault.at == "sync":
            fault = JournalFault("crash_after_commit", at="publish")
        self._inner.arm(operation, fault)


@pytest.mark.spec("INBOX-15")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_a_crash_that_leaves_an_unsynced_publish_diverges_at_the_crash(
    base: JournalBinding, tmp_path: Path
) -> None:
    trace = _trace("INBOX-15-crash-at-every-create-step-leaves-last-durable-revision")
    divergence = _diverged(trace, PublishesEarly(base), tmp_path)
    crashed = next(s for s in trace.steps if s.fault is not None and s.fault.at == "sync")
    assert divergence.step == crashed.step
    assert divergence.actual == ("crashed", None)
    assert divergence.projection_diff == (
        f"records[{chain(1)[0].offer_id[:12]}]: unexpected record",
    )


class SingleProcess(MutantBinding):
    """An adapter binding that cannot start a second process on its root."""

    def __init__(self) -> None:
        super().__init__(FileBinding())
        self.capabilities = FileBinding.capabilities - {"second_process", "ownership"}


def test_a_trace_needing_a_missing_capability_is_not_applicable_never_passed() -> None:
    """SPEC §7: a capability flag, not a skip: the trace is reported not applicable with what is
    missing, and no step is replayed."""
    trace = _trace("INBOX-21-of-two-competing-owners-exactly-one-acquires")
    assert "second_process" in trace.header.capabilities
    result = replay(trace, world_factory(SingleProcess()))
    assert result.status == "not_applicable"
    assert result.missing_capabilities == ("second_process",)
    assert result.steps == 0


class NoRetention(MutantBinding):
    """An adapter binding that does not offer the Worker's terminal retention over its store."""

    def __init__(self) -> None:
        super().__init__(FileBinding())
        self.capabilities = FileBinding.capabilities - {"retention", "ownership"}


RETENTION_TRACE = (
    "INBOX-39-retention-deletes-only-old-final-records-receipts-first-within-the-budget"
)


def test_a_binding_without_retention_gets_the_retention_trace_not_applicable() -> None:
    trace = _trace(RETENTION_TRACE)
    assert trace.header.capabilities == ("retention",)
    result = replay(trace, world_factory(NoRetention()))
    assert result.status == "not_applicable"
    assert result.missing_capabilities == ("retention",)


def _first_retention_run(trace: JournalTrace) -> int:
    """The first `retention` step that runs (the ones before are invalid bounds)."""
    return next(
        s.step
        for s in trace.steps
        if s.command is not None and s.command.name == "retention" and s.expect.kind == "ok"
    )


@pytest.mark.spec("INBOX-39")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_a_retention_that_removes_the_record_before_its_receipt_diverges(
    base: JournalBinding, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Worker runtime whose steps remove a completion_acknowledged record and only then
    delete its receipt (§3.14: receipts first) is caught by the named trace: where the receipt
    cleanup fails, the record is gone (it must stay)."""
    order = (RetentionStep.CONFIRM_REVISION, RetentionStep.REMOVE_RECORD)
    monkeypatch.setattr(
        worker_retention,
        "steps_for",
        lambda record: (
            (*order, RetentionStep.DELETE_RECEIPT)
            if record.state is JournalState.COMPLETION_ACKNOWLEDGED
            else (RetentionStep.REMOVE_RECORD,)
        ),
    )
    trace = _trace(RETENTION_TRACE)
    divergence = _diverged(trace, base, tmp_path)
    loosened = next(s.step for s in trace.steps if s.fault is not None and s.fault.what)
    assert divergence.step == loosened + 1
    assert any(line.endswith(": missing") for line in divergence.projection_diff)
    actual = [e[0] for e in divergence.actual_result["effects"]]
    assert actual.index("remove") < actual.index("delete_receipt")


@pytest.mark.spec("INBOX-39")
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.name)
def test_a_retention_that_deletes_a_running_acknowledged_record_diverges(
    base: JournalBinding, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Worker runtime that also plans running_acknowledged records and removes without asking
    the kernel (`RetentionDelete`) diverges at its first call with the record missing
    (INBOX-07, INBOX-39: never eligible)."""

    def widened(records: Any, **kwargs: Any) -> RetentionPlan:
        plan = plan_page(records, **kwargs)
        extra = [r for r in records if r.state is JournalState.RUNNING_ACKNOWLEDGED]
        return dataclasses.replace(plan, delete=(*extra, *plan.delete))

    perform = worker_retention.TerminalRetention._perform

    def unguarded(
        self: worker_retention.TerminalRetention,
        step: RetentionStep,
        record: JournalRecord,
        observed_at_ms: int,
    ) -> Any:
        if step is RetentionStep.REMOVE_RECORD:
            self._journal.remove(record.offer_id, record.revision)
            return None
        return perform(self, step, record, observed_at_ms)

    monkeypatch.setattr(worker_retention, "plan_page", widened)
    monkeypatch.setattr(
        worker_retention, "steps_for", lambda record: (RetentionStep.REMOVE_RECORD,)
    )
    monkeypatch.setattr(worker_retention.TerminalRetention, "_perform", unguarded)
    trace = _trace(RETENTION_TRACE)
    divergence = _diverged(trace, base, tmp_path)
    assert divergence.step == _first_retention_run(trace)
    running = chain(4)[4]  # the trace's running_acknowledged record (corpus._RETENTION_WORLD)
    assert running.state is JournalState.RUNNING_ACKNOWLEDGED
    assert f"records[{running.offer_id[:12]}]: missing" in divergence.projection_diff


# -- the CLI ---------------------------------------------------------------------------------
SOME = (
    "INBOX-02-stale-expected-revision-changes-nothing.jsonl",
    "INBOX-21-a-second-process-can-neither-read-nor-write-until-release.jsonl",
    "INBOX-43-enospc-eio-eacces-at-write-fsync-publish-keep-the-prior-revision.jsonl",
    "generated/walk-6000.jsonl.gz",
)


def _corpus(tmp_path: Path, *, tamper: bool = False) -> Path:
    root = tmp_path / "traces"
    for name in SOME:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(JOURNAL_CORPUS / name, root / name)
    if tamper:
        target = root / SOME[0]
        lines = target.read_text(encoding="utf-8").splitlines()
        step = json.loads(lines[3])  # step 3: the first replace
        step["expect"]["projection"]["records"][0]["record"]["revision"] = 7
        step["expect"]["digest"] = projection_digest(step["expect"]["projection"])
        lines[3] = canonical(step)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _rows(out: str) -> Iterator[dict[str, str]]:
    """The summary tables of the output, one dict per table."""
    table: dict[str, str] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2:
            table[cells[0]] = cells[1]
        elif line.startswith("+") and table:
            yield table
            table = {}


@pytest.mark.spec("INBOX-21")
def test_qlk_conform_journal_replays_on_both_adapters_with_a_summary(tmp_path: Path) -> None:
    """`qlk conform --component journal --journal-adapter all`: one summary per adapter (all
    passed, faults by kind), one JUnit report per adapter, exit status 0."""
    out = io.StringIO()
    junit = tmp_path / "journal.xml"
    status = qlk(
        [
            "conform",
            "--component",
            "journal",
            "--journal-adapter",
            "all",
            "--traces",
            str(_corpus(tmp_path)),
            "--junit",
            str(junit),
            "--quiet",
        ],
        out=out,
    )
    text = out.getvalue()
    assert status == 0, text
    tables = list(_rows(text))
    assert [t["runner"] for t in tables] == ["journal/file", "journal/sqlite"]
    for table in tables:
        assert (table["traces"], table["passed"], table["diverged"]) == ("4", "4", "0")
        assert table["not applicable"] == "0"
        assert table["properties covered"] == "3 of 3 named"
    assert text.count("faults injected by kind: ") == 2
    io_errors = sum(
        1
        for name in SOME
        for step in read_journal_trace(JOURNAL_CORPUS / name).steps
        if step.fault is not None and step.fault.kind == "io_error"
    )
    assert io_errors >= 21
    assert f"io_error {io_errors}" in text
    for name in ADAPTERS:
        suite = ET.parse(tmp_path / f"journal-{name}.xml").getroot()
        assert (suite.get("tests"), suite.get("failures")) == ("4", "0")


def test_qlk_conform_journal_reports_a_divergence_and_exits_1(tmp_path: Path) -> None:
    out = io.StringIO()
    root = _corpus(tmp_path, tamper=True)
    status = qlk(
        ["conform", "--component", "journal", "--journal-adapter", "sqlite", "--traces", str(root)],
        out=out,
    )
    text = out.getvalue()
    assert status == 1
    assert "INBOX-02-stale-expected-revision-changes-nothing: step 3 (replace) diverged" in text
    assert ".record.revision: expected 7, got 1" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["--journal-adapter", "nfs"],
        ["--runner", "cluster"],
        ["--jobs", "2"],
    ],
)
def test_qlk_conform_journal_bad_usage_exits_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert qlk(["conform", "--component", "journal", *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"qlk: {argv[0]}")


def test_qlk_traces_show_reads_a_journal_trace() -> None:
    out = io.StringIO()
    path = JOURNAL_CORPUS / "INBOX-21-of-two-competing-owners-exactly-one-acquires.jsonl"
    assert qlk(["traces", "show", str(path)], out=out) == 0
    text = out.getvalue()
    assert "[journal, profile worker, seed 0, capacity 64]" in text
    assert "   1 race_acquire: concurrent ok,JOURNAL_LOCKED | JOURNAL_LOCKED,ok" in text
    assert "loser acquire: error JOURNAL_LOCKED" in text


# -- no raw token anywhere -------------------------------------------------------------------
def _placeholders(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        if set(value) == {"token"} and isinstance(value["token"], str):
            yield value["token"]
        for item in value.values():
            yield from _placeholders(item)
    elif isinstance(value, list):
        for item in value:
            yield from _placeholders(item)


@pytest.mark.spec("INBOX-44")
def test_no_trace_file_or_report_holds_a_raw_token(tmp_path: Path) -> None:
    """Every lease token in the corpus is a placeholder `{"token": name}`; no trace file, no
    `qlk traces show` view, no conformance output, JUnit report or divergence report contains
    any token `trace_token(name)` derives, and the projections do hold their digests."""
    texts = {path: read_text(path) for path in PATHS}
    names = {
        n
        for text in texts.values()
        for line in text.splitlines()
        for n in _placeholders(json.loads(line))
    }
    assert len(names) >= 65
    names |= {f"callback-{g}" for g in range(1, 80)}  # their digests are in the records
    raw = {trace_token(name).reveal() for name in names}
    digests = {trace_token(name).digest() for name in names if name.startswith("lease-")}
    reports = list(texts.values())
    reports += ["\n".join(show_lines(read_journal_trace(path), full=True)) for path in PATHS]
    out = io.StringIO()
    junit = tmp_path / "report.xml"
    root = _corpus(tmp_path, tamper=True)
    qlk(
        [
            "conform",
            "--component",
            "journal",
            "--journal-adapter",
            "file",
            "--traces",
            str(root),
            "--junit",
            str(junit),
            "--quiet",
        ],
        out=out,
    )
    reports += [out.getvalue(), junit.read_text(encoding="utf-8")]
    trace = _trace("INBOX-02-stale-expected-revision-changes-nothing")
    mutant = replay(trace, world_factory(MutantBinding(FileBinding(), DropsReplace), tmp_path))
    assert mutant.divergence is not None
    reports.append(mutant.divergence.render())
    for report in reports:
        assert not any(token in report for token in raw)
    everything = "\n".join(texts.values())
    assert all(digest in everything for digest in digests)
