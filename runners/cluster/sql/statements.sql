-- Statements of the cluster runner (PostgreSQL, psycopg 3 named parameters `%(name)s`).
-- So far: the migrator's bookkeeping (runners/cluster/migrate.py).

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
