
# Copyright (c) pmhash authors
#
# Out of disk while a pool grows.  A file-size limit (RLIMIT_FSIZE, set on
# the running postmaster with prlimit(1), so that only backends started
# afterwards inherit it) makes growing a pool fail as a full disk would:
# PostgreSQL ignores SIGXFSZ, so ftruncate/posix_fallocate return EFBIG.
# The statement fails with a clear ERROR, its transaction aborts, the pool
# stays consistent, nothing committed is lost, other indexes keep working,
# a CREATE INDEX that runs out leaves no pool behind, and once the limit is
# lifted (space freed) the same inserts work.
#
# Everything else a limited backend writes must stay below the limit: WAL
# segments are 1 MB (initdb --wal-segsize=1), and the heap is extended
# before the limit is set (rows inserted, deleted and vacuumed without
# truncation), so the inserts reuse its pages.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $prlimit = `command -v prlimit 2>/dev/null`;
chomp $prlimit;
plan skip_all => 'prlimit(1) not found' unless $prlimit;

# pool layout: 4 kB header + 512 kB backup log, then segments of 16640 B
sub pool_bytes { return 4096 + 2048 * 256 + $_[0] * 16640; }

my $limit = 1_150_000;		# bytes: above a WAL segment, below 49 segments

# emulated persistent memory on tmpfs when /dev/shm is there (msync on an
# ordinary file makes the inserts slow); the limit applies all the same
my $shm_dir = '';
if (-d '/dev/shm' && -w '/dev/shm')
{
	$shm_dir = "/dev/shm/pmhash-tap-013-$$";
	$ENV{PMEM_IS_PMEM_FORCE} = '1';
}
END { system('rm', '-rf', $shm_dir) if $shm_dir; }

my $node = PostgreSQL::Test::Cluster->new('diskfull');
$node->init(extra => ['--wal-segsize=1']);
$node->append_conf('postgresql.conf', "pmhash.pool_dir = '$shm_dir'\n")
  if $shm_dir;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
autovacuum = off
max_wal_size = 32MB
});
$node->start;

my $pool_dir = $shm_dir ? $shm_dir : $node->data_dir . '/pmhash';
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
sub pools { my @p = glob("$pool_dir/$dboid/*.pool"); return scalar(@p); }

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4) WITH (vacuum_truncate = off);
	INSERT INTO t SELECT generate_series(1, 60000);
	DELETE FROM t;
	VACUUM t;
	CREATE INDEX t_k ON t USING pmhash (k);
	INSERT INTO t SELECT generate_series(1, 5000);
	CREATE TABLE other (k int4);
	INSERT INTO other SELECT generate_series(1, 1000);
	CREATE INDEX other_k ON other USING pmhash (k);
	CREATE TABLE many (k int4);
	INSERT INTO many SELECT generate_series(1, 60000);
	VACUUM many;
	CHECKPOINT;
});
my $pool = $node->safe_psql('postgres', q{SELECT pool_path FROM pmhash_stats('t_k')});
cmp_ok(-s $pool, '<', $limit, 'the pool starts below the limit');
cmp_ok(-s ($node->data_dir . '/' .
		$node->safe_psql('postgres', q{SELECT pg_relation_filepath('t')})),
	'>', $limit, 'the heap was extended beyond it beforehand');

sub set_limit
{
	my ($soft) = @_;
	my $pm = $node->safe_psql('postgres',
		'SELECT pid FROM pg_stat_activity WHERE backend_type = \'checkpointer\'');
	# the postmaster is the parent of every backend
	my $ppid = `ps -o ppid= -p $pm`;
	$ppid =~ s/\s//g;
	system($prlimit, "--pid=$ppid", "--fsize=$soft:") == 0
	  or die "prlimit failed";
	return;
}

# every row of t is found through its index
sub all_found
{
	return $node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT (SELECT count(*) FROM t) = (SELECT count(*)
			FROM generate_series(1, (SELECT max(k) FROM t)) g
			JOIN t ON t.k = g)});
}

set_limit($limit);

my ($ret, $out, $err);
my $rows = 5000;
my $failed = 0;
for my $b (1 .. 30)
{
	my ($from, $to) = ($rows + 1, $rows + 2000);
	($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nINSERT INTO t SELECT generate_series($from, $to)");
	if ($ret != 0) { $failed = 1; last; }
	$rows = $to;
}
ok($failed, "an insert fails once the pool cannot grow ($rows rows fit)");
like($err, qr/ERROR:  53100: could not extend pool of pmhash index "t_k" to \d+ bytes: File too large/,
	'the error names the index and the reason, SQLSTATE disk full');
like($err, qr/HINT:  Free space in pmhash.pool_dir/, 'and hints what to do');
cmp_ok(-s $pool, '<=', $limit, 'the pool file kept its length');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows,
	'the failed statement was rolled back, nothing committed was lost');
is(all_found(), 't', 'every committed row is found through the index');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds the pool consistent');

# a transaction whose later statement runs out aborts as a whole
($ret, $out, $err) = $node->psql('postgres', qq{
	BEGIN;
	INSERT INTO t VALUES (-1);
	INSERT INTO t SELECT generate_series($rows + 1, $rows + 2000);
	COMMIT;});
like($err, qr/could not extend pool of pmhash index "t_k"/,
	'a transaction that runs out fails');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE k = -1'), '0',
	'and none of it is committed');

# other indexes keep working, inserts that fit too
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM other WHERE k = 500}), '1',
	'another pmhash index keeps working');
($ret, $out, $err) = $node->psql('postgres', 'INSERT INTO other VALUES (1001)');
is($ret, 0, 'and takes inserts that need no growth');

# a CREATE INDEX whose pool outgrows the limit leaves nothing behind
my $before = pools();
($ret, $out, $err) = $node->psql('postgres',
	'CREATE INDEX many_k ON many USING pmhash (k)');
like($err, qr/could not extend pool of pmhash index "many_k"/,
	'CREATE INDEX that runs out of space fails');
is(pools(), $before, 'and leaves no pool file behind');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class WHERE relname = 'many_k'}),
	'0', 'nor an index');

# the server never crashed (restart_after_crash is off in TAP tests)
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is up');

# space freed: the same inserts work
set_limit('unlimited');
($ret, $out, $err) = $node->psql('postgres',
	"INSERT INTO t SELECT generate_series($rows + 1, $rows + 20000)");
is($ret, 0, 'after the limit is lifted the insert works') or diag($err);
$rows += 20000;
cmp_ok(-s $pool, '>', $limit, 'the pool grew past the old limit');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows, 'all rows are there');
is(all_found(), 't', 'and found through the index');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'and the index is consistent');
($ret, $out, $err) = $node->psql('postgres',
	'CREATE INDEX many_k ON many USING pmhash (k)');
is($ret, 0, 'and so does CREATE INDEX');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM many WHERE k = 31337}), '1', 'which finds its rows');

done_testing();
