
# Copyright (c) pmhash authors
#
# A logical-replication subscriber with its own pmhash index: the apply
# worker's inserts, updates and deletes (also of rows that change key) go
# through the index as any session's do, the initial table copy too, and
# every key's rows found through the index on the subscriber equal its
# sequential scan's and the publisher's.  The publisher has a pmhash index
# as well, whose WAL logical decoding skips (pmhash's records carry no
# logical changes).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $forced = 'SET enable_seqscan = off; SET enable_bitmapscan = off;';
my $seqscan = 'SET enable_indexscan = off; SET enable_bitmapscan = off;';
my $per_key = q{SELECT k, count(*), sum(id) FROM t
	WHERE k = ANY (ARRAY(SELECT generate_series(0, 300))) GROUP BY k ORDER BY k};

my $pub = PostgreSQL::Test::Cluster->new('publisher');
$pub->init(allows_streaming => 'logical');
$pub->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$pub->start;
my $sub = PostgreSQL::Test::Cluster->new('subscriber');
$sub->init;
$sub->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$sub->start;

for my $node ($pub, $sub)
{
	$node->safe_psql('postgres', q{
		CREATE EXTENSION pmhash;
		CREATE TABLE t (id int PRIMARY KEY, k int4);
		CREATE INDEX t_k ON t USING pmhash (k);
	});
}
$pub->safe_psql('postgres', q{
	INSERT INTO t SELECT g, g % 300 FROM generate_series(1, 5000) g;
	CREATE PUBLICATION p FOR TABLE t;
});
my $connstr = $pub->connstr . ' dbname=postgres';
$sub->safe_psql('postgres', "CREATE SUBSCRIPTION s CONNECTION '$connstr' PUBLICATION p");
$sub->wait_for_subscription_sync($pub, 's');

$pub->safe_psql('postgres', q{
	INSERT INTO t SELECT g, g % 7 FROM generate_series(5001, 8000) g;
	UPDATE t SET k = k + 1 WHERE id % 5 = 0;
	DELETE FROM t WHERE id % 11 = 0;
	BEGIN;
	INSERT INTO t SELECT g, 299 FROM generate_series(8001, 8100) g;
	ROLLBACK;
	INSERT INTO t SELECT g, 299 FROM generate_series(8101, 8200) g;
});
$pub->wait_for_catchup('s');

my $expected = $pub->safe_psql('postgres', "$seqscan $per_key");
like($sub->safe_psql('postgres',
		"$forced EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 5"),
	qr/t_k/, 'the subscriber\'s plan uses its pmhash index');
is($sub->safe_psql('postgres', "$seqscan $per_key"), $expected,
	'the subscriber has the publisher\'s rows');
is($sub->safe_psql('postgres', "$forced $per_key"), $expected,
	'its pmhash index finds them, key by key');
is($pub->safe_psql('postgres', "$forced $per_key"), $expected,
	'and so does the publisher\'s');

$sub->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
is($sub->safe_psql('postgres', "$forced $per_key"), $expected,
	'after VACUUM on the subscriber too');
is($sub->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing on the subscriber');

$sub->stop;
$pub->stop;
done_testing();
