
# Copyright (c) pmhash authors
#
# Smoke test: a pmhash index answers point lookups like a seqscan does, and
# keeps doing so across a clean (fast) restart and a crash (immediate stop,
# i.e. WAL replay / pmem pool recovery on the next start).
#
# Run through test/run_tests.sh (suite "tap"), which sets PATH, PG_REGRESS
# and TESTDIR for PostgreSQL::Test::Cluster.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION pmhash');
$node->safe_psql(
	'postgres', q{
	CREATE TABLE t (k int8, v text);
	INSERT INTO t SELECT g % 5000, 'row ' || g FROM generate_series(1, 10000) g;
	CREATE INDEX t_k_pmhash ON t USING pmhash (k);
	ANALYZE t;
});
pass('created table and pmhash index');

# count(*) for k = 42 through the index and through a seqscan (the constant
# is int8 so that no cross-type operator is needed in the opclass)
sub check_lookup
{
	my ($label) = @_;

	my $plan = $node->safe_psql(
		'postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 42::int8;
	});
	like($plan, qr/Index (Only )?Scan using t_k_pmhash/,
		"$label: plan uses the pmhash index");

	my $via_index = $node->safe_psql(
		'postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE k = 42::int8;
	});
	my $via_seqscan = $node->safe_psql(
		'postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SET enable_indexonlyscan = off;
		SELECT count(*) FROM t WHERE k = 42::int8;
	});
	is($via_seqscan, '2', "$label: seqscan finds the 2 rows");
	is($via_index, $via_seqscan, "$label: index scan agrees with seqscan");
	return;
}

check_lookup('after build');

$node->stop('fast');
$node->start;
check_lookup('after fast restart');

# insert more rows so that the crash has something to recover
$node->safe_psql('postgres',
	q{INSERT INTO t SELECT 42, 'late ' || g FROM generate_series(1, 3) g});
$node->safe_psql('postgres', q{DELETE FROM t WHERE v LIKE 'late %'});

$node->stop('immediate');
$node->start;
check_lookup('after immediate stop (crash) and restart');

$node->stop('fast');
done_testing();
