
# Copyright (c) pmhash authors
#
# Segments load lazily after a restart: the first use of an index reads
# only the segment words and the backup log; a lookup loads the one
# segment it needs, inserts and VACUUM load theirs, pmhash_stats and
# pmhash_check load the rest.  Whatever the mix, every key gives through
# the index exactly the rows a sequential scan gives, across clean
# restarts and crashes with part of the index loaded, and pmhash_check
# finds nothing.  pmhash.prewarm = off, so that nothing loads behind the
# test's back; the last part turns it on and waits for the worker.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lazy');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
pmhash.prewarm = off
restart_after_crash = on
# (an autovacuum's index cleanup loads every segment: the counts of what
# a lookup loads would then depend on when it ran)
autovacuum = off
});
$node->start;

# 60000 rows of 20000 keys, built; then 6000 more rows in small
# transactions, so that entries wait in the backup log and in D-buckets
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int8, v int);
	INSERT INTO t SELECT g % 20000, g FROM generate_series(1, 60000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
});
sub insert_batches
{
	my ($from, $n, $per) = @_;
	my $sql = '';
	for (my $i = $from; $i < $from + $n; $i += $per)
	{
		my $hi = $i + $per - 1;
		$sql .= "INSERT INTO t SELECT g % 20000, g FROM generate_series($i, $hi) g;\n";
	}
	$node->safe_psql('postgres', $sql);
}
insert_batches(100001, 6000, 100);

# keys whose rows through the index differ from a sequential scan's
sub mismatches
{
	return $node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		CREATE TEMP TABLE via_heap AS SELECT k, count(*) AS n FROM t GROUP BY k;
		RESET enable_indexscan; SET enable_seqscan = off;
		CREATE TEMP TABLE via_index AS
		SELECT k, (SELECT count(*) FROM t WHERE t.k = keys.k) AS n
		  FROM generate_series(-5, 20004) AS keys(k);
		SELECT count(*) FROM via_index i LEFT JOIN via_heap h USING (k)
		 WHERE i.n <> coalesce(h.n, 0);
	});
}

# "all" when every segment is loaded and the log sorted out
sub all_loaded
{
	return $node->safe_psql('postgres', q{
		SELECT CASE WHEN segments = segments_loaded AND log_entries_unsorted = 0
			THEN 'all' ELSE segments_loaded || '/' || segments END
		  FROM pmhash_load_progress('t_k')});
}

# progress as "loaded/segments unsorted"
sub progress
{
	return $node->safe_psql('postgres', q{
		SELECT segments_loaded || '/' || segments || ' ' || log_entries_unsorted
		  FROM pmhash_load_progress('t_k')});
}

sub probe
{
	my ($key) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE k = $key});
}

my $segments = $node->safe_psql('postgres',
	q{SELECT segments FROM pmhash_load_progress('t_k')});
cmp_ok($segments, '>', 4, "the index has $segments primary segments");

# 1. a clean restart: nothing loaded but the words; the log is sorted
$node->restart;
my ($loaded, $total, $unsorted) = progress() =~ m{^(\d+)/(\d+) (\d+)$};
is("$loaded/$total", "0/$segments", 'after a restart no segment is loaded');
cmp_ok($unsorted, '>', 0, "backup-log entries wait for their segments ($unsorted)");
is(probe(42), '4', 'a lookup answers');
($loaded) = progress() =~ m{^(\d+)/};
is($loaded, '1', 'the lookup loaded exactly one segment');
is(probe(42), '4', 'and again, from the loaded segment');

# 2. inserts, deletes and VACUUM with part of the index loaded
$node->safe_psql('postgres',
	'INSERT INTO t SELECT 42, g FROM generate_series(250001, 250020) g');
($loaded) = progress() =~ m{^(\d+)/};
is($loaded, '1', 'inserts into the loaded segment load nothing more');
is(probe(42), '24', 'and are found');
insert_batches(200001, 3000, 50);
$node->safe_psql('postgres', 'DELETE FROM t WHERE v % 7 = 0');
$node->safe_psql('postgres', 'VACUUM t');
is(all_loaded(), 'all', 'VACUUM loaded every segment');
is(mismatches(), '0', 'index and heap agree after inserts, deletes, VACUUM');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing');

# 3. a crash with a few segments loaded and D-buckets refilled; then
#    VACUUM first thing after the restart, with nothing loaded
$node->restart;
probe($_) for (1, 2, 3);
insert_batches(300001, 2000, 40);
$node->safe_psql('postgres', 'DELETE FROM t WHERE v % 11 = 0');
$node->stop('immediate');
$node->start;
($loaded) = progress() =~ m{^(\d+)/};
is($loaded, '0', 'after the crash nothing is loaded');
$node->safe_psql('postgres', 'VACUUM t');
is(mismatches(), '0', 'index and heap agree after crash and VACUUM');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing');

# 4. pmhash_check itself loads, with the index lock exclusive (the
#    D-bucket entries are placed as inserts are)
insert_batches(400001, 2000, 40);
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check right after a crash loads and finds nothing');
is(all_loaded(), 'all', 'and has loaded everything');
is(mismatches(), '0', 'index and heap agree');

# 5. pmhash_stats counts every entry, loading what is not loaded
$node->restart;
probe(7);
is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('t_k')}),
	$node->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'pmhash_stats counts every entry');

# 6. concurrent sessions loading the same segments: a pgbench of lookups
#    and inserts right after a crash
insert_batches(500001, 1000, 40);
$node->stop('immediate');
$node->start;
my $script = $node->basedir . '/mix.sql';
open my $fh, '>', $script or die $!;
print $fh q{\set k random(0, 19999)
SET enable_seqscan = off;
SELECT count(*) FROM t WHERE k = :k;
INSERT INTO t VALUES (:k, -1);
};
close $fh;
$node->command_ok(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', '300', '-f', $script,
		'postgres' ],
	'pgbench lookups and inserts right after a crash');
is(mismatches(), '0', 'index and heap agree after concurrent loading');

# 7. with prewarm on, the worker loads everything in the background
$node->append_conf('postgresql.conf', 'pmhash.prewarm = on');
my $off = -s $node->logfile;
$node->restart;
$node->wait_for_log(qr/pmhash prewarm: database \d+: 1 index\(es\) loaded, 0 not/, $off);
is(all_loaded(), 'all', 'the prewarm worker loaded every segment');
is(mismatches(), '0', 'index and heap agree after prewarm');

$node->stop;
done_testing();
