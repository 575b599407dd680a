
# Copyright (c) pmhash authors
#
# Standbys, promotion and restored base backups (issue 29: pmhash in the
# WAL).  The pools a base backup copied are rebuilt from the heap by a
# background worker, also with pmhash.prewarm off: meanwhile the planner
# avoids the index and a forced use answers right or is a clear error.
# Then a hot standby uses its pmhash index and follows its primary through
# the WAL (rows inserted after the backup are found); promotion keeps the
# index usable with nothing done; a clone restored from the backup rebuilds
# its pools by itself and keeps them across a restart.  No REINDEX anywhere.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# first uses are what this test is about: no background loading
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n"
	. "pmhash.prewarm = off\n");
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 10000);
	CREATE INDEX t_k ON t USING pmhash (k);
	ANALYZE t;
});
$primary->backup('b');
# rows the pool copied by the backup does not have
$primary->safe_psql('postgres', q{INSERT INTO t SELECT 77 FROM generate_series(1, 5)});

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
probe_while_rebuilding($standby, 'standby right after its start',
	'SELECT * FROM t WHERE k = 77', hi => 10100, min_keys => 10000);
wait_rebuilt($standby, 'standby', 'postgres', 't_k');
$primary->wait_for_catchup($standby);

my $plan = $standby->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77});
like($plan, qr/t_k/, 'the standby planner uses the pmhash index');
is(forced_count($standby, 't', 'k = 77'), '6',
	'the standby finds, through the index, the rows inserted after the backup');
is(seq_count($standby, 't', 'k = 77'), '6', 'its sequential scan agrees');
plans_agree($standby, 'standby', hi => 10100, min_keys => 10000);

# the primary goes on; the standby follows
$primary->safe_psql('postgres', q{INSERT INTO t SELECT 77 FROM generate_series(1, 3)});
$primary->wait_for_catchup($standby);
is(forced_count($standby, 't', 'k = 77'), '9', 'the standby follows its primary');

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
# nothing done after the promotion
like($standby->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77}),
	qr/t_k/, 'after promotion the planner uses the index');
is(forced_count($standby, 't', 'k = 77'), '9',
	'after promotion the index answers right, no REINDEX');
$standby->safe_psql('postgres', q{INSERT INTO t VALUES (77)});
is(forced_count($standby, 't', 'k = 77'), '10', 'and takes new rows');

# every answer above agrees with a sequential scan on the same server
is(seq_count($standby, 't', 'k = 77'), '10',
	$standby->name . ': sequential scan finds the same rows');
is(seq_count($primary, 't', 'k = 77'), '9',
	$primary->name . ': sequential scan finds the same rows');

# the primary is unaffected
is(forced_count($primary, 't', 'k = 77'), '9', 'primary still right');

# a base backup restored without archive recovery stays on the same
# timeline: its copied pools are rebuilt all the same.  First with no
# background worker slot (the launcher takes the only one), so that the
# rebuild cannot run and the index can be looked at while it awaits it.
my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($primary, 'b');
$clone->append_conf('postgresql.conf',
	"max_worker_processes = 1\nmax_logical_replication_workers = 0\n");
$clone->start;

# a plan made before the server knew (prewarm is off: nothing has loaded
# the index yet), kept and executed again: right answers or clear errors
my ($ret, $out, $err) = $clone->psql('postgres', q{
	SET plan_cache_mode = force_generic_plan;
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	PREPARE q(int4) AS SELECT count(*) FROM t WHERE k = $1;
	\echo @1
	EXECUTE q(77);
	\echo @2
	EXECUTE q(77);
	\echo @plan
	EXPLAIN (COSTS OFF) EXECUTE q(77);
}, on_error_stop => 0);
my %res = map { /^(\w+)\n?(.*?)\n*$/s ? ($1 => $2) : () } split(/^@/m, $out);
my @errors = grep { /ERROR/ } split(/\n(?=psql:)/, $err);
note("cached plan: " . ($res{plan} // '') . "; errors: $err");
my $answers = grep { defined $res{$_} && $res{$_} ne '' } (1, 2);
for my $i (1, 2)
{
	is($res{$i}, '1', "a kept plan forced on the copied pool, run $i: right answer")
	  if defined $res{$i} && $res{$i} ne '';
}
is($answers + @errors, 2, 'each run of the kept plan answers or fails');
for my $e (@errors)
{
	like($e, qr/ERROR:  pmhash index "t_k" is being rebuilt/,
		'a kept plan on the copied pool: a clear error');
}
unlike($err, qr/server closed the connection|terminat/, 'no backend died');

is($clone->safe_psql('postgres',
	q{SELECT rebuilding FROM pmhash_rebuild_progress('t_k'::regclass)}), 't',
	'with no worker to run it, the copied pool awaits its rebuild');
is($clone->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_progress_create_index
	WHERE index_relid = 't_k'::regclass}), '0', 'and no rebuild runs');
unlike($clone->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77}),
	qr/t_k/, 'meanwhile the planner avoids the index');
plans_agree($clone, 'clone awaiting its rebuild', hi => 10100, min_keys => 10000,
	allow_error => 1, check => 0);
is(forced_count($clone, 't', 'k = 77'), '1',
	'a forced query answers right (without the index)');
$clone->safe_psql('postgres', q{INSERT INTO t VALUES (77), (77)});
is(seq_count($clone, 't', 'k = 77'), '3', 'inserts go on meanwhile');
is($clone->safe_psql('postgres',
	q{SELECT rebuilding FROM pmhash_rebuild_progress('t_k'::regclass)}), 't',
	'the pool still awaits its rebuild');

# now with workers
$clone->append_conf('postgresql.conf',
	"max_worker_processes = 8\nmax_logical_replication_workers = 4\n");
$clone->restart;
wait_rebuilt($clone, 'clone', 'postgres', 't_k');
like($clone->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77}),
	qr/t_k/, 'after its rebuild the clone\'s planner uses the index');
is(forced_count($clone, 't', 'k = 77'), '3',
	'the restored server answers right with no REINDEX (the backup\'s row and two new ones)');
$clone->restart;
wait_rebuilt($clone, 'clone after a restart', 'postgres', 't_k');
is(forced_count($clone, 't', 'k = 77'), '3',
	'and the rebuilt pool is accepted after a restart');
is(seq_count($clone, 't', 'k = 77'), '3', 'the clone\'s sequential scan agrees');
$clone->safe_psql('postgres', q{INSERT INTO t VALUES (77)});
is(forced_count($clone, 't', 'k = 77'), '4', 'the clone takes new rows');
plans_agree($clone, 'clone', hi => 10100, min_keys => 10000);
$clone->stop;

$standby->stop;
$primary->stop;
done_testing();
