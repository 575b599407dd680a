-- test/stress/probe.sql: pmhash against the btree for a random and a hot
-- key, and for 40 random keys and a hot one at once ("= ANY"), in one
-- snapshot (stress_probe raises an error on any difference)
\set k random(1, :keys)
\set hot random(1, 8)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT stress_probe(ARRAY[:k]::int8[]);
SELECT stress_probe(ARRAY[:hot]::int8[]);
SELECT stress_probe(ARRAY(SELECT (random() * :keys)::int8 + 1
						  FROM generate_series(1, 40)) || :hot::int8);
COMMIT;
