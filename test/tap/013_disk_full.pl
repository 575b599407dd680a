
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

# every row of t is found through its index (on $node, or the node given)
sub all_found
{
	my ($n) = @_;
	$n //= $node;
	return $n->safe_psql('postgres', q{
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

# space freed (a new postmaster has no limit); after the restart the first
# user is a plain query (index lock shared), and rebuilding the index needs
# splits: the entries of the failed insert wait in the backup log again
set_limit('unlimited');
$node->restart;
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 4242}), '1',
	'after a restart a query loads the index');
is($node->safe_psql('postgres', q{SELECT string_agg(p, E'\n') FROM pmhash_check('t_k') p}),
	'', 'and the rebuilt state is consistent');
is(all_found(), 't', 'every committed row is found through the index');
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
$node->stop;

# A really full file system (ENOSPC: the file gets its new length, the
# blocks cannot be reserved, the length is set back), when the harness
# provides a small one: test/run_tests.sh mounts an 8 MB tmpfs when it
# runs as root and may mount, and passes it in PMHASH_TEST_SMALL_FS.
SKIP:
{
	my $fs = $ENV{PMHASH_TEST_SMALL_FS} // '';
	skip 'no small file system (PMHASH_TEST_SMALL_FS)', 18
	  unless $fs && -d $fs && -w $fs;

	my $dir = "$fs/pools-$$";
	my $filler = "$fs/filler-$$";
	my $full = PostgreSQL::Test::Cluster->new('fullfs');
	$full->init;
	$full->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
pmhash.pool_dir = '$dir'
autovacuum = off
});
	$full->start;
	$full->safe_psql('postgres', q{
		CREATE EXTENSION pmhash;
		CREATE TABLE t (k int4);
		INSERT INTO t SELECT generate_series(1, 5000);
		CREATE INDEX t_k ON t USING pmhash (k);
		CREATE TABLE many (k int4);
		INSERT INTO many SELECT generate_series(1, 60000);
	});
	my $pool = $full->safe_psql('postgres', q{SELECT pool_path FROM pmhash_stats('t_k')});

	# fill the file system up to the last 64 kB: less than any growth
	my $avail = `df -B1 --output=avail '$fs' | tail -1`;
	$avail =~ s/\s//g;
	open(my $fh, '>', $filler) or die "$filler: $!";
	binmode $fh;
	my $left = $avail - 65536;
	my $chunk = "\0" x 65536;
	while ($left > 0)
	{
		my $n = $left < 65536 ? $left : 65536;
		print $fh substr($chunk, 0, $n) or die "filling $filler: $!";
		$left -= $n;
	}
	close($fh) or die "filling $filler: $!";

	my $rows = 5000;
	my $size = -s $pool;
	my ($ret, $out, $err) = (0, '', '');
	for my $b (1 .. 30)
	{
		$size = -s $pool;
		($ret, $out, $err) = $full->psql('postgres',
			"\\set VERBOSITY verbose\nINSERT INTO t SELECT generate_series($rows + 1, $rows + 2000)");
		last if $ret != 0;
		$rows += 2000;
	}
	isnt($ret, 0, "full file system: an insert fails ($rows rows fit)");
	like($err, qr/ERROR:  53100: could not extend pool of pmhash index "t_k" to \d+ bytes: No space left on device/,
		'full file system: the error names the index and the reason');
	is(-s $pool, $size, 'full file system: the pool file was set back to its length');
	is($full->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows,
		'full file system: nothing committed was lost, the failed insert is gone');
	is(all_found($full), 't', 'full file system: every committed row is found through the index');
	is($full->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
		'0', 'full file system: the pool is consistent');

	# CREATE INDEX cannot create its pool, or not grow it to the table's
	# size (an empty pool takes 40 kB of disk)
	my @before = glob("$dir/*/*.pool");
	($ret, $out, $err) = $full->psql('postgres',
		'CREATE INDEX many_k ON many USING pmhash (k)');
	like($err, qr/ERROR:  could not (allocate pool file "[^"]*" for|extend pool of) pmhash index "many_k".*: No space left on device/,
		'full file system: CREATE INDEX fails, naming the index and the reason');
	my @after = glob("$dir/*/*.pool");
	is(scalar(@after), scalar(@before), 'full file system: and leaves no pool behind');
	is($full->safe_psql('postgres', q{SELECT count(*) FROM pg_class WHERE relname = 'many_k'}),
		'0', 'full file system: nor an index');
	is($full->safe_psql('postgres', 'SELECT 1'), '1', 'full file system: the server is up');

	# After a restart the index is rebuilt from its pool, and the entries
	# that wait in the backup log go back into D-buckets: those of the
	# failed insert too (flushed lines of an aborted transaction stay until
	# VACUUM), so the rebuild may need to split and grow.  Either it fits,
	# or the first use of the segment that needs it (here pmhash_check,
	# which loads every segment) fails with the same clear error; nothing
	# is lost.
	$full->restart;
	($ret, $out, $err) = $full->psql('postgres',
		q{SELECT count(*) FROM pmhash_check('t_k')});
	ok(($ret == 0 && $out eq '0') ||
		$err =~ /ERROR:  could not extend pool of pmhash index "t_k".*No space left on device(.*\n)*CONTEXT:  loading (pool file|segment \d+ of pool file)/,
		'full file system: after a restart the index loads, or says it needs space')
	  or diag("ret $ret out '$out' err '$err'");
	is($full->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows,
		'full file system: and the table is intact');

	# space freed
	unlink($filler) or die;
	($ret, $out, $err) = $full->psql('postgres',
		"INSERT INTO t SELECT generate_series($rows + 1, $rows + 20000)");
	is($ret, 0, 'space freed: the insert works') or diag($err);
	$rows += 20000;
	cmp_ok(-s $pool, '>', $size, 'space freed: the pool grew');
	is(all_found($full), 't', 'space freed: every row is found through the index');
	is($full->safe_psql('postgres', q{SELECT string_agg(p, E'\n') FROM pmhash_check('t_k') p}),
		'', 'space freed: the pool is consistent');
	($ret, $out, $err) = $full->psql('postgres',
		'CREATE INDEX many_k ON many USING pmhash (k)');
	is($ret, 0, 'space freed: CREATE INDEX works') or diag($err);
	is($full->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM many WHERE k = 31337}), '1',
		'space freed: and the new index finds its rows');
	$full->stop;
	system('rm', '-rf', $dir);
}

done_testing();
