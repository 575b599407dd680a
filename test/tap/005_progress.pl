
# Copyright (c) pmhash authors
#
# pg_stat_progress_create_index shows a pmhash build with pmhash's own
# phase name and the tuples it has loaded.  The key expression sleeps a
# little per row so that the build lasts long enough to be watched,
# whatever the speed of the machine.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('progress');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE FUNCTION slow_key(int4) RETURNS int4 IMMUTABLE LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.002); RETURN $1; END $$;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 6000);
});

my $bg = $node->background_psql('postgres');
$bg->query_until(qr/started/, q{
	\echo started
	CREATE INDEX t_slow ON t USING pmhash (slow_key(k));
});

ok( $node->poll_query_until(
		'postgres', q{
		SELECT phase LIKE 'building index: loading entries into pool'
		   AND tuples_done >= 4096 AND blocks_total > 0
		FROM pg_stat_progress_create_index
		WHERE relid = 't'::regclass}),
	'build reports its phase, the tuples loaded so far and the heap blocks');

$bg->quit;
is( $node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE slow_key(k) = 77}),
	'1', 'the index built while being watched works');
is( $node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE slow_key(k) = 77}),
	'1', 'and agrees with a sequential scan');

$node->stop;
done_testing();
