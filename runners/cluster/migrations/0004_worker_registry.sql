-- 0004_worker_registry: the durable Worker registry and the sealed offers of the cluster dispatch
-- grant (SPEC §1.1 Worker session, §1.7 T1, §3.2, §3.8 D-5..D-8, Appendix E-2, E-8; issue 17
-- items 1 and 2; kernel/worker_registry.py, kernel/specs/worker_session.py).
--
-- Cluster-only tables: the edge runner has no remote Workers, so it has neither
-- (tests/runners/cluster/test_cluster_schema.py names them as the only difference).
--
-- worker_sessions: one row per worker id holding its *current* session (a new process start
-- replaces it: new session id, generation + 1). `version` is the CAS counter of every change.
-- `public_key` is the session's X25519 public key, to which each lease token is sealed.
CREATE TABLE worker_sessions (
    worker_id             TEXT PRIMARY KEY NOT NULL,
    session_id            TEXT NOT NULL,
    generation            BIGINT NOT NULL CHECK (generation >= 1),
    status                TEXT NOT NULL CHECK (status IN ('online', 'draining', 'offline')),
    executor_types        TEXT[] NOT NULL CHECK (cardinality(executor_types) >= 1),
    capacity              INTEGER NOT NULL CHECK (capacity >= 1),
    public_key            BYTEA NOT NULL CHECK (octet_length(public_key) = 32),
    session_expires_at_ms BIGINT NOT NULL,
    registered_at_ms      BIGINT NOT NULL,
    updated_at_ms         BIGINT NOT NULL,
    version               BIGINT NOT NULL CHECK (version >= 1)
);

-- worker_offers: the offer of one granted lease, its token sealed to the target session's key
-- (libsodium sealed box: only that session's private key opens it). Written in the grant's own
-- transaction; the raw token is never stored (the lease keeps only its SHA-256 digest).
CREATE TABLE worker_offers (
    attempt_id        TEXT NOT NULL,
    lease_generation  BIGINT NOT NULL,
    worker_id         TEXT NOT NULL,
    worker_session_id TEXT NOT NULL,
    worker_generation BIGINT NOT NULL CHECK (worker_generation >= 1),
    sealed_token      BYTEA NOT NULL,
    created_at_ms     BIGINT NOT NULL,
    PRIMARY KEY (attempt_id, lease_generation),
    FOREIGN KEY (attempt_id, lease_generation)
        REFERENCES run_dispatch_leases (attempt_id, lease_generation)
);

-- A Worker reads its own session's offers.
CREATE INDEX worker_offers_by_session
    ON worker_offers (worker_id, worker_session_id, worker_generation, attempt_id);

-- The Worker-ingress role (0002, CAD-18): nothing on these tables but what a future ingress needs
-- for the registry on behalf of the Worker it authenticated, and only for that Worker's rows:
-- its session row (read, register, renew, drain, stop: SELECT, INSERT, UPDATE) and its offers
-- (read, discard: SELECT, DELETE). Never a row of another Worker (row security keyed by the
-- ingress's `ql3.worker_id` setting), never an offer written (only the dispatcher grants), never
-- a session deleted or a table truncated. The owner (the runtime pool) is not subject to these
-- policies. E-8: in this version the Worker host connects as the runtime itself (trusted).
REVOKE ALL PRIVILEGES ON worker_sessions, worker_offers FROM ql3_worker_ingress;
GRANT SELECT, INSERT, UPDATE ON worker_sessions TO ql3_worker_ingress;
GRANT SELECT, DELETE ON worker_offers TO ql3_worker_ingress;

ALTER TABLE worker_sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE worker_offers ENABLE ROW LEVEL SECURITY;

CREATE POLICY worker_sessions_own_row ON worker_sessions TO ql3_worker_ingress
    USING (worker_id = current_setting('ql3.worker_id', true))
    WITH CHECK (worker_id = current_setting('ql3.worker_id', true));

CREATE POLICY worker_offers_own_rows ON worker_offers TO ql3_worker_ingress
    USING (worker_id = current_setting('ql3.worker_id', true));
