-- Statements of the cluster task store (runners/cluster/tasks.py; migration 0003_tasks): the
-- edge runner's runners/edge/sql/tasks.sql on PostgreSQL, with the same columns in the same
-- order (the row mapping is shared, runners/task_rows.py). Every UPDATE is a compare-and-set on
-- the row's version: zero rows affected means a concurrent writer (another replica) won, and the
-- caller reports a race instead of writing over it. Names compare and sort with COLLATE "C"
-- (bytewise, as SQLite does), so a keyset page is the same on both runners whatever the
-- database's collation is.

-- ---------------------------------------------------------------- tasks and revisions -------
-- name: task_write_lock
-- Serializes `add` and `remove` of one task name across replicas (two first adds of one name
-- would otherwise both find no row). A two-key advisory lock: a key space apart from the
-- Attempt locks (one bigint key) and the migrator's; held to the end of the transaction.
SELECT pg_advisory_xact_lock(%(namespace)s, hashtext(%(task_name)s));

-- name: select_task
SELECT t.task_name, t.origin, t.current_revision, t.removed_at_ms, t.version,
       r.argv, r.cwd, r.env, r.cron, r.deadline_ms, r.retry_policy, r.created_at_ms,
       FALSE AS requires_approval  -- the cluster profile refuses approval (SPEC §5.4)
FROM tasks AS t
JOIN task_revisions AS r ON r.task_name = t.task_name AND r.revision = t.current_revision
WHERE t.task_name = %(task_name)s;

-- name: select_task_revision
SELECT r.task_name, t.origin, r.revision, r.argv, r.cwd, r.env, r.cron, r.deadline_ms,
       r.retry_policy, r.created_at_ms,
       FALSE AS requires_approval  -- the cluster profile refuses approval (SPEC §5.4)
FROM task_revisions AS r
JOIN tasks AS t ON t.task_name = r.task_name
WHERE r.task_name = %(task_name)s AND r.revision = %(revision)s;

-- name: list_tasks
-- One keyset page by name (P-3): `after` is the last name of the previous page ('' at first).
-- `limit` is the page size + 1, so the caller knows whether there is more (P-2).
SELECT t.task_name, t.origin, t.current_revision, t.removed_at_ms, t.version,
       r.argv, r.cwd, r.env, r.cron, r.deadline_ms, r.retry_policy, r.created_at_ms,
       FALSE AS requires_approval  -- the cluster profile refuses approval (SPEC §5.4)
FROM tasks AS t
JOIN task_revisions AS r ON r.task_name = t.task_name AND r.revision = t.current_revision
WHERE t.task_name COLLATE "C" > %(after)s COLLATE "C"
  AND (%(include_removed)s OR t.removed_at_ms IS NULL)
  AND (%(include_adhoc)s OR t.origin = 'user')
ORDER BY t.task_name COLLATE "C"
LIMIT %(limit)s;

-- name: insert_task
INSERT INTO tasks (task_name, origin, current_revision, created_at_ms, updated_at_ms,
                   removed_at_ms, version)
VALUES (%(task_name)s, %(origin)s, %(current_revision)s, %(at_ms)s, %(at_ms)s, NULL,
        %(version)s);

-- name: update_task_revision
UPDATE tasks
SET current_revision = %(current_revision)s, updated_at_ms = %(at_ms)s, removed_at_ms = NULL,
    version = %(version)s
WHERE task_name = %(task_name)s AND version = %(expected_version)s;

-- name: remove_task
UPDATE tasks
SET removed_at_ms = %(at_ms)s, updated_at_ms = %(at_ms)s, version = %(version)s
WHERE task_name = %(task_name)s AND version = %(expected_version)s AND removed_at_ms IS NULL;

-- name: insert_task_revision
INSERT INTO task_revisions (task_name, revision, argv, cwd, env, cron, deadline_ms,
                            retry_policy, digest, created_at_ms)
VALUES (%(task_name)s, %(revision)s, %(argv)s, %(cwd)s, %(env)s, %(cron)s, %(deadline_ms)s,
        %(retry_policy)s, %(digest)s, %(created_at_ms)s);

-- ---------------------------------------------------------------- schedule bookkeeping ------
-- name: select_schedule
SELECT task_name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision, fire_state,
       fire_code, version
FROM task_schedules
WHERE task_name = %(task_name)s;

-- name: select_schedule_for_update
-- `add` and `remove` rewrite the bookkeeping from what they read: the row lock makes a
-- scheduler's concurrent compare-and-set wait and then find the version changed (it writes
-- nothing), instead of failing the edit.
SELECT task_name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision, fire_state,
       fire_code, version
FROM task_schedules
WHERE task_name = %(task_name)s
FOR UPDATE;

-- name: insert_schedule
INSERT INTO task_schedules (task_name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision,
                            fire_state, fire_code, version)
VALUES (%(task_name)s, %(cron)s, %(since_ms)s, %(next_due_ms)s, %(fire_at_ms)s,
        %(fire_revision)s, %(fire_state)s, %(fire_code)s, %(version)s);

-- name: update_schedule
UPDATE task_schedules
SET cron = %(cron)s, since_ms = %(since_ms)s, next_due_ms = %(next_due_ms)s,
    fire_at_ms = %(fire_at_ms)s, fire_revision = %(fire_revision)s,
    fire_state = %(fire_state)s, fire_code = %(fire_code)s, version = %(version)s
WHERE task_name = %(task_name)s AND version = %(expected_version)s;

-- name: due_schedules
-- The schedule phase's due scan: rows with next_due_ms <= now_ms after the keyset cursor
-- (after_due_ms, after_task), in (next_due_ms, task_name) order, with the task's current
-- revision; on the partial index task_schedules_by_due.
SELECT s.task_name, s.cron, s.since_ms, s.next_due_ms, s.fire_at_ms, s.fire_revision,
       s.fire_state, s.fire_code, s.version, t.current_revision
FROM task_schedules AS s
JOIN tasks AS t ON t.task_name = s.task_name
WHERE s.next_due_ms IS NOT NULL
  AND s.next_due_ms <= %(now_ms)s
  AND (s.next_due_ms > %(after_due_ms)s
       OR (s.next_due_ms = %(after_due_ms)s
           AND s.task_name COLLATE "C" > %(after_task)s COLLATE "C"))
ORDER BY s.next_due_ms, s.task_name COLLATE "C"
LIMIT %(limit)s;
