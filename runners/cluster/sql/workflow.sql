-- The Workflow statements (SPEC §4, issue 18): the loads of a Workflow aggregate beside the Run's
-- (statements.sql), one write per Workflow effect (kernel/workflow/effects.py) whose WHERE
-- clause re-checks its guard, and the backdoor reader's three tables. Columns are the kernel
-- entity field names; `depends_on` is JSON text. runners/edge/sql/workflow.sql has the same
-- sections with SQLite placeholders; here the aggregate loads run after `select_run`'s row lock.

-- ---------------------------------------------------------------- aggregate loads -----------
-- name: select_workflow_admission
SELECT run_id, plan_name, plan_digest, step_count, admitted_at_ms
FROM workflow_admissions
WHERE run_id = %(run_id)s;

-- name: select_step_runs_of_run
SELECT step_run_id, run_id, step_key, ordinal, task_id, task_revision, executor_type,
       depends_on, max_attempts, retry_backoff_ms, status, version, created_at_ms,
       updated_at_ms, ready_at_ms, started_at_ms, finished_at_ms, error_code
FROM step_runs
WHERE run_id = %(run_id)s
ORDER BY ordinal;

-- name: select_task_admissions_of_run
SELECT attempt_id, run_id, step_run_id, step_run_version, plan_digest, task_id, task_revision,
       executor_type, attempt_number, event_id, admitted_at_ms
FROM task_admissions
WHERE run_id = %(run_id)s
ORDER BY attempt_number;

-- ---------------------------------------------------------------- effects -------------------
-- name: insert_workflow_admission
-- InsertWorkflowAdmission. A collision means the Workflow was admitted first (exact replay).
INSERT INTO workflow_admissions (run_id, plan_name, plan_digest, step_count, admitted_at_ms)
VALUES (%(run_id)s, %(plan_name)s, %(plan_digest)s, %(step_count)s, %(admitted_at_ms)s);

-- name: insert_step_run
INSERT INTO step_runs (
    step_run_id, run_id, step_key, ordinal, task_id, task_revision, executor_type, depends_on,
    max_attempts, retry_backoff_ms, status, version, created_at_ms, updated_at_ms, ready_at_ms,
    started_at_ms, finished_at_ms, error_code
) VALUES (
    %(step_run_id)s, %(run_id)s, %(step_key)s, %(ordinal)s, %(task_id)s, %(task_revision)s, %(executor_type)s,
    %(depends_on)s, %(max_attempts)s, %(retry_backoff_ms)s, %(status)s, %(version)s, %(created_at_ms)s,
    %(updated_at_ms)s, %(ready_at_ms)s, %(started_at_ms)s, %(finished_at_ms)s, %(error_code)s
);

-- name: update_step_run
-- UpdateStepRun: CAS on the epoch. The plan columns are pinned at admission and never written.
UPDATE step_runs SET
    status = %(status)s, version = %(version)s, updated_at_ms = %(updated_at_ms)s,
    ready_at_ms = %(ready_at_ms)s, started_at_ms = %(started_at_ms)s,
    finished_at_ms = %(finished_at_ms)s, error_code = %(error_code)s
WHERE step_run_id = %(step_run_id)s
  AND version = %(expected_version)s;

-- name: insert_task_admission
-- InsertTaskAdmission: unique (step_run_id, step_run_version) is I-W1.
INSERT INTO task_admissions (
    attempt_id, run_id, step_run_id, step_run_version, plan_digest, task_id, task_revision,
    executor_type, attempt_number, event_id, admitted_at_ms
) VALUES (
    %(attempt_id)s, %(run_id)s, %(step_run_id)s, %(step_run_version)s, %(plan_digest)s, %(task_id)s,
    %(task_revision)s, %(executor_type)s, %(attempt_number)s, %(event_id)s, %(admitted_at_ms)s
);

-- ---------------------------------------------------------------- backdoor reader -----------
-- name: project_workflow_admissions
SELECT run_id, plan_name, plan_digest, step_count, admitted_at_ms
FROM workflow_admissions
ORDER BY run_id;

-- name: project_step_runs
SELECT step_run_id, run_id, step_key, ordinal, task_id, task_revision, executor_type,
       depends_on, max_attempts, retry_backoff_ms, status, version, created_at_ms,
       updated_at_ms, ready_at_ms, started_at_ms, finished_at_ms, error_code
FROM step_runs
ORDER BY step_run_id;

-- name: project_task_admissions
SELECT attempt_id, run_id, step_run_id, step_run_version, plan_digest, task_id, task_revision,
       executor_type, attempt_number, event_id, admitted_at_ms
FROM task_admissions
ORDER BY attempt_id;
