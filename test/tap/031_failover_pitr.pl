
# Copyright (c) pmhash authors
#
# pmhash after failover, point-in-time recovery, a restored base backup and
# pg_rewind, with no REINDEX and no other manual step.  One primary (WAL
# archived) and a base backup taken while pgbench writes; then
#   - a clone restored from the backup (no archive, no standby): it rebuilds
#     the copied pools by itself, its indexes agree with its heap, take new
#     rows, and are trusted after a restart;
#   - after the backup the primary goes on writing, VACUUMs, REINDEXes,
#     creates and drops pmhash indexes, around a named restore point;
#   - a point-in-time recovery from the backup and the archive to the restore
#     point: rows written before it are there, rows written after it are
#     not, an index created before it and dropped after it is there, one
#     dropped before it is gone, and every pmhash index agrees with the heap
#     per key (after the automatic rebuild) and takes new rows;
#   - a streaming standby from the backup is promoted: with nothing done, its
#     planner uses the indexes, inserts work, answers equal a seqscan;
#   - the old primary writes rows the new one never sees (and a pmhash index
#     of its own), is stopped, rewound with pg_rewind and started as a
#     standby of the new primary: after its rebuild it answers right, the
#     divergent rows and index are gone, and it follows the new primary.
# "Agrees with the heap": every key's heap tuples through a forced index scan
# and a forced bitmap scan equal those of a sequential scan on the same
# snapshot, and pmhash_check() is empty.

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $maxkey = 3000;
# the workload's keys are 0 .. $maxkey + 19; marker rows of each phase have
# keys of their own above that
my %mark = (
	before_rp => 4000,    # written before the restore point
	after_rp => 4100,     # after it
	clone => 4150,        # on the clone
	pitr => 4160,         # on the PITR server after its recovery
	divergent => 4200,    # on the old primary after the failover
	promoted => 4300,     # on the new primary right after its promotion
	followed => 4400);    # on the new primary, replayed by the rewound one
my $hi = 4500;

sub workload
{
	my ($node, $tag, $seconds) = @_;
	return start_pgbench($node, scripts => workload_scripts(), tag => $tag,
		seconds => $seconds, rate => 150, clients => 2,
		defines => { maxkey => $maxkey });
}

# 200 rows of 50 keys from $mark{$name}, in table $table
sub add_marks
{
	my ($node, $name, $table) = @_;
	$table //= 't';
	my $cols = $table eq 't' ? '(k, s)' : '(k)';
	my $vals = $table eq 't' ? q{m + g % 50, 'v' || (m + g % 50)} : 'm + g % 50';
	$node->safe_psql('postgres', qq{
		INSERT INTO $table $cols SELECT $vals
		FROM generate_series(1, 200) g, (VALUES ($mark{$name})) v(m)});
	return;
}

# the number of marker rows $name of $table on $node, through the index
# (forced) and through a seqscan: both must be $want
sub marks_are
{
	my ($node, $label, $name, $want, $table) = @_;
	$table //= 't';
	my $where = "k >= $mark{$name} AND k < $mark{$name} + 50";
	# an equality per key, so that the index can be used
	my $keys = join(', ', map { $mark{$name} + $_ } 0 .. 49);
	my $forced = $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_hashjoin = off; SET enable_mergejoin = off;
		SET enable_memoize = off;
		SELECT count(*) FROM unnest('{$keys}'::int4[]) p(k) JOIN $table x ON x.k = p.k});
	is(seq_count($node, $table, $where), $want,
		"$label: $want $name rows in $table (seqscan)");
	is($forced, $want, "$label: $want $name rows in $table (through the index)");
	return;
}

# both indexes of t agree with the heap on $node
sub compare
{
	my ($node, $label, %o) = @_;
	compare_t($node, $label, $hi, %o);
	return;
}

sub planner_uses
{
	my ($node, $label) = @_;
	like($node->safe_psql('postgres',
		'EXPLAIN (COSTS OFF) SELECT * FROM t WHERE k = 1234'),
		qr/\bt_k\b/, "$label: the planner uses t_k for a point lookup");
	return;
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1, has_archiving => 1);
start_primary($primary, $maxkey, q{
	-- u_k is dropped after the backup, before the restore point;
	-- v gets its index v_k after the backup, dropped after the restore point
	CREATE TABLE u (k int4);
	INSERT INTO u SELECT g % 500 FROM generate_series(1, 5000) g;
	CREATE INDEX u_k ON u USING pmhash (k);
	CREATE TABLE v (k int4);
	INSERT INTO v SELECT g % 500 FROM generate_series(1, 5000) g;
	ANALYZE;
});

# ------------------------------------------------------------------------
# a base backup while pgbench writes

my $w = workload($primary, 'during_backup', 4);
$primary->backup('b');
wait_pgbench($w);

# the streaming standby, promoted later; it replays all that follows
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', "archive_mode = off\n");
$standby->start;

# ------------------------------------------------------------------------
# a clone: the backup restored, no archive, no standby

my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($primary, 'b');
$clone->append_conf('postgresql.conf', "archive_mode = off\n");
$clone->start;
is($clone->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f',
	'the clone is out of recovery');
probe_while_rebuilding($clone, 'clone right after its start',
	'SELECT * FROM t WHERE k = 1234', hi => $hi);
wait_rebuilt($clone, 'clone', 'postgres', 't_k', 't_s', 'u_k');
planner_uses($clone, 'clone');
compare($clone, 'clone');
plans_agree($clone, 'clone, u_k', table => 'u', hi => 600, min_keys => 500);
add_marks($clone, 'clone');
marks_are($clone, 'clone after its inserts', 'clone', 200);
compare($clone, 'clone after its inserts');
$clone->restart;
wait_rebuilt($clone, 'clone after a restart', 'postgres', 't_k', 't_s');
compare($clone, 'clone after a restart');
marks_are($clone, 'clone after a restart', 'clone', 200);
$clone->stop;

# ------------------------------------------------------------------------
# the primary goes on, around a named restore point

$w = workload($primary, 'around_rp', 8);
$primary->safe_psql('postgres', 'DROP INDEX u_k');
$primary->safe_psql('postgres', 'CREATE INDEX v_k ON v USING pmhash (k)');
$primary->safe_psql('postgres', 'INSERT INTO v SELECT g % 500 FROM generate_series(1, 2000) g');
$primary->safe_psql('postgres', 'DELETE FROM t WHERE k % 7 = 3');
$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
$primary->safe_psql('postgres', 'REINDEX INDEX t_s');
add_marks($primary, 'before_rp');
add_marks($primary, 'before_rp', 'v');
$primary->safe_psql('postgres', q{SELECT pg_create_restore_point('rp')});
add_marks($primary, 'after_rp');
add_marks($primary, 'after_rp', 'v');
$primary->safe_psql('postgres', 'REINDEX INDEX t_k');
$primary->safe_psql('postgres', 'DROP INDEX v_k');
$primary->safe_psql('postgres', 'CREATE INDEX u_k2 ON u USING pmhash (k)');
wait_pgbench($w);

# everything archived
my $walfile = $primary->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_lsn())');
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
ok($primary->poll_query_until('postgres',
	"SELECT last_archived_wal >= '$walfile' FROM pg_stat_archiver"),
	'the WAL up to after the restore point is archived');

# ------------------------------------------------------------------------
# point-in-time recovery to the restore point

my $pitr = PostgreSQL::Test::Cluster->new('pitr');
$pitr->init_from_backup($primary, 'b', has_restoring => 1, standby => 0);
$pitr->append_conf('postgresql.conf', q{
archive_mode = off
recovery_target_name = 'rp'
recovery_target_action = 'promote'
});
$pitr->start;
ok($pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the point-in-time recovery ends');
probe_while_rebuilding($pitr, 'PITR right after its recovery',
	'SELECT * FROM t WHERE k = 1234', hi => $hi);
wait_rebuilt($pitr, 'PITR', 'postgres', 't_k', 't_s', 'v_k');
is($pitr->safe_psql('postgres', q{
	SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class
	WHERE relname IN ('t_k', 't_s', 'u_k', 'u_k2', 'v_k')}),
	't_k,t_s,v_k', 'PITR: the indexes of the restore point, no other');
marks_are($pitr, 'PITR', 'before_rp', 200);
marks_are($pitr, 'PITR', 'after_rp', 0);
marks_are($pitr, 'PITR', 'before_rp', 200, 'v');
marks_are($pitr, 'PITR', 'after_rp', 0, 'v');
planner_uses($pitr, 'PITR');
compare($pitr, 'PITR');
plans_agree($pitr, 'PITR, v_k', table => 'v', hi => $hi, min_keys => 500);
add_marks($pitr, 'pitr');
marks_are($pitr, 'PITR after its inserts', 'pitr', 200);
compare($pitr, 'PITR after its inserts');
$pitr->stop;

# ------------------------------------------------------------------------
# failover: the standby is promoted

$primary->wait_for_catchup($standby);
wait_rebuilt($standby, 'standby', 'postgres', 't_k', 't_s', 'u_k2');
compare($standby, 'standby before its promotion');
marks_are($standby, 'standby', 'after_rp', 200);

$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'the standby is promoted');
my $new = $standby;
# nothing done: no REINDEX, no wait
planner_uses($new, 'right after the promotion');
compare($new, 'right after the promotion');
add_marks($new, 'promoted');
marks_are($new, 'new primary after its first inserts', 'promoted', 200);
$w = workload($new, 'after_promotion', 3);
wait_pgbench($w);
compare($new, 'new primary after a workload');

# the old primary diverges
add_marks($primary, 'divergent');
$primary->safe_psql('postgres', q{
	DELETE FROM t WHERE k % 13 = 1 AND k < 4000;
	VACUUM (INDEX_CLEANUP ON) t;
	CREATE TABLE x (k int4);
	INSERT INTO x SELECT g FROM generate_series(1, 1000) g;
	CREATE INDEX x_k ON x USING pmhash (k);
});
marks_are($primary, 'old primary', 'divergent', 200);
$primary->stop;

# ------------------------------------------------------------------------
# pg_rewind of the old primary, started as a standby of the new one

$new->safe_psql('postgres', 'CHECKPOINT');
my $old = $primary;
# the WAL before the divergence that pg_rewind reads may be archived and
# removed: it restores it from the old primary's archive
my $archive = $old->archive_dir;
$old->append_conf('postgresql.conf', qq{restore_command = 'cp "$archive/%f" "%p"'\n});
# pg_rewind copies the new primary's postgresql.conf: keep the old one's
my $conf = $old->data_dir . '/postgresql.conf';
my $saved = PostgreSQL::Test::Utils::tempdir() . '/postgresql.conf';
copy($conf, $saved) or die "copy $conf: $!";
command_ok(
	[
		'pg_rewind', '--source-server', $new->connstr('postgres'),
		'--target-pgdata', $old->data_dir, '--restore-target-wal', '--no-sync'
	],
	'pg_rewind of the old primary');
copy($saved, $conf) or die "copy $saved: $!";
$old->enable_streaming($new);
$old->start;
$w = workload($new, 'followed', 3);
add_marks($new, 'followed');
wait_pgbench($w);
$new->wait_for_catchup($old);
is($old->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'the rewound old primary is a standby');
wait_rebuilt($old, 'rewound old primary', 'postgres', 't_k', 't_s');
compare($old, 'rewound old primary');
planner_uses($old, 'rewound old primary');
marks_are($old, 'rewound old primary', 'divergent', 0);
marks_are($old, 'rewound old primary', 'promoted', 200);
marks_are($old, 'rewound old primary', 'followed', 200);
is($old->safe_psql('postgres', q{SELECT to_regclass('x_k') IS NULL}), 't',
	'the old primary\'s own index is gone');

# and it follows what comes next
$w = workload($new, 'last', 3);
$new->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
$new->safe_psql('postgres', 'REINDEX INDEX t_k');
wait_pgbench($w);
$new->wait_for_catchup($old);
compare($old, 'rewound old primary, caught up at the end');
compare($new, 'new primary at the end');

$old->stop;
$new->stop;
done_testing();
