"""The Workflow plan: what a user asks a Workflow Run to do (SPEC §4.1 plan admission, ADR-0229).

A Workflow is one aggregate Run with one StepRun per plan step (§4). The plan is written as a TOML
file and admitted by `qlk workflow submit PLAN`; this module is the pure model of it and the
validation of its decoded form (`plan_from_mapping`). Reading the file is the CLI's
(`conformance.cli.workflow_plan.load_plan`, stdlib `tomllib`).

The file::

    name = "build-and-test"     # required: ^[a-z0-9][a-z0-9_-]{0,63}$

    [[steps]]                   # 1..64 steps, kept in file order
    key = "build"               # required: ^[a-z0-9][a-z0-9_-]{0,31}$, unique in the plan
    argv = ["make", "build"]    # required: 1..64 non-empty strings without NUL, <= 4096 chars

    [[steps]]
    key = "test"
    argv = ["make", "test"]
    after = ["build"]           # optional, default []: keys of the steps this one waits for
    max_attempts = 3            # optional, default 1 (1..16, A-3)
    retry_backoff_ms = 1000     # optional, default 0 (0..86_400_000)

Admission fails closed: a missing required key, an unknown key (top level or in a step), a wrong
type (`true` is not an integer, `1.0` is not one either), a key outside its pattern, a duplicate
step key, an `after` that names an unknown step, the step itself or one step twice, a dependency
cycle, or a value outside its limit raises `PlanError`, a `ValueError` whose message is one line
naming the step and the field (`step "b": after names unknown step "x"`). Messages never repeat
an argv item (an argument may be a secret, S-1 spirit); keys a user wrote that are not plan keys
are quoted with escapes, so the message stays one line.

The values are validated on construction too (`PlanStep` and `WorkflowPlan` raise `PlanError`
from `__post_init__`), so no invalid plan exists anywhere, however it was built.

Pure, like the rest of the kernel: no I/O, no clock.

    >>> plan = plan_from_mapping({
    ...     "name": "build-and-test",
    ...     "steps": [
    ...         {"key": "test", "argv": ["make", "test"], "after": ["build"]},
    ...         {"key": "build", "argv": ["make", "build"]},
    ...     ],
    ... })
    >>> plan.topological_order()
    ('build', 'test')
    >>> len(plan.digest())
    64
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeGuard

from kernel.specs.limits import BACKOFF_MAX_MS, MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN

__all__ = [
    "PLAN_DIGEST_VERSION",
    "PLAN_NAME_MAX_LENGTH",
    "PLAN_NAME_RE",
    "PLAN_STEPS_MAX",
    "STEP_ARGV_MAX_ITEMS",
    "STEP_ARG_MAX_LENGTH",
    "STEP_KEY_MAX_LENGTH",
    "STEP_KEY_RE",
    "STEP_MAX_ATTEMPTS_MAX",
    "STEP_MAX_ATTEMPTS_MIN",
    "STEP_RETRY_BACKOFF_MAX_MS",
    "PlanError",
    "PlanStep",
    "WorkflowPlan",
    "plan_from_mapping",
]

# [decision, §4.1 plan admission] The limits of a plan. A step key and a plan name are lowercase
# ASCII, safe as a command-line argument, a file-name component and part of a StepRun id (§0.4
# portable ids have room for a prefix and a 32-character key). Bounded counts keep a plan one
# bounded row and every frontier scan of it small (§4.2 budgets page over StepRuns).
STEP_KEY_MAX_LENGTH: Final = 32
STEP_KEY_RE: Final[re.Pattern[str]] = re.compile(
    rf"[a-z0-9][a-z0-9_-]{{0,{STEP_KEY_MAX_LENGTH - 1}}}", re.ASCII
)
# A plan name is its Workflow Run's `task_id`, a §0.4 portable id: at most 36 characters.
PLAN_NAME_MAX_LENGTH: Final = 36
PLAN_NAME_RE: Final[re.Pattern[str]] = re.compile(
    rf"[a-z0-9][a-z0-9_-]{{0,{PLAN_NAME_MAX_LENGTH - 1}}}", re.ASCII
)
PLAN_STEPS_MAX: Final = 64
STEP_ARGV_MAX_ITEMS: Final = 64
STEP_ARG_MAX_LENGTH: Final = 4096
# A step's retry policy has the Run policy's limits (A-3, kernel/specs/limits.py), so a step
# can never hold a policy the ordinary admission rule would refuse.
STEP_MAX_ATTEMPTS_MIN: Final = MAX_ATTEMPTS_MIN
STEP_MAX_ATTEMPTS_MAX: Final = MAX_ATTEMPTS_MAX
STEP_RETRY_BACKOFF_MAX_MS: Final = BACKOFF_MAX_MS

#: The domain tag inside the digested document: a later plan format gets a new tag, so two
#: formats can never share a digest.
PLAN_DIGEST_VERSION: Final = "ql3-workflow-plan-v1"

_TOP_KEYS: Final = frozenset({"name", "steps"})
_STEP_REQUIRED: Final = ("key", "argv")
_STEP_KEYS: Final = frozenset({"key", "argv", "after", "max_attempts", "retry_backoff_ms"})
# How much of a key the user wrote (not a plan key) a message repeats.
_QUOTE_MAX: Final = 40


class PlanError(ValueError):
    """A plan refused at admission (§4.1 plan admission): `message` is one line naming the step
    (`step "b"`, or `steps[2]` when its key is unusable, or `plan`) and the field. `step` is the
    step key when there is a valid one, `field` the field refused (`""` for the plan's shape)."""

    def __init__(self, message: str, *, step: str | None = None, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.step = step
        self.field = field


def _quote(text: str) -> str:
    """A user-written string, quoted with JSON escapes (ASCII, so no line separator survives)
    and shortened: a message stays one short line."""
    shown = text if len(text) <= _QUOTE_MAX else text[:_QUOTE_MAX] + "..."
    return json.dumps(shown, ensure_ascii=True)


def _where(step: str | None, index: int | None) -> str:
    if step is not None:
        return f'step "{step}"'
    if index is not None:
        return f"steps[{index}]"
    return "plan"


def _refuse(
    field: str, problem: str, *, step: str | None = None, index: int | None = None
) -> PlanError:
    subject = f"{field} " if field else ""
    return PlanError(f"{_where(step, index)}: {subject}{problem}", step=step, field=field)


def _plain_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass: `max_attempts = true` must not read as 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _arg_problem(value: object) -> str | None:
    """Why an argv item is refused (never repeating it), or None."""
    if not isinstance(value, str):
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > STEP_ARG_MAX_LENGTH:
        return f"must be at most {STEP_ARG_MAX_LENGTH} characters"
    if "\0" in value:
        return "must not contain NUL"  # no exec argument can carry one
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogate)"  # no UTF-8 form to digest or pass
    return None


# --------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a plan (§4.1 plan admission): one StepRun of the Workflow Run.

    `after` holds the keys of the steps this one waits for, sorted and without duplicates (one
    stored form per dependency set, so equal plans are equal values with equal digests).
    `max_attempts` and `retry_backoff_ms` are the step's retry policy (A-3 limits). `repr`
    hides the argv items (an argument may be a secret)."""

    key: str
    argv: tuple[str, ...]
    after: tuple[str, ...] = ()
    max_attempts: int = 1
    retry_backoff_ms: int = 0

    def __post_init__(self) -> None:
        _check_step(self)

    def __repr__(self) -> str:
        return (
            f"PlanStep(key={self.key!r}, argv=<{len(self.argv)} items>, after={self.after!r}, "
            f"max_attempts={self.max_attempts!r}, retry_backoff_ms={self.retry_backoff_ms!r})"
        )

    def document(self) -> dict[str, object]:
        """Every field as JSON values (the step's part of the plan digest)."""
        return {
            "key": self.key,
            "argv": list(self.argv),
            "after": list(self.after),
            "max_attempts": self.max_attempts,
            "retry_backoff_ms": self.retry_backoff_ms,
        }


def _check_step(step: PlanStep) -> None:
    key: object = step.key  # typed, but a caller may pass anything
    if not isinstance(key, str) or STEP_KEY_RE.fullmatch(key) is None:
        raise _refuse("key", f"must match ^{STEP_KEY_RE.pattern}$")
    argv: object = step.argv
    if not isinstance(argv, tuple):
        raise _refuse("argv", "must be a tuple of strings", step=key)
    if not 1 <= len(argv) <= STEP_ARGV_MAX_ITEMS:
        raise _refuse("argv", f"must have 1..{STEP_ARGV_MAX_ITEMS} items", step=key)
    for position, item in enumerate(argv):
        problem = _arg_problem(item)
        if problem is not None:
            raise _refuse(f"argv[{position}]", problem, step=key)
    after: object = step.after
    if not isinstance(after, tuple):
        raise _refuse("after", "must be a tuple of step keys", step=key)
    for position, other in enumerate(after):
        if not isinstance(other, str) or STEP_KEY_RE.fullmatch(other) is None:
            raise _refuse(f"after[{position}]", f"must match ^{STEP_KEY_RE.pattern}$", step=key)
        if other == key:
            raise _refuse("after", "names the step itself", step=key)
    if list(after) != sorted(set(after)):
        raise _refuse("after", "must be sorted and without duplicates", step=key)
    attempts: object = step.max_attempts
    if not _plain_int(attempts):
        raise _refuse("max_attempts", "must be an integer", step=key)
    if not STEP_MAX_ATTEMPTS_MIN <= attempts <= STEP_MAX_ATTEMPTS_MAX:
        limits = f"{STEP_MAX_ATTEMPTS_MIN}..{STEP_MAX_ATTEMPTS_MAX}"
        raise _refuse("max_attempts", f"must be in {limits}", step=key)
    backoff: object = step.retry_backoff_ms
    if not _plain_int(backoff):
        raise _refuse("retry_backoff_ms", "must be an integer", step=key)
    if not 0 <= backoff <= STEP_RETRY_BACKOFF_MAX_MS:
        limits = f"0..{STEP_RETRY_BACKOFF_MAX_MS}"
        raise _refuse("retry_backoff_ms", f"must be in {limits}", step=key)


@dataclass(frozen=True, slots=True)
class WorkflowPlan:
    """A validated Workflow plan (§4.1 plan admission): a name and 1..64 steps in file order,
    every `after` naming another step of the plan, no dependency cycle.

    `digest()` is the plan digest a Workflow admission pins (§4.1) and every Task Attempt id is
    derived from (§4.6); `topological_order()` is the order the frontier may make steps ready in
    when it has to pick one."""

    name: str
    steps: tuple[PlanStep, ...]

    def __post_init__(self) -> None:
        _check_plan(self)

    def document(self) -> dict[str, object]:
        """The plan as JSON values, every optional field spelled out (what the digest covers,
        without its version tag; `plan_from_mapping(plan.document()) == plan`)."""
        return {"name": self.name, "steps": [step.document() for step in self.steps]}

    def digest(self) -> str:
        """Lowercase hex SHA-256 of the canonical JSON (sorted keys, `,` and `:` separators,
        UTF-8 as itself) of `{"version": "ql3-workflow-plan-v1", "name": ..., "steps": [...]}`.

        Equal plans give equal digests; any change of a field, or of the step order (which
        breaks ties in `topological_order`), gives another."""
        document = {"version": PLAN_DIGEST_VERSION, **self.document()}
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def topological_order(self) -> tuple[str, ...]:
        """Every step key, each after all the steps it waits for: Kahn's algorithm, ties broken
        by file order (deterministic: the same plan always gives the same order)."""
        order = _kahn(self.steps)
        assert len(order) == len(self.steps)  # _check_plan refused every cycle
        return order

    def step(self, key: str) -> PlanStep:
        """The step with `key` (`KeyError` if there is none)."""
        for candidate in self.steps:
            if candidate.key == key:
                return candidate
        raise KeyError(key)


def _kahn(steps: tuple[PlanStep, ...]) -> tuple[str, ...]:
    """Kahn's algorithm over the steps' `after` edges; the ready step first in file order goes
    first. Returns fewer keys than there are steps when there is a cycle."""
    index = {step.key: i for i, step in enumerate(steps)}
    waiting = [len(step.after) for step in steps]
    dependents: list[list[int]] = [[] for _ in steps]
    for i, step in enumerate(steps):
        for other in step.after:
            dependents[index[other]].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(steps[i].key)
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return tuple(order)


def _cycle(steps: tuple[PlanStep, ...], placed: set[str]) -> list[str]:
    """One dependency cycle among the steps Kahn's algorithm could not place, as keys from a
    step back to itself. Every such step waits for another unplaced step, so following the
    first unplaced `after` from the first unplaced step (file order) must come back round."""
    by_key = {step.key: step for step in steps}
    current = next(step.key for step in steps if step.key not in placed)
    path: list[str] = []
    seen: dict[str, int] = {}
    while current not in seen:
        seen[current] = len(path)
        path.append(current)
        current = next(k for k in by_key[current].after if k not in placed)
    return [*path[seen[current] :], current]


def _check_plan(plan: WorkflowPlan) -> None:
    name: object = plan.name
    if not isinstance(name, str) or PLAN_NAME_RE.fullmatch(name) is None:
        raise _refuse("name", f"must match ^{PLAN_NAME_RE.pattern}$")
    steps: object = plan.steps
    if not isinstance(steps, tuple):
        raise _refuse("steps", "must be a tuple of PlanStep")
    if not 1 <= len(steps) <= PLAN_STEPS_MAX:
        raise _refuse("steps", f"must have 1..{PLAN_STEPS_MAX} steps")
    keys: set[str] = set()
    for position, step in enumerate(steps):
        if not isinstance(step, PlanStep):
            raise _refuse("", "must be a step", index=position)
        if step.key in keys:
            raise _refuse("key", "is used by an earlier step", step=step.key)
        keys.add(step.key)
    for step in steps:
        for other in step.after:
            if other not in keys:
                raise _refuse("after", f'names unknown step "{other}"', step=step.key)
    placed = set(_kahn(steps))
    if len(placed) < len(steps):
        cycle = _cycle(steps, placed)
        chain = " -> ".join(f'"{k}"' for k in cycle)
        problem = f"forms a dependency cycle {chain} (each waits for the next)"
        raise _refuse("after", problem, step=cycle[0])


# --------------------------------------------------------------------------------------------
# The decoded file


def _unknown_keys(data: Mapping[object, object], allowed: frozenset[str]) -> list[str]:
    unknown = [key for key in data if not isinstance(key, str) or key not in allowed]
    return sorted(_quote(key if isinstance(key, str) else repr(key)) for key in unknown)


def _array(value: object) -> list[object] | None:
    """A TOML array (a list; a tuple from a caller that built the mapping itself), or None."""
    return list(value) if isinstance(value, list | tuple) else None


def _step_from_mapping(raw: object, position: int) -> PlanStep:
    if not isinstance(raw, Mapping):
        raise _refuse("", "must be a table (write [[steps]])", index=position)
    key: object = raw.get("key")
    if "key" not in raw:
        raise _refuse("key", "is missing", index=position)
    if not isinstance(key, str):
        raise _refuse("key", "must be a string", index=position)
    if STEP_KEY_RE.fullmatch(key) is None:
        raise _refuse("key", f"must match ^{STEP_KEY_RE.pattern}$", index=position)
    unknown = _unknown_keys(raw, _STEP_KEYS)
    if unknown:
        raise _refuse("", f"unknown key {', '.join(unknown)}", step=key)
    for required in _STEP_REQUIRED:
        if required not in raw:
            raise _refuse(required, "is missing", step=key)
    argv = _array(raw["argv"])
    if argv is None:
        raise _refuse("argv", "must be an array of strings", step=key)
    args: list[str] = []
    for position_in_argv, item in enumerate(argv):
        if not isinstance(item, str):
            raise _refuse(f"argv[{position_in_argv}]", "must be a string", step=key)
        args.append(item)  # the rest of its checks are PlanStep's
    after = _array(raw.get("after", []))
    if after is None:
        raise _refuse("after", "must be an array of step keys", step=key)
    keys: list[str] = []
    for position_in_after, other in enumerate(after):
        if not isinstance(other, str) or STEP_KEY_RE.fullmatch(other) is None:
            problem = f"must match ^{STEP_KEY_RE.pattern}$"
            raise _refuse(f"after[{position_in_after}]", problem, step=key)
        if other in keys:
            raise _refuse("after", f'names step "{other}" twice', step=key)
        keys.append(other)
    integers: dict[str, int] = {}
    for field, default in (("max_attempts", 1), ("retry_backoff_ms", 0)):
        value = raw.get(field, default)
        if not _plain_int(value):
            raise _refuse(field, "must be an integer", step=key)
        integers[field] = value  # its range is PlanStep's to check
    return PlanStep(
        key=key,
        argv=tuple(args),
        after=tuple(sorted(keys)),  # the one stored form; the file's order carries no meaning
        max_attempts=integers["max_attempts"],
        retry_backoff_ms=integers["retry_backoff_ms"],
    )


def plan_from_mapping(data: Mapping[str, object]) -> WorkflowPlan:
    """The plan of a decoded plan file (what `tomllib` returns for the format in this module's
    docstring), validated (§4.1 plan admission).

    :raises PlanError: one line naming the step and the field, for a missing or unknown key, a
        wrong type, a key or name outside its pattern, a duplicate step key, an `after` naming
        an unknown step, the step itself or one step twice, a dependency cycle (its steps are
        named), or a value outside its limit.
    """
    document: object = data
    if not isinstance(document, Mapping):
        raise _refuse("", "must be a table")
    unknown = _unknown_keys(document, _TOP_KEYS)
    if unknown:
        raise _refuse("", f"unknown key {', '.join(unknown)}")
    if "name" not in document:
        raise _refuse("name", "is missing")
    name = document["name"]
    if not isinstance(name, str):
        raise _refuse("name", "must be a string")
    if "steps" not in document:
        raise _refuse("steps", "is missing (write at least one [[steps]] table)")
    raw_steps = _array(document["steps"])
    if raw_steps is None:
        raise _refuse("steps", "must be an array of tables (write [[steps]])")
    if not 1 <= len(raw_steps) <= PLAN_STEPS_MAX:
        raise _refuse("steps", f"must have 1..{PLAN_STEPS_MAX} steps")
    steps = tuple(_step_from_mapping(raw, position) for position, raw in enumerate(raw_steps))
    return WorkflowPlan(name=name, steps=steps)
