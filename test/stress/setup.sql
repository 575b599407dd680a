-- test/stress/setup.sql: schema of the pgbench stress run (psql variables
-- rows and keys).  Table s has the pmhash index under test on k and, as an
-- independent oracle for the checks made during the run, a btree on k + 0
-- (a query on "k = x" can only use pmhash, one on "k + 0 = x" only the
-- btree).
CREATE EXTENSION pmhash;
CREATE TABLE s (id bigserial, k int8 NOT NULL)
	WITH (autovacuum_vacuum_threshold = 500, autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX s_k ON s USING pmhash (k);
CREATE INDEX s_k_oracle ON s USING btree ((k + 0));
INSERT INTO s (k) SELECT g % :keys + 1 FROM generate_series(1, :rows) g;
ANALYZE s;

-- The rows with one of the keys through a pmhash index scan and through
-- the btree must be the same (call it in a REPEATABLE READ transaction, so
-- that both see one snapshot); raises an error naming the keys otherwise.
-- One key is looked up as "k = key", several as "k = ANY (keys)" (one
-- batched pmhash scan).
CREATE FUNCTION stress_probe(keys int8[]) RETURNS int
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
	via_pmhash tid[];
	via_btree tid[];
BEGIN
	IF cardinality(keys) = 1 THEN
		SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
			INTO via_pmhash FROM s WHERE k = keys[1];
		SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
			INTO via_btree FROM s WHERE k + 0 = keys[1];
	ELSE
		SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
			INTO via_pmhash FROM s WHERE k = ANY (keys);
		SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
			INTO via_btree FROM s WHERE k + 0 = ANY (keys);
	END IF;
	IF via_pmhash <> via_btree THEN
		RAISE EXCEPTION 'pmhash stress: keys % have % rows through pmhash, % through the btree',
			keys, cardinality(via_pmhash), cardinality(via_btree)
			USING DETAIL = format('pmhash %s, btree %s', via_pmhash, via_btree);
	END IF;
	RETURN cardinality(via_pmhash);
END $$;
