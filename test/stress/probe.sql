-- test/stress/probe.sql: pmhash against the btree for a random and a hot
-- key, in one snapshot (stress_probe raises an error on any difference)
\set k random(1, :keys)
\set hot random(1, 8)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT stress_probe(:k);
SELECT stress_probe(:hot);
COMMIT;
