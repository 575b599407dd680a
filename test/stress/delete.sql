-- test/stress/delete.sql: delete one key's rows, move another key's rows
-- to a third key (new entries, dead old ones)
\set k random(1, :keys)
\set k2 random(1, :keys)
DELETE FROM s WHERE k = :k;
UPDATE s SET k = :k2 WHERE k = :k + 1;
