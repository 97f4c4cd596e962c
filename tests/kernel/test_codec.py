"""Strict command decoding (SPEC §1.6 A-1, B-12; RETRY-01).

A Run command never carries its own retry policy: any policy member is refused with
`RUN_RETRY_POLICY_NOT_ADMISSIBLE` before a command value is built, so no transition runs and
nothing is written. Every other malformed input raises `CommandError` naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    AdmitRun,
    Code,
    CommandError,
    CreateRun,
    LostRetryStep,
    PolicyDefinition,
    Rejected,
    RunKind,
    RunOwner,
    Safety,
)
from kernel.codec import POLICY_MEMBERS, decode_command, encode_command
from kernel.commands import COMMANDS_BY_NAME, field_names

ADMIT_ARGS: dict[str, object] = {
    "run_id": "run-1",
    "attempt_id": "a1",
    "project_id": "proj",
    "task_id": "task",
    "task_revision": 1,
    "executor_type": "shell",
}
CREATE_ARGS: dict[str, object] = {k: v for k, v in ADMIT_ARGS.items() if k != "attempt_id"}
ADMIT_FIELDS = frozenset(field_names(AdmitRun))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)


def _policy_definition() -> st.SearchStrategy[PolicyDefinition]:
    return st.builds(
        PolicyDefinition,
        max_attempts=st.integers(-5, 20),
        retry_on_lost=st.booleans(),
        safety=st.sampled_from(Safety),
        backoff_base_ms=st.integers(-5, 10**8),
        backoff_max_ms=st.integers(-5, 10**8),
    )


@pytest.mark.spec("RETRY-01")
@given(
    st.dictionaries(st.sampled_from(sorted(POLICY_MEMBERS)), json_values, min_size=1),
    st.dictionaries(
        st.sampled_from(["run_id", "task_revision", "kind", "bogus_member", "attempt_id"]),
        json_values,
    ),
    st.none() | _policy_definition(),
)
def test_any_policy_member_in_a_run_command_is_not_admissible(
    policy_members: dict[str, object],
    other_members: dict[str, object],
    provider_policy: PolicyDefinition | None,
) -> None:
    """RETRY-01 / A-1 / B-12: an `admit_run` mapping that carries any policy member
    (`retry_policy`, `policy`, `provider_policy`, or any policy field), with any value, is
    `Rejected(RUN_RETRY_POLICY_NOT_ADMISSIBLE)`. The refusal comes before anything is built:
    it wins even when other members are malformed or unknown (building them would raise), and
    even when the trusted provider supplied a policy of its own."""
    args: dict[str, object] = {**ADMIT_ARGS, **other_members, **policy_members}
    result = decode_command("admit_run", args, provider_policy=provider_policy)
    assert result == Rejected(Code.RUN_RETRY_POLICY_NOT_ADMISSIBLE)


@pytest.mark.spec("RETRY-01")
@pytest.mark.parametrize("member", sorted(POLICY_MEMBERS))
def test_each_policy_member_alone_is_not_admissible(member: str) -> None:
    """RETRY-01: every single policy member, even with a null value, refuses the command."""
    result = decode_command("admit_run", {**ADMIT_ARGS, member: None})
    assert result == Rejected(Code.RUN_RETRY_POLICY_NOT_ADMISSIBLE)


@pytest.mark.spec("RETRY-01")
def test_policy_members_cover_every_policy_field() -> None:
    """A-1 "or any policy field": every field of a provider policy definition, the policy
    cursor and the policy container names are in the refused set."""
    assert {f.name for f in dataclasses.fields(PolicyDefinition)} <= POLICY_MEMBERS
    assert {"retry_policy", "policy", "provider_policy", "next_attempt_at_ms"} <= POLICY_MEMBERS


@pytest.mark.spec("RETRY-01")
def test_admission_without_policy_members_decodes_without_a_policy() -> None:
    """A-2: without policy members, and with no provider policy, the command decodes and
    carries no policy (the safe default)."""
    without = decode_command("admit_run", ADMIT_ARGS)
    assert isinstance(without, AdmitRun)
    assert without.provider_policy is None
    assert without.kind is RunKind.ORDINARY
    assert without.owner is RunOwner.RUNTIME


_PROVIDED = PolicyDefinition(
    max_attempts=3,
    retry_on_lost=True,
    safety=Safety.IDEMPOTENT,
    backoff_base_ms=1_000,
    backoff_max_ms=60_000,
)


@pytest.mark.spec("RETRY-01")
def test_admission_decodes_with_the_provider_policy() -> None:
    """A-2: with no policy members, the decoded command's policy is exactly the trusted
    provider's result."""
    decoded = decode_command("admit_run", ADMIT_ARGS, provider_policy=_PROVIDED)
    assert isinstance(decoded, AdmitRun)
    assert decoded.provider_policy == _PROVIDED


_RESERVED = ADMIT_FIELDS | POLICY_MEMBERS


@pytest.mark.spec("RETRY-01")
@given(
    st.text(
        st.characters(codec="ascii", categories=["Ll", "Lu", "Nd", "Pc"]), min_size=1, max_size=20
    ).filter(lambda k: k not in _RESERVED),
    json_values,
)
def test_unknown_member_raises_a_command_error_naming_it(key: str, value: object) -> None:
    """B-12 strict decoding: an unknown member raises `CommandError` whose field is that
    member (nothing is built, the caller still holds its input)."""
    with pytest.raises(CommandError) as info:
        decode_command("admit_run", {**ADMIT_ARGS, key: value})
    assert info.value.field == key
    assert key in str(info.value)


@pytest.mark.spec("RETRY-01")
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run_id", 5),
        ("run_id", ""),
        ("run_id", "a/b"),
        ("attempt_id", None),
        ("project_id", ["p"]),
        ("task_revision", "1"),
        ("task_revision", True),
        ("task_revision", 1.0),
        ("task_revision", 0),
        ("executor_type", 7),
        ("kind", "batch"),
        ("owner", 1),
        ("actor", "admin"),
    ],
)
def test_wrong_member_types_raise_a_command_error_naming_the_field(
    field: str, value: object
) -> None:
    """B-12: a wrong type or value (including a JSON `true` where an integer is due) raises
    `CommandError` naming the member."""
    with pytest.raises(CommandError) as info:
        decode_command("admit_run", {**ADMIT_ARGS, field: value})
    assert info.value.field == field


@pytest.mark.spec("RETRY-01")
@pytest.mark.parametrize("missing", sorted(ADMIT_ARGS))
def test_missing_member_raises_a_command_error(missing: str) -> None:
    """B-12: a required member that is absent raises `CommandError` naming it."""
    args = {k: v for k, v in ADMIT_ARGS.items() if k != missing}
    with pytest.raises(CommandError) as info:
        decode_command("admit_run", args)
    assert info.value.field == missing


@pytest.mark.spec("RETRY-01")
def test_unknown_command_and_non_mapping_arguments_are_command_errors() -> None:
    """Strict decoding: an unknown command name or arguments that are not an object fail."""
    with pytest.raises(CommandError) as unknown:
        decode_command("admit_run_with_retry", ADMIT_ARGS)
    assert unknown.value.field == "command"
    with pytest.raises(CommandError) as not_mapping:
        decode_command("admit_run", [("run_id", "run-1")])  # type: ignore[arg-type]
    assert not_mapping.value.field == "admit_run"


@pytest.mark.spec("RETRY-01")
@pytest.mark.parametrize("name", sorted(set(COMMANDS_BY_NAME) - {"admit_run"}))
def test_only_admit_run_takes_a_provider_policy(name: str) -> None:
    """A-2: the provider policy belongs to admission only; passing one with any other command
    raises `CommandError("provider_policy")` before the arguments are even looked at."""
    provided = PolicyDefinition(
        max_attempts=2,
        retry_on_lost=True,
        safety=Safety.IDEMPOTENT,
        backoff_base_ms=0,
        backoff_max_ms=0,
    )
    with pytest.raises(CommandError) as info:
        decode_command(name, {}, provider_policy=provided)
    assert info.value.field == "provider_policy"


@pytest.mark.spec("RETRY-01")
@pytest.mark.parametrize("member", sorted(POLICY_MEMBERS))
def test_create_run_with_a_policy_member_is_refused(member: str) -> None:
    """RETRY-01 for the first phase of a two-phase admission: a `create_run` mapping with a
    policy member is refused before anything is built (strict decoding)."""
    result = decode_command("create_run", {**CREATE_ARGS, member: {"max_attempts": 3}})
    assert result == Rejected(Code.RUN_RETRY_POLICY_NOT_ADMISSIBLE)


@pytest.mark.spec("RETRY-01")
def test_create_run_with_a_policy_member_is_not_admissible() -> None:
    """A-1 / B-12: `create_run` creates a Run too, so a policy member should be refused with
    the same stable code as for `admit_run`."""
    result = decode_command("create_run", {**CREATE_ARGS, "retry_policy": {"max_attempts": 3}})
    assert result == Rejected(Code.RUN_RETRY_POLICY_NOT_ADMISSIBLE)


@pytest.mark.spec("RETRY-01")
def test_policy_fields_in_other_commands_are_unknown_members() -> None:
    """Commands that are not Run admissions have no policy members either: one is an unknown
    member (`CommandError` naming it), so a policy can never ride along a lost-retry step."""
    with pytest.raises(CommandError) as info:
        decode_command(
            "lost_retry_step", {"run_id": "run-1", "new_attempt_id": "a2", "max_attempts": 9}
        )
    assert info.value.field == "max_attempts"
    ok = decode_command("lost_retry_step", {"run_id": "run-1", "new_attempt_id": "a2"})
    assert ok == LostRetryStep(run_id="run-1", new_attempt_id="a2")


@pytest.mark.spec("RETRY-01")
@given(
    st.none() | _policy_definition(),
    st.sampled_from(RunKind),
    st.sampled_from(RunOwner),
    st.integers(1, 10**6),
)
def test_encoded_admission_round_trips_and_never_carries_its_policy_back_in(
    provider_policy: PolicyDefinition | None, kind: RunKind, owner: RunOwner, revision: int
) -> None:
    """`encode_command` returns the provider policy under its own key. Feeding the encoded
    mapping back unchanged is a Run command with a policy member and is refused (A-1), with or
    without a policy value; with the key split off, a policy-less admission decodes back to the
    same command."""
    command = AdmitRun(
        run_id="run-1",
        attempt_id="a1",
        project_id="proj",
        task_id="task",
        task_revision=revision,
        executor_type="shell",
        provider_policy=provider_policy,
        kind=kind,
        owner=owner,
    )
    name, encoded = encode_command(command)
    assert name == "admit_run"
    assert "provider_policy" in encoded
    assert decode_command(name, encoded) == Rejected(Code.RUN_RETRY_POLICY_NOT_ADMISSIBLE)
    rest: dict[str, Any] = {k: v for k, v in encoded.items() if k != "provider_policy"}
    if provider_policy is None:
        assert decode_command(name, rest) == command


@pytest.mark.spec("RETRY-01")
def test_create_run_decodes_strictly() -> None:
    """The `created` phase command decodes from exactly its members."""
    decoded = decode_command("create_run", CREATE_ARGS)
    assert decoded == CreateRun(
        run_id="run-1", project_id="proj", task_id="task", task_revision=1, executor_type="shell"
    )
