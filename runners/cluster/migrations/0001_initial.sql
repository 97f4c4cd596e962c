-- 0001_initial: the Run domain of SPEC §1.1 on PostgreSQL, the same logical schema as the edge
-- runner's runners/edge/migrations/0001_initial.sql: the same tables, the same columns (the
-- kernel entity field names), the same keys, checks and indexes. Applied once, in one
-- transaction under an advisory lock, by runners/cluster/migrate.py, which records version 1
-- with this file's SHA-256.
--
-- Types: TEXT for ids and enumerations (checked against the kernel's values), BIGINT for
-- milliseconds, versions and counters, BOOLEAN for `retry_on_lost`, JSONB for Event payloads.
-- Tokens are never stored: leases keep `token_digest`, local Attempts `callback_token_sha256`.

CREATE TABLE schema_version (
    version  INTEGER PRIMARY KEY CHECK (version >= 1),
    name     TEXT NOT NULL,
    checksum TEXT NOT NULL CHECK (length(checksum) = 64)
);

CREATE TABLE runs (
    run_id                 TEXT PRIMARY KEY,
    project_id             TEXT NOT NULL,
    task_id                TEXT NOT NULL,
    task_revision          BIGINT NOT NULL,
    executor_type          TEXT NOT NULL,
    kind                   TEXT NOT NULL CHECK (kind IN ('ordinary', 'workflow')),
    owner                  TEXT NOT NULL CHECK (owner IN ('runtime', 'legacy')),
    status                 TEXT NOT NULL CHECK (status IN (
                               'created', 'queued', 'dispatching', 'running', 'lost',
                               'retry_wait', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    version                BIGINT NOT NULL CHECK (version >= 1),
    event_seq              BIGINT NOT NULL CHECK (event_seq >= 0),
    created_at_ms          BIGINT NOT NULL,
    updated_at_ms          BIGINT NOT NULL,
    queued_at_ms           BIGINT,
    started_at_ms          BIGINT,
    finished_at_ms         BIGINT,
    cancel_requested_at_ms BIGINT,
    cancel_reason          TEXT CHECK (cancel_reason IN (
                               'user', 'policy', 'shutdown', 'reconcile', 'timeout')),
    error_code             TEXT,
    retry_of_run_id        TEXT
);

CREATE TABLE attempts (
    attempt_id            TEXT PRIMARY KEY,
    run_id                TEXT NOT NULL REFERENCES runs (run_id),
    number                BIGINT NOT NULL CHECK (number >= 1),
    status                TEXT NOT NULL CHECK (status IN (
                              'claimed', 'starting', 'running', 'succeeded', 'failed',
                              'cancelled', 'timed_out', 'lost')),
    executor_type         TEXT NOT NULL,
    created_at_ms         BIGINT NOT NULL,
    step_run_id           TEXT,
    worker_id             TEXT,
    worker_session_id     TEXT,
    worker_generation     BIGINT,
    offer_id              TEXT,
    lease_generation      BIGINT CHECK (lease_generation >= 1),
    lease_version         BIGINT CHECK (lease_version >= 1),
    executor_handle       TEXT,
    started_at_ms         BIGINT,
    log_artifact_id       TEXT,
    callback_sequence     BIGINT NOT NULL DEFAULT 0 CHECK (callback_sequence >= 0),
    finished_at_ms        BIGINT,
    exit_code             BIGINT,
    error_code            TEXT,
    callback_token_sha256 TEXT CHECK (callback_token_sha256 ~ '^[0-9a-f]{64}$'),
    -- I-1: one Attempt per (Run, number); also the index "latest Attempt of a Run" uses.
    UNIQUE (run_id, number)
);

CREATE TABLE run_retry_policies (
    run_id             TEXT PRIMARY KEY REFERENCES runs (run_id),
    max_attempts       BIGINT NOT NULL CHECK (max_attempts >= 1),
    retry_on_lost      BOOLEAN NOT NULL,
    safety             TEXT NOT NULL CHECK (safety IN ('unknown', 'idempotent', 'deduplicated')),
    backoff_base_ms    BIGINT NOT NULL CHECK (backoff_base_ms >= 0),
    backoff_max_ms     BIGINT NOT NULL CHECK (backoff_max_ms >= 0),
    version            BIGINT NOT NULL CHECK (version >= 1),
    created_at_ms      BIGINT NOT NULL,
    updated_at_ms      BIGINT NOT NULL,
    next_attempt_at_ms BIGINT
);

CREATE TABLE run_dispatch_leases (
    attempt_id        TEXT NOT NULL REFERENCES attempts (attempt_id),
    run_id            TEXT NOT NULL REFERENCES runs (run_id),
    lease_generation  BIGINT NOT NULL CHECK (lease_generation >= 1),
    status            TEXT NOT NULL CHECK (status IN ('leased', 'completed', 'released')),
    version           BIGINT NOT NULL CHECK (version >= 1),
    worker_id         TEXT NOT NULL,
    worker_session_id TEXT NOT NULL,
    worker_generation BIGINT NOT NULL,
    token_digest      TEXT NOT NULL CHECK (token_digest ~ '^[0-9a-f]{64}$'),
    acquired_at_ms    BIGINT NOT NULL,
    renewed_at_ms     BIGINT NOT NULL,
    expires_at_ms     BIGINT NOT NULL,
    updated_at_ms     BIGINT NOT NULL,
    released_at_ms    BIGINT,
    release_reason    TEXT CHECK (release_reason IN (
                          'declined', 'shutdown', 'start_failed', 'capacity_changed',
                          'lease_expired', 'cancelled')),
    completed_at_ms   BIGINT,
    -- §1.1: unique (attempt_id, lease_generation).
    PRIMARY KEY (attempt_id, lease_generation)
);

CREATE TABLE events (
    event_id    TEXT NOT NULL UNIQUE,
    run_id      TEXT NOT NULL REFERENCES runs (run_id),
    seq         BIGINT NOT NULL CHECK (seq >= 1),
    type        TEXT NOT NULL,
    actor       TEXT NOT NULL CHECK (actor IN (
                    'user', 'trigger', 'worker', 'executor', 'scheduler', 'reconciler',
                    'system')),
    dedupe_key  TEXT NOT NULL,
    at_ms       BIGINT NOT NULL,
    attempt_id  TEXT,
    step_run_id TEXT,
    code        TEXT,
    payload     JSONB NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    -- I-7 / V-3: gapless seq per Run; a replayed transaction cannot append a duplicate Event.
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, dedupe_key)
);

-- §1.1 / ADR-0021 §5.4: the expiry source's index, in its keyset order.
CREATE INDEX run_dispatch_leases_by_expiry
    ON run_dispatch_leases (status, expires_at_ms, attempt_id);

-- §1.1: at most one `leased` row per Attempt.
CREATE UNIQUE INDEX run_dispatch_leases_one_leased
    ON run_dispatch_leases (attempt_id) WHERE status = 'leased';

-- Loading an aggregate reads its leases by Run (and backs the foreign key).
CREATE INDEX run_dispatch_leases_by_run ON run_dispatch_leases (run_id);

-- Every Run-domain source starts from a Run status (docs/decisions.md E-2, CAD-16).
CREATE INDEX runs_by_status ON runs (status, created_at_ms, run_id);
