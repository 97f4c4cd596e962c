-- Statements of the task store (runners/edge/tasks.py; migration 0002_tasks). Every UPDATE is a
-- compare-and-set on the row's version: zero rows affected means a concurrent writer (another
-- process on the file) won, and the caller reports a race instead of writing over it.

-- ---------------------------------------------------------------- tasks and revisions -------
-- name: select_task
SELECT t.task_name, t.origin, t.current_revision, t.removed_at_ms, t.version,
       r.argv, r.cwd, r.env, r.cron, r.deadline_ms, r.retry_policy, r.created_at_ms,
       r.requires_approval
FROM tasks AS t
JOIN task_revisions AS r ON r.task_name = t.task_name AND r.revision = t.current_revision
WHERE t.task_name = :task_name;

-- name: select_task_revision
SELECT r.task_name, t.origin, r.revision, r.argv, r.cwd, r.env, r.cron, r.deadline_ms,
       r.retry_policy, r.created_at_ms,
       r.requires_approval
FROM task_revisions AS r
JOIN tasks AS t ON t.task_name = r.task_name
WHERE r.task_name = :task_name AND r.revision = :revision;

-- name: list_tasks
-- One keyset page by name (P-3): `:after` is the last name of the previous page ('' at first).
-- `:limit` is the page size + 1, so the caller knows whether there is more (P-2).
SELECT t.task_name, t.origin, t.current_revision, t.removed_at_ms, t.version,
       r.argv, r.cwd, r.env, r.cron, r.deadline_ms, r.retry_policy, r.created_at_ms,
       r.requires_approval
FROM tasks AS t
JOIN task_revisions AS r ON r.task_name = t.task_name AND r.revision = t.current_revision
WHERE t.task_name > :after
  AND (:include_removed OR t.removed_at_ms IS NULL)
  AND (:include_adhoc OR t.origin = 'user')
ORDER BY t.task_name
LIMIT :limit;

-- name: insert_task
INSERT INTO tasks (task_name, origin, current_revision, created_at_ms, updated_at_ms,
                   removed_at_ms, version)
VALUES (:task_name, :origin, :current_revision, :at_ms, :at_ms, NULL, :version);

-- name: update_task_revision
UPDATE tasks
SET current_revision = :current_revision, updated_at_ms = :at_ms, removed_at_ms = NULL,
    version = :version
WHERE task_name = :task_name AND version = :expected_version;

-- name: remove_task
UPDATE tasks
SET removed_at_ms = :at_ms, updated_at_ms = :at_ms, version = :version
WHERE task_name = :task_name AND version = :expected_version AND removed_at_ms IS NULL;

-- name: insert_task_revision
INSERT INTO task_revisions (task_name, revision, argv, cwd, env, cron, deadline_ms,
                            retry_policy, digest, created_at_ms, requires_approval)
VALUES (:task_name, :revision, :argv, :cwd, :env, :cron, :deadline_ms, :retry_policy, :digest,
        :created_at_ms, :requires_approval);

-- ---------------------------------------------------------------- schedule bookkeeping ------
-- name: select_schedule
SELECT task_name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision, fire_state,
       fire_code, version
FROM task_schedules
WHERE task_name = :task_name;

-- name: insert_schedule
INSERT INTO task_schedules (task_name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision,
                            fire_state, fire_code, version)
VALUES (:task_name, :cron, :since_ms, :next_due_ms, :fire_at_ms, :fire_revision, :fire_state,
        :fire_code, :version);

-- name: update_schedule
UPDATE task_schedules
SET cron = :cron, since_ms = :since_ms, next_due_ms = :next_due_ms, fire_at_ms = :fire_at_ms,
    fire_revision = :fire_revision, fire_state = :fire_state, fire_code = :fire_code,
    version = :version
WHERE task_name = :task_name AND version = :expected_version;

-- name: due_schedules
-- The schedule phase's due scan: rows with next_due_ms <= :now_ms after the keyset cursor
-- (:after_due_ms, :after_task), in (next_due_ms, task_name) order, with the task's current
-- revision; on the partial index task_schedules_by_due.
SELECT s.task_name, s.cron, s.since_ms, s.next_due_ms, s.fire_at_ms, s.fire_revision,
       s.fire_state, s.fire_code, s.version, t.current_revision
FROM task_schedules AS s
JOIN tasks AS t ON t.task_name = s.task_name
WHERE s.next_due_ms IS NOT NULL
  AND s.next_due_ms <= :now_ms
  AND (s.next_due_ms, s.task_name) > (:after_due_ms, :after_task)
ORDER BY s.next_due_ms, s.task_name
LIMIT :limit;
