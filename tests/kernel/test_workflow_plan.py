"""The Workflow plan (SPEC §4.1 plan admission, ADR-0229; issue 18 item 5): the pure model, its
validation from a decoded TOML mapping, its digest and its topological order."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.workflow import (
    PLAN_DIGEST_VERSION,
    PlanError,
    PlanStep,
    WorkflowPlan,
    plan_from_mapping,
)

Doc = dict[str, object]


def _sample() -> Doc:
    """The plan of the module docstring, as tomllib decodes it."""
    return {
        "name": "build-and-test",
        "steps": [
            {"key": "build", "argv": ["make", "build"]},
            {
                "key": "test",
                "argv": ["make", "test"],
                "after": ["build"],
                "max_attempts": 3,
                "retry_backoff_ms": 1000,
            },
        ],
    }


def _steps(doc: Doc) -> list[dict[str, object]]:
    steps = doc["steps"]
    assert isinstance(steps, list)
    return steps


def test_a_valid_plan_is_read_with_its_defaults_and_round_trips() -> None:
    """§4.1 plan admission: the fields as written, the optional ones defaulted, and the plan's
    own document reads back as an equal plan with an equal digest."""
    plan = plan_from_mapping(_sample())
    assert plan == WorkflowPlan(
        name="build-and-test",
        steps=(
            PlanStep(key="build", argv=("make", "build")),
            PlanStep(
                key="test",
                argv=("make", "test"),
                after=("build",),
                max_attempts=3,
                retry_backoff_ms=1000,
            ),
        ),
    )
    build = plan.step("build")
    assert (build.after, build.max_attempts, build.retry_backoff_ms) == ((), 1, 0)
    again = plan_from_mapping(plan.document())
    assert again == plan
    assert again.digest() == plan.digest()
    assert plan.topological_order() == ("build", "test")
    with pytest.raises(KeyError):
        plan.step("deploy")


def test_after_is_stored_sorted_whatever_order_the_file_gives() -> None:
    doc = _sample()
    _steps(doc).insert(0, {"key": "lint", "argv": ["make", "lint"]})
    _steps(doc)[2]["after"] = ["lint", "build"]
    plan = plan_from_mapping(doc)
    assert plan.step("test").after == ("build", "lint")
    _steps(doc)[2]["after"] = ["build", "lint"]
    assert plan_from_mapping(doc).digest() == plan.digest()


def test_the_digest_is_sha256_of_the_canonical_document() -> None:
    """The digest the Workflow admission pins and the WF-10 Task Attempt ids are derived from
    (§4.6): SHA-256 over canonical JSON with the version tag and every field."""
    plan = plan_from_mapping(_sample())
    document = {
        "version": PLAN_DIGEST_VERSION,
        "name": "build-and-test",
        "steps": [
            {
                "key": "build",
                "argv": ["make", "build"],
                "after": [],
                "max_attempts": 1,
                "retry_backoff_ms": 0,
            },
            {
                "key": "test",
                "argv": ["make", "test"],
                "after": ["build"],
                "max_attempts": 3,
                "retry_backoff_ms": 1000,
            },
        ],
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plan.digest() == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", plan.digest())


def _set(path: tuple[object, ...], value: object) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        target: object = doc
        for part in path[:-1]:
            target = target[part]  # type: ignore[index]
        target[path[-1]] = value  # type: ignore[index]

    return change


def _delete(path: tuple[object, ...]) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        target: object = doc
        for part in path[:-1]:
            target = target[part]  # type: ignore[index]
        del target[path[-1]]  # type: ignore[attr-defined]

    return change


def _append_step(step: object) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        _steps(doc).append(step)  # type: ignore[arg-type]

    return change


S1 = ("steps", 1)  # the "test" step of the sample

REFUSALS: list[tuple[str, Callable[[Doc], None], str]] = [
    # missing and unknown keys
    ("missing name", _delete(("name",)), "plan: name is missing"),
    ("missing steps", _delete(("steps",)), "plan: steps is missing"),
    ("missing step key", _delete((*S1, "key")), "steps[1]: key is missing"),
    ("missing argv", _delete((*S1, "argv")), 'step "test": argv is missing'),
    ("unknown top key", _set(("owner",), "me"), 'plan: unknown key "owner"'),
    ("unknown step key", _set((*S1, "cwd"), "/srv"), 'step "test": unknown key "cwd"'),
    # wrong types
    ("name not a string", _set(("name",), 7), "plan: name must be a string"),
    ("steps not an array", _set(("steps",), {"key": "a"}), "plan: steps must be an array"),
    ("step not a table", _set(S1, ["make"]), "steps[1]: must be a table"),
    ("key not a string", _set((*S1, "key"), 1), "steps[1]: key must be a string"),
    ("argv not an array", _set((*S1, "argv"), "make test"), 'step "test": argv must be an array'),
    ("argv item not a string", _set((*S1, "argv"), ["make", 1]), 'step "test": argv[1] must be'),
    ("after not an array", _set((*S1, "after"), "build"), 'step "test": after must be an array'),
    ("after item not a key", _set((*S1, "after"), [3]), 'step "test": after[0] must match'),
    ("bool max_attempts", _set((*S1, "max_attempts"), True), 'step "test": max_attempts must be'),
    ("float max_attempts", _set((*S1, "max_attempts"), 2.0), 'step "test": max_attempts must be'),
    ("bool backoff", _set((*S1, "retry_backoff_ms"), False), 'step "test": retry_backoff_ms must'),
    ("str backoff", _set((*S1, "retry_backoff_ms"), "1s"), 'step "test": retry_backoff_ms must'),
    # patterns
    ("name pattern", _set(("name",), "Build"), "plan: name must match"),
    ("name too long", _set(("name",), "a" * 37), "plan: name must match"),
    ("key pattern", _set((*S1, "key"), "-test"), "steps[1]: key must match"),
    ("key too long", _set((*S1, "key"), "a" * 33), "steps[1]: key must match"),
    ("key with a dot", _set((*S1, "key"), "a.b"), "steps[1]: key must match"),
    # the graph
    (
        "duplicate key",
        _append_step({"key": "build", "argv": ["make"]}),
        'step "build": key is used by an earlier step',
    ),
    (
        "unknown after",
        _set((*S1, "after"), ["x"]),
        'step "test": after names unknown step "x"',
    ),
    ("self after", _set((*S1, "after"), ["test"]), 'step "test": after names the step itself'),
    (
        "after twice",
        _set((*S1, "after"), ["build", "build"]),
        'step "test": after names step "build" twice',
    ),
    (
        "cycle",
        _set(("steps", 0, "after"), ["test"]),
        'step "build": after forms a dependency cycle "build" -> "test" -> "build"',
    ),
    # limits
    ("no steps", _set(("steps",), []), "plan: steps must have 1..64 steps"),
    (
        "65 steps",
        _set(("steps",), [{"key": f"s{i}", "argv": ["true"]} for i in range(65)]),
        "plan: steps must have 1..64 steps",
    ),
    ("empty argv", _set((*S1, "argv"), []), 'step "test": argv must have 1..64 items'),
    ("65 argv", _set((*S1, "argv"), ["x"] * 65), 'step "test": argv must have 1..64 items'),
    ("empty arg", _set((*S1, "argv"), ["make", ""]), 'step "test": argv[1] must not be empty'),
    ("NUL arg", _set((*S1, "argv"), ["ma\0ke"]), 'step "test": argv[0] must not contain NUL'),
    ("long arg", _set((*S1, "argv"), ["x" * 4097]), 'step "test": argv[0] must be at most 4096'),
    ("0 attempts", _set((*S1, "max_attempts"), 0), 'step "test": max_attempts must be in 1..16'),
    ("17 attempts", _set((*S1, "max_attempts"), 17), 'step "test": max_attempts must be in 1..16'),
    ("negative backoff", _set((*S1, "retry_backoff_ms"), -1), 'step "test": retry_backoff_ms'),
    ("backoff > 24 h", _set((*S1, "retry_backoff_ms"), 86_400_001), 'step "test": retry_backoff'),
]


@pytest.mark.parametrize(
    ("change", "expected"),
    [pytest.param(change, expected, id=case) for case, change, expected in REFUSALS],
)
def test_every_refusal_is_one_line_naming_the_step_and_field(
    change: Callable[[Doc], None], expected: str
) -> None:
    """§4.1 plan admission fails closed: each refusal is a `PlanError` (a ValueError) with one
    line that names the step (or the plan) and the field."""
    doc = copy.deepcopy(_sample())
    change(doc)
    with pytest.raises(PlanError) as raised:
        plan_from_mapping(doc)
    message = str(raised.value)
    assert message.startswith(expected), message
    assert len(message.splitlines()) == 1
    assert isinstance(raised.value, ValueError)


def test_the_sample_itself_is_admitted() -> None:
    """The refusals above each change one thing of a plan that is admitted as it is."""
    assert plan_from_mapping(copy.deepcopy(_sample())).name == "build-and-test"


def test_the_limits_themselves_are_admitted() -> None:
    doc = _sample()
    _steps(doc)[1].update(
        argv=["x" * 4096] * 64, max_attempts=16, retry_backoff_ms=86_400_000, key="t" * 32
    )
    doc["name"] = "n" * 36
    plan = plan_from_mapping(doc)
    assert plan.steps[1].max_attempts == 16
    many = {"name": "many", "steps": [{"key": f"s{i}", "argv": ["true"]} for i in range(64)]}
    assert len(plan_from_mapping(many).steps) == 64


def test_a_longer_cycle_is_named_step_by_step() -> None:
    doc: Doc = {
        "name": "loop",
        "steps": [
            {"key": "start", "argv": ["true"]},
            {"key": "a", "argv": ["true"], "after": ["start", "c"]},
            {"key": "b", "argv": ["true"], "after": ["a"]},
            {"key": "c", "argv": ["true"], "after": ["b"]},
            {"key": "d", "argv": ["true"], "after": ["c"]},
        ],
    }
    with pytest.raises(PlanError) as raised:
        plan_from_mapping(doc)
    assert str(raised.value) == (
        'step "a": after forms a dependency cycle "a" -> "c" -> "b" -> "a" '
        "(each waits for the next)"
    )
    assert (raised.value.step, raised.value.field) == ("a", "after")


def test_an_unknown_key_is_quoted_on_one_line_and_argv_is_never_repeated() -> None:
    doc = _sample()
    doc["evil\u2028key\nname"] = 1
    with pytest.raises(PlanError) as raised:
        plan_from_mapping(doc)
    assert len(str(raised.value).splitlines()) == 1
    assert r"evil\u2028key\nname" in str(raised.value)
    doc = _sample()
    _steps(doc)[1]["argv"] = ["make", "secret-token\0"]
    with pytest.raises(PlanError) as raised:
        plan_from_mapping(doc)
    assert "secret-token" not in str(raised.value)
    assert "secret-token" not in repr(plan_from_mapping(_sample()).steps[1])
    assert "argv=<2 items>" in repr(plan_from_mapping(_sample()).steps[1])


def test_a_top_level_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(PlanError, match=r"^plan: must be a table$"):
        plan_from_mapping(["name"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        pytest.param(lambda: PlanStep(key="a", argv=["x"]), "argv must be a tuple", id="list"),  # type: ignore[arg-type]
        pytest.param(
            lambda: PlanStep(key="a", argv=("x",), after=("c", "b")), "sorted", id="order"
        ),
        pytest.param(lambda: PlanStep(key="a", argv=("x",), after=("b", "b")), "sorted", id="dup"),
        pytest.param(lambda: PlanStep(key="A", argv=("x",)), "key must match", id="key"),
        pytest.param(
            lambda: PlanStep(key="a", argv=("\udc80",)), "argv[0] must be valid Unicode", id="utf8"
        ),
        pytest.param(lambda: WorkflowPlan(name="p", steps=()), "steps must have", id="empty"),
        pytest.param(
            lambda: WorkflowPlan(name="p", steps=[PlanStep(key="a", argv=("x",))]),  # type: ignore[arg-type]
            "steps must be a tuple",
            id="steps-list",
        ),
        pytest.param(
            lambda: WorkflowPlan(name="p", steps=(PlanStep(key="a", argv=("x",), after=("b",)),)),
            'after names unknown step "b"',
            id="unknown",
        ),
    ],
)
def test_values_built_directly_are_checked_too(build: Callable[[], object], expected: str) -> None:
    """No invalid plan exists anywhere: the constructors run the same checks."""
    with pytest.raises(PlanError) as raised:
        build()
    assert expected in str(raised.value)


# -- digests -------------------------------------------------------------------------------------

DIGEST_CHANGES: list[tuple[str, Callable[[Doc], None]]] = [
    ("name", _set(("name",), "build-and-test2")),
    ("key", _set((*S1, "key"), "check")),
    ("argv item", _set(("steps", 0, "argv"), ["make", "all"])),
    ("argv length", _set(("steps", 0, "argv"), ["make", "build", "-j4"])),
    ("after", _set((*S1, "after"), [])),
    ("max_attempts", _set((*S1, "max_attempts"), 4)),
    ("retry_backoff_ms", _set((*S1, "retry_backoff_ms"), 1001)),
    ("step added", _append_step({"key": "deploy", "argv": ["make", "deploy"]})),
    ("step order", lambda doc: _steps(doc).reverse()),
]


@pytest.mark.parametrize(
    "change", [pytest.param(change, id=field) for field, change in DIGEST_CHANGES]
)
def test_the_digest_changes_with_every_field(change: Callable[[Doc], None]) -> None:
    doc = copy.deepcopy(_sample())
    change(doc)
    assert plan_from_mapping(doc).digest() != plan_from_mapping(_sample()).digest()


@st.composite
def dag_plans(draw: st.DrawFn) -> Doc:
    """A random valid plan of 1..6 steps: each step waits only for steps drawn before it (so
    there is no cycle), then the file order is shuffled (so file order and dependency order
    differ)."""
    keys = draw(
        st.lists(
            st.from_regex(r"[a-z0-9][a-z0-9_-]{0,7}", fullmatch=True),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    steps: list[dict[str, object]] = []
    for position, key in enumerate(keys):
        step: dict[str, object] = {
            "key": key,
            "argv": draw(
                st.lists(
                    st.text(min_size=1, max_size=8).filter(lambda a: "\0" not in a),
                    min_size=1,
                    max_size=3,
                )
            ),
        }
        after = draw(
            st.lists(st.sampled_from(keys[:position]), unique=True) if position else st.just([])
        )
        spelled_out = draw(st.booleans())  # `after = []` written, or left to its default
        if after or spelled_out:
            step["after"] = after
        if draw(st.booleans()):
            step["max_attempts"] = draw(st.integers(1, 16))
        if draw(st.booleans()):
            step["retry_backoff_ms"] = draw(st.integers(0, 86_400_000))
        steps.append(step)
    return {
        "name": draw(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,15}", fullmatch=True)),
        "steps": draw(st.permutations(steps)),
    }


@given(dag_plans())
def test_equal_inputs_give_equal_digests_and_the_order_respects_every_edge(doc: Doc) -> None:
    """§4.1 plan admission: a plan read twice from equal input has one digest (the digest the
    WF-10 ids are derived from), and the topological order is a permutation of the keys with
    every step after each step it waits for, the same every time."""
    plan = plan_from_mapping(doc)
    twin = plan_from_mapping(copy.deepcopy(doc))
    assert twin == plan
    assert twin.digest() == plan.digest()
    order = plan.topological_order()
    assert sorted(order) == sorted(step.key for step in plan.steps)
    position = {key: i for i, key in enumerate(order)}
    for step in plan.steps:
        for other in step.after:
            assert position[other] < position[step.key]
    assert twin.topological_order() == order
    assert plan_from_mapping(plan.document()) == plan


@given(dag_plans(), st.data())
def test_changing_any_one_field_changes_the_digest(doc: Doc, data: st.DataObject) -> None:
    plan = plan_from_mapping(doc)
    index = data.draw(st.integers(0, len(plan.steps) - 1))
    step = plan.steps[index]
    field = data.draw(st.sampled_from(["name", "key", "argv", "max_attempts", "retry_backoff_ms"]))
    changed: WorkflowPlan
    if field == "name":
        changed = WorkflowPlan(name=plan.name + "x", steps=plan.steps)
    elif field == "key":
        # Renaming a key also renames it in every `after` that names it, so the plan stays
        # valid; the digest must still change.
        new_key = step.key[:31] + ("z" if not step.key.endswith("z") else "y")
        if any(s.key == new_key for s in plan.steps):
            return
        new_steps = tuple(
            PlanStep(
                key=new_key if s.key == step.key else s.key,
                argv=s.argv,
                after=tuple(sorted(new_key if a == step.key else a for a in s.after)),
                max_attempts=s.max_attempts,
                retry_backoff_ms=s.retry_backoff_ms,
            )
            for s in plan.steps
        )
        changed = WorkflowPlan(name=plan.name, steps=new_steps)
    else:
        values = {
            "argv": (*step.argv, "x"),
            "max_attempts": step.max_attempts % 16 + 1,
            "retry_backoff_ms": (step.retry_backoff_ms + 1) % 86_400_001,
        }
        fields = step.document() | {"argv": step.argv, "after": step.after}
        fields[field] = values[field]
        if field == "argv" and len(step.argv) >= 64:
            return
        replaced = PlanStep(**fields)  # type: ignore[arg-type]
        changed = WorkflowPlan(
            name=plan.name, steps=(*plan.steps[:index], replaced, *plan.steps[index + 1 :])
        )
    assert changed != plan
    assert changed.digest() != plan.digest()


def test_the_order_breaks_ties_by_file_order() -> None:
    """Deterministic Kahn: among the steps that are ready together, the first in the file goes
    first, whatever the keys sort as."""
    doc: Doc = {
        "name": "ties",
        "steps": [
            {"key": "zeta", "argv": ["true"]},
            {"key": "merge", "argv": ["true"], "after": ["zeta", "alpha"]},
            {"key": "alpha", "argv": ["true"]},
            {"key": "mid", "argv": ["true"], "after": ["zeta"]},
        ],
    }
    assert plan_from_mapping(doc).topological_order() == ("zeta", "alpha", "merge", "mid")
