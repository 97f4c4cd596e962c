"""The task store on a real SQLite file (issue 15 item 3; runners/edge/tasks.py, migration
0002_tasks): add, revise, remove, list, the revision the launcher reads, and croniter's part."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from kernel import PolicyDefinition, Safety
from kernel.specs import BudgetError, Code
from kernel.task import (
    FireState,
    TaskDefinition,
    TaskRefused,
    adhoc_definition,
    define_task,
)
from runners.edge.cron import cron_refusal, first_fire_after, latest_fire_at_or_before
from runners.edge.store import EdgeStore
from runners.edge.tasks import TASKS, EdgeTaskStore, TaskWrite

MIN = 60_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def task(name: str, *argv: str, **fields: object) -> TaskDefinition:
    made = define_task(name, argv or ("/bin/true",), **fields)
    assert isinstance(made, TaskDefinition), made
    return made


def written(result: TaskWrite | TaskRefused) -> TaskWrite:
    assert isinstance(result, TaskWrite), result
    return result


@pytest.fixture
def store(tmp_path: Path) -> EdgeStore:
    return EdgeStore(tmp_path / "local.sqlite3")


@pytest.fixture
def tasks(store: EdgeStore) -> EdgeTaskStore:
    return EdgeTaskStore(store)


def test_add_revise_and_read_back(tasks: EdgeTaskStore) -> None:
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 10_000)
    first = task(
        "backup",
        "/usr/bin/backup",
        "--all",
        cwd="/srv",
        env={"HOME": "/root", "A": "é ∂"},
        cron="*/5 * * * *",
        deadline_ms=60_000,
        retry_policy=policy,
    )
    added = written(tasks.add(first, T0))
    assert (added.written, added.created, added.revision.revision) == (True, True, 1)
    again = written(tasks.add(first, T0 + 1))  # identical re-add: a no-op
    assert (again.written, again.revision.revision, again.state.version) == (False, 1, 1)
    second = task("backup", "/usr/bin/backup", "--quick", cron="*/5 * * * *")
    revised = written(tasks.add(second, T0 + 2))
    assert (revised.written, revised.created, revised.revision.revision) == (True, False, 2)
    # Revisions are immutable: a Run of revision 1 still reads revision 1.
    one = tasks.revision("backup", 1)
    assert one is not None
    assert one.definition == first
    assert one.retry_policy == policy
    assert one.created_at_ms == T0
    execution = tasks.execution("backup", 1)
    assert execution is not None
    assert execution.argv == ("/usr/bin/backup", "--all")
    assert execution.environment() == {"HOME": "/root", "A": "é ∂"}
    assert (execution.cwd, execution.deadline_ms) == ("/srv", 60_000)
    current = tasks.state("backup")
    assert current is not None
    assert current.current.definition == second
    assert tasks.revision("backup", 3) is None
    assert tasks.execution("nope", 1) is None
    assert tasks.state("nope") is None


def test_croniter_refuses_what_the_kernel_cannot_judge(tasks: EdgeTaskStore) -> None:
    for cron in ("61 * * * *", "* 25 * * *", "0 0 31 2 *", "H * * * *", "* * * foo *"):
        result = tasks.add(task("t", cron=cron), T0)
        assert result == TaskRefused(Code.TASK_CRON_INVALID, "cron"), cron
    assert tasks.state("t") is None  # nothing written
    assert written(tasks.add(task("t", cron="0 0 29 2 *"), T0)).written  # leap days only


def test_the_schedule_starts_at_the_first_fire_after_the_add(tasks: EdgeTaskStore) -> None:
    written(tasks.add(task("t", cron="*/5 * * * *"), T0 + 7 * MIN + 1))
    schedule = tasks.schedule("t")
    assert schedule is not None
    assert (schedule.since_ms, schedule.next_due_ms, schedule.last_fire) == (
        T0 + 7 * MIN + 1,
        T0 + 10 * MIN,
        None,
    )
    written(tasks.add(task("plain"), T0))
    assert tasks.schedule("plain") is None


def test_soft_removal_and_re_add(tasks: EdgeTaskStore) -> None:
    definition = task("t", cron="* * * * *")
    written(tasks.add(definition, T0))
    removed = written(tasks.remove("t", T0 + MIN))
    assert removed.state.removed_at_ms == T0 + MIN
    schedule = tasks.schedule("t")
    assert schedule is not None
    assert schedule.next_due_ms is None
    assert tasks.remove("t", T0 + MIN) == TaskRefused(Code.TASK_REMOVED, "name")
    assert tasks.remove("other", T0) == TaskRefused(Code.TASK_NOT_FOUND, "name")
    assert tasks.revision("t", 1) is not None  # revisions stay
    back = written(tasks.add(definition, T0 + 2 * MIN))  # TK-7: a new revision, reactivated
    assert (back.revision.revision, back.reactivated, back.state.removed_at_ms) == (2, True, None)
    schedule = tasks.schedule("t")
    assert schedule is not None
    assert (schedule.since_ms, schedule.next_due_ms) == (T0 + 2 * MIN, T0 + 3 * MIN)


def test_list_is_keyset_paged_and_filtered(tasks: EdgeTaskStore) -> None:
    for name in ("e", "a", "d", "b", "c"):
        written(tasks.add(task(name), T0))
    written(tasks.remove("d", T0))
    adhoc = adhoc_definition(["/bin/echo", "x"])
    assert isinstance(adhoc, TaskDefinition)
    written(tasks.add(adhoc, T0))
    pages, after = [], None
    while True:
        page = tasks.list(after=after, limit=2)
        pages.append([r.state.name for r in page.items])
        if page.next_after is None:
            break
        after = page.next_after
    assert pages == [["a", "b"], ["c", "e"]]
    everything = tasks.list(limit=64, include_removed=True, include_adhoc=True)
    assert [r.state.name for r in everything.items] == sorted(["a", "b", "c", "d", "e", adhoc.name])
    assert everything.next_after is None
    for bad in (0, 65):
        with pytest.raises(BudgetError):
            tasks.list(limit=bad)
    record = tasks.get("a")
    assert record is not None
    assert record.schedule is None
    assert tasks.get("zz") is None


def test_the_task_store_shares_the_edge_store_connection(store: EdgeStore) -> None:
    """FP-2: one SQLite connection per process; the task store has none of its own."""
    tasks = EdgeTaskStore(store)
    written(tasks.add(task("t"), T0))
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        tasks.state("t")
    store.reopen()
    assert tasks.state("t") is not None


def test_revisions_are_never_updated_or_deleted() -> None:
    """No statement of the task store can change a stored revision."""
    for name, text in TASKS.items():
        assert not re.search(r"\b(UPDATE|DELETE\s+FROM|REPLACE)\s+task_revisions\b", text), name
        assert "INSERT OR REPLACE" not in text.upper(), name


def test_a_corrupt_row_fails_closed(store: EdgeStore, tasks: EdgeTaskStore) -> None:
    written(tasks.add(task("t"), T0))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE task_revisions SET argv = '[]'")
    with pytest.raises(ValueError, match="argv"):
        tasks.revision("t", 1)


def test_schedule_writes_are_compare_and_set(tasks: EdgeTaskStore) -> None:
    written(tasks.add(task("t", cron="* * * * *"), T0))
    schedule = tasks.schedule("t")
    assert schedule is not None
    moved = replace(schedule, next_due_ms=T0 + 5 * MIN, version=schedule.version + 1)
    assert tasks.write_schedule(moved, schedule.version)
    assert not tasks.write_schedule(moved, schedule.version)  # the version moved on
    assert tasks.schedule("t") == moved
    assert FireState("claimed") is FireState.CLAIMED


# -- croniter ---------------------------------------------------------------------------------


def test_cron_times_are_utc_minutes_at_the_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert first_fire_after("*/5 * * * *", T0) == T0 + 5 * MIN  # strictly after
    assert first_fire_after("*/5 * * * *", T0 - 1) == T0
    assert latest_fire_at_or_before("*/5 * * * *", T0) == T0  # at or before
    assert latest_fire_at_or_before("*/5 * * * *", T0 - 1) == T0 - 5 * MIN
    assert latest_fire_at_or_before("*/5 * * * *", T0 + 5 * MIN - 1) == T0
    assert first_fire_after("0 9 * * *", T0) == T0 + 9 * 60 * MIN  # 09:00 UTC, not Tokyo
    assert latest_fire_at_or_before("0 0 31 2 *", T0) is None
    assert cron_refusal("* * * * *", T0) is None
    assert cron_refusal("@daily", T0) == TaskRefused(Code.TASK_CRON_INVALID, "cron")
