
# Copyright (c) pmhash authors
#
# A partitioned table with 2000 partitions and a pmhash index on the
# parent, on default settings: created, loaded, queried with and without
# partition pruning (one session maps every partition's pool), and dropped,
# with one pool per index storage after each step.  An index on a
# partitioned table behaves as btree's does: ATTACH PARTITION adopts a
# matching index or builds one, DETACH keeps it with the table, and
# partition-wise joins use the partitions' indexes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashPools;

my $nparts = 2000;

my $node = PostgreSQL::Test::Cluster->new('partitions');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pmhash');
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});

# the pool files of the database, and those the catalog implies
sub pools { return pool_files($node, $dboid); }
sub expected_pools { return catalog_pools($node, 'postgres'); }

sub npools
{
	my $p = pools();
	return $p eq '' ? 0 : scalar(split(/,/, $p));
}

sub pools_match
{
	my ($what) = @_;
	my $got = pools();
	is($got, expected_pools(), "$what: one pool per index storage")
	  or diag('pools: ' . npools());
}

my $forced = 'SET enable_seqscan = off; SET enable_bitmapscan = off;';
my $seq = 'SET enable_indexscan = off; SET enable_bitmapscan = off;';

# 1. create: 2000 partitions, then the index on the parent
$node->safe_psql('postgres', qq{
	CREATE TABLE p (k int4, v int4) PARTITION BY HASH (k);
	SELECT format('CREATE TABLE p_%s PARTITION OF p
	               FOR VALUES WITH (MODULUS $nparts, REMAINDER %s)', i, i)
	FROM generate_series(0, $nparts - 1) i \\gexec
	CREATE INDEX p_k ON p USING pmhash (k);
});
is(npools(), $nparts, "CREATE INDEX on the parent made $nparts pools");
pools_match('after CREATE INDEX');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'p_k'::regclass AND c.relkind = 'i'}),
	$nparts, 'every partition index is attached to the parent index');
my $shmem = $node->safe_psql('postgres', q{
	SELECT sum(s.shmem_bytes) / count(*), sum(s.pool_bytes) / count(*)
	FROM pg_class c JOIN pg_am a ON a.oid = c.relam,
	     LATERAL pmhash_stats(c.oid::regclass) s
	WHERE a.amname = 'pmhash' AND c.relkind = 'i'});
note("per empty partition index: shared memory and pool bytes $shmem");
my ($shm_each) = split(/\|/, $shmem);
cmp_ok($shm_each, '<', 16 * 1024,
	'an empty index takes less than 16 kB of shared memory');
# an empty pool leaves the unused part of its fixed backup log a hole
my $maxdisk = 0;
for my $f (split(/,/, pools()))
{
	my @st = stat($node->data_dir . "/pmhash/$dboid/$f");
	$maxdisk = $st[12] * 512 if $st[12] * 512 > $maxdisk;
}
note("largest disk use of an empty pool: $maxdisk bytes");
cmp_ok($maxdisk, '<', 64 * 1024, 'an empty pool takes less than 64 kB of disk');

# 2. load
$node->safe_psql('postgres',
	'INSERT INTO p SELECT g, g % 100 FROM generate_series(1, 200000) g');
pools_match('after loading');

# 3. query: one partition (pruned), and all of them in one session
like($node->safe_psql('postgres',
		"$forced EXPLAIN (COSTS OFF) SELECT * FROM p WHERE k = 4242"),
	qr/Index Scan using p_\d+_k_idx on p_\d+/,
	'a pruned query scans one partition through its pmhash index');
is($node->safe_psql('postgres', "$forced SELECT v FROM p WHERE k = 4242"),
	'42', 'and finds the row');
is($node->safe_psql('postgres', "$forced SELECT count(*) FROM p WHERE k = 300000"),
	'0', 'an absent key is not found');

# (each outer row probes every partition: run-time pruning does not apply)
my $probe = q{
	SELECT count(*), sum(p.v) FROM generate_series(-5, 210000, 997) g
	JOIN p ON p.k = g};
my $expect = $node->safe_psql('postgres', "$seq $probe");
like($node->safe_psql('postgres', qq{
		$forced SET enable_hashjoin = off; SET enable_mergejoin = off;
		EXPLAIN (COSTS OFF) $probe}),
	qr/Index Scan using p_\d+_k_idx/, 'an unpruned join probes the partitions\' indexes');
is($node->safe_psql('postgres', qq{
		$forced SET enable_hashjoin = off; SET enable_mergejoin = off; $probe}),
	$expect, 'lookups across all partitions in one session agree with a seqscan');
is($node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_indexscan = off;
		SELECT count(*) FROM p WHERE k = ANY (ARRAY(SELECT generate_series(1, 200000, 999)))}),
	'201', 'bitmap scans over every partition agree');

# 4. ATTACH and DETACH PARTITION, as with btree
$node->safe_psql('postgres', q{
	CREATE TABLE r (k int4) PARTITION BY RANGE (k);
	CREATE TABLE r1 PARTITION OF r FOR VALUES FROM (0) TO (1000);
	CREATE INDEX r_k ON r USING pmhash (k);
	CREATE TABLE r2 (k int4);
	INSERT INTO r2 SELECT generate_series(1000, 1999);
	CREATE INDEX r2_k ON r2 USING pmhash (k);
	CREATE TABLE r3 (k int4);
	INSERT INTO r3 SELECT generate_series(2000, 2999);
	INSERT INTO r1 SELECT generate_series(0, 999);
});
my $before = npools();
$node->safe_psql('postgres',
	'ALTER TABLE r ATTACH PARTITION r2 FOR VALUES FROM (1000) TO (2000)');
is(npools(), $before, 'ATTACH PARTITION adopts the matching pmhash index');
is($node->safe_psql('postgres', q{
		SELECT inhparent::regclass FROM pg_inherits WHERE inhrelid = 'r2_k'::regclass}),
	'r_k', 'which becomes a partition of the parent index');
$node->safe_psql('postgres',
	'ALTER TABLE r ATTACH PARTITION r3 FOR VALUES FROM (2000) TO (3000)');
is(npools(), $before + 1, 'ATTACH of a table without one builds a pmhash index');
pools_match('after ATTACH');
is($node->safe_psql('postgres', qq{
		$forced SELECT count(*) FROM generate_series(0, 2999, 11) g JOIN r ON r.k = g}),
	'273', 'the attached partitions answer through their indexes');
$node->safe_psql('postgres', 'ALTER TABLE r DETACH PARTITION r2');
is(npools(), $before + 1, 'DETACH PARTITION keeps the index with the table');
is($node->safe_psql('postgres', "$forced SELECT count(*) FROM r2 WHERE k = 1500"),
	'1', 'and the detached table still uses it');
is($node->safe_psql('postgres', "$forced SELECT count(*) FROM r WHERE k = 1500"),
	'0', 'the parent no longer has those rows');

# partition-wise join: per-partition joins probe the partitions' indexes
$node->safe_psql('postgres', q{
	CREATE TABLE a (k int4) PARTITION BY HASH (k);
	CREATE TABLE b (k int4, w int4) PARTITION BY HASH (k);
	SELECT format('CREATE TABLE a_%s PARTITION OF a FOR VALUES WITH (MODULUS 4, REMAINDER %s);
	               CREATE TABLE b_%s PARTITION OF b FOR VALUES WITH (MODULUS 4, REMAINDER %s)',
	              i, i, i, i)
	FROM generate_series(0, 3) i \gexec
	INSERT INTO a SELECT generate_series(1, 2000, 3);
	INSERT INTO b SELECT g, g FROM generate_series(1, 20000) g;
	CREATE INDEX b_k ON b USING pmhash (k);
	ANALYZE a, b;
});
my $join = 'SELECT count(*), sum(b.w) FROM a JOIN b ON a.k = b.k';
my $pw = qq{SET enable_partitionwise_join = on; SET enable_hashjoin = off;
	SET enable_mergejoin = off; SET enable_seqscan = off;};
my $plan = $node->safe_psql('postgres', "$pw EXPLAIN (COSTS OFF) $join");
like($plan, qr/Nested Loop.*Index Scan using b_\d+_k_idx on b_\d+/s,
	'a partition-wise join probes the partitions\' pmhash indexes');
is($node->safe_psql('postgres', "$pw $join"),
	$node->safe_psql('postgres', "$seq $join"),
	'and agrees with a plain join');

# 5. drop
$node->safe_psql('postgres', 'DROP TABLE p');
pools_match('after DROP TABLE of the 2000 partitions');
# a pool copied with its database keeps the hole in its fixed log
$node->safe_psql('postgres', 'CREATE DATABASE copydb TEMPLATE postgres');
my $copyoid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'copydb'});
my ($ncopied, $bigger) = (0, 0);
for my $f (split(/,/, pools()))
{
	my @a = stat($node->data_dir . "/pmhash/$dboid/$f");
	my @b = stat($node->data_dir . "/pmhash/$copyoid/$f");
	next unless @b;
	$ncopied++;
	$bigger++ if $b[12] > $a[12] + 8;
}
is($ncopied, npools(), 'CREATE DATABASE ... TEMPLATE copied every pool');
is($bigger, 0, 'and no copy takes more disk than its original');
is($node->safe_psql('copydb', "$forced SELECT count(*) FROM r2 WHERE k = 1500"),
	'1', 'the copies answer');
$node->safe_psql('postgres', 'DROP DATABASE copydb');

$node->safe_psql('postgres', 'DROP TABLE r, r2, a, b');
is(npools(), 0, 'no pool is left once every table is dropped');

$node->stop;
done_testing();
