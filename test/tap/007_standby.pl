
# Copyright (c) pmhash authors
#
# Pools are not WAL-logged.  A hot standby does not use pmhash indexes (the
# planner avoids them; a forced use is a clear error), and after promotion
# the pools that came with the base backup are refused as stale until
# REINDEX rebuilds them from the heap.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# first uses are what this test is about: no background loading
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n"
	. "pmhash.prewarm = off\n");
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 10000);
	CREATE INDEX t_k ON t USING pmhash (k);
	ANALYZE t;
});
$primary->backup('b');
# rows the pool copied by the backup does not have
$primary->safe_psql('postgres', q{INSERT INTO t SELECT 77 FROM generate_series(1, 5)});

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

my $plan = $standby->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77});
unlike($plan, qr/t_k/, 'the standby planner does not use the pmhash index');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM t WHERE k = 77}),
	'6', 'the standby answers right without it');
my ($ret, $out, $err) = $standby->psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77});
if ($ret != 0)
{
	like($err, qr/cannot be used during recovery/,
		'forcing the index on a standby is a clear error');
}
else
{
	is($out, '6', 'forcing the index on a standby still answers right');
}

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
($ret, $out, $err) = $standby->psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77});
isnt($ret, 0, 'after promotion the stale pool is refused');
like($err, qr/predates a promotion, a point-in-time recovery or a restored base backup/,
	'with an error that says why');
like($err, qr/HINT:\s+REINDEX INDEX t_k/, 'and how to repair');
$standby->safe_psql('postgres', 'REINDEX INDEX t_k');
is($standby->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '6',
	'REINDEX on the promoted server gives right answers');

# every answer above agrees with a sequential scan on the same server
for my $n ($standby, $primary)
{
	is($n->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE k = 77}), '6',
		$n->name . ': sequential scan finds the same rows');
}

# the primary is unaffected
is($primary->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '6', 'primary still right');

# a base backup restored without archive recovery stays on the same
# timeline: the pool epoch still tells its pools are older than its heap
my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($primary, 'b');
$clone->start;
($ret, $out, $err) = $clone->psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77});
isnt($ret, 0, 'a restored base backup refuses its copied pools');
like($err, qr/restored base backup/, 'with an error that says why');
$clone->safe_psql('postgres', 'REINDEX INDEX t_k');
is($clone->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '1',
	'REINDEX on the restored server gives right answers (the clone stops at the backup)');
$clone->restart;
is($clone->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '1',
	'and the rebuilt pool is accepted after a restart');
is($clone->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '1',
	'the clone\'s sequential scan agrees');
$clone->stop;

$standby->stop;
$primary->stop;
done_testing();
