-- The local application's own reads (runners/local/), beside the Run sources of sources.sql.

-- name: local_stop_candidates
-- O-2 step 2 (L4/L5), mirrors kernel.local_control.local_stop_candidates: runtime ordinary
-- `running` Runs with a cancellation intent whose latest Attempt is a local Attempt (it holds a
-- callback digest and no lease) `running` under a recorded handle. Key (cancel_requested_at_ms,
-- run_id). Driven by the Run status index: only `running` Runs are read.
SELECT r.run_id AS run_id, a.attempt_id AS attempt_id, r.cancel_requested_at_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
JOIN attempts AS a ON a.run_id = r.run_id
WHERE r.status = 'running'
  AND r.cancel_requested_at_ms IS NOT NULL
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
  AND a.status = 'running'
  AND a.callback_token_sha256 IS NOT NULL
  AND a.executor_handle IS NOT NULL
  AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = a.run_id)
ORDER BY r.cancel_requested_at_ms, r.run_id
LIMIT :limit + 1;

-- name: deadline_candidates
-- O-2 step 2, deadline control (B-06), mirrors kernel.local_control.deadline_candidates: runtime
-- ordinary `dispatching`/`running` Runs without an intent whose task revision has a deadline that
-- passed since the Run started. Key (started_at_ms + deadline_ms, run_id). Driven by the Run
-- status index: only started Runs are read, each joined to its revision by primary key.
SELECT r.run_id AS run_id, r.started_at_ms + t.deadline_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
JOIN task_revisions AS t ON t.task_name = r.task_id AND t.revision = r.task_revision
WHERE r.status IN ('dispatching', 'running')
  AND r.cancel_requested_at_ms IS NULL
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
  AND r.started_at_ms IS NOT NULL
  AND t.deadline_ms IS NOT NULL
  AND r.started_at_ms + t.deadline_ms <= :now_ms
ORDER BY k0, r.run_id
LIMIT :limit + 1;

-- name: run_task
-- The task revision a Run was admitted with (the launcher reads its ExecutionSpec).
SELECT task_id, task_revision FROM runs WHERE run_id = :run_id;

-- name: attempt_sequence
-- D-1 cleanup: an Attempt's status and callback sequence, by id.
SELECT status, callback_sequence FROM attempts WHERE attempt_id = :attempt_id;

-- name: attempt_finish
-- O-2 step 4 log cleanup (CAD-02, D-1, decision LR-13): an Attempt's status and end time, by id
-- (the kernel's `log_cleanup_allowed` decides; no row: the database does not know the Attempt).
SELECT status, finished_at_ms FROM attempts WHERE attempt_id = :attempt_id;

-- name: run_status_counts
-- `qlk serve --until-idle` and `qlk status`: how many Runs are in each status (one scan of the
-- status index; the kernel's `local_idle` decides what counts as settled).
SELECT status, count(*) FROM runs INDEXED BY runs_by_status GROUP BY status;

-- name: attempt_step_run
-- The StepRun of an Attempt (NULL for an ordinary Attempt): the completion port asks the kernel
-- which command a receipt becomes (kernel.workflow.local_completion_command).
SELECT step_run_id FROM attempts WHERE attempt_id = :attempt_id;

-- name: task_attempt_task
-- The task revision a Task Attempt was admitted with (its immutable ledger entry, §4.1): the
-- launcher reads its ExecutionSpec.
SELECT task_id, task_revision FROM task_admissions WHERE attempt_id = :attempt_id;
