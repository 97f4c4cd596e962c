-- The SQLite offer journal (runners/worker/journal/sqlite.py, SPEC §3.1, §3.3, §3.9): one table of
-- canonical record bytes (kernel/worker/codec.py) keyed by offer id, with the revision beside
-- the bytes so that replace and remove are one revision-conditional statement (F-4, F-5).
-- Statements take named parameters only; none is ever built by string formatting.

-- ---------------------------------------------------------------- connection set-up --------
-- name: pragma_journal_mode_wal
PRAGMA journal_mode = WAL;

-- name: pragma_synchronous_full
-- Every commit fsyncs the log: an acknowledged revision survives power loss (I-J2).
PRAGMA synchronous = FULL;

-- name: pragma_trusted_schema_off
PRAGMA trusted_schema = OFF;

-- name: pragma_query_only_on
-- The reader connection can never write, whatever a caller does with it.
PRAGMA query_only = ON;

-- name: read_journal_mode
PRAGMA journal_mode;

-- name: read_synchronous
PRAGMA synchronous;

-- ---------------------------------------------------------------- transaction control ------
-- name: begin_immediate
BEGIN IMMEDIATE;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- ---------------------------------------------------------------- migration ----------------
-- name: read_user_version
PRAGMA user_version;

-- name: create_journal_records
-- offer_id: 64 lowercase hex (kernel.identity.offer_id). record: the canonical bytes, at most
-- 192 KiB (F-2; the adapter checks before writing, the CHECK is the last line). STRICT keeps a
-- BLOB a BLOB; WITHOUT ROWID stores the rows in offer_id order, which is the list order (F-8).
CREATE TABLE journal_records (
    offer_id TEXT NOT NULL PRIMARY KEY
        CHECK (length(offer_id) = 64 AND offer_id NOT GLOB '*[^0-9a-f]*'),
    revision INTEGER NOT NULL CHECK (revision >= 0),
    record BLOB NOT NULL CHECK (length(record) BETWEEN 1 AND 196608)
) STRICT, WITHOUT ROWID;

-- name: set_user_version_1
PRAGMA user_version = 1;

-- ---------------------------------------------------------------- records ------------------
-- name: select_record
SELECT offer_id, revision, record FROM journal_records WHERE offer_id = :offer_id;

-- name: count_records
SELECT count(*) FROM journal_records;

-- name: insert_record
INSERT INTO journal_records (offer_id, revision, record)
VALUES (:offer_id, :revision, :record);

-- name: update_record
-- F-4: zero rows means the stored revision is not the expected one (a conflict, nothing changed).
UPDATE journal_records
SET revision = :revision, record = :record
WHERE offer_id = :offer_id AND revision = :expected_revision;

-- name: delete_record
-- F-5: zero rows means the stored revision is not the expected one.
DELETE FROM journal_records
WHERE offer_id = :offer_id AND revision = :expected_revision;

-- name: list_records
-- F-8: ascending offer_id strictly after the cursor ('' before every id); the adapter asks for
-- one row more than the page to know `has_more` exactly.
SELECT offer_id, revision, record FROM journal_records
WHERE offer_id > :after
ORDER BY offer_id
LIMIT :limit;
