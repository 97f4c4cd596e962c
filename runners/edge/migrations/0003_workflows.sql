-- 0003_workflows: the Workflow tables of SPEC §4.1 (ADR-0229; issue 18): the immutable Workflow
-- admission, one StepRun per plan step, and the immutable Task admission ledger. The Run tables
-- are untouched: a Workflow is a Run with `kind = 'workflow'`, its Task Attempts are `attempts`
-- rows with `step_run_id` set, and its Events are `events` rows.
--
-- Column names are the kernel entity field names (kernel/workflow/entities.py); `depends_on` is
-- a JSON array of step keys (sorted). Rows of `workflow_admissions` and `task_admissions` are
-- inserted, never updated or deleted (the store has no statement that would).

CREATE TABLE workflow_admissions (
    run_id         TEXT PRIMARY KEY NOT NULL REFERENCES runs (run_id),
    plan_name      TEXT NOT NULL,
    plan_digest    TEXT NOT NULL CHECK (
                       length(plan_digest) = 64 AND plan_digest NOT GLOB '*[^0-9a-f]*'),
    step_count     INTEGER NOT NULL CHECK (step_count >= 1),
    admitted_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE step_runs (
    step_run_id      TEXT PRIMARY KEY NOT NULL,
    run_id           TEXT NOT NULL REFERENCES workflow_admissions (run_id),
    step_key         TEXT NOT NULL,
    ordinal          INTEGER NOT NULL CHECK (ordinal >= 1),
    task_id          TEXT NOT NULL,
    task_revision    INTEGER NOT NULL CHECK (task_revision >= 1),
    executor_type    TEXT NOT NULL,
    depends_on       TEXT NOT NULL CHECK (json_valid(depends_on) AND json_type(depends_on) = 'array'),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    retry_backoff_ms INTEGER NOT NULL CHECK (retry_backoff_ms >= 0),
    status           TEXT NOT NULL CHECK (status IN (
                         'pending', 'ready', 'running', 'succeeded', 'failed', 'cancelled',
                         'timed_out')),
    version          INTEGER NOT NULL CHECK (version >= 1),
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    ready_at_ms      INTEGER,
    started_at_ms    INTEGER,
    finished_at_ms   INTEGER,
    error_code       TEXT,
    UNIQUE (run_id, step_key),
    UNIQUE (run_id, ordinal)
) STRICT;

CREATE TABLE task_admissions (
    attempt_id       TEXT PRIMARY KEY NOT NULL REFERENCES attempts (attempt_id),
    run_id           TEXT NOT NULL REFERENCES runs (run_id),
    step_run_id      TEXT NOT NULL REFERENCES step_runs (step_run_id),
    step_run_version INTEGER NOT NULL CHECK (step_run_version >= 1),
    plan_digest      TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    task_revision    INTEGER NOT NULL CHECK (task_revision >= 1),
    executor_type    TEXT NOT NULL,
    attempt_number   INTEGER NOT NULL CHECK (attempt_number >= 1),
    event_id         TEXT NOT NULL UNIQUE,
    admitted_at_ms   INTEGER NOT NULL,
    -- §4.3 / I-W1: one admission per StepRun epoch; a replay finds it, never a second.
    UNIQUE (step_run_id, step_run_version)
) STRICT;

-- The Task admission phase reads `ready` StepRuns due by `ready_at_ms` (sources.sql).
CREATE INDEX step_runs_by_status ON step_runs (status, ready_at_ms, step_run_id);

-- Loading a Workflow aggregate reads its ledger by Run.
CREATE INDEX task_admissions_by_run ON task_admissions (run_id);
