
# Copyright (c) pmhash authors
#
# The backup log grows with the table: an index with more primary segments
# than the fixed log has lines (about 1.4 million entries) gets log
# segments, whose lines are used like the fixed ones, survive a crash with
# entries still pending in them, and are checked by pmhash_check.
#
# Run through test/run_tests.sh (suite "tap").

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Emulated persistent memory (CPU flushes on tmpfs) when /dev/shm is there:
# with msync on an ordinary file the load alone takes a minute.
my $pool_dir = '';
if (-d '/dev/shm' && -w '/dev/shm')
{
	$pool_dir = "/dev/shm/pmhash-tap-011-$$";
	$ENV{PMEM_IS_PMEM_FORCE} = '1';
}
END { system('rm', '-rf', $pool_dir) if $pool_dir; }

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "pmhash.pool_dir = '$pool_dir'\n")
  if $pool_dir;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
shared_buffers = 256MB
max_wal_size = 2GB
synchronous_commit = off
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int8);
	CREATE INDEX t_k ON t USING pmhash (k);
});

# log segments in the pool of an index (t_k if not given): segment words
# with the overflow bit and depth 63
sub log_segments
{
	my ($index) = @_;
	$index //= 't_k';
	my $path = $node->safe_psql('postgres',
		qq{SELECT pool_path FROM pmhash_stats('$index')});
	my $size = -s $path;
	my $first = 4096 + 2048 * 256;
	my $segbytes = 256 * 65;
	my $n = 0;
	open(my $fh, '<:raw', $path) or die "$path: $!";
	for (my $off = $first; $off + $segbytes <= $size; $off += $segbytes)
	{
		seek($fh, $off, 0) or die;
		read($fh, my $buf, 8) == 8 or die;
		my $w = unpack('Q<', $buf);
		$n++ if (($w >> 62) & 1) && ((($w >> 56) & 0x3f) == 63);
	}
	close($fh);
	return $n;
}

sub agree
{
	my ($label) = @_;
	my $q = q{SELECT count(*), sum(k % 1000) FROM t JOIN
		(SELECT hashint8(g)::int8 AS k FROM generate_series(1, 2600000, 997) g
		 UNION ALL SELECT -g FROM generate_series(1, 50) g) p USING (k)};
	my $seq = $node->safe_psql('postgres',
		"SET enable_indexscan = off; SET enable_bitmapscan = off; $q");
	my $idx = $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_hashjoin = off; SET enable_mergejoin = off; $q});
	is($idx, $seq, "index agrees with seqscan: $label");
}

is(log_segments(), 0, 'a small index has the fixed log only');

# insert hashint8(1 .. 10000 * batches) into a table, in transactions of
# 10000 rows
sub load
{
	my ($table, $batches) = @_;
	$node->safe_psql('postgres', qq{
	DO \$\$
	BEGIN
		FOR i IN 0 .. $batches - 1 LOOP
			INSERT INTO $table SELECT hashint8(g)::int8
			FROM generate_series(i * 10000 + 1, (i + 1) * 10000) g;
			COMMIT;
		END LOOP;
	END \$\$;
	});
	return;
}

# 2.5 million entries
load('t', 250);
my $nlog = log_segments();
ok($nlog > 0, "the backup log grew: $nlog log segments");
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check is clean with log segments');
ok($node->safe_psql('postgres',
	q{SELECT pending_entries > 0 AND log_lines_in_use > 2048 FROM pmhash_stats('t_k')}) eq 't',
	'entries wait in lines beyond the fixed log');
agree('after the load');

# a crash with entries pending in log segments: recovery reads them back
$node->safe_psql('postgres', q{
	INSERT INTO t SELECT hashint8(g)::int8 FROM generate_series(2500001, 2600000) g});
$node->stop('immediate');
$node->start;
is(log_segments(), $nlog, 'the log segments are kept');
is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('t_k')}),
	'2600000', 'every entry is back after the crash');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'and the index is consistent');
agree('after a crash');

# VACUUM clears released copies in log segments too, then deletes
$node->safe_psql('postgres', 'DELETE FROM t WHERE k % 10 = 0; VACUUM t');
agree('after VACUUM');
$node->restart;
agree('after VACUUM and a restart');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'consistent after VACUUM and a restart');

# the log's tables grow with it (room for 4 extensions, then 8, 16, ...);
# dropping the index gives all of them back, those it grew from too
# (pmhash_free_shared logs any bytes an index leaves unaccounted for)
my $logpos = -s $node->logfile;
$node->safe_psql('postgres',
	'CREATE TABLE u (k int8); CREATE INDEX u_k ON u USING pmhash (k)');
load('u', 60);
my $ulog = log_segments('u_k');
cmp_ok($ulog, '>', 4, "the log grew past its tables' first room: $ulog log segments");
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('u_k')}),
	'0', 'consistent after its log tables grew');
$node->safe_psql('postgres', 'DROP TABLE u');
ok(!$node->log_contains('unaccounted for', $logpos),
	'DROP gives back every byte of shared memory the index held');

$node->stop;
done_testing();
