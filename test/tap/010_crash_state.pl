
# Copyright (c) pmhash authors
#
# The crash count and the pools' state line: a start after a crash (or a
# reinitialisation after a killed backend) counts a crash in PMHASH_EPOCH;
# the next open of a pool that was in use sets its stale flag for good, so
# that relocation looks for entries a lost insert left behind.  A clean
# restart counts nothing, and a new pool (REINDEX) starts clean.
#
# Run through test/run_tests.sh (suite "tap").

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use PmhashCrash;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pmhash'\nrestart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT g % 1000 FROM generate_series(1, 5000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
});

my $epoch_file = $node->data_dir . '/pmhash/PMHASH_EPOCH';

# the crash count: second number of the epoch file
sub crashes
{
	open(my $fh, '<', $epoch_file) or die "$epoch_file: $!";
	my $line = <$fh>;
	close($fh);
	my ($epoch, $crashes) = split(' ', $line);
	return $crashes // 0;
}

# the state line of an index's pool: (crash_count, flags)
sub pool_state
{
	my ($index) = @_;
	my $path = $node->safe_psql('postgres',
		"SELECT pool_path FROM pmhash_stats('$index')");
	open(my $fh, '<:raw', $path) or die "$path: $!";
	seek($fh, 2048, 0) or die;
	read($fh, my $buf, 16) == 16 or die "short read of $path";
	close($fh);
	return unpack('Q<Q<', $buf);
}

# index scans only, compared with a sequential scan
sub agree
{
	my ($label) = @_;
	my $q = 'SELECT k, count(*) FROM t WHERE k = ANY (ARRAY[0, 1, 7, 500, 999, 4242]) GROUP BY k ORDER BY k';
	my $seq = $node->safe_psql('postgres',
		"SET enable_indexscan = off; SET enable_bitmapscan = off; $q");
	my $idx = $node->safe_psql('postgres',
		"SET enable_seqscan = off; SET enable_bitmapscan = off; $q");
	is($idx, $seq, "index agrees with seqscan: $label");
}

my $c0 = crashes();
my ($count, $flags) = pool_state('t_k');
is($count, $c0, 'a new pool carries the current crash count');
is($flags, 2, 'a new pool keeps a crash count and is not stale');

$node->restart;
is(crashes(), $c0, 'a clean restart counts no crash');
($count, $flags) = pool_state('t_k');
is($flags, 2, 'the pool is still clean after a clean restart');

# a crash with the index in use
$node->safe_psql('postgres', 'INSERT INTO t SELECT g % 1000 FROM generate_series(1, 100) g');
$node->stop('immediate');
$node->start;
is(crashes(), $c0 + 1, 'a start after a crash counts it');
($count, $flags) = pool_state('t_k');
is($count, $c0 + 1, 'the open brings the pool to the new count');
is($flags, 3, 'and marks it as possibly holding entries of lost inserts');
agree('after the crash');

# a killed backend: the postmaster reinitialises, which counts too
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
kill_backend($node, $pid);
eval { $bg->quit; };
is(crashes(), $c0 + 2, 'a reinitialisation after a killed backend counts');
($count, $flags) = pool_state('t_k');
is($flags, 3, 'the stale flag stays');

# heap slots of lost inserts reused by rows with the same key: relocation
# checks the segment, so nothing is stored twice
$bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(q{BEGIN; INSERT INTO t SELECT 7 FROM generate_series(1, 400)});
$node->stop('immediate');
$bg->quit;
$node->start;
$node->safe_psql('postgres', 'INSERT INTO t SELECT 7 FROM generate_series(1, 2000)');
agree('after reusing the heap slots of lost inserts');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing stored twice');

# REINDEX makes a new pool: clean again
$node->safe_psql('postgres', 'REINDEX INDEX t_k');
($count, $flags) = pool_state('t_k');
is($flags, 2, 'a rebuilt pool is clean');
is($count, crashes(), 'and carries the current count');
agree('after REINDEX');

$node->stop;
done_testing();
