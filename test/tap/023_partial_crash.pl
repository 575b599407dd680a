# A partial pmhash index after a crash.  Entries of inserts that a crash
# lost can stay in the pool (src/README.pmhash, "The TID-reuse hazard"),
# and their heap slots get reused.  The executor rechecks the key of every
# row an index returns, and the index's predicate only where the plan
# keeps the quals it implies (Debian's PostgreSQL 15.20 keeps them for
# index AMs that need a key, like pmhash and hash, and drops them for
# btree; the planner of the 15.15 sources drops them for every AM), and an
# exclusion constraint's check does not look at the predicate at all.  A
# reused slot whose row has the same key but fails the predicate must not
# be returned: the scan checks the predicate itself when the pool is
# stale.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use PmhashReplica;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('partial_crash');
$node->init;
# keep the lost transaction's heap WAL in memory until the crash: no WAL
# writer round, no background writer (which would flush the WAL before it
# writes a heap page)
$node->append_conf('postgresql.conf', qq{autovacuum = off
wal_writer_delay = 10s
wal_writer_flush_after = 1GB
bgwriter_lru_maxpages = 0
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE p (k int4, s int4);
	CREATE INDEX p_k ON p USING pmhash (k) WHERE s = 1;
	INSERT INTO p SELECT g, 1 FROM generate_series(1, 100) g;
	CREATE TABLE e (k int4, s int4,
					EXCLUDE USING pmhash (k WITH =) WHERE (s = 1));
	CHECKPOINT;
});

# lost: rows inside the predicate with key 500, whose entries reached the
# pool.  The WAL writer is stopped first (a round of it between the insert
# and the crash, every wal_writer_delay, would write the insert's WAL, and
# recovery would bring its rows back as dead tuples in those slots); the
# power cut kills it with every other process of the server.
my $walwriter = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'});
kill('STOP', $walwriter) or die "could not stop the WAL writer $walwriter: $!";
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(q{BEGIN; INSERT INTO p SELECT 500, 1 FROM generate_series(1, 500);
	INSERT INTO e SELECT g, 1 FROM generate_series(1001, 1200) g});
power_cut($node);
eval { $bg->quit; };
$node->start;

# after the crash, rows with the same key outside the predicate take the
# lost rows' slots (the file kept the pages that the lost insert added,
# zeroed, and new rows go to the last one)
$node->safe_psql('postgres', q{INSERT INTO p SELECT 500, 0 FROM generate_series(1, 500)});
cmp_ok($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('p_k')}),
	'>', 100, 'entries of the lost rows are in the pool');
cmp_ok($node->safe_psql('postgres', q{
	SELECT count(*) FROM p WHERE k + 0 = 500 AND ctid < '(3,0)'}), '>', 0,
	'rows with the same key, outside the predicate, took slots of lost rows');
my $q = 'SELECT count(*) FROM p WHERE k = 500 AND s = 1';
like($node->safe_psql('postgres',
	"SET enable_seqscan = off; SET enable_bitmapscan = off; EXPLAIN (COSTS OFF) $q"),
	qr/Index Scan using p_k/, 'the query scans the partial index');
is($node->safe_psql('postgres',
	"SET enable_seqscan = off; SET enable_bitmapscan = off; $q"), '0',
	'an index scan returns no row outside the predicate');
is($node->safe_psql('postgres',
	"SET enable_seqscan = off; SET enable_indexscan = off; $q"), '0',
	'nor does a bitmap scan');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM p WHERE k = 12 AND s = 1}),
	'1', 'rows inside the predicate are found');
# (k + 0 cannot use the index: a sequential scan)
my $keys = 'ARRAY[12, 500, 1000]';
my $by_seqscan = $node->safe_psql('postgres',
	"SELECT count(*), sum(k) FROM p WHERE k + 0 = ANY ($keys) AND s = 1");
is($node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*), sum(k) FROM p WHERE k = ANY ($keys) AND s = 1}),
	$by_seqscan, 'index scan answers equal a sequential scan\'s');
is($node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_indexscan = off;
	SELECT count(*), sum(k) FROM p WHERE k = ANY ($keys) AND s = 1}),
	$by_seqscan, 'bitmap scan answers equal a sequential scan\'s');

# an exclusion constraint reads its index with a dirty snapshot and checks
# only the key of what it finds.  The lost rows were the table's first (on
# one page, kept zeroed): rows outside the predicate with the same keys,
# inserted in the same order, take their slots; rows inside it with those
# keys must not conflict with them
$node->safe_psql('postgres',
	q{INSERT INTO e SELECT g, 0 FROM generate_series(1001, 1200) g});
cmp_ok($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('e_k_excl')}),
	'>', 0, 'entries of the lost rows are in the exclusion constraint\'s pool');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM e WHERE ctid = ('(0,' || k - 1000 || ')')::tid}),
	'200', 'rows outside the predicate took the lost rows\' slots, key for key');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	q{INSERT INTO e SELECT g, 1 FROM generate_series(1001, 1200) g});
is($ret, 0, 'no false exclusion conflict with a row outside the predicate')
  or diag($stderr);
is($node->safe_psql('postgres', q{SELECT count(*) FROM e WHERE s = 1}),
	'200', 'every row inside the predicate was inserted');
my $eq = 'SELECT count(*), sum(k) FROM e WHERE k = ANY (ARRAY(SELECT generate_series(1001, 1200))) AND s = 1';
like($node->safe_psql('postgres',
	"SET enable_seqscan = off; SET enable_bitmapscan = off; EXPLAIN (COSTS OFF) $eq"),
	qr/Index Scan using e_k_excl/, 'the query scans the exclusion constraint\'s index');
is($node->safe_psql('postgres',
	"SET enable_seqscan = off; SET enable_bitmapscan = off; $eq"),
	$node->safe_psql('postgres', q{
	SELECT count(*), sum(k) FROM e WHERE k + 0 BETWEEN 1001 AND 1200 AND s = 1}),
	'its index scan answers equal a sequential scan\'s');
($ret, $stdout, $stderr) = $node->psql('postgres',
	q{INSERT INTO e VALUES (1200, 1)});
like($stderr, qr/conflicting key value violates exclusion constraint/,
	'a true conflict is still found');

$node->stop;
done_testing();
