"""The seven candidate sources in SQL (`sql/sources.sql`), answered as `kernel.selection.Page`
values with the oracle's keys (runners/sources.py). Each call is one statement with one
observation time (P-5) that reads `limit + 1` rows (P-2); a cursor selects the `_after` variant
of the statement, which keeps only keys strictly after it (P-3). The limit is checked as the
oracle checks it (P-1)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kernel.selection import Candidate, Page, check_limit
from runners.edge.named_sql import SOURCES

K = TypeVar("K", bound=tuple[object, ...])


def _page(
    conn: sqlite3.Connection,
    name: str,
    params: Mapping[str, Any],
    limit: int,
    build: Callable[[tuple[Any, ...]], Candidate[K]],
) -> Page[K]:
    check_limit(limit)
    rows = conn.execute(SOURCES[name], {**params, "limit": limit}).fetchall()
    items = tuple(build(tuple(row)) for row in rows[:limit])
    return Page(items=items, has_more=len(rows) > limit)


def lost_retry_candidates(
    conn: sqlite3.Connection, observed_at_ms: int, limit: int
) -> Page[tuple[int, int, int, str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[int, int, int, str]]:
        run_id, attempt_id, k0, k1 = row
        return Candidate(run_id, attempt_id, (k0, k1, 0, run_id))

    return _page(conn, "lost_retry_candidates", {"observed_at_ms": observed_at_ms}, limit, build)


def runtime_recovery_candidates(
    conn: sqlite3.Connection, observed_at_ms: int, limit: int
) -> Page[tuple[int, int, str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[int, int, str]]:
        run_id, attempt_id, k0, k1 = row
        return Candidate(run_id, attempt_id, (k0, k1, attempt_id))

    params = {"observed_at_ms": observed_at_ms}
    return _page(conn, "runtime_recovery_candidates", params, limit, build)


def lease_expiry_candidates(
    conn: sqlite3.Connection,
    observed_at_ms: int,
    limit: int,
    after: tuple[int, str] | None = None,
) -> Page[tuple[int, str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
        run_id, attempt_id, k0 = row
        return Candidate(run_id, attempt_id, (k0, attempt_id))

    params: dict[str, Any] = {"observed_at_ms": observed_at_ms}
    if after is None:
        return _page(conn, "lease_expiry_candidates", params, limit, build)
    params |= {"after_expires_at_ms": after[0], "after_attempt_id": after[1]}
    return _page(conn, "lease_expiry_candidates_after", params, limit, build)


def local_startup_candidates(
    conn: sqlite3.Connection, limit: int, after: tuple[str] | None = None
) -> Page[tuple[str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[str]]:
        run_id, attempt_id = row
        return Candidate(run_id, attempt_id, (attempt_id,))

    if after is None:
        return _page(conn, "local_startup_candidates", {}, limit, build)
    params = {"after_attempt_id": after[0]}
    return _page(conn, "local_startup_candidates_after", params, limit, build)


def orphaned_created_candidates(
    conn: sqlite3.Connection,
    process_started_at_ms: int,
    limit: int,
    after: tuple[int, str] | None = None,
) -> Page[tuple[int, str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
        run_id, k0 = row
        return Candidate(run_id, None, (k0, run_id))

    params: dict[str, Any] = {"process_started_at_ms": process_started_at_ms}
    if after is None:
        return _page(conn, "orphaned_created_candidates", params, limit, build)
    params |= {"after_created_at_ms": after[0], "after_run_id": after[1]}
    return _page(conn, "orphaned_created_candidates_after", params, limit, build)


def cancel_convergence_candidates(conn: sqlite3.Connection, limit: int) -> Page[tuple[int, str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
        run_id, k0 = row
        return Candidate(run_id, None, (k0, run_id))

    return _page(conn, "cancel_convergence_candidates", {}, limit, build)


def local_dispatch_candidates(
    conn: sqlite3.Connection,
    local_executor_type: str,
    limit: int,
    after: tuple[int, int, str] | None = None,
) -> Page[tuple[int, int, str]]:
    def build(row: tuple[Any, ...]) -> Candidate[tuple[int, int, str]]:
        run_id, attempt_id, k0, k1 = row
        return Candidate(run_id, attempt_id, (k0, k1, attempt_id))

    params: dict[str, Any] = {"local_executor_type": local_executor_type}
    if after is None:
        return _page(conn, "local_dispatch_candidates", params, limit, build)
    params |= {
        "after_queued_at_ms": after[0],
        "after_created_at_ms": after[1],
        "after_attempt_id": after[2],
    }
    return _page(conn, "local_dispatch_candidates_after", params, limit, build)
