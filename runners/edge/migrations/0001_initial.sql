-- 0001_initial: the Run domain of SPEC §1.1 (Run, Attempt, RunRetryPolicy, Run dispatch lease,
-- Event) and the schema version record. Applied once, in one transaction, by
-- runners/edge/migrate.py, which then records version 1 with this file's SHA-256.
--
-- Column names are the field names of the kernel entities (kernel/entities.py), so the backdoor
-- reader projects rows without renaming. Enumerations are stored as their TEXT values, booleans
-- as INTEGER 0/1, times as INTEGER milliseconds, Event payloads as canonical JSON text. Tokens are
-- never stored: leases keep `token_digest`, local Attempts `callback_token_sha256` (I-9, S-1).
-- STRICT tables refuse a value of the wrong type instead of converting it.

CREATE TABLE schema_version (
    version  INTEGER PRIMARY KEY CHECK (version >= 1),
    name     TEXT NOT NULL,
    checksum TEXT NOT NULL CHECK (length(checksum) = 64)
) STRICT;

CREATE TABLE runs (
    run_id                 TEXT PRIMARY KEY NOT NULL,
    project_id             TEXT NOT NULL,
    task_id                TEXT NOT NULL,
    task_revision          INTEGER NOT NULL,
    executor_type          TEXT NOT NULL,
    kind                   TEXT NOT NULL CHECK (kind IN ('ordinary', 'workflow')),
    owner                  TEXT NOT NULL CHECK (owner IN ('runtime', 'legacy')),
    status                 TEXT NOT NULL CHECK (status IN (
                               'created', 'queued', 'dispatching', 'running', 'lost',
                               'retry_wait', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    version                INTEGER NOT NULL CHECK (version >= 1),
    event_seq              INTEGER NOT NULL CHECK (event_seq >= 0),
    created_at_ms          INTEGER NOT NULL,
    updated_at_ms          INTEGER NOT NULL,
    queued_at_ms           INTEGER,
    started_at_ms          INTEGER,
    finished_at_ms         INTEGER,
    cancel_requested_at_ms INTEGER,
    cancel_reason          TEXT CHECK (cancel_reason IN (
                               'user', 'policy', 'shutdown', 'reconcile', 'timeout')),
    error_code             TEXT,
    retry_of_run_id        TEXT
) STRICT;

CREATE TABLE attempts (
    attempt_id            TEXT PRIMARY KEY NOT NULL,
    run_id                TEXT NOT NULL REFERENCES runs (run_id),
    number                INTEGER NOT NULL CHECK (number >= 1),
    status                TEXT NOT NULL CHECK (status IN (
                              'claimed', 'starting', 'running', 'succeeded', 'failed',
                              'cancelled', 'timed_out', 'lost')),
    executor_type         TEXT NOT NULL,
    created_at_ms         INTEGER NOT NULL,
    step_run_id           TEXT,
    worker_id             TEXT,
    worker_session_id     TEXT,
    worker_generation     INTEGER,
    offer_id              TEXT,
    lease_generation      INTEGER CHECK (lease_generation >= 1),
    lease_version         INTEGER CHECK (lease_version >= 1),
    executor_handle       TEXT,
    started_at_ms         INTEGER,
    log_artifact_id       TEXT,
    callback_sequence     INTEGER NOT NULL DEFAULT 0 CHECK (callback_sequence >= 0),
    finished_at_ms        INTEGER,
    exit_code             INTEGER,
    error_code            TEXT,
    callback_token_sha256 TEXT CHECK (
                              length(callback_token_sha256) = 64
                              AND callback_token_sha256 NOT GLOB '*[^0-9a-f]*'),
    -- I-1: one Attempt per (Run, number); also the index "latest Attempt of a Run" uses.
    UNIQUE (run_id, number)
) STRICT;

CREATE TABLE run_retry_policies (
    run_id             TEXT PRIMARY KEY NOT NULL REFERENCES runs (run_id),
    max_attempts       INTEGER NOT NULL CHECK (max_attempts >= 1),
    retry_on_lost      INTEGER NOT NULL CHECK (retry_on_lost IN (0, 1)),
    safety             TEXT NOT NULL CHECK (safety IN ('unknown', 'idempotent', 'deduplicated')),
    backoff_base_ms    INTEGER NOT NULL CHECK (backoff_base_ms >= 0),
    backoff_max_ms     INTEGER NOT NULL CHECK (backoff_max_ms >= 0),
    version            INTEGER NOT NULL CHECK (version >= 1),
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    next_attempt_at_ms INTEGER
) STRICT;

CREATE TABLE run_dispatch_leases (
    attempt_id        TEXT NOT NULL REFERENCES attempts (attempt_id),
    run_id            TEXT NOT NULL REFERENCES runs (run_id),
    lease_generation  INTEGER NOT NULL CHECK (lease_generation >= 1),
    status            TEXT NOT NULL CHECK (status IN ('leased', 'completed', 'released')),
    version           INTEGER NOT NULL CHECK (version >= 1),
    worker_id         TEXT NOT NULL,
    worker_session_id TEXT NOT NULL,
    worker_generation INTEGER NOT NULL,
    token_digest      TEXT NOT NULL CHECK (
                          length(token_digest) = 64 AND token_digest NOT GLOB '*[^0-9a-f]*'),
    acquired_at_ms    INTEGER NOT NULL,
    renewed_at_ms     INTEGER NOT NULL,
    expires_at_ms     INTEGER NOT NULL,
    updated_at_ms     INTEGER NOT NULL,
    released_at_ms    INTEGER,
    release_reason    TEXT CHECK (release_reason IN (
                          'declined', 'shutdown', 'start_failed', 'capacity_changed',
                          'lease_expired', 'cancelled')),
    completed_at_ms   INTEGER,
    -- §1.1: unique (attempt_id, lease_generation).
    PRIMARY KEY (attempt_id, lease_generation)
) STRICT;

CREATE TABLE events (
    event_id    TEXT NOT NULL UNIQUE,
    run_id      TEXT NOT NULL REFERENCES runs (run_id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    type        TEXT NOT NULL,
    actor       TEXT NOT NULL CHECK (actor IN (
                    'user', 'trigger', 'worker', 'executor', 'scheduler', 'reconciler',
                    'system')),
    dedupe_key  TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    attempt_id  TEXT,
    step_run_id TEXT,
    code        TEXT,
    payload     TEXT NOT NULL CHECK (json_valid(payload)),
    -- I-7 / V-3: gapless seq per Run; a replayed transaction cannot append a duplicate Event.
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, dedupe_key)
) STRICT;

-- §1.1 / ADR-0021 §5.4: the expiry source's index, in its keyset order.
CREATE INDEX run_dispatch_leases_by_expiry
    ON run_dispatch_leases (status, expires_at_ms, attempt_id);

-- §1.1: at most one `leased` row per Attempt.
CREATE UNIQUE INDEX run_dispatch_leases_one_leased
    ON run_dispatch_leases (attempt_id) WHERE status = 'leased';

-- Loading an aggregate reads its leases by Run (and backs the foreign key).
CREATE INDEX run_dispatch_leases_by_run ON run_dispatch_leases (run_id);

-- Every Run-domain source starts from a Run status: local dispatch and cancellation
-- convergence, and on the same index, with nothing of their own (CAD-16), lost retry, startup
-- recovery and the cluster recovery source; created time and id give the orphaned-created
-- keyset order directly.
CREATE INDEX runs_by_status ON runs (status, created_at_ms, run_id);
