-- UNIQUE pmhash indexes: every statement also runs on a twin table with a
-- unique btree index, and both must end the same.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;
\set VERBOSITY default

CREATE TABLE uq (id int8, t text, n int);
CREATE TABLE uq_bt (LIKE uq);
INSERT INTO uq SELECT g, 'v' || g, g % 10 FROM generate_series(1, 2000) g;
INSERT INTO uq_bt SELECT * FROM uq;

-- CREATE UNIQUE INDEX checks the rows it finds, and names a duplicate
CREATE UNIQUE INDEX uq_id ON uq USING pmhash (id);
CREATE UNIQUE INDEX uq_bt_id ON uq_bt USING btree (id);
CREATE UNIQUE INDEX uq_n ON uq USING pmhash (n);
CREATE UNIQUE INDEX uq_bt_n ON uq_bt USING btree (n);

-- inserts: a duplicate fails with btree's error, other rows go in
INSERT INTO uq VALUES (5, 'dup', 0);
INSERT INTO uq_bt VALUES (5, 'dup', 0);
INSERT INTO uq VALUES (2001, 'a', 0), (2001, 'b', 0);
INSERT INTO uq_bt VALUES (2001, 'a', 0), (2001, 'b', 0);
INSERT INTO uq VALUES (2001, 'new', 1);
INSERT INTO uq_bt VALUES (2001, 'new', 1);
-- NULLs are distinct: any number of them
INSERT INTO uq VALUES (NULL, 'null1', 0), (NULL, 'null2', 0);
INSERT INTO uq_bt VALUES (NULL, 'null1', 0), (NULL, 'null2', 0);
-- updates: onto another row's key fails, a non-key change or a key freed
-- in the same statement does not
UPDATE uq SET id = 10 WHERE id = 11;
UPDATE uq_bt SET id = 10 WHERE id = 11;
UPDATE uq SET t = t || '!' WHERE id <= 100;
UPDATE uq_bt SET t = t || '!' WHERE id <= 100;
UPDATE uq SET id = id + 100000 WHERE id BETWEEN 200 AND 300;
UPDATE uq_bt SET id = id + 100000 WHERE id BETWEEN 200 AND 300;
-- a key deleted earlier in the transaction can come back
BEGIN;
DELETE FROM uq WHERE id = 42;
INSERT INTO uq VALUES (42, 'again', 2);
COMMIT;
BEGIN;
DELETE FROM uq_bt WHERE id = 42;
INSERT INTO uq_bt VALUES (42, 'again', 2);
COMMIT;
-- so can the key of a rolled-back subtransaction or transaction
BEGIN;
SAVEPOINT s;
INSERT INTO uq VALUES (3000, 'sub', 0);
ROLLBACK TO s;
INSERT INTO uq VALUES (3000, 'kept', 0);
COMMIT;
BEGIN;
INSERT INTO uq VALUES (3001, 'lost', 0);
ROLLBACK;
INSERT INTO uq VALUES (3001, 'kept', 0);
INSERT INTO uq_bt VALUES (3000, 'kept', 0), (3001, 'kept', 0);
-- the index answers like the btree
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM uq WHERE id = 42;
SELECT * FROM uq WHERE id = 42;
RESET ALL;
(SELECT * FROM uq EXCEPT ALL SELECT * FROM uq_bt)
UNION ALL
(SELECT * FROM uq_bt EXCEPT ALL SELECT * FROM uq);

-- INSERT ... ON CONFLICT, with the pmhash index as arbiter
INSERT INTO uq VALUES (7, 'x', 0) ON CONFLICT (id) DO NOTHING;
INSERT INTO uq_bt VALUES (7, 'x', 0) ON CONFLICT (id) DO NOTHING;
INSERT INTO uq VALUES (7, 'x', 0), (4000, 'y', 0) ON CONFLICT DO NOTHING;
INSERT INTO uq_bt VALUES (7, 'x', 0), (4000, 'y', 0) ON CONFLICT DO NOTHING;
INSERT INTO uq SELECT g, 'upsert', 0 FROM generate_series(1990, 2010) g
	ON CONFLICT (id) DO UPDATE SET t = excluded.t || uq.id, n = uq.n + 1;
INSERT INTO uq_bt SELECT g, 'upsert', 0 FROM generate_series(1990, 2010) g
	ON CONFLICT (id) DO UPDATE SET t = excluded.t || uq_bt.id, n = uq_bt.n + 1;
INSERT INTO uq VALUES (8, 'z', 0) ON CONFLICT (id) DO UPDATE SET n = 99
	RETURNING *;
INSERT INTO uq_bt VALUES (8, 'z', 0) ON CONFLICT (id) DO UPDATE SET n = 99
	RETURNING *;
-- one statement cannot touch a row twice
INSERT INTO uq VALUES (9, 'a', 0), (9, 'b', 0) ON CONFLICT (id) DO UPDATE SET n = 1;
INSERT INTO uq_bt VALUES (9, 'a', 0), (9, 'b', 0) ON CONFLICT (id) DO UPDATE SET n = 1;
-- in a data-modifying WITH query
WITH w AS (INSERT INTO uq VALUES (9, 'cte', 0), (4001, 'cte', 0)
		   ON CONFLICT (id) DO NOTHING RETURNING id)
SELECT count(*) FROM w;
WITH w AS (INSERT INTO uq_bt VALUES (9, 'cte', 0), (4001, 'cte', 0)
		   ON CONFLICT (id) DO NOTHING RETURNING id)
SELECT count(*) FROM w;
(SELECT * FROM uq EXCEPT ALL SELECT * FROM uq_bt)
UNION ALL
(SELECT * FROM uq_bt EXCEPT ALL SELECT * FROM uq);
SELECT count(*) FROM uq;

-- REINDEX and VACUUM keep the index right
DELETE FROM uq WHERE id % 5 = 0;
VACUUM (INDEX_CLEANUP ON) uq;
INSERT INTO uq VALUES (5, 'back', 0);
INSERT INTO uq VALUES (6, 'dup', 0);
REINDEX INDEX uq_id;
INSERT INTO uq VALUES (6, 'dup', 0);
SELECT * FROM pmhash_check('uq_id');
REINDEX INDEX CONCURRENTLY uq_id;
INSERT INTO uq VALUES (6, 'dup', 0);
CREATE UNIQUE INDEX CONCURRENTLY uq_id2 ON uq USING pmhash (id);
INSERT INTO uq VALUES (7, 'dup', 0);
DROP INDEX uq_id2;
-- a failed concurrent build leaves an invalid index, as with btree
CREATE UNIQUE INDEX CONCURRENTLY uq_n2 ON uq USING pmhash (n);
SELECT indisvalid FROM pg_index WHERE indexrelid = 'uq_n2'::regclass;
DROP INDEX uq_n2;
TRUNCATE uq;
INSERT INTO uq VALUES (1, 'one', 0), (2, 'two', 0);
INSERT INTO uq VALUES (1, 'one', 0);
DROP TABLE uq, uq_bt;

-- a btree arbiter on a table that also has a unique pmhash index; the
-- pmhash index still checks its own key there
CREATE TABLE ua (id int, t text);
CREATE UNIQUE INDEX ua_id ON ua USING pmhash (id);
CREATE UNIQUE INDEX ua_t ON ua USING btree (t);
INSERT INTO ua VALUES (1, 'a'), (2, 'b');
INSERT INTO ua VALUES (3, 'a') ON CONFLICT (t) DO NOTHING;
INSERT INTO ua VALUES (3, 'c') ON CONFLICT (t) DO UPDATE SET id = 30;
INSERT INTO ua VALUES (1, 'd') ON CONFLICT (t) DO NOTHING;
INSERT INTO ua VALUES (4, 'b') ON CONFLICT (t) DO UPDATE SET id = 1;
SELECT * FROM ua ORDER BY id;
DROP TABLE ua;

-- several key columns, NULLS NOT DISTINCT
CREATE TABLE um (a int, b text);
CREATE UNIQUE INDEX um_ab ON um USING pmhash (a, b);
INSERT INTO um VALUES (1, 'x'), (1, 'y'), (2, 'x');
INSERT INTO um VALUES (1, 'x');
INSERT INTO um VALUES (1, NULL), (1, NULL);
INSERT INTO um VALUES (1, 'x'), (3, 'z') ON CONFLICT (a, b) DO NOTHING;
INSERT INTO um VALUES (1, 'y') ON CONFLICT (a, b) DO UPDATE SET b = 'y2';
SELECT * FROM um ORDER BY a, b;
CREATE TABLE un (a int, b int);
CREATE UNIQUE INDEX un_ab ON un USING pmhash (a, b) NULLS NOT DISTINCT;
INSERT INTO un VALUES (1, NULL), (NULL, NULL), (NULL, 1), (1, 1);
INSERT INTO un VALUES (1, NULL);
INSERT INTO un VALUES (NULL, NULL);
INSERT INTO un VALUES (1, NULL), (2, NULL) ON CONFLICT (a, b) DO NOTHING;
INSERT INTO un VALUES (NULL, NULL) ON CONFLICT (a, b) DO UPDATE SET b = 7;
SELECT * FROM un ORDER BY a, b;
CREATE TABLE un2 (a int);
INSERT INTO un2 VALUES (NULL), (NULL);
CREATE UNIQUE INDEX un2_a ON un2 USING pmhash (a) NULLS NOT DISTINCT;
DELETE FROM un2;
INSERT INTO un2 VALUES (NULL), (1);
CREATE UNIQUE INDEX un2_a ON un2 USING pmhash (a) NULLS NOT DISTINCT;
INSERT INTO un2 VALUES (NULL);
INSERT INTO un2 VALUES (NULL) ON CONFLICT (a) DO NOTHING;
SELECT * FROM un2 ORDER BY a;
DROP TABLE um, un, un2;

-- expressions and partial indexes
CREATE TABLE ue (email text, active bool);
CREATE UNIQUE INDEX ue_lower ON ue USING pmhash (lower(email));
CREATE UNIQUE INDEX ue_active ON ue USING pmhash (email) WHERE active;
INSERT INTO ue VALUES ('A@x.org', true), ('b@x.org', false), ('B2@x.org', false);
INSERT INTO ue VALUES ('a@X.org', false);
INSERT INTO ue VALUES ('b@x.org', true);
INSERT INTO ue VALUES ('c@x.org', true), ('C@x.org', false);
INSERT INTO ue VALUES ('A@X.ORG', true) ON CONFLICT (lower(email)) DO NOTHING;
INSERT INTO ue VALUES ('d@x.org', true) ON CONFLICT (email) WHERE active DO NOTHING;
SELECT * FROM ue ORDER BY email;
DROP TABLE ue;

-- rows older than ADD COLUMN ... DEFAULT have the default as their key
CREATE TABLE ud (id int);
INSERT INTO ud VALUES (1);
ALTER TABLE ud ADD COLUMN k int DEFAULT 7;
CREATE UNIQUE INDEX ud_k ON ud USING pmhash (k);
INSERT INTO ud VALUES (2, 7);
INSERT INTO ud VALUES (2, 8);
INSERT INTO ud VALUES (3, 7) ON CONFLICT (k) DO NOTHING;
DROP INDEX ud_k;
INSERT INTO ud (id) VALUES (4);
CREATE UNIQUE INDEX ud_k ON ud USING pmhash (k);
SELECT * FROM ud ORDER BY id;
DROP TABLE ud;

-- keys longer than btree takes: pmhash stores 16 bytes per entry anyway
CREATE TABLE ul (t text);
ALTER TABLE ul ALTER COLUMN t SET STORAGE plain;
CREATE UNIQUE INDEX ul_bt ON ul USING btree (t);
INSERT INTO ul VALUES (repeat('x', 3000));
DROP INDEX ul_bt;
CREATE UNIQUE INDEX ul_t ON ul USING pmhash (t);
INSERT INTO ul SELECT repeat('x', 3000) || g FROM generate_series(1, 50) g;
INSERT INTO ul VALUES (repeat('x', 3000) || 17);
SELECT count(*) FROM ul WHERE t = repeat('x', 3000) || 17;
DROP TABLE ul;

-- keys whose hashes collide are never taken for duplicates: an operator
-- class whose hash function gives every value the same hash
CREATE FUNCTION uq_same_hash(int4, int8) RETURNS int8
	AS 'SELECT 42::int8' LANGUAGE sql IMMUTABLE STRICT;
CREATE OPERATOR CLASS uq_collide_ops FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 2 uq_same_hash(int4, int8);
CREATE TABLE uc (k int4);
INSERT INTO uc SELECT generate_series(1, 100);
CREATE UNIQUE INDEX uc_k ON uc USING pmhash (k uq_collide_ops);
INSERT INTO uc SELECT generate_series(101, 150);
INSERT INTO uc VALUES (77);
INSERT INTO uc VALUES (77) ON CONFLICT (k) DO NOTHING;
INSERT INTO uc VALUES (151) ON CONFLICT (k) DO NOTHING;
SELECT count(*), count(DISTINCT k) FROM uc;
INSERT INTO uc VALUES (3);
CREATE UNIQUE INDEX uc_k2 ON uc USING pmhash (k uq_collide_ops);
DROP TABLE uc;
DROP OPERATOR CLASS uq_collide_ops USING pmhash;
DROP OPERATOR FAMILY uq_collide_ops USING pmhash;
DROP FUNCTION uq_same_hash(int4, int8);

-- where PostgreSQL takes only a btree index, it says so
CREATE TABLE ux (id int);
CREATE UNIQUE INDEX ux_id ON ux USING pmhash (id);
ALTER TABLE ux ADD CONSTRAINT ux_pk PRIMARY KEY USING INDEX ux_id;
ALTER TABLE ux ADD CONSTRAINT ux_u UNIQUE USING INDEX ux_id;
CREATE TABLE ux_ref (id int REFERENCES ux (id));
-- nor as a replica identity, which a subscriber could not use (pmhash's
-- own error: PostgreSQL would take it, and its apply worker then fail)
ALTER TABLE ux ALTER COLUMN id SET NOT NULL;
ALTER TABLE ux REPLICA IDENTITY USING INDEX ux_id;
CREATE UNIQUE INDEX ux_bt ON ux USING btree (id);
ALTER TABLE ux REPLICA IDENTITY USING INDEX ux_bt;
SELECT relreplident FROM pg_class WHERE oid = 'ux'::regclass;
-- INCLUDE columns are refused as for any pmhash index
CREATE UNIQUE INDEX ON ux USING pmhash (id) INCLUDE (id);
-- PostgreSQL 15 takes only btree for a unique index on a partitioned table,
-- and for the unique indexes of partitions that INSERT ... ON CONFLICT
-- routes rows to; inserting into the partition itself works
CREATE TABLE up (id int) PARTITION BY LIST (id);
CREATE TABLE up0 PARTITION OF up FOR VALUES IN (1, 2, 3, 4, 5);
CREATE TABLE up1 PARTITION OF up FOR VALUES IN (6, 7, 8, 9, 10);
CREATE UNIQUE INDEX up_id ON up USING pmhash (id);
CREATE UNIQUE INDEX up0_id ON up0 USING pmhash (id);
CREATE UNIQUE INDEX up1_id ON up1 USING pmhash (id);
INSERT INTO up SELECT generate_series(1, 10);
INSERT INTO up VALUES (3);
INSERT INTO up VALUES (3) ON CONFLICT DO NOTHING;
INSERT INTO up0 VALUES (3), (4) ON CONFLICT DO NOTHING;
INSERT INTO up1 VALUES (6) ON CONFLICT (id) DO UPDATE SET id = 7;
SELECT count(*) FROM up;
DROP TABLE ux, up;
