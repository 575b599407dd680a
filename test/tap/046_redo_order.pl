
# Copyright (c) pmhash authors
#
# WAL replay that a recovery must not skip, and WAL that must precede the
# pool (both found by a review):
#   1. a data directory restored from a base backup, started without
#      recovery.signal, with WAL past the backup's end in pg_wal, whose
#      first recovery stops after the backup's end (here: a WAL segment it
#      cannot read, a PANIC).  backup_label is renamed by then; the next
#      start continues the recovery and must still replay pmhash's
#      records (PMHASH_EPOCH keeps the flag), or the index that the first
#      attempt made by redo misses the rows inserted after it.  A clone
#      whose recovery runs in one go is the control.
#   2. a primary that crashes with VACUUM's DELETE record still in the WAL
#      buffers (walwriter stopped): the deletions must not have reached
#      its pool first, or the standby keeps entries that the next VACUUM
#      never deletes, and a partial index has entries for rows outside it.

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $conf = q{
autovacuum = off
shared_buffers = 32MB
wal_keep_size = '1GB'
max_wal_size = '1GB'
checkpoint_timeout = '1h'
bgwriter_lru_maxpages = 0
};

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', $conf);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pmhash');

# 1. ------------------------------------------------------------------
my $pgdata = $primary->data_dir;
my $bdir = $primary->backup_dir . '/b1';
mkdir $primary->backup_dir;
my $segfile = $primary->basedir . '/seg_build';

$primary->safe_psql('postgres', qq{
SELECT pg_backup_start('b1', true);
\\! cp -a $pgdata $bdir
CREATE TABLE w (k int4);
INSERT INTO w SELECT g % 100 FROM generate_series(1, 2000) g;
CREATE INDEX w_k ON w USING pmhash (k);
\\pset tuples_only on
\\pset format unaligned
SELECT labelfile FROM pg_backup_stop(false) \\g $bdir/backup_label
SELECT pg_switch_wal();
-- WAL after the backup's end, as when pg_wal is copied after pg_backup_stop
CREATE TABLE filler (x int4, y text);
INSERT INTO filler SELECT g, repeat('x', 40) FROM generate_series(1, 30000) g;
SELECT pg_switch_wal();
SELECT pg_walfile_name(pg_current_wal_insert_lsn()) \\g $segfile
-- committed after CREATE INDEX
INSERT INTO w SELECT 1000 + g % 100 FROM generate_series(1, 2000) g;
SELECT pg_switch_wal();
});
my $seg_late = slurp_file($segfile);
chomp $seg_late;
note "the INSERT after CREATE INDEX is in segment $seg_late";

unlink "$bdir/postmaster.pid", "$bdir/postmaster.opts";
my $label = slurp_file("$bdir/backup_label");
$label =~ s/\n+\z/\n/;
open(my $lf, '>', "$bdir/backup_label") or die;
print $lf $label;
close $lf;
note "backup_label:\n$label";
opendir(my $dh, "$bdir/pg_wal") or die;
for my $f (readdir $dh)
{
	unlink "$bdir/pg_wal/$f" if $f =~ /^[0-9A-F]{24}$/;
}
closedir $dh;

sub wal_segments
{
	opendir(my $d, "$pgdata/pg_wal") or die;
	my @s = sort grep { /^[0-9A-F]{24}$/ } readdir $d;
	closedir $d;
	return @s;
}
# all the WAL, as a copy of pg_wal taken after pg_backup_stop has it
copy("$pgdata/pg_wal/$_", "$bdir/pg_wal/$_") or die for wal_segments();

# control: a clone whose recovery runs in one go
my $ok_clone = PostgreSQL::Test::Cluster->new('clone_ok');
$ok_clone->init_from_backup($primary, 'b1');
$ok_clone->append_conf('postgresql.conf', 'recovery_prefetch = off');
$ok_clone->start;

# the clone whose first recovery dies after the backup's end (here: a WAL
# segment it cannot open, a PANIC; a kill -9, an OOM kill, a power cut or
# an immediate stop at that point do the same)
my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($primary, 'b1');
$clone->append_conf('postgresql.conf', 'recovery_prefetch = off');
my $late = $clone->data_dir . "/pg_wal/$seg_late";
chmod(0, $late) or die;
my $started = $clone->start(fail_ok => 1);
ok(!$started, 'backup: first recovery of the restored backup stops');
my $log1 = slurp_file($clone->logfile);
like($log1, qr/end of backup reached|consistent recovery state reached/,
	'backup: ... after the end of the backup');
ok(!-e $clone->data_dir . '/backup_label'
	  && -e $clone->data_dir . '/backup_label.old',
	'backup: backup_label was renamed by the first attempt');
chmod(0600, $late) or die;
my $log_off = -s $clone->logfile;
$clone->start;
ok($clone->log_contains('continuing the recovery of a base backup', $log_off),
	'backup: the second start continues the base backup\'s recovery');
ok( eval {
		$clone->wait_for_log(qr/the recovery of the base backup has finished/,
			$log_off);
		1;
	},
	'backup: and clears the flag once it has finished');

for my $n ($ok_clone, $clone)
{
	my $name = $n->name;
	my $seq = $n->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM w WHERE k = 1042});
	my $plan = $n->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		EXPLAIN (COSTS OFF) SELECT count(*) FROM w WHERE k = 1042});
	my $idx = $n->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM w WHERE k = 1042});
	my $idx_old = $n->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM w WHERE k = 42});
	my $st = $n->safe_psql('postgres',
		q{SELECT entries FROM pmhash_stats('w_k')});
	my $rb = $n->safe_psql('postgres',
		q{SELECT rebuilding FROM pmhash_rebuild_progress('w_k')});
	note "$name: plan: $plan";
	note "$name: seq=$seq idx=$idx idx(k=42)=$idx_old entries=$st rebuilding=$rb";
	is($seq, 20, "backup: $name: seqscan finds the 20 rows of key 1042");
	is($idx, $seq, "backup: $name: the index finds the same rows");
}

$ok_clone->stop;
$clone->stop;

# 2. ------------------------------------------------------------------
$primary->backup('sb');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'sb', has_streaming => 1);
$standby->start;

# created after the standby started: its pools come from redo of CREATE
$primary->safe_psql('postgres', q{
	CREATE TABLE d1 (k int4) WITH (autovacuum_enabled = off);
	INSERT INTO d1 SELECT g FROM generate_series(1, 100) g;
	CREATE INDEX d1_k ON d1 USING pmhash (k);
	CREATE TABLE d2 (k int4, f bool) WITH (autovacuum_enabled = off);
	INSERT INTO d2 SELECT g, true FROM generate_series(1, 100) g;
	CREATE INDEX d2_kf ON d2 USING pmhash (k) WHERE f;
	DELETE FROM d1 WHERE k <= 10;
	DELETE FROM d2 WHERE k <= 10;
});
$primary->wait_for_catchup($standby);

sub entries
{
	my ($n, $i) = @_;
	return $n->safe_psql('postgres', "SELECT entries FROM pmhash_stats('$i')");
}
note 'before: primary d1_k=' . entries($primary, 'd1_k')
  . ' standby d1_k=' . entries($standby, 'd1_k');

my $ww = $primary->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'});
ok($ww =~ /^\d+$/, "vacuum: walwriter pid $ww");
kill 'STOP', $ww or die;
$primary->safe_psql('postgres',
	'VACUUM (TRUNCATE false, INDEX_CLEANUP on) d1, d2');
my $unflushed = $primary->safe_psql('postgres',
	'SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()');
note "vacuum: after VACUUM, WAL unflushed: $unflushed";
note 'vacuum: primary entries after VACUUM, before crash: d1_k=' . entries($primary, 'd1_k')
  . ' d2_kf=' . entries($primary, 'd2_kf');

# a server crash: the WAL buffers are lost, the pools (page cache) are not
my $pm = $primary->{_pid};
kill 'KILL', $ww or die;
for (1 .. 600)
{
	last unless kill 0, $pm;
	usleep(100_000);
}
$primary->_update_pid(-1);
$primary->start;

$primary->safe_psql('postgres', q{
	VACUUM (TRUNCATE false, INDEX_CLEANUP on) d1, d2;
	INSERT INTO d1 SELECT 1000 + g FROM generate_series(1, 10) g;
	INSERT INTO d2 SELECT g, false FROM generate_series(1, 10) g;
});
note 'vacuum: reused slots d1: ' . $primary->safe_psql('postgres',
	q{SELECT string_agg(ctid::text, ' ') FROM d1 WHERE k > 1000});
note 'vacuum: reused slots d2: ' . $primary->safe_psql('postgres',
	q{SELECT string_agg(ctid::text, ' ') FROM d2 WHERE NOT f});
$primary->wait_for_catchup($standby);

for my $i ('d1_k', 'd2_kf')
{
	my $p = entries($primary, $i);
	my $s = entries($standby, $i);
	note "vacuum: $i entries: primary $p, standby $s";
	is($s, $p, "vacuum: $i: the standby's pool holds what the primary's holds");
}
for my $n ($primary, $standby)
{
	my $name = $n->name;
	my $plan = $n->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		EXPLAIN (COSTS OFF) SELECT ctid, * FROM d2 WHERE k = 3 AND f});
	my $r = $n->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM d2 WHERE k = 3 AND f});
	note "vacuum: $name: plan $plan";
	is($r, 0, "vacuum: $name: no row k = 3 AND f through the partial index");
	is( $n->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT array_agg(ctid ORDER BY ctid) FROM d2 WHERE k = ANY ('{1,2,3,4,5,6,7,8,9,10,11,12}') AND f}),
		$n->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT array_agg(ctid ORDER BY ctid) FROM d2 WHERE k = ANY ('{1,2,3,4,5,6,7,8,9,10,11,12}') AND f}),
		"vacuum: $name: the partial index finds what a sequential scan does");
}

# after promotion the standby keeps them
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
is($standby->safe_psql('postgres',
		q{SELECT count(*) FROM pmhash_check('d2_kf')}),
	'0', 'vacuum: after promotion pmhash_check finds nothing wrong');

done_testing();
