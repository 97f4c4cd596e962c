"""Workflow Task Attempt identities (SPEC §4.6, ADR-0229 §4; WF-09, WF-10, I-W6): the first
pieces of the Workflow issue, pure and checked on their own."""

from __future__ import annotations

import hashlib
import uuid

import icontract
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    is_portable_id,
    workflow_admission_event_id,
    workflow_task_attempt_id,
)
from kernel.identity import WORKFLOW_TASK_ATTEMPT_ID_RE

digests = st.text("0123456789abcdef", min_size=64, max_size=64)
step_runs = st.from_regex(r"sr-[a-z0-9]{1,30}", fullmatch=True)
versions = st.integers(0, 2**63 - 1)


@pytest.mark.spec("WF-10")
@given(digests, step_runs, versions)
def test_equal_admission_inputs_give_equal_ids_of_the_wta_shape(
    plan: str, step_run: str, version: int
) -> None:
    first = workflow_task_attempt_id(plan, step_run, version)
    assert first == workflow_task_attempt_id(plan, step_run, version)
    assert WORKFLOW_TASK_ATTEMPT_ID_RE.fullmatch(first) is not None
    assert len(first) == 36
    assert is_portable_id(first)  # I-W6


@pytest.mark.spec("WF-10")
@given(digests, step_runs, versions, versions)
def test_another_step_run_epoch_is_another_id(
    plan: str, step_run: str, version: int, other: int
) -> None:
    """A StepRun that went back to `ready` at a new epoch (§4.5) gets a new Attempt id, so its
    admission is a new one, never a replay of the lost one."""
    if version != other:
        assert workflow_task_attempt_id(plan, step_run, version) != workflow_task_attempt_id(
            plan, step_run, other
        )


def test_the_id_is_the_decided_digest_and_the_event_id_shares_it() -> None:
    """§4.6 [decision]: the first 32 hex of SHA-256 over the domain, plan digest, StepRun id and
    version joined by NUL; the admission Event id is `wte:` + the same 32 hex."""
    plan = "ab" * 32
    material = "ql3-workflow-task-attempt-v1\0" + plan + "\0sr-1\0" + "7"
    expected = hashlib.sha256(material.encode()).hexdigest()[:32]
    assert workflow_task_attempt_id(plan, "sr-1", 7) == "wta:" + expected
    assert workflow_admission_event_id(plan, "sr-1", 7) == "wte:" + expected
    assert workflow_task_attempt_id("cd" * 32, "sr-1", 7) != "wta:" + expected
    assert workflow_task_attempt_id(plan, "sr-2", 7) != "wta:" + expected


@pytest.mark.parametrize(
    ("plan", "step_run", "version"),
    [
        ("AB" * 32, "sr-1", 1),  # upper-case digest
        ("ab" * 31, "sr-1", 1),  # short digest
        ("ab" * 32, "sr/1", 1),  # not portable
        ("ab" * 32, "sr-1", -1),
        ("ab" * 32, "sr-1", True),  # a bool is not a version
    ],
)
def test_malformed_admission_inputs_are_refused(plan: str, step_run: str, version: int) -> None:
    with pytest.raises(icontract.ViolationError):
        workflow_task_attempt_id(plan, step_run, version)


@pytest.mark.spec("WF-09")
@given(st.integers(0, 2**48 - 1), st.integers(0, 2**74 - 1))
def test_the_portable_regex_accepts_every_uuid7_and_wta_id(ms: int, rand: int) -> None:
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & (2**62 - 1))
    assert is_portable_id(str(uuid.UUID(int=value)))
    assert is_portable_id(workflow_task_attempt_id("0" * 64, f"sr-{ms}", rand % 1000))


@pytest.mark.spec("WF-09")
@pytest.mark.parametrize(
    "value",
    ["", ".hidden", "a/b", "a\\b", "a b", "a\tb", "a\0b", "é", "x" * 37, "wta:" + "0" * 33],
)
def test_the_portable_regex_rejects_what_would_widen_path_authority(value: str) -> None:
    assert not is_portable_id(value)
