
# Copyright (c) pmhash authors
#
# Splits under the segment lock (pmhash_split_segment_shared): inserting
# sessions split segments while other sessions keep inserting into and
# reading the index with the index lock shared.  Readers look up keys that
# are there from the start, through index scans and bitmap scans, and a
# lookup that misses one (or finds it twice) fails the pgbench run with a
# division by zero (computed from the count: a constant 1 / 0 would fail
# in the planner): a reader that read the directory before a split and
# the segment after it must follow the hash to its new segment.  Then
# every key's rows through the index equal a sequential scan's, and
# pmhash_check finds nothing.  Bounded by transaction counts, never by
# time.  Pools are synced at every persist here (pmhash.lazy_writeback =
# off): the msync that ends each split keeps it open long enough for
# readers to meet it, which the test counts.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('splits');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
autovacuum = off
max_connections = 30
pmhash.lazy_writeback = off
});
$node->start;

# 3000 anchor keys (negative), each once, spread over the hash space, and
# 60000 keys whose hashes start with five zero bits: that 1/32 of the hash
# space gets segments far deeper than the rest, so the directory is deep
# and a split of a shallow segment publishes its new half in many entries
# (64 and more), during which a backend that found the new half must not
# split it (pmhash_split_segment_shared holds its lock)
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE s (id bigserial, k int8);
	INSERT INTO s (k) SELECT -g FROM generate_series(1, 3000) g;
	INSERT INTO s (k) SELECT g FROM generate_series(1, 2000000) g
		WHERE hashint8extended(g, 0) >> 59 = 0;
	CREATE INDEX s_k ON s USING pmhash (k);
});
cmp_ok($node->safe_psql('postgres',
	q{SELECT global_depth FROM pmhash_stats('s_k')}),
	'>=', 10, 'the skewed keys made the directory deep');

my $log_offset = -s $node->logfile;

# Inserting sessions log their splits (DEBUG2); 4 clients on 2 CPUs
$node->pgbench(
	'--no-vacuum --client=4 --jobs=2 --transactions=300',
	0,
	[qr{processed: 1200/1200}],
	[qr{^$}],
	'inserts splitting segments while lookups run',
	{
		'pmhash_insert@6' => q{
\set b random(0, 100000000)
SET log_min_messages = debug2;
INSERT INTO s (k) SELECT :b::int8 * 256 + g FROM generate_series(0, 199) g;
},
		'pmhash_index_scan@2' => q{
\set a random(1, 3000)
SET log_min_messages = debug2;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT 1 / (count(*) = 1)::int FROM s WHERE k = -:a;
},
		'pmhash_bitmap_scan@2' => q{
\set a random(1, 3000)
SET log_min_messages = debug2;
SET enable_seqscan = off; SET enable_indexscan = off;
SELECT 1 / (count(*) = 3)::int
	FROM s WHERE k = ANY (ARRAY[-:a, -(:a % 3000 + 1), -((:a + 1) % 3000 + 1)]);
},
	});

my $log = slurp_file($node->logfile, $log_offset);
my $local_splits = () = $log =~ /split segment \d+ into \d+ under the segment lock/g;
my $retries = () = $log =~ /split after the directory was read; reading it again/g;
cmp_ok($local_splits, '>', 10, "segments split under their own lock ($local_splits)");
# (whether a backend meets a split between its directory read and its
# lock is a matter of timing: only reported)
note("backends that found the segment they read in the directory split meanwhile: $retries");

my $via_index = $node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SET enable_hashjoin = off; SET enable_mergejoin = off;
	SELECT count(*), sum(id) FROM (SELECT DISTINCT k FROM s) d JOIN s USING (k)});
my $via_seq = $node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*), sum(id) FROM s});
is($via_index, $via_seq, 'index answers equal seqscan answers after the run');
# (pmhash_check also compares the counts of primary and overflow segments
# that the splits kept in shared memory with the pool's)
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('s_k')}),
	'0', 'pmhash_check finds nothing');
is($node->safe_psql('postgres',
	q{SELECT entries = (SELECT count(*) FROM s) FROM pmhash_stats('s_k')}),
	't', 'the entry count is exact');

# the structure the splits left survives a restart
$node->restart;
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SET enable_hashjoin = off; SET enable_mergejoin = off;
	SELECT count(*), sum(id) FROM (SELECT DISTINCT k FROM s) d JOIN s USING (k)}),
	$via_seq, 'the same answers after a restart');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('s_k')}),
	'0', 'pmhash_check finds nothing after the restart');

$node->stop;
done_testing();
