
# Copyright (c) pmhash authors
#
# The prewarm background worker: after a start, and again after a crash
# reinitialisation, it loads every pmhash index of every database with
# pools (one worker per database); an index whose pool is broken is
# reported with a WARNING naming it and skipped, the others load, and the
# server keeps working; pmhash.prewarm = off starts no worker.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use PmhashCrash;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('prewarm');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
restart_after_crash = on
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT g % 5000 FROM generate_series(1, 30000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE TABLE s (k text);
	INSERT INTO s SELECT 'key' || g FROM generate_series(1, 2000) g;
	CREATE INDEX s_k ON s USING pmhash (k);
});
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE o (k int8);
	INSERT INTO o SELECT generate_series(1, 1000);
	CREATE INDEX o_k ON o USING pmhash (k);
});
# a database without pmhash: no pool directory, no worker
$node->safe_psql('postgres', 'CREATE DATABASE plain');

my $dbpg = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
my $dbother = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'other'});
my $dbplain = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'plain'});

# the answer of a key through the index
sub probe
{
	my ($db, $q) = @_;
	return $node->safe_psql($db, qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off; $q});
}

# wait for one worker's summary line of database $oid after log offset $off
sub wait_prewarm
{
	my ($oid, $off, $label) = @_;
	my $re = qr/pmhash prewarm: database $oid: (\d+) index\(es\) loaded, (\d+) not/;
	$node->wait_for_log($re, $off);
	my ($loaded, $failed) = slurp_file($node->logfile, $off) =~ $re;
	return ($loaded, $failed);
}

# 1. a clean restart loads both databases' indexes
my $off = -s $node->logfile;
$node->restart;
my ($l, $f) = wait_prewarm($dbpg, $off);
is("$l/$f", '2/0', 'restart: both indexes of postgres loaded');
($l, $f) = wait_prewarm($dbother, $off);
is("$l/$f", '1/0', 'restart: the index of other loaded');
unlike(slurp_file($node->logfile, $off), qr/pmhash prewarm: database $dbplain:/,
	'no worker for a database without pools');
is(probe('postgres', 'SELECT count(*) FROM t WHERE k = 42'), '6', 'answers after prewarm');
is(probe('other', 'SELECT count(*) FROM o WHERE k = 42'), '1', 'answers in the other database');
# the idle launcher absorbs the barrier DROP DATABASE waits for
$node->safe_psql('postgres', 'DROP DATABASE plain');
pass('DROP DATABASE does not wait for the idle launcher');

# 2. a crashed backend: shared memory is reinitialised and the launcher
# runs again
$off = -s $node->logfile;
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $victim = $bg->query_safe('SELECT pg_backend_pid()');
kill_backend($node, $victim);
eval { $bg->quit; };
($l, $f) = wait_prewarm($dbpg, $off);
is("$l/$f", '2/0', 'after a crash reinitialisation: loaded again');
is(probe('postgres', q{SELECT count(*) FROM s WHERE k = 'key77'}), '1',
	'answers after the crash');

# 3. a broken pool: a WARNING naming the index, the other index loads, the
# server keeps working, and the planner avoids the broken index until REINDEX
my $path = $node->safe_psql('postgres', q{SELECT pool_path FROM pmhash_stats('s_k')});
$path = $node->data_dir . "/$path" unless $path =~ m{^/};
$node->stop;
open(my $fh, '+<', $path) or die "open $path: $!";
binmode $fh;
print $fh "\0" x 64;    # the header's magic and checksum
close $fh;
$off = -s $node->logfile;
$node->start;
($l, $f) = wait_prewarm($dbpg, $off);
is("$l/$f", '1/1', 'broken pool: one loaded, one not');
like(slurp_file($node->logfile, $off), qr/WARNING:.*pmhash prewarm:.*"s_k"/,
	'broken pool: WARNING names the index');
is(probe('postgres', 'SELECT count(*) FROM t WHERE k = 7'), '6', 'the other index works');
# the failed load told the planner: it avoids the index, and answers
like($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	EXPLAIN (COSTS OFF) SELECT count(*) FROM s WHERE k = 'key1'}),
	qr/Seq Scan/, 'the planner avoids the index that failed to load');
is(probe('postgres', q{SELECT count(*) FROM s WHERE k = 'key1'}), '1',
	'and the query answers without it');
$node->safe_psql('postgres', 'REINDEX INDEX s_k');
is(probe('postgres', q{SELECT count(*) FROM s WHERE k = 'key1'}), '1', 'REINDEX repairs it');

# 4. pmhash.prewarm = off: no worker
$node->append_conf('postgresql.conf', 'pmhash.prewarm = off');
$off = -s $node->logfile;
$node->restart;
is(probe('postgres', 'SELECT count(*) FROM t WHERE k = 42'), '6', 'prewarm off: lazy load answers');
unlike(slurp_file($node->logfile, $off), qr/pmhash prewarm/, 'prewarm off: no worker ran');

$node->stop;
done_testing();
