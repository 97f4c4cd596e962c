-- Statements of the cluster runner (PostgreSQL, psycopg 3 named parameters `%(name)s`).
-- The migrator's bookkeeping (runners/cluster/migrate.py), then the aggregate loads, which lock
-- the rows in the kernel's lock order (B-35: Run, Attempts, policy, leases), and one statement
-- per kernel effect; every UPDATE re-checks the effect's guard in its WHERE clause.

-- name: migration_lock
-- One migrator at a time across replicas: a transaction-scoped advisory lock, released by the
-- commit or rollback that ends the migration.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: schema_version_table_exists
SELECT to_regclass('schema_version') IS NOT NULL;

-- name: select_schema_versions
SELECT version, name, checksum FROM schema_version ORDER BY version;

-- name: insert_schema_version
INSERT INTO schema_version (version, name, checksum) VALUES (%(version)s, %(name)s, %(checksum)s);

-- ---------------------------------------------------------------- aggregate loads -----------
-- name: select_run
SELECT run_id, project_id, task_id, task_revision, executor_type, kind, owner, status,
       version, event_seq, created_at_ms, updated_at_ms, queued_at_ms, started_at_ms,
       finished_at_ms, cancel_requested_at_ms, cancel_reason, error_code, retry_of_run_id
FROM runs
WHERE run_id = %(run_id)s
FOR UPDATE;

-- name: select_run_id_of_attempt
SELECT run_id FROM attempts WHERE attempt_id = %(attempt_id)s;

-- name: attempt_lock
-- B-26, REC-06: the Attempt's transaction-scoped advisory lock, taken before any row lock, so
-- replicas working on one Attempt (recovery, lost retry, expiry, a Worker's fenced call) queue
-- here instead of meeting in the row locks; released by the commit or rollback.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: select_latest_attempt_id_of_run
-- Unlocked: which Attempt's advisory lock a Run-addressed command takes. The row locks that
-- follow are the authority; a newer Attempt inserted meanwhile is seen by the locked load.
SELECT attempt_id FROM attempts WHERE run_id = %(run_id)s ORDER BY number DESC LIMIT 1;

-- name: database_now_ms
-- The database's observation time (ADR-0232 §1): statement_timestamp() in epoch milliseconds.
SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint;

-- name: select_attempts_of_run
SELECT attempt_id, run_id, number, status, executor_type, created_at_ms, step_run_id,
       worker_id, worker_session_id, worker_generation, offer_id, lease_generation,
       lease_version, executor_handle, started_at_ms, log_artifact_id, callback_sequence,
       finished_at_ms, exit_code, error_code, callback_token_sha256
FROM attempts
WHERE run_id = %(run_id)s
ORDER BY number
FOR UPDATE;

-- name: select_policy_of_run
SELECT run_id, max_attempts, retry_on_lost, safety, backoff_base_ms, backoff_max_ms, version,
       created_at_ms, updated_at_ms, next_attempt_at_ms
FROM run_retry_policies
WHERE run_id = %(run_id)s
FOR UPDATE;

-- name: select_leases_of_run
SELECT attempt_id, run_id, lease_generation, status, version, worker_id, worker_session_id,
       worker_generation, token_digest, acquired_at_ms, renewed_at_ms, expires_at_ms,
       updated_at_ms, released_at_ms, release_reason, completed_at_ms
FROM run_dispatch_leases
WHERE run_id = %(run_id)s
ORDER BY attempt_id, lease_generation
FOR UPDATE;

-- ---------------------------------------------------------------- effects -------------------
-- name: insert_run
-- InsertRun. A primary-key collision means a concurrent writer created the Run first.
INSERT INTO runs (
    run_id, project_id, task_id, task_revision, executor_type, kind, owner, status, version,
    event_seq, created_at_ms, updated_at_ms, queued_at_ms, started_at_ms, finished_at_ms,
    cancel_requested_at_ms, cancel_reason, error_code, retry_of_run_id
) VALUES (
    %(run_id)s, %(project_id)s, %(task_id)s, %(task_revision)s, %(executor_type)s, %(kind)s, %(owner)s, %(status)s,
    %(version)s, %(event_seq)s, %(created_at_ms)s, %(updated_at_ms)s, %(queued_at_ms)s, %(started_at_ms)s,
    %(finished_at_ms)s, %(cancel_requested_at_ms)s, %(cancel_reason)s, %(error_code)s, %(retry_of_run_id)s
);

-- name: update_run
-- UpdateRun: CAS on the Run version (V-1).
UPDATE runs SET
    project_id = %(project_id)s, task_id = %(task_id)s, task_revision = %(task_revision)s,
    executor_type = %(executor_type)s, kind = %(kind)s, owner = %(owner)s, status = %(status)s,
    version = %(version)s, event_seq = %(event_seq)s, created_at_ms = %(created_at_ms)s,
    updated_at_ms = %(updated_at_ms)s, queued_at_ms = %(queued_at_ms)s,
    started_at_ms = %(started_at_ms)s, finished_at_ms = %(finished_at_ms)s,
    cancel_requested_at_ms = %(cancel_requested_at_ms)s, cancel_reason = %(cancel_reason)s,
    error_code = %(error_code)s, retry_of_run_id = %(retry_of_run_id)s
WHERE run_id = %(run_id)s
  AND version = %(expected_version)s;

-- name: insert_attempt
-- InsertAttempt. A collision on the id or on (run_id, number) means the Attempt exists (RUN-02).
INSERT INTO attempts (
    attempt_id, run_id, number, status, executor_type, created_at_ms, step_run_id, worker_id,
    worker_session_id, worker_generation, offer_id, lease_generation, lease_version,
    executor_handle, started_at_ms, log_artifact_id, callback_sequence, finished_at_ms,
    exit_code, error_code, callback_token_sha256
) VALUES (
    %(attempt_id)s, %(run_id)s, %(number)s, %(status)s, %(executor_type)s, %(created_at_ms)s, %(step_run_id)s,
    %(worker_id)s, %(worker_session_id)s, %(worker_generation)s, %(offer_id)s, %(lease_generation)s,
    %(lease_version)s, %(executor_handle)s, %(started_at_ms)s, %(log_artifact_id)s, %(callback_sequence)s,
    %(finished_at_ms)s, %(exit_code)s, %(error_code)s, %(callback_token_sha256)s
);

-- name: update_attempt
-- UpdateAttempt: guarded by the previous status and the lease version mirror (both may
-- be NULL); the Run (or, for a renew, the lease) CAS of the same transaction serializes writers.
UPDATE attempts SET
    number = %(number)s, status = %(status)s, executor_type = %(executor_type)s,
    created_at_ms = %(created_at_ms)s, step_run_id = %(step_run_id)s, worker_id = %(worker_id)s,
    worker_session_id = %(worker_session_id)s, worker_generation = %(worker_generation)s,
    offer_id = %(offer_id)s, lease_generation = %(lease_generation)s, lease_version = %(lease_version)s,
    executor_handle = %(executor_handle)s, started_at_ms = %(started_at_ms)s,
    log_artifact_id = %(log_artifact_id)s, callback_sequence = %(callback_sequence)s,
    finished_at_ms = %(finished_at_ms)s, exit_code = %(exit_code)s, error_code = %(error_code)s,
    callback_token_sha256 = %(callback_token_sha256)s
WHERE attempt_id = %(attempt_id)s
  AND run_id = %(run_id)s
  AND status = %(expected_status)s
  AND lease_version IS NOT DISTINCT FROM %(expected_lease_version)s;

-- name: insert_policy
-- InsertPolicy (admission, A-5).
INSERT INTO run_retry_policies (
    run_id, max_attempts, retry_on_lost, safety, backoff_base_ms, backoff_max_ms, version,
    created_at_ms, updated_at_ms, next_attempt_at_ms
) VALUES (
    %(run_id)s, %(max_attempts)s, %(retry_on_lost)s, %(safety)s, %(backoff_base_ms)s, %(backoff_max_ms)s,
    %(version)s, %(created_at_ms)s, %(updated_at_ms)s, %(next_attempt_at_ms)s
);

-- name: update_policy
-- UpdatePolicy: CAS on the policy's own version (§1.8.2).
UPDATE run_retry_policies SET
    max_attempts = %(max_attempts)s, retry_on_lost = %(retry_on_lost)s, safety = %(safety)s,
    backoff_base_ms = %(backoff_base_ms)s, backoff_max_ms = %(backoff_max_ms)s, version = %(version)s,
    created_at_ms = %(created_at_ms)s, updated_at_ms = %(updated_at_ms)s,
    next_attempt_at_ms = %(next_attempt_at_ms)s
WHERE run_id = %(run_id)s
  AND version = %(expected_version)s;

-- name: insert_lease
-- InsertLease (grant, T1): a collision on (attempt_id, lease_generation), or a second
-- `leased` row for the Attempt, means another grant won.
INSERT INTO run_dispatch_leases (
    attempt_id, run_id, lease_generation, status, version, worker_id, worker_session_id,
    worker_generation, token_digest, acquired_at_ms, renewed_at_ms, expires_at_ms,
    updated_at_ms, released_at_ms, release_reason, completed_at_ms
) VALUES (
    %(attempt_id)s, %(run_id)s, %(lease_generation)s, %(status)s, %(version)s, %(worker_id)s,
    %(worker_session_id)s, %(worker_generation)s, %(token_digest)s, %(acquired_at_ms)s, %(renewed_at_ms)s,
    %(expires_at_ms)s, %(updated_at_ms)s, %(released_at_ms)s, %(release_reason)s, %(completed_at_ms)s
);

-- name: update_lease
-- UpdateLease: the fence at the resource. CAS on version and status, keyed by
-- (attempt_id, lease_generation) of this Run, and the immutable token digest re-checked (V-2).
UPDATE run_dispatch_leases SET
    status = %(status)s, version = %(version)s, worker_id = %(worker_id)s,
    worker_session_id = %(worker_session_id)s, worker_generation = %(worker_generation)s,
    acquired_at_ms = %(acquired_at_ms)s, renewed_at_ms = %(renewed_at_ms)s,
    expires_at_ms = %(expires_at_ms)s, updated_at_ms = %(updated_at_ms)s,
    released_at_ms = %(released_at_ms)s, release_reason = %(release_reason)s,
    completed_at_ms = %(completed_at_ms)s
WHERE attempt_id = %(attempt_id)s
  AND lease_generation = %(lease_generation)s
  AND run_id = %(run_id)s
  AND version = %(expected_version)s
  AND status = %(expected_status)s
  AND token_digest = %(token_digest)s;

-- name: insert_event
-- AppendEvent: (run_id, seq) and (run_id, dedupe_key) are unique (V-3, I-7).
INSERT INTO events (
    event_id, run_id, seq, type, actor, dedupe_key, at_ms, attempt_id, step_run_id, code,
    payload
) VALUES (
    %(event_id)s, %(run_id)s, %(seq)s, %(type)s, %(actor)s, %(dedupe_key)s, %(at_ms)s, %(attempt_id)s, %(step_run_id)s,
    %(code)s, %(payload)s::jsonb
);

-- ---------------------------------------------------------------- transaction control ------
-- name: begin_snapshot
-- The backdoor reader's one snapshot over the five tables.
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;

-- name: commit
COMMIT;

-- ---------------------------------------------------------------- schemas ------------------
-- name: set_search_path
-- The store's tables live in one schema; a bound parameter, quoted by the server.
SELECT set_config('search_path', quote_ident(%(schema)s), false);

-- name: create_schema
-- `{schema}` is filled only by psycopg's identifier quoting (`sql.Identifier`), never by text.
CREATE SCHEMA {schema};

-- name: create_schema_if_missing
-- `ClusterStore(..., create_schema=True)`; `{schema}` as above.
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: drop_schema
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- ---------------------------------------------------------------- kill and terminate modes --
-- name: backend_alive
-- Kill mode (conformance/run/kill_cluster.py): whether a killed client's backend still exists, i.e.
-- whether the server has not yet noticed the closed socket and aborted its transaction.
SELECT count(*) FROM pg_stat_activity WHERE pid = %(pid)s;

-- name: terminate_backend
-- Terminate mode: a server-side fault on the runner's own backend (SIGTERM). The caller then
-- polls `backend_alive` until the backend is gone (the two-argument form of the function waits
-- too, but in steps of 100 ms).
SELECT pg_terminate_backend(%(pid)s);
