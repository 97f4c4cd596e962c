-- Statements of the edge runner: connection set-up, transaction control, the migrator's
-- bookkeeping, aggregate loads, and one statement per kernel effect (kernel/effects.py).
-- Every UPDATE re-checks the effect's guard in its WHERE clause; zero rows affected is a stale
-- write (runners.engine.StaleWrite), never a success.

-- ---------------------------------------------------------------- connection set-up --------
-- name: pragma_journal_mode_wal
PRAGMA journal_mode = WAL;

-- name: pragma_foreign_keys_on
PRAGMA foreign_keys = ON;

-- name: pragma_synchronous_extra
PRAGMA synchronous = EXTRA;

-- name: pragma_synchronous_full
PRAGMA synchronous = FULL;

-- name: pragma_synchronous_normal
PRAGMA synchronous = NORMAL;

-- name: pragma_cache_size
-- 64 MiB of page cache (a negative size is KiB), allocated only as pages are read: a source
-- page on a million-row file touches pages spread over hundreds of MiB, and with the 2 MiB
-- default each call re-reads them from the OS (docs/performance.md §2).
PRAGMA cache_size = -65536;

-- name: read_journal_mode
PRAGMA journal_mode;

-- name: read_foreign_keys
PRAGMA foreign_keys;

-- name: read_busy_timeout
PRAGMA busy_timeout;

-- name: read_cache_size
PRAGMA cache_size;

-- name: read_synchronous
PRAGMA synchronous;

-- ---------------------------------------------------------------- transaction control ------
-- name: begin_immediate
BEGIN IMMEDIATE;

-- name: begin_deferred
BEGIN DEFERRED;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- ---------------------------------------------------------------- migrator ------------------
-- name: schema_version_table_exists
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version';

-- name: select_schema_versions
SELECT version, name, checksum FROM schema_version ORDER BY version;

-- name: insert_schema_version
INSERT INTO schema_version (version, name, checksum) VALUES (:version, :name, :checksum);

-- ---------------------------------------------------------------- aggregate loads -----------
-- name: select_run
SELECT run_id, project_id, task_id, task_revision, executor_type, kind, owner, status,
       version, event_seq, created_at_ms, updated_at_ms, queued_at_ms, started_at_ms,
       finished_at_ms, cancel_requested_at_ms, cancel_reason, error_code, retry_of_run_id
FROM runs
WHERE run_id = :run_id;

-- name: select_run_id_of_attempt
SELECT run_id FROM attempts WHERE attempt_id = :attempt_id;

-- name: select_attempts_of_run
SELECT attempt_id, run_id, number, status, executor_type, created_at_ms, step_run_id,
       worker_id, worker_session_id, worker_generation, offer_id, lease_generation,
       lease_version, executor_handle, started_at_ms, log_artifact_id, callback_sequence,
       finished_at_ms, exit_code, error_code, callback_token_sha256
FROM attempts
WHERE run_id = :run_id
ORDER BY number;

-- name: select_policy_of_run
SELECT run_id, max_attempts, retry_on_lost, safety, backoff_base_ms, backoff_max_ms, version,
       created_at_ms, updated_at_ms, next_attempt_at_ms
FROM run_retry_policies
WHERE run_id = :run_id;

-- name: select_leases_of_run
SELECT attempt_id, run_id, lease_generation, status, version, worker_id, worker_session_id,
       worker_generation, token_digest, acquired_at_ms, renewed_at_ms, expires_at_ms,
       updated_at_ms, released_at_ms, release_reason, completed_at_ms
FROM run_dispatch_leases
WHERE run_id = :run_id
ORDER BY attempt_id, lease_generation;

-- ---------------------------------------------------------------- effects -------------------
-- name: insert_run
-- InsertRun. A primary-key collision means a concurrent writer created the Run first.
INSERT INTO runs (
    run_id, project_id, task_id, task_revision, executor_type, kind, owner, status, version,
    event_seq, created_at_ms, updated_at_ms, queued_at_ms, started_at_ms, finished_at_ms,
    cancel_requested_at_ms, cancel_reason, error_code, retry_of_run_id
) VALUES (
    :run_id, :project_id, :task_id, :task_revision, :executor_type, :kind, :owner, :status,
    :version, :event_seq, :created_at_ms, :updated_at_ms, :queued_at_ms, :started_at_ms,
    :finished_at_ms, :cancel_requested_at_ms, :cancel_reason, :error_code, :retry_of_run_id
);

-- name: update_run
-- UpdateRun: CAS on the Run version (V-1).
UPDATE runs SET
    project_id = :project_id, task_id = :task_id, task_revision = :task_revision,
    executor_type = :executor_type, kind = :kind, owner = :owner, status = :status,
    version = :version, event_seq = :event_seq, created_at_ms = :created_at_ms,
    updated_at_ms = :updated_at_ms, queued_at_ms = :queued_at_ms,
    started_at_ms = :started_at_ms, finished_at_ms = :finished_at_ms,
    cancel_requested_at_ms = :cancel_requested_at_ms, cancel_reason = :cancel_reason,
    error_code = :error_code, retry_of_run_id = :retry_of_run_id
WHERE run_id = :run_id
  AND version = :expected_version;

-- name: insert_attempt
-- InsertAttempt. A collision on the id or on (run_id, number) means the Attempt exists (RUN-02).
INSERT INTO attempts (
    attempt_id, run_id, number, status, executor_type, created_at_ms, step_run_id, worker_id,
    worker_session_id, worker_generation, offer_id, lease_generation, lease_version,
    executor_handle, started_at_ms, log_artifact_id, callback_sequence, finished_at_ms,
    exit_code, error_code, callback_token_sha256
) VALUES (
    :attempt_id, :run_id, :number, :status, :executor_type, :created_at_ms, :step_run_id,
    :worker_id, :worker_session_id, :worker_generation, :offer_id, :lease_generation,
    :lease_version, :executor_handle, :started_at_ms, :log_artifact_id, :callback_sequence,
    :finished_at_ms, :exit_code, :error_code, :callback_token_sha256
);

-- name: update_attempt
-- UpdateAttempt: guarded by the previous status and the lease version mirror (`IS`: both may
-- be NULL); the Run (or, for a renew, the lease) CAS of the same transaction serializes writers.
UPDATE attempts SET
    number = :number, status = :status, executor_type = :executor_type,
    created_at_ms = :created_at_ms, step_run_id = :step_run_id, worker_id = :worker_id,
    worker_session_id = :worker_session_id, worker_generation = :worker_generation,
    offer_id = :offer_id, lease_generation = :lease_generation, lease_version = :lease_version,
    executor_handle = :executor_handle, started_at_ms = :started_at_ms,
    log_artifact_id = :log_artifact_id, callback_sequence = :callback_sequence,
    finished_at_ms = :finished_at_ms, exit_code = :exit_code, error_code = :error_code,
    callback_token_sha256 = :callback_token_sha256
WHERE attempt_id = :attempt_id
  AND run_id = :run_id
  AND status = :expected_status
  AND lease_version IS :expected_lease_version;

-- name: insert_policy
-- InsertPolicy (admission, A-5).
INSERT INTO run_retry_policies (
    run_id, max_attempts, retry_on_lost, safety, backoff_base_ms, backoff_max_ms, version,
    created_at_ms, updated_at_ms, next_attempt_at_ms
) VALUES (
    :run_id, :max_attempts, :retry_on_lost, :safety, :backoff_base_ms, :backoff_max_ms,
    :version, :created_at_ms, :updated_at_ms, :next_attempt_at_ms
);

-- name: update_policy
-- UpdatePolicy: CAS on the policy's own version (§1.8.2).
UPDATE run_retry_policies SET
    max_attempts = :max_attempts, retry_on_lost = :retry_on_lost, safety = :safety,
    backoff_base_ms = :backoff_base_ms, backoff_max_ms = :backoff_max_ms, version = :version,
    created_at_ms = :created_at_ms, updated_at_ms = :updated_at_ms,
    next_attempt_at_ms = :next_attempt_at_ms
WHERE run_id = :run_id
  AND version = :expected_version;

-- name: insert_lease
-- InsertLease (grant, T1): a collision on (attempt_id, lease_generation), or a second
-- `leased` row for the Attempt, means another grant won.
INSERT INTO run_dispatch_leases (
    attempt_id, run_id, lease_generation, status, version, worker_id, worker_session_id,
    worker_generation, token_digest, acquired_at_ms, renewed_at_ms, expires_at_ms,
    updated_at_ms, released_at_ms, release_reason, completed_at_ms
) VALUES (
    :attempt_id, :run_id, :lease_generation, :status, :version, :worker_id,
    :worker_session_id, :worker_generation, :token_digest, :acquired_at_ms, :renewed_at_ms,
    :expires_at_ms, :updated_at_ms, :released_at_ms, :release_reason, :completed_at_ms
);

-- name: update_lease
-- UpdateLease: the fence at the resource. CAS on version and status, keyed by
-- (attempt_id, lease_generation) of this Run, and the immutable token digest re-checked (V-2).
UPDATE run_dispatch_leases SET
    status = :status, version = :version, worker_id = :worker_id,
    worker_session_id = :worker_session_id, worker_generation = :worker_generation,
    acquired_at_ms = :acquired_at_ms, renewed_at_ms = :renewed_at_ms,
    expires_at_ms = :expires_at_ms, updated_at_ms = :updated_at_ms,
    released_at_ms = :released_at_ms, release_reason = :release_reason,
    completed_at_ms = :completed_at_ms
WHERE attempt_id = :attempt_id
  AND lease_generation = :lease_generation
  AND run_id = :run_id
  AND version = :expected_version
  AND status = :expected_status
  AND token_digest = :token_digest;

-- name: insert_event
-- AppendEvent: (run_id, seq) and (run_id, dedupe_key) are unique (V-3, I-7).
INSERT INTO events (
    event_id, run_id, seq, type, actor, dedupe_key, at_ms, attempt_id, step_run_id, code,
    payload
) VALUES (
    :event_id, :run_id, :seq, :type, :actor, :dedupe_key, :at_ms, :attempt_id, :step_run_id,
    :code, :payload
);
