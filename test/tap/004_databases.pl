
# Copyright (c) pmhash authors
#
# Pools per database: DROP DATABASE removes a database's pools; CREATE
# DATABASE ... TEMPLATE copies them, and the copy is an independent,
# working index in the new database; a copy that fails leaves nothing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dbs');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$node->start;

my $pool_dir = $node->data_dir . '/pmhash';

$node->safe_psql('postgres', 'CREATE DATABASE d1');
$node->safe_psql('d1', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 10000);
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE INDEX t_k2 ON t USING pmhash ((k + 1));
});
my $d1 = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'd1'});
my @pools = glob("$pool_dir/$d1/*.pool");
is(scalar(@pools), 2, 'two pools in the database directory');

# a new database from d1 as template gets copies of both pools
$node->safe_psql('postgres', 'CREATE DATABASE d2 TEMPLATE d1');
my $d2 = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'd2'});
@pools = glob("$pool_dir/$d2/*.pool");
is(scalar(@pools), 2, 'the copy has its own two pools');
is($node->safe_psql('d2', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '1', 'copied index answers');
$node->safe_psql('d2', q{INSERT INTO t VALUES (77)});
is($node->safe_psql('d2', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '2', 'copied index takes inserts');
is($node->safe_psql('d1', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 77}), '1', 'the template is unaffected');
is($node->safe_psql('d2', q{SELECT count(*) FROM pmhash_check('t_k')}), '0',
	'copied index is consistent');

# a CREATE DATABASE whose pool copy fails (a template pool it cannot
# read) leaves no database directory and no pool directory behind, with
# either strategy: not on the primary, not on a standby that replays the
# WAL, not after a crash recovery of the primary
sub listing
{
	my ($n) = @_;
	my $pd = $n->data_dir . '/pmhash';
	my @l = map { s{^.*/}{}r } (glob($n->data_dir . '/base/*'), glob("$pd/*"));
	return join(' ', sort @l);
}
$node->backup('b004');
my $standby = PostgreSQL::Test::Cluster->new('dbs_standby');
$standby->init_from_backup($node, 'b004', has_streaming => 1);
$standby->start;
my ($unreadable) = glob("$pool_dir/$d1/*.pool");
chmod(0000, $unreadable) or die "chmod $unreadable: $!";
foreach my $strategy ('wal_log', 'file_copy')
{
	my $before = listing($node);
	my ($ret, $out, $err) = $node->psql('postgres',
		"CREATE DATABASE d_fail TEMPLATE d1 STRATEGY $strategy");
	isnt($ret, 0, "$strategy: CREATE DATABASE fails when a pool cannot be copied");
	like($err, qr/could not open pool file ".*" of the template database/,
		"$strategy: and says which pool file");
	is(listing($node), $before,
		"$strategy: and leaves no database or pool directory behind");
	is($node->safe_psql('postgres',
			q{SELECT count(*) FROM pg_database WHERE datname = 'd_fail'}),
		'0', "$strategy: and no database");
}
chmod(0600, $unreadable) or die "chmod $unreadable: $!";
$node->wait_for_catchup($standby);
my $base_dirs = sub {
	my ($n) = @_;
	return join(' ', sort grep { /^\d+$/ }
		  map { s{^.*/}{}r } glob($n->data_dir . '/base/*'));
};
is($base_dirs->($standby), $base_dirs->($node),
	'the standby has no directory of the failed databases either');
$standby->stop;
my $after = listing($node);
$node->stop('immediate');
$node->start;
is(listing($node), $after,
	'nor has the primary after a crash recovery');

# DROP DATABASE removes the pools
$node->safe_psql('postgres', 'DROP DATABASE d2');
ok(!-e "$pool_dir/$d2", 'DROP DATABASE removed the pool directory');
$node->safe_psql('postgres', 'DROP DATABASE d1 WITH (FORCE)');
ok(!-e "$pool_dir/$d1", 'DROP DATABASE WITH (FORCE) removed the pool directory');

# a failed DROP DATABASE (someone connected) keeps the pools
$node->safe_psql('postgres', 'CREATE DATABASE d3');
$node->safe_psql('d3', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 100);
	CREATE INDEX t_k ON t USING pmhash (k);
});
my $d3 = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'd3'});
my $bg = $node->background_psql('d3');
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE d3');
isnt($ret, 0, 'DROP DATABASE with a session connected fails');
ok(-e "$pool_dir/$d3", 'and leaves the pools in place');
$bg->quit;
is($node->safe_psql('d3', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 7}), '1', 'the index still works');

# pool files and directories are private to the server's user
my $mode = (stat("$pool_dir/$d3"))[2] & 07777;
is(sprintf('%o', $mode), '700', 'database pool directory is 0700');
my ($pool) = glob("$pool_dir/$d3/*.pool");
$mode = (stat($pool))[2] & 07777;
is(sprintf('%o', $mode), '600', 'pool file is 0600');

$node->stop;
done_testing();
