"""The canonical projection of durable Run-domain state (SPEC §7).

Every store projects to the same JSON-compatible value: the rows of §1.1 as plain dicts, sorted
by primary key, enums as their values, tokens only as digests (they are never stored raw). A
field-level diff of two projections is what the conformance report shows.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from kernel import Attempt, Event, Lease, Run, RunAggregate, RunRetryPolicy

Projection = dict[str, list[dict[str, Any]]]
TABLES = ("runs", "attempts", "policies", "leases", "events")


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _row(value: Run | Attempt | RunRetryPolicy | Lease | Event) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cls: type = type(value)
    for name in _field_names(cls):
        item = getattr(value, name)
        if isinstance(item, enum.Enum):
            item = item.value
        elif name == "payload":
            item = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in item}
        out[name] = item
    return out


def project(
    aggregates: Iterable[RunAggregate], events: Mapping[str, Iterable[Event]]
) -> Projection:
    """Project aggregates and their Events (keyed by run id) canonically."""
    runs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    leases: list[dict[str, Any]] = []
    all_events: list[dict[str, Any]] = []
    for agg in aggregates:
        runs.append(_row(agg.run))
        attempts.extend(_row(a) for a in agg.attempts)
        if agg.policy is not None:
            policies.append(_row(agg.policy))
        leases.extend(_row(x) for x in agg.leases)
        all_events.extend(_row(e) for e in events.get(agg.run.run_id, ()))
    return {
        "runs": sorted(runs, key=lambda r: r["run_id"]),
        "attempts": sorted(attempts, key=lambda r: r["attempt_id"]),
        "policies": sorted(policies, key=lambda r: r["run_id"]),
        "leases": sorted(leases, key=lambda r: (r["attempt_id"], r["lease_generation"])),
        "events": sorted(all_events, key=lambda r: (r["run_id"], r["seq"])),
    }


_KEYS = {
    "runs": ("run_id",),
    "attempts": ("attempt_id",),
    "policies": ("run_id",),
    "leases": ("attempt_id", "lease_generation"),
    "events": ("run_id", "seq"),
}


def _rows(projection: Projection, table: str) -> dict[str, Mapping[str, Any]]:
    return {"/".join(str(r[k]) for k in _KEYS[table]): r for r in projection.get(table, [])}


def _compare(before: Projection, after: Projection) -> list[tuple[str, str, object, object]]:
    """(row label, field or "" for a whole row, before value, after value) for every
    difference; a missing row is `None`."""
    found: list[tuple[str, str, object, object]] = []
    for table in TABLES:
        want, got = _rows(before, table), _rows(after, table)
        for k in sorted(want.keys() - got.keys()):
            found.append((f"{table}[{k}]", "", want[k], None))
        for k in sorted(got.keys() - want.keys()):
            found.append((f"{table}[{k}]", "", None, got[k]))
        for k in sorted(want.keys() & got.keys()):
            for name in sorted(want[k].keys() | got[k].keys()):
                a, b = want[k].get(name), got[k].get(name)
                if a != b:
                    found.append((f"{table}[{k}]", name, a, b))
    return found


def diff(expected: Projection, actual: Projection) -> list[str]:
    """Field-level differences, one line each: `table[key].field: expected != actual`."""
    if expected == actual:  # the common case, decided at C speed
        return []
    lines: list[str] = []
    for row, name, a, b in _compare(expected, actual):
        if not name:
            lines.append(f"{row}: missing" if b is None else f"{row}: unexpected row")
        else:
            lines.append(f"{row}.{name}: expected {a!r}, got {b!r}")
    return lines


def changes(before: Projection, after: Projection) -> list[str]:
    """What a step changed, one line each: `table[key]: new row`, `table[key].field: a -> b`."""
    if before == after:
        return []
    lines: list[str] = []
    for row, name, a, b in _compare(before, after):
        if not name:
            lines.append(f"{row}: new row" if a is None else f"{row}: removed")
        else:
            lines.append(f"{row}.{name}: {a!r} -> {b!r}")
    return lines
