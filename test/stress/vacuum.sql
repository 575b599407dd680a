-- test/stress/vacuum.sql: VACUUM, one time in four with heap truncation
-- (which waits up to 5 s for its lock, so mostly without)
\set t random(1, 4)
\if :t = 1
VACUUM s;
\else
VACUUM (TRUNCATE false) s;
\endif
