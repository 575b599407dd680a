
# Copyright (c) pmhash authors
#
# pmhash's shared memory is a cache of the pools with two limits:
# pmhash.max_shared_memory (directories, fingerprints, D-buckets, log
# states; set here to no growth past pmhash.shared_memory, see
# 044_shmem_growth for growth) and pmhash.max_indexes (index storages with
# shared state).  Running out
# of either is a clear ERROR for the statement that needed more -- CREATE
# INDEX, an insert that grows an index, the first use of an index after a
# restart -- never a crash or a wrong answer; committed entries stay found,
# pmhash_check stays clean, other indexes keep working, and freeing memory
# (dropping an index) makes the failed operation work.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashShmem;

my $node = PostgreSQL::Test::Cluster->new('shmem');
$node->init;
$node->append_conf('postgresql.conf', small_shmem_conf());
$node->start;

my $pool_dir = $node->data_dir . '/pmhash';
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE big (k int4);
	INSERT INTO big SELECT generate_series(1, 1000);
	CREATE INDEX big_k ON big USING pmhash (k);
});

sub pools { my @p = glob("$pool_dir/$dboid/*.pool"); return scalar(@p); }

sub npmhash
{
	return $node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_class c JOIN pg_am a ON a.oid = c.relam
		WHERE a.amname = 'pmhash'});
}

# count of rows with key k, through the index or not
sub count_index
{
	my ($table, $k) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM $table WHERE k = $k});
}

# every row of big is found through its index
sub big_all_found
{
	return $node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) = (SELECT count(*) FROM big)
		FROM generate_series(1, (SELECT max(k) FROM big)) g
		JOIN big ON big.k = g});
}

# 1. CREATE INDEX until the shared memory is used up
my ($small, $ret, $out, $err) = create_until_full($node, 's');
isnt($ret, 0, "CREATE INDEX fails once the shared memory is used up ($small fit)");
like($err, qr/ERROR:  out of pmhash shared memory/, 'the error says what ran out');
like($err, qr/HINT:  Increase pmhash.max_shared_memory/, 'and how to get more');
is(npmhash(), $small + 1, 'the failed index does not exist');
is(pools(), $small + 1, 'and left no pool file behind');
is(count_index('s1', 50), '1', 'other indexes keep working');
is(count_index('big', 500), '1', 'the big one too');

# DROP gives the memory back: drop one, create one, several times over
my $cycled = 0;
for my $i (1 .. 8)
{
	my $j = $small + $i;
	($ret, $out, $err) = $node->psql('postgres', qq{
		DROP TABLE s$i;
		BEGIN;
		CREATE TABLE s$j (k int4);
		INSERT INTO s$j SELECT generate_series(1, 100);
		CREATE INDEX s${j}_k ON s$j USING pmhash (k);
		COMMIT;});
	last if $ret != 0;
	$cycled = $i;
}
is($cycled, 8, 'each DROP INDEX frees the memory of a new index') or diag($err);
my @s = map { "s$_" } 9 .. $small + 8;	# the small tables left

# 2. an insert that needs a split (more shared memory) fails cleanly
my $batches = 0;
for my $b (1 .. 40)
{
	my $from = 1000 + ($b - 1) * 2000 + 1;
	my $to = $from + 1999;
	($ret, $out, $err) = $node->psql('postgres',
		"INSERT INTO big SELECT generate_series($from, $to)");
	last if $ret != 0;
	$batches = $b;
}
isnt($ret, 0, "an insert that grows the index fails ($batches batches fit)");
like($err, qr/ERROR:  out of pmhash shared memory/, 'with the same clear error');
my $rows = 1000 + $batches * 2000;
is($node->safe_psql('postgres', 'SELECT count(*) FROM big'), $rows,
	'the failed statement was rolled back');
is(big_all_found(), 't', 'every committed row is found through the index');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('big_k')}),
	'0', 'pmhash_check finds the index consistent');
is(count_index($s[0], 7), '1', 'other indexes keep working');

# 2b. an error while placing a flushed batch, caught by a savepoint: the
# batch also held rows of the transaction around the savepoint, which
# lives on.  Rows of one key fill its segment chain until an insert fails
# (an overflow segment needs memory); then a transaction inserts 12 rows
# of the key, and a PL/pgSQL block inserts more and catches the error of
# the flush that carries both.  The outer rows' entries must not be lost:
# COMMIT either fails (they go to the pool again, which still has no room)
# or leaves every committed row found through the index.
my $filled = 0;
for my $b (1 .. 40)
{
	($ret, $out, $err) = $node->psql('postgres',
		'INSERT INTO big SELECT -5 FROM generate_series(1, 500)');
	last if $ret != 0;
	$filled = $b;
}
like($err, qr/ERROR:  out of pmhash shared memory/,
	"rows of one key fill its chain ($filled batches of 500 fit)");
my $catch_block = caught_insert_block('big', -5);
($ret, $out, $err) = $node->psql('postgres', qq{
	BEGIN;
	INSERT INTO big SELECT -5 FROM generate_series(1, 12);
	$catch_block;
	COMMIT;});
like($err, qr/NOTICE:  caught: out of pmhash shared memory/,
	'the block caught the error of placing the batch');
my $neg = $node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM big WHERE k = -5});
is(count_index('big', -5), $neg,
	"every committed row of the key is found through the index ($neg rows, COMMIT: "
	  . ($ret == 0 ? 'done' : 'failed') . ')');
if ($ret != 0)
{
	like($err, qr/ERROR:  out of pmhash shared memory/,
		'COMMIT failed with the clear error: the outer rows went to the pool again');
}
# (big_all_found looks at keys from 1 on)
$node->safe_psql('postgres', 'DELETE FROM big WHERE k = -5');
is(big_all_found(), 't', 'every committed row is found through the index');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('big_k')}),
	'0', 'pmhash_check finds the index consistent');

# 2c. the same, but memory comes back before COMMIT: the outer rows that
# went back into the collecting log must reach the index at COMMIT, each
# once.  The outer rows come from INSERT ... ON CONFLICT, whose entries go
# to the WAL at every flush (upsert mode), and from a plain INSERT after
# the block.  Freeing memory means dropping indexes: small indexes free
# small pieces, and an overflow segment or a split needs a chunk of 41 kB
# (the area is not compacted), so all but the two used below go.
($ret, $out, $err) = $node->psql('postgres',
	'INSERT INTO big SELECT -5 FROM generate_series(1, 20)');
like($err, qr/ERROR:  out of pmhash shared memory/,
	'the chain of the key is still full');
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(q{BEGIN});
$bg->query_safe(q{
	INSERT INTO big SELECT -5 FROM generate_series(1, 12) ON CONFLICT DO NOTHING});
$bg->query($catch_block);
like($bg->{stderr}, qr/NOTICE:  caught: out of pmhash shared memory/,
	'the block caught the error of placing the batch with the outer rows');
$bg->{stderr} = '';
$bg->query_safe(q{INSERT INTO big SELECT -5 FROM generate_series(1, 3)});
$node->safe_psql('postgres',
	'DROP TABLE ' . join(', ', @s[0 .. 2], @s[5 .. $#s]));
$bg->query(q{COMMIT});
is($bg->{stderr}, '', 'COMMIT places them once the memory is back');
$bg->quit;
is($node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM big WHERE k = -5}), '15',
	'the 15 outer rows are committed');
is(count_index('big', -5), '15', 'and found through the index, each once');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_indexscan = off;
	SELECT count(*) FROM big WHERE k = -5}), '15', 'by a bitmap scan too');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('big_k')}),
	'0', 'pmhash_check finds the index consistent');
$node->safe_psql('postgres', 'DELETE FROM big WHERE k = -5');

# freeing memory (2c dropped indexes) lets the insert through
my $from = $rows + 1;
my $to = $rows + 2000;
($ret, $out, $err) = $node->psql('postgres',
	"INSERT INTO big SELECT generate_series($from, $to)");
is($ret, 0, 'after DROP INDEX frees memory the insert works') or diag($err);
is(big_all_found(), 't', 'every row is found through the index');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('big_k')}),
	'0', 'and the index is consistent');

# 3. after a restart, new indexes take the memory first: loading an old
# one fails with the error, and works once memory is freed again
$node->restart;
my $made;
($made, $ret, $out, $err) = create_until_full($node, 'n');
isnt($ret, 0, "new indexes use up the memory ($made made)");
($ret, $out, $err) = $node->psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM big WHERE k = 77});
isnt($ret, 0, 'loading an index without enough memory fails');
like($err, qr/ERROR:  out of pmhash shared memory/, 'with the clear error');
like($err, qr/CONTEXT:  loading pool file "[^"]*" of pmhash index "big_k"/,
	'naming the index and its pool');
like($node->safe_psql('postgres', q{
	SET enable_seqscan = off;
	EXPLAIN (COSTS OFF) SELECT count(*) FROM big WHERE k = 77}), qr/big_k/,
	'a lack of memory does not make the planner give up the index');
is(count_index('n1', 5), '1', 'the indexes that are loaded keep working');
$node->safe_psql('postgres', 'DROP TABLE ' . join(', ', map { "n$_" } 1 .. $made));
is(count_index('big', 77), '1', 'after DROP frees memory the index loads');
is(big_all_found(), 't', 'and finds every row');

# 4. pmhash.max_indexes: index storages with shared state.  A fourth
# index is made with room to spare (how many small ones fit in 1MB above
# depends on the size of a segment's metadata), then the limit is set.
$node->append_conf('postgresql.conf', "pmhash.shared_memory = 2MB\n");
$node->restart;
$node->safe_psql('postgres', q{
	CREATE TABLE q (k int4);
	INSERT INTO q SELECT generate_series(1, 100);
	CREATE INDEX q_k ON q USING pmhash (k)});
$node->append_conf('postgresql.conf',
	"pmhash.shared_memory = 1MB\npmhash.max_indexes = 3\n");
$node->restart;
is(count_index('big', 10), '1', 'first index in use');
is(count_index($s[3], 10), '1', 'second index in use');
is(count_index($s[4], 10), '1', 'third index in use');
($ret, $out, $err) = $node->psql('postgres', qq{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM q WHERE k = 10});
isnt($ret, 0, 'a fourth index cannot be used');
like($err, qr/ERROR:  too many pmhash indexes in use/, 'the error says why');
like($err, qr/HINT:  Increase pmhash.max_indexes/, 'and what to do');
my $before = pools();
($ret, $out, $err) = $node->psql('postgres', q{
	CREATE TABLE m (k int4);
	CREATE INDEX m_k ON m USING pmhash (k)});
like($err, qr/ERROR:  too many pmhash indexes in use/,
	'CREATE INDEX fails with the same error');
is(pools(), $before, 'and leaves no pool file behind');
is(count_index($s[3], 20), '1', 'the indexes in use keep working');
is($node->safe_psql('postgres', qq{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM q WHERE k = 10}), '1', 'the table is intact');
$node->safe_psql('postgres', "DROP TABLE $s[4]");
is(count_index('q', 10), '1', 'dropping an index makes room for another');

# 5. CREATE INDEX splits a new index up front for the table's estimated
# rows, but never into more than a quarter of pmhash.shared_memory: an
# estimate gone stale (ANALYZE saw 200000 rows, 100 are left, which would
# mean 128 segments) must not make it fail for lack of memory
$node->append_conf('postgresql.conf', "pmhash.max_indexes = 200\n");
$node->restart;
$node->safe_psql('postgres', q{
	CREATE TABLE st (k int4);
	INSERT INTO st SELECT generate_series(1, 200000);
	ANALYZE st;
	DELETE FROM st WHERE k > 100});
($ret, $out, $err) =
  $node->psql('postgres', 'CREATE INDEX st_k ON st USING pmhash (k)');
is($ret, 0, 'a stale row estimate does not use up the shared memory')
  or diag($err);
my $segs = $node->safe_psql('postgres',
	q{SELECT segments FROM pmhash_stats('st_k')});
ok($segs > 1 && $segs < 128,
	"the index was presized within the budget ($segs segments)");
is(count_index('st', 42), '1', 'and it finds its rows');

done_testing();
