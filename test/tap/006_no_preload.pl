
# Copyright (c) pmhash authors
#
# Without shared_preload_libraries, CREATE EXTENSION pmhash fails with an
# error that says how to fix it, and the server stays up.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
# the test runner's TEMP_CONFIG preloads pmhash: undo that here
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->start;

my ($ret, $out, $err) = $node->psql('postgres', 'CREATE EXTENSION pmhash');
isnt($ret, 0, 'CREATE EXTENSION fails without shared_preload_libraries');
like($err, qr/pmhash must be loaded via shared_preload_libraries/,
	'the error says so');
like($err, qr/HINT:\s+Add pmhash to shared_preload_libraries/,
	'and hints at the fix');
($ret, $out, $err) = $node->psql('postgres', q{LOAD 'pmhash'});
isnt($ret, 0, 'LOAD fails the same way');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is fine');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_extension WHERE extname = 'pmhash'}), '0',
	'nothing was created');

# with the library preloaded it works
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$node->restart;
$node->safe_psql('postgres', 'CREATE EXTENSION pmhash');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_am WHERE amname = 'pmhash'}), '1',
	'CREATE EXTENSION works once preloaded');

$node->stop;
done_testing();
