"""The §2.1 evidence order (REC-08, O-8) of `kernel.evidence.collect_evidence`, driven through
recording fake ports: a scripted receipt reader and a scripted identity inspector that log every
call, so the tests see not only the Evidence value but which probes happened, in which order."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    CompletedEvidence,
    CompletionOutcome,
    LiveEvidence,
    NotRunningEvidence,
    UnknownEvidence,
    UnknownReason,
)
from kernel.evidence import Evidence, Inspection, ReceiptRead, ReceiptState, collect_evidence


@dataclass
class Ports:
    """Scripted ports. Reading past the end of a script is a test failure: the collector made a
    call the SPEC does not allow."""

    reads: list[ReceiptRead]
    inspections: list[Inspection]
    log: list[str] = field(default_factory=list)

    def read_receipt(self) -> ReceiptRead:
        self.log.append("read")
        assert self.reads, "an unexpected receipt read"
        return self.reads.pop(0)

    def inspect(self) -> Inspection:
        self.log.append("inspect")
        assert self.inspections, "an unexpected inspection"
        return self.inspections.pop(0)

    def collect(self) -> Evidence:
        return collect_evidence(self.read_receipt, self.inspect)


completed_values = st.builds(
    CompletedEvidence,
    outcome=st.sampled_from(CompletionOutcome),
    callback_sequence=st.integers(0, 5),
    exit_code=st.one_of(st.none(), st.integers(-3, 3)),
    started_at_ms=st.one_of(st.none(), st.integers(0, 10**6)),
)
ABSENT = ReceiptRead(ReceiptState.ABSENT)
CONFLICT = ReceiptRead(ReceiptState.CONFLICT)
READ_FAILED = ReceiptRead(ReceiptState.READ_FAILED)


def valid(evidence: CompletedEvidence) -> ReceiptRead:
    return ReceiptRead(ReceiptState.VALID, evidence)


receipt_reads = st.one_of(
    st.just(ABSENT), st.just(CONFLICT), st.just(READ_FAILED), completed_values.map(valid)
)
inspections = st.sampled_from(Inspection)
_NON_RUNNING_FAILURES = [
    i for i in Inspection if i not in (Inspection.RUNNING, Inspection.NOT_RUNNING)
]


@pytest.mark.spec("REC-08")
@given(completed_values, st.lists(inspections, max_size=3))
def test_a_valid_receipt_means_no_inspection(
    evidence: CompletedEvidence, script: list[Inspection]
) -> None:
    """REC-08: a valid receipt is the evidence (`completed`) and no inspection happens."""
    ports = Ports([valid(evidence)], list(script))
    assert ports.collect() == evidence
    assert ports.log == ["read"]


@pytest.mark.spec("REC-08")
@pytest.mark.parametrize(
    ("read", "reason"),
    [
        (CONFLICT, UnknownReason.RECEIPT_CONFLICT),
        (READ_FAILED, UnknownReason.RECEIPT_READ_FAILED),
    ],
)
def test_an_invalid_receipt_or_read_error_is_unknown_without_inspection(
    read: ReceiptRead, reason: UnknownReason
) -> None:
    """REC-08: a receipt that fails validation is `unknown(receipt_conflict)`, a read error is
    `unknown(receipt_read_failed)`; both stop before any process probe (O-8)."""
    ports = Ports([read], [Inspection.NOT_RUNNING, Inspection.NOT_RUNNING])
    assert ports.collect() == UnknownEvidence(reason)
    assert ports.log == ["read"]


@pytest.mark.spec("REC-08")
def test_live_requires_two_consistent_running_inspections() -> None:
    """REC-08: without a receipt, two consecutive `running` inspections of the persisted
    identity are `live`; the receipt is not read again."""
    ports = Ports([ABSENT], [Inspection.RUNNING, Inspection.RUNNING])
    assert ports.collect() == LiveEvidence()
    assert ports.log == ["read", "inspect", "inspect"]


@pytest.mark.spec("REC-08")
@pytest.mark.parametrize("second", [i for i in Inspection if i is not Inspection.RUNNING])
def test_running_then_anything_else_is_inconsistent(second: Inspection) -> None:
    """REC-08: one `running` inspection followed by any other result is never `live` (nor
    `not_running`): it is `unknown(inconsistent_inspections)`, and nothing else is probed."""
    ports = Ports([ABSENT, ABSENT], [Inspection.RUNNING, second])
    assert ports.collect() == UnknownEvidence(UnknownReason.INCONSISTENT_INSPECTIONS)
    assert ports.log == ["read", "inspect", "inspect"]


@pytest.mark.spec("REC-08")
@pytest.mark.parametrize("first", _NON_RUNNING_FAILURES)
def test_an_untrusted_inspection_is_unknown_with_its_reason(first: Inspection) -> None:
    """§2.1 step 3: handle missing, identity mismatch, unsupported or a failed probe is
    `unknown` with that reason, after one inspection and no second receipt read."""
    ports = Ports([ABSENT, ABSENT], [first, Inspection.RUNNING])
    assert ports.collect() == UnknownEvidence(UnknownReason(first.value))
    assert ports.log == ["read", "inspect"]


@pytest.mark.spec("REC-08")
def test_not_running_rereads_the_receipt_once() -> None:
    """B-29: after a trusted `not_running`, the receipt is read exactly once more; with still
    no receipt the evidence is `not_running`."""
    ports = Ports([ABSENT, ABSENT, ABSENT], [Inspection.NOT_RUNNING, Inspection.NOT_RUNNING])
    assert ports.collect() == NotRunningEvidence()
    assert ports.log == ["read", "inspect", "read"]


@pytest.mark.spec("REC-08")
@given(completed_values)
def test_a_receipt_found_on_the_reread_wins(evidence: CompletedEvidence) -> None:
    """B-29: a receipt published between the inspection and the re-read wins over
    `not_running`."""
    ports = Ports([ABSENT, valid(evidence)], [Inspection.NOT_RUNNING])
    assert ports.collect() == evidence
    assert ports.log == ["read", "inspect", "read"]


def _receipt_class(read: ReceiptRead) -> Evidence | None:
    """Step 1 of §2.1 as a table (None: no receipt)."""
    if read.state is ReceiptState.VALID:
        assert read.completed is not None
        return read.completed
    if read.state is ReceiptState.CONFLICT:
        return UnknownEvidence(UnknownReason.RECEIPT_CONFLICT)
    if read.state is ReceiptState.READ_FAILED:
        return UnknownEvidence(UnknownReason.RECEIPT_READ_FAILED)
    return None


@pytest.mark.spec("REC-08")
@given(st.lists(receipt_reads, min_size=2, max_size=2), st.lists(inspections, min_size=2))
def test_evidence_order_for_any_port_answers(
    reads: list[ReceiptRead], script: list[Inspection]
) -> None:
    """REC-08 for any answers of the two ports: the receipt is read first; an inspection
    happens only when that read found no receipt; at most two inspections and two reads;
    `live` only after exactly two `running` inspections; `not_running` only after a
    `not_running` inspection and a second read that again found nothing; a receipt (valid or
    not) found by either read decides the evidence exactly as step 1 of §2.1 does."""
    ports = Ports(list(reads), list(script))
    result = ports.collect()
    log = ports.log
    assert log[0] == "read"
    assert log.count("read") <= 2
    assert log.count("inspect") <= 2
    first = _receipt_class(reads[0])
    if first is not None:
        assert log == ["read"]
        assert result == first
        return
    assert log[1] == "inspect"
    if script[0] is Inspection.RUNNING:
        assert log == ["read", "inspect", "inspect"]
        expected: Evidence = (
            LiveEvidence()
            if script[1] is Inspection.RUNNING
            else UnknownEvidence(UnknownReason.INCONSISTENT_INSPECTIONS)
        )
        assert result == expected
    elif script[0] is Inspection.NOT_RUNNING:
        assert log == ["read", "inspect", "read"]
        late = _receipt_class(reads[1])
        assert result == (late if late is not None else NotRunningEvidence())
    else:
        assert log == ["read", "inspect"]
        assert result == UnknownEvidence(UnknownReason(script[0].value))
    if isinstance(result, LiveEvidence):
        assert log.count("inspect") == 2
    if isinstance(result, NotRunningEvidence):
        assert log.count("read") == 2


@pytest.mark.spec("REC-08")
def test_a_failing_port_fails_closed_as_unknown() -> None:
    """A receipt reader or probe that raises yields `unknown(receipt_read_failed)` or
    `unknown(probe_failed)`; a raising reader means no inspection happens."""
    probes: list[str] = []

    def broken_reader() -> ReceiptRead:
        raise OSError("disk")

    def probe() -> Inspection:
        probes.append("probe")
        return Inspection.NOT_RUNNING

    assert collect_evidence(broken_reader, probe) == UnknownEvidence(
        UnknownReason.RECEIPT_READ_FAILED
    )
    assert probes == []

    def broken_probe() -> Inspection:
        raise RuntimeError("ptrace")

    absent = ReceiptRead(ReceiptState.ABSENT)
    assert collect_evidence(lambda: absent, broken_probe) == UnknownEvidence(
        UnknownReason.PROBE_FAILED
    )
