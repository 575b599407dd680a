-- Bad input gets a clear error and loses nothing.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE TABLE er (a int4, b int4, t text, p point);
INSERT INTO er SELECT g, g, 'v' || g, point(g, g) FROM generate_series(1, 1000) g;

-- one key column only, no INCLUDE, no UNIQUE
CREATE INDEX ON er USING pmhash (a, b);
CREATE INDEX ON er USING pmhash (a) INCLUDE (b);
CREATE UNIQUE INDEX ON er USING pmhash (a);
-- a type without a pmhash operator class
CREATE INDEX ON er USING pmhash (p);
-- reloptions: none exist, unknown ones are rejected
CREATE INDEX ON er USING pmhash (a) WITH (fillfactor = 50);
CREATE INDEX ON er USING pmhash (a) WITH (nonsense = 1);
-- ordering is not something a hash index offers
CREATE INDEX er_a ON er USING pmhash (a);
CREATE INDEX er_a_desc ON er USING pmhash (a DESC);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT a FROM er ORDER BY a LIMIT 1;
EXPLAIN (COSTS OFF) SELECT a FROM er WHERE a < 5;
RESET enable_seqscan;
-- nothing was lost along the way
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM er WHERE a = 500;
RESET ALL;

-- expression and partial indexes work
CREATE INDEX er_lower ON er USING pmhash (lower(t));
CREATE INDEX er_part ON er USING pmhash (b) WHERE b > 900;
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT a FROM er WHERE lower(t) = 'v10';
SELECT a FROM er WHERE lower(t) = 'v10';
EXPLAIN (COSTS OFF) SELECT a FROM er WHERE b = 950 AND b > 900;
SELECT a FROM er WHERE b = 950 AND b > 900;
RESET ALL;

-- huge keys are hashed like any other
INSERT INTO er (a, t) VALUES (-1, repeat('x', 1000000));
CREATE INDEX er_t ON er USING pmhash (t);
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT a FROM er WHERE t = repeat('x', 1000000);
RESET ALL;

-- the SQL functions check their argument
SELECT * FROM pmhash_stats('er');
CREATE INDEX er_bt ON er USING btree (a);
SELECT * FROM pmhash_stats('er_bt');
SELECT * FROM pmhash_check('er_bt');
SELECT * FROM pmhash_stats(NULL);

-- and are not for everybody
CREATE ROLE regress_pmhash_nobody;
GRANT SELECT ON er TO regress_pmhash_nobody;
SET ROLE regress_pmhash_nobody;
SELECT entries FROM pmhash_stats('er_a');
SELECT * FROM pmhash_check('er_a');
RESET ROLE;
CREATE ROLE regress_pmhash_monitor IN ROLE pg_monitor;
SET ROLE regress_pmhash_monitor;
SELECT entries FROM pmhash_stats('er_a');
SELECT * FROM pmhash_check('er_a');
RESET ROLE;
DROP ROLE regress_pmhash_monitor;
REVOKE ALL ON er FROM regress_pmhash_nobody;
DROP ROLE regress_pmhash_nobody;

-- GUCs are server-start only
SET pmhash.pool_dir = '/tmp';
SET pmhash.shared_memory = '1GB';
SET pmhash.max_indexes = 10;

DROP TABLE er;
