
# Copyright (c) pmhash authors
#
# Restarts and crashes: clean restart, immediate stop (crash), a backend
# killed with SIGKILL (shared memory reinitialised), a prepared transaction
# carried across a crash, and unlogged indexes that come back empty.  After
# each event every key's rows found through the index equal those found by
# a sequential scan, and pmhash_check() finds nothing.

use strict;
use warnings;

use Time::HiRes;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use PmhashCrash;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
max_prepared_transactions = 5
restart_after_crash = on
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (id serial PRIMARY KEY, k int8);
	INSERT INTO t (k) SELECT g % 3000 FROM generate_series(1, 40000) g;
	INSERT INTO t (k) SELECT 7 FROM generate_series(1, 3000);
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE UNLOGGED TABLE u (k int4);
	INSERT INTO u SELECT generate_series(1, 5000);
	CREATE INDEX u_k ON u USING pmhash (k);
});

# every key: index nested loop vs. sequential scan, as (key, count, sum of
# ids) so that a duplicate or a missing row changes the answer
sub compare_all
{
	my ($label) = @_;
	my $q = q{SELECT k, count(*), sum(id) FROM t WHERE k = ANY (SELECT generate_series(-5, 3005)) GROUP BY k ORDER BY k};
	my $via_index = $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_hashjoin = off; SET enable_mergejoin = off;
		SELECT k, count(*), sum(id) FROM generate_series(-5, 3005) p JOIN t ON t.k = p
		GROUP BY k ORDER BY k});
	my $plan = $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_hashjoin = off; SET enable_mergejoin = off;
		EXPLAIN (COSTS OFF) SELECT count(*) FROM generate_series(-5, 3005) p JOIN t ON t.k = p});
	like($plan, qr/Index Scan using t_k/, "$label: plan probes the pmhash index");
	my $via_seq = $node->safe_psql('postgres', qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		$q});
	is($via_index, $via_seq, "$label: index answers equal seqscan answers");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
		'0', "$label: pmhash_check finds nothing");
	return;
}

compare_all('after build');

$node->restart;
compare_all('after clean restart');

# insert more (splits happen), crash, compare
$node->safe_psql('postgres',
	q{INSERT INTO t (k) SELECT g % 3000 FROM generate_series(1, 20000) g});
$node->stop('immediate');
$node->start;
compare_all('after immediate stop');

# the unlogged index is empty after the crash, and usable
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = 10}), '0',
	'unlogged table and its pmhash index are empty after a crash');
$node->safe_psql('postgres', q{INSERT INTO u VALUES (10), (10)});
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = 10}), '2',
	'unlogged pmhash index takes new entries after a crash');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('u_k')}),
	'0', 'unlogged index consistent after a crash');

# a prepared transaction's inserts survive a crash and commit afterwards
$node->safe_psql('postgres', q{
	BEGIN; INSERT INTO t (k) VALUES (-1), (-1), (-2); PREPARE TRANSACTION 'p1';});
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = -1}), '0',
	'prepared rows are invisible before COMMIT PREPARED');
$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'});
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = -1}), '2',
	'prepared rows are found through the index after COMMIT PREPARED');
compare_all('after a prepared transaction across a crash');

# a backend killed with SIGKILL: the postmaster reinitialises shared
# memory; pmhash rebuilds its state from the pool
my ($stdout, $stderr);
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
$node->safe_psql('postgres',
	q{INSERT INTO t (k) SELECT g % 3000 FROM generate_series(1, 5000) g});
kill_backend($node, $pid);
eval { $bg->quit; };
compare_all('after a backend was killed');

# uncommitted inserts that reached the pool before a crash are harmless:
# their heap tuples are dead or never reached the disk, and the heap slots
# they name get reused by other rows -- with the same key (the insert finds
# the entry already there) or another one (the recheck rejects it)
$bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(q{BEGIN; INSERT INTO t (k) SELECT 11 FROM generate_series(1, 500)});
$node->stop('immediate');
$bg->quit;
$node->start;
compare_all('after a crash with uncommitted inserts');
$node->safe_psql('postgres',
	q{INSERT INTO t (k) SELECT (g % 2) * 11 FROM generate_series(1, 2000) g});
compare_all('after reusing the heap slots of lost inserts');
$node->safe_psql('postgres', 'VACUUM t');
compare_all('after VACUUM');
is($node->safe_psql('postgres',
	q{SELECT entries >= (SELECT count(*) FROM t WHERE k IS NOT NULL) FROM pmhash_stats('t_k')}),
	't', 'every row has its entry');

# a crash loses a big uncommitted insert whose entries reached the pool;
# VACUUM then truncates the heap below the blocks those entries name:
# scans skip them and VACUUM removes them
$node->safe_psql('postgres', q{
	CREATE TABLE lost (k int4);
	INSERT INTO lost SELECT generate_series(1, 1000);
	CREATE INDEX lost_k ON lost USING pmhash (k);
	CHECKPOINT;
});
# The insert's first rows fill the free slots of the committed rows' last
# block.  How much of the insert's WAL the crash keeps depends on when the
# WAL writer last woke up (every wal_writer_delay).  Had it lost those
# first rows too, their entries would name slots past the end of that
# block's line pointers, in a block that stays: no VACUUM reports them
# dead or past the end of the heap (harmless, like any stale entry: they
# go once their slot is used and dies again), and the count at the end
# would be off by their number (1129 instead of 999 when all 130 were
# lost).  So a checkpoint writes the first thousand rows, well past that
# block, before the crash: they come back as dead tuples, and the crash
# loses only rows in blocks of their own, which VACUUM cuts off.
$bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(q{BEGIN; INSERT INTO lost SELECT generate_series(1001, 2000)});
$node->safe_psql('postgres', 'CHECKPOINT');
$bg->query_safe(q{INSERT INTO lost SELECT generate_series(2001, 20000)});
$node->stop('immediate');
$bg->quit;
$node->start;
# a session whose scans saw the heap's length before VACUUM truncated it
# (the lost rows' entries name blocks up to its old end; VACUUM removes
# those whose pages reached the disk and cuts off the pages that did not):
# its scans must not take the old length for the heap's (pmhash_collect)
my $scanner = $node->background_psql('postgres', on_error_stop => 0);
my $lost_keys = 'k = ANY (ARRAY(SELECT generate_series(1001, 20000)))';
is($scanner->query_safe(qq{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM lost WHERE $lost_keys}), '0',
	'the lost rows are not found before VACUUM');
my $bytes = $node->safe_psql('postgres', q{SELECT pg_relation_size('lost')});
$node->safe_psql('postgres', 'VACUUM lost');
cmp_ok($node->safe_psql('postgres', q{SELECT pg_relation_size('lost')}),
	'<', $bytes, 'VACUUM truncated the heap');
cmp_ok($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('lost_k')}),
	'>', 1000, 'entries of lost rows are left after VACUUM');
like($scanner->query_safe(q{
	EXPLAIN (COSTS OFF) SELECT count(*) FROM lost WHERE k = ANY ('{1}')}),
	qr/Index Scan using lost_k/, 'the session scans the pmhash index');
is($scanner->query_safe(qq{SELECT count(*) FROM lost WHERE $lost_keys}), '0',
	'a session that saw the longer heap skips the entries past its end');
is($scanner->query_safe(q{
	SELECT count(*) FROM lost WHERE k = ANY (ARRAY(SELECT generate_series(1, 1000)))}),
	'1000', 'and finds the rows that are there');
# (k + 0 cannot use the index: a sequential scan)
my $all_keys = 'ARRAY(SELECT generate_series(1, 20000))';
my $by_seqscan = $node->safe_psql('postgres',
	qq{SELECT count(*), sum(k) FROM lost WHERE k + 0 = ANY ($all_keys)});
is($scanner->query_safe(
	qq{SELECT count(*), sum(k) FROM lost WHERE k = ANY ($all_keys)}),
	$by_seqscan, "the session's index answers equal a sequential scan's");
$scanner->quit;
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM lost WHERE k = 10000}), '0',
	'index scan skips entries that point past the truncated heap');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_indexscan = off;
	SELECT count(*) FROM lost WHERE k = 500}), '1',
	'bitmap scan is right too');
# a serializable bitmap heap scan reads every block the bitmap names (it
# does not stop at the length it saw), so the index skips them for it
is($node->safe_psql('postgres', qq{
	SET default_transaction_isolation = serializable;
	SET enable_seqscan = off; SET enable_indexscan = off;
	SELECT count(*) FROM lost WHERE $lost_keys}), '0',
	'a serializable bitmap scan skips them too');
is($node->safe_psql('postgres', qq{
	SET default_transaction_isolation = serializable;
	SET enable_seqscan = off; SET enable_indexscan = off;
	SELECT count(*), sum(k) FROM lost WHERE k = ANY ($all_keys)}),
	$by_seqscan, 'and answers as a sequential scan does');
# the VACUUM above truncated the heap after its index pass; the next index
# pass removes the entries that point past the end.  That needs the heap
# cut down to the blocks of its rows first: VACUUM's truncation can stop
# early (a page whose cleanup lock it could not take, pinned for a moment
# by the background writer, say, counts as in use; the truncation gives
# way to a conflicting lock request), and entries naming the blocks it
# left would rightly outlive the next index pass.  So VACUUM until the
# heap has only those blocks (normally it has already), then delete a row
# so that there is an index pass (INDEX_CLEANUP ON: never bypassed).
my $rows_bytes = $node->safe_psql('postgres', q{
	SELECT (max((ctid::text::point)[0])::int8 + 1) * current_setting('block_size')::int8
	FROM lost});
for (my $i = 0; $i < 10; $i++)
{
	last if $node->safe_psql('postgres',
		q{SELECT pg_relation_size('lost')}) == $rows_bytes;
	$node->safe_psql('postgres', 'VACUUM lost');
}
is($node->safe_psql('postgres', q{SELECT pg_relation_size('lost')}),
	$rows_bytes, 'the heap has only the blocks of its rows');
$node->safe_psql('postgres', 'DELETE FROM lost WHERE k = 1');
$node->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) lost');
is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('lost_k')}),
	'999', 'VACUUM removed the entries past the end of the heap');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('lost_k')}),
	'0', 'and the index is consistent');

# a crash while the transaction that created a pmhash storage is open:
# PostgreSQL keeps the storage's relation file, and no pg_class row names
# it; the next start removes its pool (and keeps every other one)
my $open = $node->background_psql('postgres');
$open->query_safe('BEGIN');
$open->query_safe('CREATE TABLE uncommitted (k int4)');
$open->query_safe('INSERT INTO uncommitted SELECT generate_series(1, 50000)');
$open->query_safe('CREATE INDEX uncommitted_k ON uncommitted USING pmhash (k)');
my $lost_pool = $open->query_safe(
	q{SELECT pool_path FROM pmhash_stats('uncommitted_k')});
my $kept_pool = $node->safe_psql('postgres',
	q{SELECT pool_path FROM pmhash_stats('t_k')});
ok(-e $lost_pool, 'an open transaction\'s CREATE INDEX made a pool');
$node->stop('immediate');
eval { $open->quit; };
my $log_off = -s $node->logfile;
$node->start;
my $gone = 0;
for (my $i = 0; $i < 300 && !$gone; $i++)
{
	$gone = !-e $lost_pool;
	Time::HiRes::usleep(100_000) unless $gone;
}
ok($gone, 'the next start removes the pool of a storage that no transaction committed');
ok(-e $kept_pool, 'and keeps the others');
# (the sweep logs its count after its last removal: wait for the line)
ok(eval { $node->wait_for_log(qr/removed 1 orphan pool file/, $log_off); 1 },
	'and says so');
is($node->safe_psql('postgres',
		'SELECT count(*) FROM pg_class WHERE relname = \'uncommitted_k\''),
	'0', 'the index does not exist');
compare_all('after a crash with an open CREATE INDEX');

$node->stop;
done_testing();
