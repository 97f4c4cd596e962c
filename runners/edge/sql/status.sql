-- What `qlk status` reads (runners/local/status.py): bounded aggregates over the Run domain and
-- the task schedules, and one Run's rows for `qlk status RUN` / `qlk logs`. Read-only.
--
-- Bounded: every count scans at most `:cap + 1` index entries (a count above `:cap` is reported
-- as "more than :cap"), and the statements are driven by the indexes the sources already use
-- (`runs_by_status`, `task_schedules_by_due`), never a table scan of a long-lived database.
-- Where a backlog is capped its oldest time is the oldest among the `:cap + 1` rows read (in the
-- index's order, the earliest created), which is the true oldest whenever the count is exact.
-- Tokens and digests (`callback_token_sha256`, `token_digest`) are never selected.

-- name: begin_read
-- One read transaction: the statements that follow see one committed state (WAL snapshot).
BEGIN DEFERRED;

-- name: end_read
COMMIT;

-- name: run_counts
-- Runs by status, each count stopping at `:cap + 1` entries of the status index.
WITH statuses (status) AS (
    VALUES ('created'), ('queued'), ('dispatching'), ('running'), ('lost'), ('retry_wait'),
           ('succeeded'), ('failed'), ('cancelled'), ('timed_out')
)
SELECT s.status,
       (SELECT count(*) FROM (
            SELECT 1 FROM runs AS r INDEXED BY runs_by_status
            WHERE r.status = s.status
            LIMIT :cap + 1
       )) AS runs
FROM statuses AS s;

-- name: backlog_dispatch
-- Queued Runs waiting for the dispatch phase (no cancellation intent); oldest by the time they
-- were queued (the local dispatch key, D-13).
SELECT count(*), min(k)
FROM (
    SELECT coalesce(r.queued_at_ms, r.created_at_ms) AS k
    FROM runs AS r INDEXED BY runs_by_status
    WHERE r.status = 'queued'
      AND r.cancel_requested_at_ms IS NULL
    LIMIT :cap + 1
);

-- name: backlog_retry_due
-- `retry_wait` Runs whose next Attempt is due (no intent); oldest by the time it became due.
SELECT count(*), min(k)
FROM (
    SELECT p.next_attempt_at_ms AS k
    FROM runs AS r INDEXED BY runs_by_status
    JOIN run_retry_policies AS p ON p.run_id = r.run_id
    WHERE r.status = 'retry_wait'
      AND r.cancel_requested_at_ms IS NULL
      AND p.next_attempt_at_ms <= :now_ms
    LIMIT :cap + 1
);

-- name: backlog_lost
-- `lost` Runs without an intent, waiting for the lost-retry decision; oldest by the time the Run
-- last changed (when it became lost).
SELECT count(*), min(k)
FROM (
    SELECT r.updated_at_ms AS k
    FROM runs AS r INDEXED BY runs_by_status
    WHERE r.status = 'lost'
      AND r.cancel_requested_at_ms IS NULL
    LIMIT :cap + 1
);

-- name: backlog_running
-- `running` Runs; oldest by the time the Run started (the longest running).
SELECT count(*), min(k)
FROM (
    SELECT coalesce(r.started_at_ms, r.updated_at_ms) AS k
    FROM runs AS r INDEXED BY runs_by_status
    WHERE r.status = 'running'
    LIMIT :cap + 1
);

-- name: backlog_cancelling
-- Runs with a cancellation intent that are not terminal yet (convergence or execution control
-- still has to finish them); oldest by the time the intent was recorded.
SELECT count(*), min(k)
FROM (
    SELECT r.cancel_requested_at_ms AS k
    FROM runs AS r INDEXED BY runs_by_status
    WHERE r.status IN ('created', 'queued', 'dispatching', 'running', 'lost', 'retry_wait')
      AND r.cancel_requested_at_ms IS NOT NULL
    LIMIT :cap + 1
);

-- name: backlog_schedule
-- Task schedules whose next fire is due (the schedule phase's due scan); oldest by due time.
SELECT count(*), min(k)
FROM (
    SELECT s.next_due_ms AS k
    FROM task_schedules AS s INDEXED BY task_schedules_by_due
    WHERE s.next_due_ms IS NOT NULL
      AND s.next_due_ms <= :now_ms
    ORDER BY s.next_due_ms, s.task_name
    LIMIT :cap + 1
);

-- name: run_detail
SELECT run_id, status, task_id, task_revision, created_at_ms, updated_at_ms, queued_at_ms,
       started_at_ms, finished_at_ms, cancel_requested_at_ms, cancel_reason, error_code,
       retry_of_run_id
FROM runs
WHERE run_id = :run_id;

-- name: run_attempts
-- A Run's Attempts by number (at most 16 by A-3; the limit is a guard, not a page).
SELECT attempt_id, number, status, created_at_ms, started_at_ms, finished_at_ms, exit_code,
       error_code
FROM attempts
WHERE run_id = :run_id
ORDER BY number
LIMIT :limit;

-- name: run_events
-- A Run's Events by seq, the first `:limit` (the caller asks for one more to know if there are
-- more). Payloads are not read.
SELECT seq, type, actor, at_ms, attempt_id, code
FROM events
WHERE run_id = :run_id
ORDER BY seq
LIMIT :limit;

-- name: run_progress
-- What `qlk logs --follow` polls: the Run's status and its latest Attempt.
SELECT r.status,
       (SELECT a.attempt_id FROM attempts AS a
        WHERE a.run_id = r.run_id
        ORDER BY a.number DESC
        LIMIT 1) AS latest_attempt_id
FROM runs AS r
WHERE r.run_id = :run_id;

-- name: workflow_admission
-- A Workflow Run's immutable admission (SPEC §4.1); no row for an ordinary Run.
SELECT plan_name, plan_digest, step_count, admitted_at_ms
FROM workflow_admissions
WHERE run_id = :run_id;

-- name: workflow_step_runs
-- A Workflow Run's StepRuns in plan order (at most 64 by the plan's limit; `:limit` is a guard,
-- not a page), each with how many Task Attempts were admitted for it (its ledger entries, one
-- per epoch at most, I-W1; counted through the ledger's `(step_run_id, step_run_version)`
-- unique index).
SELECT s.step_key, s.step_run_id, s.status, s.version, s.task_id, s.task_revision,
       s.depends_on, s.max_attempts, s.created_at_ms, s.updated_at_ms, s.ready_at_ms,
       s.started_at_ms, s.finished_at_ms, s.error_code,
       (SELECT count(*) FROM task_admissions AS t
        WHERE t.step_run_id = s.step_run_id) AS admitted
FROM step_runs AS s
WHERE s.run_id = :run_id
ORDER BY s.ordinal
LIMIT :limit;
