
# Copyright (c) pmhash authors
#
# Pools rebuilt from the heap, deterministically:
#   1. a primary whose pool epoch moved on (as a start from a base backup
#      moves it) and that has no background worker slot for the rebuild:
#      the planner avoids the index before anything loaded it (even when
#      told to avoid sequential scans), pmhash_rebuild_progress() says so,
#      an exclusion constraint's check (a scan the planner does not choose)
#      is a clear ERROR, inserts and VACUUM go on into the new pool; with a
#      worker slot the pool is rebuilt and every key's ctids through the
#      index equal a seqscan's;
#      an orphan pool (no relation file) is removed at the next start, and
#      an index created while that sweep runs keeps its pool;
#   2. a standby whose redo runs out of pmhash shared memory: the replay
#      goes on (a WARNING, the server stays up), the index is avoided and
#      answers are right; with more memory after a restart the standby
#      rebuilds the pool and agrees with its sequential scan.

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $forced = 'SET enable_seqscan = off; SET enable_bitmapscan = off;';
my $seqscan = 'SET enable_indexscan = off; SET enable_bitmapscan = off;';
my $per_key = q{SELECT k, array_agg(ctid ORDER BY ctid) FROM t
	WHERE k = ANY ('{1,2,3,5,77,500,4999}') GROUP BY k ORDER BY k};

# index and sequential scan agree on every probed key
sub agree
{
	my ($node, $name) = @_;
	is($node->safe_psql('postgres', "$forced $per_key"),
		$node->safe_psql('postgres', "$seqscan $per_key"), $name);
}

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT g % 5000 FROM generate_series(1, 20000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE TABLE e (k int4, EXCLUDE USING pmhash (k WITH =));
	INSERT INTO e SELECT generate_series(1, 100);
	ANALYZE t;
});
agree($node, 'before: index and seqscan agree');

# 1. the epoch moves on, and no worker slot is left for the rebuild
$node->stop;
my $epochfile = $node->data_dir . '/pmhash/PMHASH_EPOCH';
my ($epoch, $crashes) = split(/\s+/, slurp_file($epochfile));
open(my $fh, '>', $epochfile) or die "cannot write $epochfile: $!";
print $fh ($epoch + 1) . " $crashes\n";
close($fh);
$node->append_conf('postgresql.conf', "max_worker_processes = 1\n");
$node->start;

unlike($node->safe_psql('postgres',
		'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 5'),
	qr/t_k/, 'the planner avoids a copied pool before anything loaded it');
is($node->safe_psql('postgres',
		q{SELECT rebuilding FROM pmhash_rebuild_progress('t_k')}),
	't', 'pmhash_rebuild_progress says the pool awaits a rebuild');
like($node->safe_psql('postgres',
		"$forced EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 5"),
	qr/Seq Scan/, 'even a disabled sequential scan is preferred');
my ($ret, $out, $err) = $node->psql('postgres', 'INSERT INTO e VALUES (1000)');
isnt($ret, 0, 'an exclusion check on a pool being rebuilt fails');
like($err, qr/pmhash index "e_k_excl" is being rebuilt/,
	'with an error that says why');
like($err, qr/HINT:\s+Retry when pmhash_rebuild_progress/, 'and what to do');
is($node->safe_psql('postgres', "SELECT count(*) FROM t WHERE k = 5"),
	'4', 'queries still answer (without the index)');
$node->safe_psql('postgres', q{
	INSERT INTO t SELECT 5 FROM generate_series(1, 10);
	DELETE FROM t WHERE k = 3;
	VACUUM (INDEX_CLEANUP ON) t;
});
ok($node->log_contains('too many background workers'),
	'no worker could be started for the rebuild');

# an orphan pool (a crash between a DROP's commit and the pool's removal
# leaves one): its storage has no relation file
my $pooldir = $node->data_dir . '/pmhash/'
  . $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
my ($apool) = glob("$pooldir/*.pool");
my $orphan = "$pooldir/0_4000000000.pool";
File::Copy::copy($apool, $orphan) or die "copy $apool: $!";

# a slot again: the restart finds the flag and rebuilds from scratch
$node->append_conf('postgresql.conf', "max_worker_processes = 8\n");
$node->restart;
ok($node->poll_query_until('postgres',
		q{SELECT NOT rebuilding FROM pmhash_rebuild_progress('t_k')}),
	'the background worker rebuilds the pool');
like($node->safe_psql('postgres',
		'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 5'),
	qr/t_k/, 'and the planner uses the index again');
agree($node, 'after the rebuild: index and seqscan agree');
is($node->safe_psql('postgres', "$forced SELECT count(*) FROM t WHERE k = 5"),
	'14', 'rows inserted while the pool was rebuilt are found once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing');
# (the worker logs it after the progress says done: wait for the line)
ok(eval { $node->wait_for_log(qr/pool rebuilt from the table/); 1 },
	'the rebuild is logged');
ok($node->poll_query_until('postgres',
		"SELECT pg_stat_file('pmhash/' || (SELECT oid FROM pg_database WHERE datname = 'postgres') || '/0_4000000000.pool', true) IS NULL"),
	'the background worker removes an orphan pool at start');
# (the sweep logs its count after its last removal: wait for the line)
ok(eval { $node->wait_for_log(qr/removed 1 orphan pool file/); 1 },
	'and says so');
ok(-e $apool, 'and keeps the pools of existing storages');
ok($node->poll_query_until('postgres',
		q{SELECT NOT rebuilding FROM pmhash_rebuild_progress('e_k_excl')}),
	'the exclusion constraint\'s index is rebuilt too');
$node->safe_psql('postgres', 'INSERT INTO e VALUES (1000)');
($ret, $out, $err) = $node->psql('postgres', 'INSERT INTO e VALUES (1000)');
like($err, qr/conflicting key value violates exclusion constraint/,
	'and enforces the constraint again');

# an index created while the start's sweep runs keeps its pool: the sweep
# lists the pool files before it reads the catalog (pmhash.sweep_pause
# holds it between the two; read the other way round, the new index's row
# would be missing and its pool removed as an orphan)
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
File::Copy::copy($apool, "$pooldir/0_4000000001.pool")
  or die "copy $apool: $!";
$node->append_conf('postgresql.conf', "pmhash.sweep_pause = '8s'\n");
my $log_off = -s $node->logfile;
$node->restart;
ok( eval {
		$node->wait_for_log(
			qr/orphan sweep of database $dboid listed \d+ pool file\(s\), pausing 8000 ms/,
			$log_off);
		1;
	},
	'the sweep pauses after listing the pool files');
$node->safe_psql('postgres', q{
	CREATE TABLE during_sweep (k int);
	INSERT INTO during_sweep SELECT g FROM generate_series(1, 3000) g;
	CREATE INDEX during_sweep_k ON during_sweep USING pmhash (k);
});
my $newpool = $node->safe_psql('postgres',
	q{SELECT relfilenode FROM pg_class WHERE relname = 'during_sweep_k'});
ok(eval { $node->wait_for_log(qr/removed 1 orphan pool file/, $log_off); 1 },
	'after the pause the sweep removes the orphan');
ok(!-e "$pooldir/0_4000000001.pool", 'which is gone');
ok(-e "$pooldir/0_$newpool.pool",
	'and keeps the pool of the index created while it paused');
is($node->safe_psql('postgres',
		"$forced SELECT count(*) FROM during_sweep WHERE k IN (1, 1500, 3000)"),
	'3', 'that index answers');
is($node->safe_psql('postgres',
		"$forced SELECT array_agg(ctid ORDER BY ctid) FROM during_sweep WHERE k IN (1, 1500, 3000)"),
	$node->safe_psql('postgres',
		"$seqscan SELECT array_agg(ctid ORDER BY ctid) FROM during_sweep WHERE k IN (1, 1500, 3000)"),
	'with the rows a sequential scan finds');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pmhash_check('during_sweep_k')}),
	'0', 'and pmhash_check finds nothing wrong with it');
$node->append_conf('postgresql.conf', "pmhash.sweep_pause = 0\n");
$node->reload;

# 2. a standby whose replay runs out of pmhash shared memory
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf',
	"pmhash.shared_memory = 1MB\npmhash.max_shared_memory = 0\n");
$standby->start;
ok($standby->poll_query_until('postgres',
		q{SELECT NOT rebuilding FROM pmhash_rebuild_progress('t_k')}),
	'the standby rebuilds its copied pool');
$node->safe_psql('postgres',
	'INSERT INTO t SELECT g % 5000 FROM generate_series(1, 400000) g');
$node->wait_for_catchup($standby);
ok($standby->log_contains('pmhash: could not replay INSERT record'),
	'a record the standby cannot apply is reported');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'and the standby stays up and replays on');
is($standby->safe_psql('postgres', "SELECT count(*) FROM t WHERE k = 5"),
	$node->safe_psql('postgres', "$seqscan SELECT count(*) FROM t WHERE k = 5"),
	'the standby answers right without the index');
unlike($standby->safe_psql('postgres',
		'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 5'),
	qr/t_k/, 'and its planner avoids the index');

$standby->append_conf('postgresql.conf', "pmhash.shared_memory = 64MB\n");
$standby->restart;
$node->safe_psql('postgres', 'INSERT INTO t VALUES (4999)');
$node->wait_for_catchup($standby);
ok($standby->poll_query_until('postgres',
		q{SELECT NOT rebuilding FROM pmhash_rebuild_progress('t_k')}),
	'with enough memory the standby rebuilds the pool');
agree($standby, 'standby: index and seqscan agree after the rebuild');
is($standby->safe_psql('postgres', "$forced SELECT count(*) FROM t"),
	$node->safe_psql('postgres', "SELECT count(*) FROM t"),
	'the standby has every row of the primary');

$standby->stop;
$node->stop;
done_testing();
