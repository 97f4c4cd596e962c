-- 0002_worker_ingress_role: the Worker-ingress PostgreSQL role of SPEC FP-2 / CAD-18
-- (ADR-0232 §5, least privilege). The Worker-ingress pool connects as a LOGIN role that is a
-- member of `ql3_worker_ingress`; that role may read the facts a Worker delivery is checked
-- against (Run, Attempt, lease) and may write nothing: no INSERT, UPDATE, DELETE or TRUNCATE
-- on runs, attempts, run_retry_policies or run_dispatch_leases, nor on events or schema_version.
-- Every Run/Attempt/policy/lease mutation goes through the runtime pool (the owner), never the
-- ingress. docs/decisions.md PG-3.
--
-- Roles are cluster-wide while this file runs once per schema (the migration transaction holds
-- the migrator's advisory lock, but that lock is per database). So the role is created only if
-- missing, and a concurrent creator (another database of the same cluster) is tolerated: a
-- racing CREATE ROLE fails with duplicate_object, or with unique_violation on pg_authid when it
-- waited for the other transaction's commit. A role named so that exists already but is a
-- superuser or bypasses row security would make the grants below meaningless: fail closed.
-- A migrating user without CREATEROLE works when an operator created the role beforehand.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ql3_worker_ingress') THEN
        BEGIN
            CREATE ROLE ql3_worker_ingress NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE
                NOREPLICATION NOBYPASSRLS;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a concurrent migration: the same role
        END;
    END IF;
    IF EXISTS (
        SELECT 1 FROM pg_roles
        WHERE rolname = 'ql3_worker_ingress' AND (rolsuper OR rolbypassrls)
    ) THEN
        RAISE EXCEPTION 'role ql3_worker_ingress must not be a superuser or bypass row security'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

-- The schema of this migration (the connection's search_path, as for 0001's tables). A schema
-- name cannot be a bound parameter; format('%I') quotes it inside the server.
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO ql3_worker_ingress', current_schema());
END
$$;

-- No write on any table of the Run domain, stated explicitly (none is granted by 0001 either,
-- and PostgreSQL grants PUBLIC nothing on tables): a later GRANT ... TO PUBLIC is not covered
-- by this, which is why tests/runners/cluster/test_cluster_privileges.py tries every write.
REVOKE ALL PRIVILEGES
    ON runs, attempts, run_retry_policies, run_dispatch_leases, events, schema_version
    FROM ql3_worker_ingress;

-- Read only the facts a Worker delivery is checked against (SPEC §3.1: Run/Attempt rows are
-- the facts, the lease is the authority). Policies, Events and schema_version: nothing.
GRANT SELECT ON runs, attempts, run_dispatch_leases TO ql3_worker_ingress;
