-- 0005_workflows: the edge runner's 0003_workflows (SPEC §4.1, ADR-0229; issue 18): the
-- immutable Workflow admission, the StepRuns and the immutable Task admission ledger, with the
-- same tables, columns, checks and named indexes, so both runners keep one logical schema
-- (tests/runners/cluster/test_cluster_schema). `depends_on` stays text checked as a JSON array,
-- as on the edge runner. The Worker-ingress role gets no privilege on them (CAD-18): the
-- runtime's own credentials write them, a Worker never does.

CREATE TABLE workflow_admissions (
    run_id         TEXT PRIMARY KEY REFERENCES runs (run_id),
    plan_name      TEXT NOT NULL,
    plan_digest    TEXT NOT NULL CHECK (plan_digest ~ '^[0-9a-f]{64}$'),
    step_count     BIGINT NOT NULL CHECK (step_count >= 1),
    admitted_at_ms BIGINT NOT NULL
);

CREATE TABLE step_runs (
    step_run_id      TEXT PRIMARY KEY,
    run_id           TEXT NOT NULL REFERENCES workflow_admissions (run_id),
    step_key         TEXT NOT NULL,
    ordinal          BIGINT NOT NULL CHECK (ordinal >= 1),
    task_id          TEXT NOT NULL,
    task_revision    BIGINT NOT NULL CHECK (task_revision >= 1),
    executor_type    TEXT NOT NULL,
    depends_on       TEXT NOT NULL CHECK (json_typeof(depends_on::json) = 'array'),
    max_attempts     BIGINT NOT NULL CHECK (max_attempts >= 1),
    retry_backoff_ms BIGINT NOT NULL CHECK (retry_backoff_ms >= 0),
    status           TEXT NOT NULL CHECK (status IN (
                         'pending', 'ready', 'running', 'succeeded', 'failed', 'cancelled',
                         'timed_out')),
    version          BIGINT NOT NULL CHECK (version >= 1),
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL,
    ready_at_ms      BIGINT,
    started_at_ms    BIGINT,
    finished_at_ms   BIGINT,
    error_code       TEXT,
    UNIQUE (run_id, step_key),
    UNIQUE (run_id, ordinal)
);

CREATE TABLE task_admissions (
    attempt_id       TEXT PRIMARY KEY REFERENCES attempts (attempt_id),
    run_id           TEXT NOT NULL REFERENCES runs (run_id),
    step_run_id      TEXT NOT NULL REFERENCES step_runs (step_run_id),
    step_run_version BIGINT NOT NULL CHECK (step_run_version >= 1),
    plan_digest      TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    task_revision    BIGINT NOT NULL CHECK (task_revision >= 1),
    executor_type    TEXT NOT NULL,
    attempt_number   BIGINT NOT NULL CHECK (attempt_number >= 1),
    event_id         TEXT NOT NULL UNIQUE,
    admitted_at_ms   BIGINT NOT NULL,
    -- §4.3 / I-W1: one admission per StepRun epoch; a replay finds it, never a second.
    UNIQUE (step_run_id, step_run_version)
);

CREATE INDEX step_runs_by_status ON step_runs (status, ready_at_ms, step_run_id);

CREATE INDEX task_admissions_by_run ON task_admissions (run_id);

REVOKE ALL PRIVILEGES ON workflow_admissions, step_runs, task_admissions FROM ql3_worker_ingress;
