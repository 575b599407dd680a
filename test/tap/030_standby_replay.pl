
# Copyright (c) pmhash authors
#
# pmhash in the WAL: a hot standby replays the pmhash resource manager's
# records into its own pools and uses its pmhash indexes.
#
#   - A streaming standby made from a base backup taken while pgbench
#     inserts: the pools the backup copied are rebuilt from the heap in the
#     background (the planner avoids an index while it is rebuilt; a forced
#     use answers right or is a clear error), then the standby's planner
#     uses the indexes.
#   - While pgbench inserts (many keys, a hot key with thousands of rows,
#     aborted inserts), deletes and updates on the primary, and the primary
#     bulk-loads (segments split), VACUUMs (INDEX_CLEANUP ON) and REINDEXes:
#     at replay points -- caught up, and mid-stream without waiting -- every
#     key's heap tuples found on the standby through a forced index scan and
#     a forced bitmap scan are exactly those a sequential scan finds on the
#     same snapshot (ctid lists, none twice), and pmhash_check() is empty.
#   - The standby, with a restart point behind it and pmhash records
#     (inserts, VACUUM deletions, a REINDEX's create/build/drop) after it,
#     loses power (SIGKILL of all its processes) mid-stream: it replays from
#     its restart point, stores nothing twice and agrees with its heap again.
#   - A cascading standby made from a base backup of the standby: rebuilt,
#     then it replays through the standby and agrees with its heap.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $maxkey = 3000;
my $hi = $maxkey + 100;    # every key of the workload is in 0 .. $hi

sub workload
{
	my ($node, $tag, $seconds) = @_;
	return start_pgbench($node, scripts => workload_scripts(), tag => $tag,
		seconds => $seconds, rate => 150, clients => 2,
		defines => { maxkey => $maxkey });
}

# both indexes of t agree with the heap on $node
sub compare
{
	my ($node, $label, %o) = @_;
	compare_t($node, $label, $hi, %o);
	return;
}

# the planner of $node picks the pmhash index for a point lookup
sub planner_uses
{
	my ($node, $label) = @_;
	like($node->safe_psql('postgres',
		'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 1234'),
		qr/\bt_k\b/, "$label: the planner uses t_k for a point lookup");
	like($node->safe_psql('postgres',
		q{EXPLAIN (COSTS OFF) SELECT * FROM t WHERE s = 'v1234'}),
		qr/\bt_s\b/, "$label: the planner uses t_s for a point lookup");
	return;
}

# caught up and quiet, $node has the rows of $primary
sub same_rows
{
	my ($node, $primary, $label) = @_;
	my $q = q{SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*), sum(k), sum(hashtext(s)::int8), sum(id) FROM t};
	is($node->safe_psql('postgres', $q), $primary->safe_psql('postgres', $q),
		"$label: the same rows as the primary");
	return;
}

sub segments
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT segments FROM pmhash_stats('t_k')});
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
start_primary($primary, $maxkey);
is($primary->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'pmhash'}),
	'0.6', 'CREATE EXTENSION pmhash installs version 0.6');

# ------------------------------------------------------------------------
# a standby from a base backup taken while pgbench writes

my $w = workload($primary, 'during_backup', 4);
$primary->backup('b');
wait_pgbench($w);

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
probe_while_rebuilding($standby, 'standby right after its start',
	'SELECT * FROM t WHERE k = 1234', hi => $hi);
wait_rebuilt($standby, 'standby', 'postgres', 't_k', 't_s');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'the standby is in recovery');
planner_uses($standby, 'standby after the rebuild');
compare($standby, 'standby after the rebuild, caught up');
compare($primary, 'primary');
my $seg0 = segments($standby);

# ------------------------------------------------------------------------
# replay while the primary writes, bulk-loads, VACUUMs, REINDEXes

$w = workload($primary, 'stream', 12);
compare($standby, 'standby mid-stream');

# segments split on the primary and, replaying it, on the standby
my $pseg = segments($primary);
$primary->safe_psql('postgres', qq{
	INSERT INTO t (k, s) SELECT 1 + g % $maxkey, 'v' || (1 + g % $maxkey)
		FROM generate_series(1, 30000) g});
cmp_ok(segments($primary), '>', $pseg, 'the bulk load split segments on the primary');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
cmp_ok(segments($standby), '>', $seg0, 'and on the standby, replaying it');
compare($standby, 'standby mid-stream, after the bulk load');

$primary->safe_psql('postgres', 'DELETE FROM t WHERE k % 7 = 3');
$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
compare($standby, 'standby mid-stream, VACUUM sent');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
compare($standby, 'standby mid-stream, VACUUM replayed');

$primary->safe_psql('postgres', 'REINDEX INDEX t_k');
compare($standby, 'standby mid-stream, REINDEX sent');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
compare($standby, 'standby mid-stream, REINDEX replayed');
wait_pgbench($w);
$primary->wait_for_catchup($standby);
compare($standby, 'standby caught up after the workload');
same_rows($standby, $primary, 'standby caught up after the workload');
planner_uses($standby, 'standby after REINDEX');

# ------------------------------------------------------------------------
# power cut of the standby mid-stream, with pmhash records after its
# restart point

$w = workload($primary, 'crash', 8);
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
$standby->safe_psql('postgres', 'CHECKPOINT');    # a restart point
my $restart_redo = $standby->safe_psql('postgres',
	'SELECT redo_lsn FROM pg_control_checkpoint()');
$primary->safe_psql('postgres', 'DELETE FROM t WHERE k % 11 = 5');
$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
$primary->safe_psql('postgres', 'REINDEX INDEX t_s');
$primary->safe_psql('postgres', qq{
	INSERT INTO t (k, s) SELECT 1 + g % $maxkey, 'v' || (1 + g % $maxkey)
		FROM generate_series(1, 5000) g});
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
ok($standby->safe_psql('postgres',
	"SELECT pg_last_wal_replay_lsn() > '$restart_redo'::pg_lsn") eq 't',
	"the standby's restart point ($restart_redo) is behind what it replayed");
power_cut($standby);
$standby->start;
compare($standby, 'standby restarted after a power cut, mid-stream');
wait_pgbench($w);
$primary->wait_for_catchup($standby);
wait_rebuilt($standby, 'standby after the power cut', 'postgres', 't_k', 't_s');
compare($standby, 'standby after the power cut, caught up');
same_rows($standby, $primary, 'standby after the power cut');
planner_uses($standby, 'standby after the power cut');

# ------------------------------------------------------------------------
# a cascading standby from a base backup of the standby

$w = workload($primary, 'cascade_backup', 4);
$standby->backup('b2');
my $cascade = PostgreSQL::Test::Cluster->new('cascade');
$cascade->init_from_backup($standby, 'b2', has_streaming => 1);
$cascade->start;
probe_while_rebuilding($cascade, 'cascading standby right after its start',
	'SELECT * FROM t WHERE k = 1234', hi => $hi);
wait_rebuilt($cascade, 'cascading standby', 'postgres', 't_k', 't_s');
wait_pgbench($w);

$w = workload($primary, 'cascade', 6);
compare($cascade, 'cascading standby mid-stream');
$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
$primary->safe_psql('postgres', 'REINDEX INDEX t_k');
compare($cascade, 'cascading standby mid-stream, REINDEX sent');
wait_pgbench($w);
my $end = $primary->lsn('insert');
$primary->wait_for_catchup($standby, 'replay', $end);
$standby->wait_for_catchup($cascade, 'replay', $end);
planner_uses($cascade, 'cascading standby');
compare($cascade, 'cascading standby caught up');
compare($standby, 'standby caught up at the end');
compare($primary, 'primary at the end');
same_rows($cascade, $primary, 'cascading standby');

$cascade->stop;
$standby->stop;
$primary->stop;
done_testing();
