
# Copyright (c) pmhash authors
#
# The rebuild of a hot standby's copied pool, held open deterministically
# to look at it: on the primary a transaction holds an ACCESS EXCLUSIVE
# lock on the table while the base backup is taken and the standby starts
# (the standby's startup process holds the lock for it, so the rebuild
# cannot open the table), and a standby session takes a snapshot then.
# When the lock goes, the rebuild scans the table and waits for the
# snapshots older than its scan: that session's.  Meanwhile
# pmhash_rebuild_progress() says rebuilding, pg_stat_progress_create_index
# shows the rebuild (REINDEX, building index), the planner avoids the index,
# forced queries answer right, and the standby replays inserts, deletes and
# updates into the pool being rebuilt.  When the session ends, the rebuild
# ends, and every key's ctids through the index equal a seqscan's (nothing
# stored twice by the scan and the replay); pmhash_check() is empty.
#
# Then the standby loses a pool file (removed while it is down): it
# rebuilds it by itself, and answers right.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $maxkey = 3000;
my $hi = $maxkey + 100;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', wal_test_conf());
$primary->start;
$primary->safe_psql('postgres', qq{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (id bigserial, k int4, s text);
	INSERT INTO t (k, s) SELECT 1 + g % $maxkey, 'v' || (1 + g % $maxkey)
		FROM generate_series(1, 20000) g;
	INSERT INTO t (k, s) SELECT 0, 'v0' FROM generate_series(1, 2000);
	CREATE INDEX t_k ON t USING pmhash (k);
	ANALYZE t;
});

# the primary holds an ACCESS EXCLUSIVE lock on t through the backup and
# the standby's start: the standby's rebuild worker cannot open t
my $locker = $primary->background_psql('postgres');
$locker->query_safe(q{BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE});
$primary->backup('b');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', q{
max_standby_streaming_delay = -1
wal_receiver_status_interval = 1s
});
$standby->start;

# a snapshot on the standby, taken while the primary's transaction runs:
# older than whatever the rebuild's scan can start with
my $old = $standby->background_psql('postgres');
my $xmin = $old->query_safe(q{BEGIN ISOLATION LEVEL REPEATABLE READ;
	SELECT backend_xmin FROM pg_stat_activity WHERE pid = pg_backend_pid()});
like($xmin, qr/^\d+$/, "the standby's old snapshot has xmin $xmin");
# the primary keeps what that snapshot sees (hot_standby_feedback), so that
# replay never waits for it
ok($primary->poll_query_until('postgres', qq{
	SELECT backend_xmin::text::bigint <= $xmin FROM pg_stat_replication
	WHERE application_name = 'standby'}),
	'the primary holds its horizon back for the standby\'s snapshot');
is($standby->safe_psql('postgres',
	q{SELECT rebuilding FROM pmhash_rebuild_progress('t_k'::regclass)}),
	't', 'pmhash_rebuild_progress() says rebuilding while the table is locked');

# the lock goes: the worker scans t, then waits for the old snapshot
$locker->query_safe('COMMIT');
$locker->quit;
ok($standby->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_progress_create_index
	WHERE index_relid = 't_k'::regclass}),
	'the rebuild shows in pg_stat_progress_create_index');
is($standby->safe_psql('postgres', q{
	SELECT p.command, p.phase, p.relid = c.oid
	FROM pg_stat_progress_create_index p, pg_class c
	WHERE p.index_relid = 't_k'::regclass AND c.relname = 't'}),
	'REINDEX|building index|t', 'as a REINDEX building t_k of t');
is($standby->safe_psql('postgres',
	q{SELECT rebuilding, blocks_total > 0 FROM pmhash_rebuild_progress('t_k'::regclass)}),
	't|t', 'pmhash_rebuild_progress() says rebuilding, with the heap\'s size');
unlike($standby->safe_psql('postgres', 'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 1234'),
	qr/t_k/, 'the planner avoids the index meanwhile');
is(forced_count($standby, 't', 'k = 1234'), seq_count($standby, 't', 'k = 1234'),
	'a forced query answers right meanwhile');

# replay into the pool being rebuilt
my $w = start_pgbench($primary, scripts => workload_scripts(), tag => 'during',
	seconds => 4, rate => 150, defines => { maxkey => $maxkey });
wait_pgbench($w);
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres',
	q{SELECT rebuilding FROM pmhash_rebuild_progress('t_k'::regclass)}),
	't', 'the rebuild still waits for the old snapshot');
plans_agree($standby, 'during the rebuild', hi => $hi, min_keys => 1000,
	allow_error => 1, check => 0);

$old->query_safe('COMMIT');
$old->quit;
wait_rebuilt($standby, 'standby', 'postgres', 't_k');
# (the worker ends its progress report after the rebuild says done)
ok($standby->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_progress_create_index
	WHERE index_relid = 't_k'::regclass}), 'the progress row is gone');
$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
$primary->wait_for_catchup($standby);
like($standby->safe_psql('postgres', 'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 1234'),
	qr/t_k/, 'the planner uses the rebuilt index');
plans_agree($standby, 'standby after its rebuild', hi => $hi, min_keys => 1000);

# the standby loses its pool file
my $pool = $standby->safe_psql('postgres', q{SELECT pool_path FROM pmhash_stats('t_k')});
$pool = $standby->data_dir . "/$pool" unless $pool =~ m{^/};
$standby->stop;
ok(-f $pool, "the standby's pool file is $pool");
unlink($pool) or die "unlink $pool: $!";
$standby->start;
$primary->safe_psql('postgres', qq{
	INSERT INTO t (k, s) SELECT 1 + g % $maxkey, 'v' || (1 + g % $maxkey)
		FROM generate_series(1, 3000) g;
	DELETE FROM t WHERE k % 7 = 3;
	VACUUM (INDEX_CLEANUP ON) t});
$primary->wait_for_catchup($standby);
wait_rebuilt($standby, 'standby that lost its pool', 'postgres', 't_k');
plans_agree($standby, 'standby that lost its pool', hi => $hi, min_keys => 1000);

$standby->stop;
$primary->stop;
done_testing();
