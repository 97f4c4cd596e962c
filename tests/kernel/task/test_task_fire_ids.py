"""The deterministic ids of a scheduled fire (TK-6): portable (§0.4), stable across versions and
processes, and different for different `(task, revision, fire time)`."""

from __future__ import annotations

import hashlib

import icontract
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import is_portable_id
from kernel.task import (
    TASK_NAME_RE,
    TaskDefinition,
    adhoc_definition,
    fire_attempt_id,
    fire_run_id,
)

NAMES = st.from_regex(TASK_NAME_RE, fullmatch=True)
TRIPLES = st.tuples(NAMES, st.integers(1, 2**31), st.integers(0, 2**62))


def test_the_derivation_is_pinned() -> None:
    """A change of the derivation would make a restarted scheduler admit a fire again under a
    new id: the values are pinned here, and recomputed from the documented recipe."""
    assert fire_run_id("backup", 1, 1_704_067_200_000) == "fr:1f088546cf76d80089ac7aefb39944de"
    assert fire_attempt_id("backup", 1, 1_704_067_200_000) == (
        "fa:b581637bd5890297608ee8f98f7bf0a1"
    )
    material = b"ql3-task-fire-run-v1\0backup\x001\x001704067200000"
    assert fire_run_id("backup", 1, 1_704_067_200_000) == (
        "fr:" + hashlib.sha256(material).hexdigest()[:32]
    )


@given(triple=TRIPLES)
def test_ids_are_portable_and_deterministic(triple: tuple[str, int, int]) -> None:
    run_id, attempt_id = fire_run_id(*triple), fire_attempt_id(*triple)
    assert is_portable_id(run_id)
    assert is_portable_id(attempt_id)
    assert len(run_id) == len(attempt_id) == 35
    assert run_id != attempt_id
    assert (run_id, attempt_id) == (fire_run_id(*triple), fire_attempt_id(*triple))


@given(triples=st.lists(TRIPLES, unique=True, min_size=2, max_size=50))
def test_different_fires_have_different_ids(triples: list[tuple[str, int, int]]) -> None:
    run_ids = {fire_run_id(*t) for t in triples}
    attempt_ids = {fire_attempt_id(*t) for t in triples}
    assert len(run_ids) == len(attempt_ids) == len(triples)
    assert not run_ids & attempt_ids


@given(task=NAMES, revision=st.integers(1, 9), fire=st.integers(0, 10**6))
def test_neighbouring_fields_do_not_collide(task: str, revision: int, fire: int) -> None:
    """The NUL-joined encoding is injective: moving a digit between fields changes the id."""
    ids = {
        fire_run_id(task, revision, fire),
        fire_run_id(task, revision * 10 + 1, fire),
        fire_run_id(task, revision, fire * 10 + 1),
        fire_run_id(task + "1", revision, fire),
    }
    assert len(ids) == 4


def test_adhoc_task_names_derive_ids_too() -> None:
    definition = adhoc_definition(["/bin/true"])
    assert isinstance(definition, TaskDefinition)
    assert is_portable_id(fire_run_id(definition.name, 1, 0))


@pytest.mark.parametrize(
    ("task", "revision", "fire"), [("", 1, 0), ("t", 0, 0), ("t", 1, -1), ("t\0", 1, 0)]
)
def test_malformed_inputs_violate_the_precondition(task: str, revision: int, fire: int) -> None:
    with pytest.raises(icontract.ViolationError):
        fire_run_id(task, revision, fire)
