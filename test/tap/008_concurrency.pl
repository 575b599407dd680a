
# Copyright (c) pmhash authors
#
# Concurrent backends: inserts (splits, overflow chains), deletes, scans
# and VACUUM at once through pgbench, then every key's rows through the
# index equal those of a sequential scan and pmhash_check finds nothing.
# Bounded by transaction counts, never by time.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('conc');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
autovacuum = off
max_connections = 30
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE c (id bigserial, k int8);
	CREATE INDEX c_k ON c USING pmhash (k);
	INSERT INTO c (k) SELECT g % 2000 FROM generate_series(1, 5000) g;
});

$node->pgbench(
	'--no-vacuum --client=6 --jobs=2 --transactions=400',
	0,
	[qr{processed: 2400/2400}],
	[qr{^$}],
	'concurrent inserts, deletes, scans and vacuum',
	{
		'pmhash_insert@8' => q{
\set k random(1, 3000)
INSERT INTO c (k) SELECT :k + g FROM generate_series(0, 19) g;
INSERT INTO c (k) VALUES (7), (7);
},
		'pmhash_select@6' => q{
\set k random(1, 3000)
SET enable_seqscan = off;
SELECT count(*) FROM c WHERE k = :k;
},
		'pmhash_delete@2' => q{
\set k random(1, 3000)
DELETE FROM c WHERE k = :k;
},
		# no heap truncation: it waits up to 5 s for a lock that the
		# VACUUMs queued behind it conflict with, and a convoy of them can
		# stretch this test to minutes (002 tests truncation)
		'pmhash_vacuum@1' => q{
VACUUM (TRUNCATE false) c;
},
	});

my $via_index = $node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SET enable_hashjoin = off; SET enable_mergejoin = off;
	SELECT count(*), sum(id) FROM generate_series(0, 3100) p JOIN c ON c.k = p});
my $via_seq = $node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*), sum(id) FROM c WHERE k BETWEEN 0 AND 3100});
is($via_index, $via_seq, 'index answers equal seqscan answers after the run');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('c_k')}),
	'0', 'pmhash_check finds nothing');
# INDEX_CLEANUP ON: with few dead rows left, VACUUM's default (AUTO) may
# skip the index pass altogether (PostgreSQL 14's bypass), and the dead
# rows' entries would stay counted
$node->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) c');
is($node->safe_psql('postgres',
	q{SELECT entries = (SELECT count(*) FROM c) FROM pmhash_stats('c_k')}),
	't', 'after VACUUM the entry count is exact');
is($node->safe_psql('postgres', q{SELECT segments > 1 FROM pmhash_stats('c_k')}),
	't', 'the run split segments');

$node->stop;
done_testing();
