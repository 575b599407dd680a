
# Copyright (c) pmhash authors
#
# A hot standby whose copied pools await their rebuild for as long as the
# test wants: no background worker slot is free for the rebuild (the
# primary and the standby run with max_worker_processes = 1, which the
# pmhash launcher takes; a hot standby needs at least the primary's value).
# Deterministically, then:
#   - the standby replays inserts, deletes, VACUUM and a REINDEX into its
#     pools meanwhile; the pool awaiting its rebuild is avoided by the
#     planner (answers stay right), the REINDEXed index -- a new pool built
#     by redo -- is used at once and agrees with the heap;
#   - the standby is promoted while its pool still awaits the rebuild:
#     inserts, deletes and VACUUM go on, answers stay right;
#   - an insert into a unique index whose pool awaits its rebuild waits for
#     it, and, as no worker takes the rebuild on, fails with an error that
#     says so;
#   - restarted with worker slots, the promoted server rebuilds the pool, and
#     every key's ctids through the index equal a seqscan's (and the unique
#     index refuses a present key again); after a power cut too.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $maxkey = 3000;
my $hi = $maxkey + 100;

sub rebuilding
{
	my ($node, $index) = @_;
	return $node->safe_psql('postgres',
		"SELECT rebuilding FROM pmhash_rebuild_progress('$index'::regclass)");
}

sub workload
{
	my ($node, $tag, $seconds) = @_;
	return start_pgbench($node, scripts => workload_scripts(), tag => $tag,
		seconds => $seconds, rate => 150, clients => 2,
		defines => { maxkey => $maxkey });
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', wal_test_conf() . q{
max_standby_streaming_delay = 2s
max_worker_processes = 1
max_logical_replication_workers = 0
});
$primary->start;
$primary->safe_psql('postgres', qq{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (id bigserial, k int4, s text);
	INSERT INTO t (k, s) SELECT 1 + g % $maxkey, 'v' || (1 + g % $maxkey)
		FROM generate_series(1, 20000) g;
	INSERT INTO t (k, s) SELECT 0, 'v0' FROM generate_series(1, 2000);
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE INDEX t_s ON t USING pmhash (s);
	ANALYZE t;
	CREATE TABLE tu (k int4);
	INSERT INTO tu SELECT generate_series(1, 1000);
	CREATE UNIQUE INDEX tu_k ON tu USING pmhash (k);
});
$primary->backup('b');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

is(rebuilding($standby, 't_k'), 't', 'standby: t_k awaits its rebuild (no worker slot)');
is(rebuilding($standby, 't_s'), 't', 'standby: t_s too');
unlike($standby->safe_psql('postgres', 'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 1234'),
	qr/t_k/, 'standby: the planner avoids t_k meanwhile');
is(forced_count($standby, 't', 'k = 1234'), seq_count($standby, 't', 'k = 1234'),
	'standby: a forced query answers right meanwhile');

# the primary writes, VACUUMs and REINDEXes t_s
my $w = workload($primary, 'pending', 5);
$primary->safe_psql('postgres', 'DELETE FROM t WHERE k % 7 = 3');
$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
$primary->safe_psql('postgres', 'REINDEX INDEX t_s');
wait_pgbench($w);
$primary->wait_for_catchup($standby);

is(rebuilding($standby, 't_k'), 't', 'standby: after the replay t_k still awaits its rebuild');
is(rebuilding($standby, 't_s'), 'f', 'standby: the REINDEXed t_s needs none');
like($standby->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT * FROM t WHERE s = 'v1234'}),
	qr/t_s/, 'standby: the planner uses the REINDEXed t_s');
plans_agree($standby, 'standby, t_s rebuilt by the replay of REINDEX', index => 't_s',
	col => 's', probe => q{'v' || p.k}, hi => $hi, min_keys => 1000);
plans_agree($standby, 'standby, t_k awaiting its rebuild', hi => $hi, min_keys => 1000,
	allow_error => 1, check => 0);
is($standby->safe_psql('postgres', 'SELECT count(*), sum(k) FROM t'),
	$primary->safe_psql('postgres', 'SELECT count(*), sum(k) FROM t'),
	'standby: the primary\'s rows');

# promoted with the rebuild still pending
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
my $new = $standby;
is(rebuilding($new, 't_k'), 't', 'promoted: t_k still awaits its rebuild');
$w = workload($new, 'promoted', 4);
$new->safe_psql('postgres', 'DELETE FROM t WHERE k % 11 = 5');
$new->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
wait_pgbench($w);
is(forced_count($new, 't', 'k = 1234'), seq_count($new, 't', 'k = 1234'),
	'promoted: a forced query answers right meanwhile');
plans_agree($new, 'promoted, t_s', index => 't_s', col => 's',
	probe => q{'v' || p.k}, hi => $hi, min_keys => 1000);

# a unique check cannot do without the pool's entries: it waits for the
# rebuild, and since no worker takes it on, it gives up with an error
is(rebuilding($new, 'tu_k'), 't', 'promoted: the unique tu_k awaits its rebuild');
my ($ret, $out, $err) = $new->psql('postgres', 'INSERT INTO tu VALUES (2000)');
isnt($ret, 0, 'promoted: an insert into the unique index awaiting its rebuild fails');
like($err, qr/pmhash index "tu_k" is being rebuilt.*no background worker has taken the rebuild on/s,
	'promoted: ... saying that no worker rebuilds it');
($ret, $out, $err) = $new->psql('postgres',
	'BEGIN; LOCK TABLE tu IN ACCESS EXCLUSIVE MODE; INSERT INTO tu VALUES (2000)');
like($err, qr/pmhash index "tu_k" is being rebuilt.*this transaction's lock on the table holds the rebuild up/s,
	'promoted: the holder of the table\'s ACCESS EXCLUSIVE lock fails at once, saying why');
is($new->safe_psql('postgres', 'SELECT count(*) FROM tu'), '1000',
	'promoted: nothing went in');

# with worker slots
$new->append_conf('postgresql.conf', "max_worker_processes = 8\n");
$new->restart;
wait_rebuilt($new, 'promoted, restarted with worker slots', 'postgres', 't_k', 't_s',
	'tu_k');
($ret, $out, $err) = $new->psql('postgres', 'INSERT INTO tu VALUES (500)');
like($err, qr/duplicate key value violates unique constraint "tu_k"/,
	'promoted: the rebuilt unique index refuses a present key');
$new->safe_psql('postgres',
	'INSERT INTO tu VALUES (2000); INSERT INTO tu VALUES (500) ON CONFLICT DO NOTHING');
is($new->safe_psql('postgres', 'SELECT count(*), count(DISTINCT k) FROM tu'), '1001|1001',
	'promoted: ... and takes an absent one');
like($new->safe_psql('postgres', 'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 1234'),
	qr/t_k/, 'promoted: the planner uses t_k after its rebuild');
plans_agree($new, 'promoted, t_k rebuilt', hi => $hi, min_keys => 1000);
plans_agree($new, 'promoted, t_s', index => 't_s', col => 's',
	probe => q{'v' || p.k}, hi => $hi, min_keys => 1000);
$w = workload($new, 'after_rebuild', 3);
wait_pgbench($w);
power_cut($new);
$new->start;
wait_rebuilt($new, 'promoted, after a power cut', 'postgres', 't_k', 't_s');
plans_agree($new, 'promoted after a power cut, t_k', hi => $hi, min_keys => 1000);
plans_agree($new, 'promoted after a power cut, t_s', index => 't_s', col => 's',
	probe => q{'v' || p.k}, hi => $hi, min_keys => 1000);

$new->stop;
$primary->stop;
done_testing();
