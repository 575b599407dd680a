
# Copyright (c) pmhash authors
#
# Dead hints: an entry whose row is dead to every snapshot is hinted in
# shared memory (PMH_FPT_DEAD) when a scan (the executor's
# kill_prior_tuple) or a unique check finds so, and later lookups skip it,
# as btree and hash skip LP_DEAD items.  Checked through idx_tup_read (the
# TIDs an index scan returns) and against sequential scans:
#   1. versions that an open REPEATABLE READ snapshot may still need are
#      not hinted, and that snapshot still finds its row through the index;
#   2. once it is gone, one scan hints the dead versions and the next
#      returns the live row and at most a D-bucket's worth more;
#   3. a unique index's checks hint on their own, and a duplicate of the
#      live row is still refused;
#   4. a scan of "= ANY" hints the entries of each of its keys;
#   5. hints are volatile: after a restart scans return every version
#      again until they hint them anew; VACUUM removes the entries;
#   6. a scan's hints wait until it has returned its TIDs: a VACUUM in
#      between, which frees a dead row's TID for a new row with the same
#      key, must make the scan drop them (found by a review: the new row
#      was hidden, and a duplicate of it accepted);
#   7. a stale pool (after a crash with inserts in flight, whose entries
#      can name heap slots that new rows take without any VACUUM): scans
#      give no hints there, unique checks do (pmhash_hint_allowed).
# pmhash_check() accepts hinted entries throughout.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashHints;

my $node = PostgreSQL::Test::Cluster->new('hints');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pmhash'
autovacuum = off
wal_writer_delay = '10s'
});
$node->start;

# 1000 keys; updates of v are never HOT (v has a btree index)
$node->safe_psql('postgres', 'CREATE EXTENSION pmhash;' . hint_tables_sql());

my $index_scan = $INDEX_SCAN;


# TIDs one index scan of "where" on table returns (idx_tup_read), and the
# rows it finds, read in one session
sub scan_reads
{
	my ($table, $where) = @_;
	my $out = $node->safe_psql('postgres', qq{
		$index_scan
		SELECT pg_stat_force_next_flush();
		SELECT 'before ' || idx_tup_read FROM pg_stat_all_indexes WHERE indexrelid = '${table}_k'::regclass;
		SELECT 'rows ' || string_agg(k || ':' || v, ',' ORDER BY k, v) FROM $table WHERE $where;
		SELECT pg_stat_force_next_flush();
		SELECT 'after ' || idx_tup_read FROM pg_stat_all_indexes WHERE indexrelid = '${table}_k'::regclass;
	});
	my ($before) = $out =~ /^before (\d+)$/m;
	my ($after) = $out =~ /^after (\d+)$/m;
	my ($rows) = $out =~ /^rows (.*)$/m;
	die "unexpected output: $out" unless defined $before && defined $after;
	return ($after - $before, $rows // '');
}

# the rows a sequential scan finds
sub seq_rows
{
	my ($table, $where) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT string_agg(k || ':' || v, ',' ORDER BY k, v) FROM $table WHERE $where;
	});
}

sub check_clean
{
	my ($label) = @_;
	is($node->safe_psql('postgres',
		q{SELECT (SELECT count(*) FROM pmhash_check('t_k')) + (SELECT count(*) FROM pmhash_check('u_k'))}),
		'0', "$label: pmhash_check finds nothing");
}

# 1. ------------------------------------------------------------------
my $bg = $node->background_psql('postgres', on_error_stop => 1);
$bg->query_safe(
	"BEGIN ISOLATION LEVEL REPEATABLE READ; $index_scan SELECT v FROM t WHERE k = 1");
update_key($node, 't', 1, 200, $index_scan);
my ($reads, $rows) = scan_reads('t', 'k = 1');
is($rows, '1:200', 'old snapshot held: the index finds the live row');
cmp_ok($reads, '>=', 201, "old snapshot held: no version hinted ($reads TIDs)");
is($bg->query_safe('SELECT v FROM t WHERE k = 1'), '0',
	'the old snapshot still finds its version through the index');
is($bg->query_safe(
	"SELECT count(*) FROM t WHERE k = 1 AND v = 0"), '1',
	'the old snapshot sees its version once');
$bg->query_safe('COMMIT');
$bg->quit;

# 2. ------------------------------------------------------------------
($reads, $rows) = scan_reads('t', 'k = 1');
is($rows, '1:200', 'first scan after the snapshot ended: the live row');
cmp_ok($reads, '>=', 201, "first scan returns every version ($reads TIDs)");
($reads, $rows) = scan_reads('t', 'k = 1');
is($rows, seq_rows('t', 'k = 1'), 'second scan: the same row as a sequential scan');
cmp_ok($reads, '<=', 17, "second scan skips the hinted versions ($reads TIDs)");
check_clean('hinted');
# the updates' own scans hint too: after more updates the scan stays short
update_key($node, 't', 1, 100, $index_scan);
($reads, $rows) = scan_reads('t', 'k = 1');
is($rows, '1:300', 'after 100 more updates: the live row');
cmp_ok($reads, '<=', 17, "the updates' scans hinted their dead versions ($reads TIDs)");

# 3. ------------------------------------------------------------------
# updates through sequential scans: only the unique checks hint
update_key($node, 'u', 5, 200, $SEQ_SCAN);
($reads, $rows) = scan_reads('u', 'k = 5');
is($rows, '5:200', 'unique index: the live row');
cmp_ok($reads, '<=', 17, "unique checks hinted the dead versions ($reads TIDs)");
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'INSERT INTO u VALUES (5, 0)');
like($stderr, qr/duplicate key value violates unique constraint "u_k"/,
	'a duplicate of the live row is refused');
$node->safe_psql('postgres', 'DELETE FROM u WHERE k = 5');
$node->safe_psql('postgres', 'INSERT INTO u VALUES (5, -1)');
is(scalar((scan_reads('u', 'k = 5'))[1]), '5:-1',
	'after DELETE, the key is inserted again and found');
check_clean('unique');

# 4. ------------------------------------------------------------------
update_key($node, 't', $_, 80, $SEQ_SCAN)
  for (2, 3);
my $any = 'k = ANY (ARRAY[2, 3, 4, 5000])';
($reads, $rows) = scan_reads('t', $any);
cmp_ok($reads, '>=', 163, "= ANY, first scan: every version ($reads TIDs)");
($reads, $rows) = scan_reads('t', $any);
is($rows, seq_rows('t', $any), '= ANY: the same rows as a sequential scan');
is($rows, '2:80,3:80,4:0', '= ANY: the live rows');
cmp_ok($reads, '<=', 3 + 2 * 16, "= ANY, second scan: hinted versions skipped ($reads TIDs)");

# 5. ------------------------------------------------------------------
$node->restart;
($reads, $rows) = scan_reads('t', 'k = 1');
is($rows, '1:300', 'after a restart: the live row');
cmp_ok($reads, '>=', 301, "after a restart the hints are gone ($reads TIDs)");
($reads, $rows) = scan_reads('t', 'k = 1');
cmp_ok($reads, '<=', 17, "and the first scan hints again ($reads TIDs)");
check_clean('after a restart');
$node->safe_psql('postgres', 'VACUUM t; VACUUM u');
is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('t_k')}),
	'1000', 'VACUUM removed the dead versions\' entries, hinted or not');
($reads, $rows) = scan_reads('t', 'k = 1');
is($reads, 1, 'after VACUUM one TID');
is($node->safe_psql('postgres', qq{
	$index_scan SELECT count(*) FROM t t1 WHERE NOT EXISTS (SELECT FROM t t2 WHERE t2.k = t1.k AND t2.v = t1.v)}),
	'0', 'every row is found through the index');
check_clean('after VACUUM');

# 6. ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE r (k int4, v int4, pad text) WITH (autovacuum_enabled = off, fillfactor = 100);
	ALTER TABLE r ALTER pad SET STORAGE PLAIN;
	INSERT INTO r VALUES (1, 1, 'dead');
	INSERT INTO r SELECT 1000 + g, g, repeat('x', 2600) FROM generate_series(1, 3) g;
	INSERT INTO r VALUES (2, 2, repeat('y', 2600));
	CREATE UNIQUE INDEX r_k ON r USING pmhash (k);
	DELETE FROM r WHERE k = 1;
});
my $cur = $node->background_psql('postgres', on_error_stop => 1);
$cur->query_safe(qq{$index_scan BEGIN;
	DECLARE c CURSOR FOR SELECT k FROM r WHERE k = ANY ('{1,2}');
	FETCH 1 FROM c});
$node->safe_psql('postgres', 'VACUUM r');
my $new_tid = $node->safe_psql('postgres', q{
	INSERT INTO r VALUES (1, 3, 'new') RETURNING ctid;
	INSERT INTO r SELECT 5000 + g, g, 'f' FROM generate_series(1, 40) g});
is($new_tid, '(0,1)', 'the new row took the dead row\'s TID');
$cur->query_safe('CLOSE c; COMMIT');
$cur->quit;
is($node->safe_psql('postgres', qq{$index_scan SELECT v FROM r WHERE k = 1}), '3',
	'the new row is found through the index after the scan ended');
($ret, $stdout, $stderr) = $node->psql('postgres', 'INSERT INTO r VALUES (1, 4)');
like($stderr, qr/duplicate key value violates unique constraint "r_k"/,
	'and a duplicate of it is refused');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('r_k')}), '0',
	'VACUUM between a scan and its hints: pmhash_check finds nothing');

# 7. ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE s (k int4, v int4) WITH (autovacuum_enabled = off);
	INSERT INTO s SELECT 1000 + g, 0 FROM generate_series(1, 50) g;
	CREATE UNIQUE INDEX s_k ON s USING pmhash (k);
	CREATE INDEX ON s (v);
	CREATE TABLE sn (k int4, v int4) WITH (autovacuum_enabled = off);
	INSERT INTO sn SELECT 1000 + g, 0 FROM generate_series(1, 50) g;
	CREATE INDEX sn_k ON sn USING pmhash (k);
	CREATE INDEX ON sn (v);
	CHECKPOINT;
});
my $x = $node->background_psql('postgres', on_error_stop => 1);
$x->query_safe(q{BEGIN;
	INSERT INTO s SELECT 3000 + g, g FROM generate_series(1, 20) g;
	INSERT INTO sn SELECT 3000 + g, g FROM generate_series(1, 20) g});
$node->stop('immediate');
eval { $x->quit; };
$node->start;
update_key($node, 'sn', 1001, 30, $SEQ_SCAN);
($reads, $rows) = scan_reads('sn', 'k = 1001');
($reads, $rows) = scan_reads('sn', 'k = 1001');
is($rows, '1001:30', 'stale pool: the updated row');
cmp_ok($reads, '>=', 31, "stale pool: scans leave no hints ($reads TIDs)");
update_key($node, 's', 1001, 30, $SEQ_SCAN);
($reads, $rows) = scan_reads('s', 'k = 1001');
is($rows, '1001:30', 'stale pool, unique index: the updated row');
cmp_ok($reads, '<=', 17, "stale pool: unique checks hint ($reads TIDs)");
is($node->safe_psql('postgres', qq{$index_scan SELECT count(*) FROM s WHERE k BETWEEN 3001 AND 3020}),
	'0', 'stale pool: the lost inserts are not found');
($ret, $stdout, $stderr) = $node->psql('postgres', 'INSERT INTO s VALUES (1001, 0)');
like($stderr, qr/duplicate key value violates unique constraint "s_k"/,
	'stale pool: a duplicate of the live row is refused');
is($rows, seq_rows('s', 'k = 1001'), 'stale pool: the same row as a sequential scan');
is($node->safe_psql('postgres',
	q{SELECT (SELECT count(*) FROM pmhash_check('s_k')) + (SELECT count(*) FROM pmhash_check('sn_k'))}),
	'0', 'stale pool: pmhash_check finds nothing');

$node->stop;
done_testing();
