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

-- The rows with key "key" through a pmhash index scan and through the
-- btree must be the same (call it in a REPEATABLE READ transaction, so that
-- both see one snapshot); raises an error naming the key otherwise.
CREATE FUNCTION stress_probe(key int8) RETURNS int
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
	via_pmhash tid[];
	via_btree tid[];
BEGIN
	SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
		INTO via_pmhash FROM s WHERE k = key;
	SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
		INTO via_btree FROM s WHERE k + 0 = key;
	IF via_pmhash <> via_btree THEN
		RAISE EXCEPTION 'pmhash stress: key % has % rows through pmhash, % through the btree',
			key, cardinality(via_pmhash), cardinality(via_btree)
			USING DETAIL = format('pmhash %s, btree %s', via_pmhash, via_btree);
	END IF;
	RETURN cardinality(via_pmhash);
END $$;

-- The same for a set of keys at once: "k = ANY (keys)" through pmhash (one
-- batched scan) and through the btree.
CREATE FUNCTION stress_probe_any(keys int8[]) RETURNS int
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
	via_pmhash tid[];
	via_btree tid[];
BEGIN
	SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
		INTO via_pmhash FROM s WHERE k = ANY (keys);
	SELECT coalesce(array_agg(ctid ORDER BY ctid), ARRAY[]::tid[])
		INTO via_btree FROM s WHERE k + 0 = ANY (keys);
	IF via_pmhash <> via_btree THEN
		RAISE EXCEPTION 'pmhash stress: keys % have % rows through pmhash, % through the btree',
			keys, cardinality(via_pmhash), cardinality(via_btree)
			USING DETAIL = format('pmhash %s, btree %s', via_pmhash, via_btree);
	END IF;
	RETURN cardinality(via_pmhash);
END $$;
