
# Copyright (c) pmhash authors
#
# A segment load that cannot finish.  After a restart, the backup-log
# entries a segment lacks go into its D-bucket; when more are missing than
# a D-bucket holds (here: the entries of an insert that failed on a full
# file system, which stay in the log until VACUUM), they are placed as
# inserts are, which can split the segment and grow the pool -- and fail
# again while the file cannot grow.  Then the index stays "blocked" on that
# segment: every use of it finishes the load first and fails the same way,
# with an error naming the index, the segment and the pool file; no
# backend crashes, nothing is lost, and once the file can grow everything
# works and agrees with the heap.  The file-size limit (prlimit on the
# running postmaster, inherited by new backends) stands in for a full disk,
# as in TAP 013.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $prlimit = `command -v prlimit 2>/dev/null`;
chomp $prlimit;
plan skip_all => 'prlimit(1) not found' unless $prlimit;

my $limit = 1_150_000;
my $shm_dir = "/dev/shm/pmhash-tap-022-$$";
$ENV{PMEM_IS_PMEM_FORCE} = '1';
END { system('rm', '-rf', $shm_dir) if $shm_dir; }

my $node = PostgreSQL::Test::Cluster->new('blocked');
$node->init(extra => ['--wal-segsize=1']);
$node->append_conf('postgresql.conf', qq{
pmhash.pool_dir = '$shm_dir'
shared_preload_libraries = 'pmhash'
autovacuum = off
pmhash.prewarm = off
max_wal_size = 32MB
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4) WITH (vacuum_truncate = off);
	INSERT INTO t SELECT generate_series(1, 60000);
	DELETE FROM t;
	VACUUM t;
	CREATE INDEX t_k ON t USING pmhash (k);
	INSERT INTO t SELECT generate_series(1, 5000);
	CHECKPOINT;
});

# the file-size limit of the postmaster (new backends inherit it)
sub set_limit
{
	my ($soft) = @_;
	my $pm = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
	my $ppid = `ps -o ppid= -p $pm`;
	$ppid =~ s/\s//g;
	system($prlimit, "--pid=$ppid", "--fsize=$soft:") == 0
	  or die "prlimit failed";
}

set_limit($limit);
my ($ret, $out, $err);
my $rows = 5000;
for my $b (1 .. 30)
{
	($ret, $out, $err) = $node->psql('postgres',
		"INSERT INTO t SELECT generate_series($rows + 1, $rows + 2000)");
	last if $ret != 0;
	$rows += 2000;
}
like($err, qr/could not extend pool of pmhash index "t_k"/,
	"inserts fill the pool up to the limit ($rows rows)");

$node->restart;
# leave another index's metadata behind in the shared memory the next
# loads get (it is not zeroed): a read of metadata never written would
# show it
$node->safe_psql('postgres', q{
	CREATE TABLE t2 (k int4);
	INSERT INTO t2 SELECT g % 7 FROM generate_series(1, 300000) g;
	CREATE INDEX t2_k ON t2 USING pmhash (k);
	SELECT count(*) FROM pmhash_check('t2_k');
	DROP TABLE t2;
});
set_limit($limit);
is($node->safe_psql('postgres',
		q{SELECT segments_loaded FROM pmhash_load_progress('t_k')}),
	'0', 'after the restart nothing is loaded');

# look up every key (from the last, so that the blocked segment is not
# the first one not loaded) until one needs the load that cannot finish
($ret, $out, $err) = $node->psql('postgres', qq{
SET enable_seqscan = off; SET enable_bitmapscan = off;
DO \$\$ DECLARE i int; n int; BEGIN
 FOR i IN REVERSE $rows..1 LOOP
  BEGIN
   SELECT count(*) INTO n FROM t WHERE k = i;
   IF n <> 1 THEN RAISE NOTICE 'wrong % %', i, n; END IF;
  EXCEPTION WHEN others THEN RAISE NOTICE 'badkey % %', i, SQLERRM; RETURN;
  END;
 END LOOP; END \$\$;});
my ($bad) = $err =~ /badkey (\d+)/;
ok(defined $bad, 'a lookup fails in a segment load that cannot grow the pool')
  or diag($err);
$bad //= 1;
unlike($err, qr/wrong/, 'the lookups before it answered right');
like($err, qr/could not extend pool of pmhash index "t_k"/,
	'with the error of a full file system');

# while the load cannot finish, every use of the index fails the same way
my $off = -s $node->logfile;
($ret, $out, $err) = $node->psql('postgres', "INSERT INTO t VALUES ($bad)");
like($err, qr/could not extend pool of pmhash index "t_k".*\n(.*\n)*CONTEXT:  loading segment \d+ of pool file ".*" of pmhash index "t_k"/,
	'an insert fails too, naming the segment, the pool file and the index');
($ret, $out, $err) = $node->psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 1});
like($err, qr/could not extend pool of pmhash index "t_k"/,
	'and a lookup of another key');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows,
	'the table is intact');
unlike(slurp_file($node->logfile, $off), qr/terminated by signal|PANIC/,
	'no backend crashed');

# room again: the load finishes -- first in pmhash_check, which holds
# the index lock exclusively and loads every other segment too -- and
# index and heap agree
set_limit('unlimited');
is($node->safe_psql('postgres', q{SELECT string_agg(c, E'\n') FROM pmhash_check('t_k') c}),
	'', 'pmhash_check, the first user after the block, finds nothing');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 1}), '1', 'with room, the index answers');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM generate_series(1, } . $rows . q{) g
	 WHERE (SELECT count(*) FROM t WHERE k = g) <> 1}), '0',
	'every key is found exactly once');
is($node->safe_psql('postgres', q{
	SELECT segments = segments_loaded AND log_entries_unsorted = 0
	  FROM pmhash_load_progress('t_k')}), 't', 'everything is loaded');

$node->stop;
done_testing();
