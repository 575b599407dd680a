
# Copyright (c) pmhash authors
#
# pmhash.pool_dir in bad shape: a missing parent, a regular file, a
# directory the server cannot write -- the server refuses to start, saying
# why; a pool directory pmhash creates is 0700 and its pool files 0600; the
# configured directory may be a symlink to a directory (like pg_wal), but a
# symlink planted in place of a database's pool directory is refused, as is
# a database directory the server cannot write: a clear ERROR at CREATE
# INDEX, nothing created, and everything works again once it is fixed; a
# second cluster pointed at the same pool directory refuses to start.

use strict;
use warnings;

use File::Path qw(make_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'permission tests need a non-root user' if $> == 0;

my $base = PostgreSQL::Test::Utils::tempdir();

my $node = PostgreSQL::Test::Cluster->new('pooldir');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");

# try to start with pool_dir set to $dir; returns (started, new log text)
sub try_start
{
	my ($dir) = @_;
	$node->append_conf('postgresql.conf', "pmhash.pool_dir = '$dir'\n");
	my $offset = -s $node->logfile;
	my $started = $node->start(fail_ok => 1);
	my $log = slurp_file($node->logfile);
	return ($started, substr($log, $offset));
}

my ($started, $log);

($started, $log) = try_start("$base/missing/pools");
ok(!$started, 'a pool_dir whose parent is missing: the server does not start');
like($log, qr/FATAL:  could not create pmhash pool directory "[^"]*missing\/pools": No such file or directory/,
	'and says why');

open(my $fh, '>', "$base/file") or die;
close($fh);
($started, $log) = try_start("$base/file");
ok(!$started, 'a pool_dir that is a regular file: the server does not start');
like($log, qr/FATAL:  pmhash pool directory "[^"]*file" is not a directory/,
	'and says why');
like($log, qr/HINT:  Set pmhash.pool_dir to a directory/, 'and what to do');

mkdir("$base/readonly") or die;
chmod(0500, "$base/readonly") or die;
($started, $log) = try_start("$base/readonly");
ok(!$started, 'a pool_dir the server cannot write: the server does not start');
like($log, qr/FATAL:  pmhash pool directory "[^"]*readonly" is not writable: Permission denied/,
	'and says why');

# created by pmhash: 0700, pool files 0600
mkdir("$base/fresh") or die;
($started, $log) = try_start("$base/fresh/pools");
ok($started, 'a missing pool_dir whose parent exists is created');
is(sprintf('%o', (stat("$base/fresh/pools"))[2] & 07777), '700',
	'the created pool directory is 0700');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 100);
	CREATE INDEX t_k ON t USING pmhash (k);
});
my $pool = $node->safe_psql('postgres', q{SELECT pool_path FROM pmhash_stats('t_k')});
like($pool, qr{^\Q$base\E/fresh/pools/\d+/0_\d+\.pool$}, 'the pool is in pool_dir');
is(sprintf('%o', (stat($pool))[2] & 07777), '600', 'and is 0600');
$node->stop;

# pool_dir may be a symlink to a directory
mkdir("$base/target") or die;
symlink("$base/target", "$base/link") or die;
($started, $log) = try_start("$base/link");
ok($started, 'a pool_dir that is a symlink to a directory is accepted');
$node->safe_psql('postgres', q{
	CREATE TABLE u (k int4);
	INSERT INTO u SELECT generate_series(1, 100);
	CREATE INDEX u_k ON u USING pmhash (k);
});
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
my @pools = glob("$base/target/$dboid/*.pool");
is(scalar(@pools), 1, 'and its pools land in the target');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = 42}), '1', 'where the index finds them');

# a symlink planted in place of a database's pool directory is refused
$node->safe_psql('postgres', 'CREATE DATABASE other');
my $otheroid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'other'});
mkdir("$base/victim") or die;
symlink("$base/victim", "$base/target/$otheroid") or die;
my ($ret, $out, $err) = $node->psql('other', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE v (k int4);
	CREATE INDEX v_k ON v USING pmhash (k)});
like($err, qr/ERROR:  pmhash pool directory "[^"]*\/$otheroid" is not a directory/,
	'a symlink planted as a database pool directory is refused');
my @victim = glob("$base/victim/*");
is(scalar(@victim), 0, 'and nothing is written where it points');
is($node->safe_psql('other', q{SELECT count(*) FROM pg_class WHERE relname = 'v_k'}),
	'0', 'and no index was created');
unlink("$base/target/$otheroid") or die;
($ret, $out, $err) = $node->psql('other', 'CREATE INDEX v_k ON v USING pmhash (k)');
is($ret, 0, 'once it is removed CREATE INDEX works');
ok(-d "$base/target/$otheroid" && !-l "$base/target/$otheroid",
	'in a real directory pmhash made');

# a database pool directory the server cannot write
chmod(0500, "$base/target/$otheroid") or die;
($ret, $out, $err) = $node->psql('other', 'CREATE INDEX v_k2 ON v USING pmhash (k)');
like($err, qr/ERROR:  could not create pool file "[^"]*" for pmhash index "v_k2": Permission denied/,
	'an unwritable database pool directory: CREATE INDEX fails, naming file and index');
is($node->safe_psql('other', q{SELECT count(*) FROM pg_class WHERE relname = 'v_k2'}),
	'0', 'and no index was created');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = 42}), '1', 'other databases keep working');
chmod(0700, "$base/target/$otheroid") or die;
($ret, $out, $err) = $node->psql('other', 'CREATE INDEX v_k2 ON v USING pmhash (k)');
is($ret, 0, 'once it is writable again CREATE INDEX works');

$node->stop;

# a pool directory belongs to one cluster: a second cluster pointed at this
# one's refuses to start, saying why, and takes nothing over; once the
# owner file is gone (its cluster gone for good), it may claim it
my $node2 = PostgreSQL::Test::Cluster->new('pooldir2');
$node2->init;
$node2->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pmhash'\npmhash.pool_dir = '$base/link'\n");
ok(!$node2->start(fail_ok => 1),
	'a second cluster on the same pool directory does not start');
$log = slurp_file($node2->logfile);
like($log, qr/FATAL:  pmhash pool directory "[^"]*" belongs to another cluster/,
	'saying that it belongs to another cluster');
like($log, qr/DETAIL:  Its owner file names the data directory "[^"]*pooldir_data[^"]*"/,
	'naming that cluster');
like($log, qr/HINT:  Give each cluster its own pmhash.pool_dir/, 'and what to do');
$node->start;
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = 42}), '1', 'the first cluster keeps its pools');
$node->stop;
unlink("$base/target/PMHASH_OWNER") or die;
ok($node2->start(fail_ok => 1), 'without the owner file the second cluster starts');
$node2->stop;
ok(!$node->start(fail_ok => 1), 'and then the first one refuses it');

done_testing();
