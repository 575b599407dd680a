
# Copyright (c) pmhash authors
#
# The pmhash WAL resource manager as pg_walinspect shows it, and crash
# recovery through it.
#
#   - The extension is version 0.4 (CREATE EXTENSION, and ALTER EXTENSION
#     UPDATE from 0.3), with pmhash_rebuild_progress().
#   - Records of resource manager "pmhash", by what writes them: committed
#     inserts -> INSERT; an aborted small insert -> none; CREATE INDEX ->
#     CREATE, INSERT, BUILD_END in that order; VACUUM that removes entries ->
#     DELETE; REINDEX -> CREATE, BUILD_END, DROP; DROP INDEX -> DROP; CREATE
#     INDEX rolled back -> CREATE then DROP; TRUNCATE -> CREATE, DROP.  Every
#     record has a description.  Inserts into an UNLOGGED table's pmhash
#     index write no pmhash record.
#   - The primary's crash recovery: with pmhash records of every kind after
#     the last checkpoint (inserts of many keys and of a hot key, VACUUM,
#     CREATE INDEX, REINDEX, DROP INDEX), an immediate stop and a restart
#     replay them over the pools that already hold them: every key's heap
#     tuples through the index (index and bitmap scans) equal a seqscan's,
#     none twice; pmhash_check() is empty.
#   - wal_level = minimal (a separate server): CREATE TABLE + CREATE INDEX +
#     INSERT in one transaction (both ways of wal_skip_threshold), a
#     TRUNCATE + INSERT in one transaction, and later inserts, survive an
#     immediate stop like a btree index would.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $node = PostgreSQL::Test::Cluster->new('wal');
$node->init(allows_streaming => 1);
# nothing but the test writes WAL of pmhash indexes
$node->append_conf('postgresql.conf', q{
shared_buffers = 32MB
autovacuum = off
checkpoint_timeout = 1h
log_statement = ddl
});
$node->start;

# ------------------------------------------------------------------------
# the extension's version

$node->safe_psql('postgres', q{CREATE DATABASE upd});
$node->safe_psql('upd', q{CREATE EXTENSION pmhash VERSION '0.3'});
$node->safe_psql('upd', q{ALTER EXTENSION pmhash UPDATE});
is($node->safe_psql('upd',
	q{SELECT extversion FROM pg_extension WHERE extname = 'pmhash'}),
	'0.6', 'ALTER EXTENSION pmhash UPDATE goes from 0.3 to 0.6');
$node->safe_psql('upd', q{
	CREATE TABLE a (k int4);
	INSERT INTO a SELECT g FROM generate_series(1, 1000) g;
	CREATE INDEX a_k ON a USING pmhash (k)});
is($node->safe_psql('upd', q{
	SELECT rebuilding, blocks_total >= 0, blocks_done >= 0
	FROM pmhash_rebuild_progress('a_k'::regclass)}),
	'f|t|t', 'the updated extension has pmhash_rebuild_progress()');
is($node->safe_psql('upd', q{
	SELECT syncs >= 0, writeback_pending IS NOT NULL FROM pmhash_stats('a_k');
	SELECT syncs >= 0 FROM pmhash_media_stats();
	SELECT pmhash_writeback() >= 0}),
	"t|t\nt\nt", 'the updated extension has the sync columns and pmhash_writeback()');
is($node->safe_psql('upd', q{
	SET enable_seqscan = off;
	SELECT count(*) FROM a WHERE k = 7;
	SELECT count(*) FROM a WHERE k = ANY ('{1,2,3}');
	SELECT lookups, lookups_locked <= lookups FROM pmhash_stats('a_k')}),
	"1\n3\n4|t", 'the updated extension counts the lookups of scans');

# the 0.5 definition of pmhash_stats still works with this library
$node->safe_psql('postgres', q{CREATE DATABASE upd5});
$node->safe_psql('upd5', q{
	CREATE EXTENSION pmhash VERSION '0.5';
	CREATE TABLE a (k int4);
	INSERT INTO a SELECT g FROM generate_series(1, 1000) g;
	CREATE INDEX a_k ON a USING pmhash (k)});
is($node->safe_psql('upd5', q{
	SELECT entries, writeback_pending IS NOT NULL FROM pmhash_stats('a_k')}),
	"1000|t", 'pmhash_stats() of version 0.5 still answers');

# the 0.4 definitions of the statistics functions still work with this library
$node->safe_psql('postgres', q{CREATE DATABASE upd4});
$node->safe_psql('upd4', q{
	CREATE EXTENSION pmhash VERSION '0.4';
	CREATE TABLE a (k int4);
	INSERT INTO a SELECT g FROM generate_series(1, 1000) g;
	CREATE INDEX a_k ON a USING pmhash (k)});
is($node->safe_psql('upd4', q{
	SELECT entries, write_amplification IS NOT NULL FROM pmhash_stats('a_k');
	SELECT count(*) FROM pmhash_media_stats()}),
	"1000|t\n1", 'pmhash_stats() and pmhash_media_stats() of version 0.4 still answer');

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE EXTENSION pg_walinspect;
	CREATE TABLE flush_marker (i int4);
});
is($node->safe_psql('postgres',
	q{SELECT extversion FROM pg_extension WHERE extname = 'pmhash'}),
	'0.6', 'CREATE EXTENSION pmhash installs 0.6');

# ------------------------------------------------------------------------
# records by kind

# the pmhash records that $sql writes: [ [record_type, description], ... ]
# in WAL order
sub records_of
{
	my ($sql, $db) = @_;
	$db //= 'postgres';
	my $start = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	$node->safe_psql($db, $sql);
	my $end = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	# a commit that flushes the WAL up to $end (pg_walinspect reads
	# flushed WAL only; a transaction that wrote no WAL does not flush)
	$node->safe_psql('postgres', 'INSERT INTO flush_marker VALUES (1)');
	my $out = $node->safe_psql('postgres', qq{
		SELECT record_type, coalesce(description, '')
		FROM pg_get_wal_records_info('$start', '$end')
		WHERE resource_manager = 'pmhash' ORDER BY start_lsn});
	return [ map { [ split(/\|/, $_, 2) ] } grep { $_ ne '' } split(/\n/, $out) ];
}

# record_type => count
sub kinds
{
	my ($recs) = @_;
	my %n;
	$n{ $_->[0] }++ for @$recs;
	return \%n;
}

sub kinds_str
{
	my ($recs) = @_;
	my $n = kinds($recs);
	return join(', ', map { "$_ x$n->{$_}" } sort keys %$n) || '(none)';
}

sub described
{
	my ($recs, $label) = @_;
	my @bare = grep { $_->[1] !~ /\S/ } @$recs;
	ok(!@bare, "$label: every pmhash record has a description")
	  or diag(scalar(@bare) . ' records without one');
	return;
}

my $section_start = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');

$node->safe_psql('postgres', q{
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT g % 1000 FROM generate_series(1, 20000) g;
});

my $r = records_of(q{CREATE INDEX t_k ON t USING pmhash (k)});
my $n = kinds($r);
note('CREATE INDEX: ' . kinds_str($r));
is($n->{CREATE}, 1, 'CREATE INDEX: one CREATE record');
ok($n->{INSERT}, 'CREATE INDEX: INSERT records of its batches');
is($n->{BUILD_END}, 1, 'CREATE INDEX: one BUILD_END record');
ok(!$n->{DROP} && !$n->{DELETE}, 'CREATE INDEX: no DROP, no DELETE');
is(join(' ', map { $_->[0] } ($r->[0], $r->[-1])), 'CREATE BUILD_END',
	'CREATE INDEX: CREATE first, BUILD_END last');
described($r, 'CREATE INDEX');

$r = records_of(q{INSERT INTO t SELECT g % 1000 FROM generate_series(1, 2000) g});
note('INSERT: ' . kinds_str($r));
ok(kinds($r)->{INSERT}, 'committed inserts: INSERT records');
is_deeply([ keys %{ kinds($r) } ], ['INSERT'], 'committed inserts: nothing else');
described($r, 'INSERT');
like($r->[0][1] // '', qr/\S/, 'an INSERT record\'s description is not empty');

$r = records_of(q{BEGIN; INSERT INTO t VALUES (1); ROLLBACK});
is(kinds_str($r), '(none)', 'a small aborted insert writes no pmhash record');

$r = records_of(q{DELETE FROM t WHERE k % 10 = 0; VACUUM (INDEX_CLEANUP ON) t});
$n = kinds($r);
note('VACUUM: ' . kinds_str($r));
ok($n->{DELETE}, 'VACUUM that removes entries: DELETE records');
ok(!$n->{CREATE} && !$n->{DROP} && !$n->{BUILD_END},
	'VACUUM: no CREATE, DROP or BUILD_END');
described($r, 'VACUUM');

$r = records_of(q{REINDEX INDEX t_k});
$n = kinds($r);
note('REINDEX: ' . kinds_str($r));
is($n->{CREATE}, 1, 'REINDEX: a CREATE record for the new storage');
is($n->{BUILD_END}, 1, 'REINDEX: a BUILD_END record');
ok($n->{INSERT}, 'REINDEX: INSERT records of its batches');
is($n->{DROP}, 1, 'REINDEX: a DROP record for the old storage');
is($r->[-1][0], 'DROP', 'REINDEX: the old pool is dropped last (after the commit)');
described($r, 'REINDEX');

$r = records_of(q{BEGIN; CREATE INDEX t_k2 ON t USING pmhash (k); ROLLBACK});
$n = kinds($r);
note('CREATE INDEX rolled back: ' . kinds_str($r));
is($n->{CREATE}, 1, 'CREATE INDEX rolled back: a CREATE record');
is($n->{DROP}, 1, 'CREATE INDEX rolled back: a DROP record');
is($r->[-1][0], 'DROP', 'CREATE INDEX rolled back: DROP last (after the abort)');

$node->safe_psql('postgres', q{
	CREATE TABLE d (k int4);
	INSERT INTO d SELECT g FROM generate_series(1, 1000) g;
	CREATE INDEX d_k ON d USING pmhash (k);
});
$r = records_of(q{TRUNCATE d});
$n = kinds($r);
note('TRUNCATE: ' . kinds_str($r));
ok($n->{CREATE} && $n->{DROP}, 'TRUNCATE: CREATE for the new storage, DROP for the old');

$r = records_of(q{DROP INDEX d_k});
note('DROP INDEX: ' . kinds_str($r));
is_deeply(kinds($r), { DROP => 1 }, 'DROP INDEX: one DROP record, nothing else');
described($r, 'DROP INDEX');

# every name is one of the five
my $all = $node->safe_psql('postgres', qq{
	SELECT string_agg(DISTINCT record_type, ',' ORDER BY record_type)
	FROM pg_get_wal_records_info_till_end_of_wal('$section_start')
	WHERE resource_manager = 'pmhash'});
is($all, 'BUILD_END,CREATE,DELETE,DROP,INSERT',
	'the pmhash record types in the WAL are exactly the five names');

# unlogged
$node->safe_psql('postgres', q{
	CREATE UNLOGGED TABLE u (k int4);
	CREATE INDEX u_k ON u USING pmhash (k);
});
$r = records_of(q{INSERT INTO u SELECT g % 100 FROM generate_series(1, 5000) g});
ok(!kinds($r)->{INSERT}, 'inserts into an unlogged pmhash index write no INSERT record')
  or diag(kinds_str($r));
is(forced_count($node, 'u', 'k = 7'), '50', 'the unlogged index answers');

# ------------------------------------------------------------------------
# the primary's crash recovery replays pmhash records over its pools

$node->safe_psql('postgres', q{
	CREATE TABLE c (id bigserial, k int4);
	INSERT INTO c (k) SELECT g % 2000 FROM generate_series(1, 20000) g;
	CREATE INDEX c_k ON c USING pmhash (k);
	CREATE TABLE e (k int4);
	INSERT INTO e SELECT g % 300 FROM generate_series(1, 3000) g;
	CREATE INDEX e_k ON e USING pmhash (k);
	CREATE INDEX e_k_old ON e USING pmhash (k);
	CHECKPOINT;
});
my $redo = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
$node->safe_psql('postgres', q{
	INSERT INTO c (k) SELECT g % 2000 FROM generate_series(1, 20000) g;
	INSERT INTO c (k) SELECT 0 FROM generate_series(1, 3000);
	DELETE FROM c WHERE k % 9 = 4;
	VACUUM (INDEX_CLEANUP ON) c;
	INSERT INTO c (k) SELECT g % 2000 FROM generate_series(1, 5000) g;
	DROP INDEX e_k_old;
	REINDEX INDEX e_k;
	INSERT INTO e SELECT g % 300 FROM generate_series(1, 3000) g;
	CREATE TABLE f (k int4);
	INSERT INTO f SELECT g % 500 FROM generate_series(1, 5000) g;
	CREATE INDEX f_k ON f USING pmhash (k);
	INSERT INTO f SELECT g % 500 FROM generate_series(1, 1000) g;
	BEGIN; INSERT INTO c (k) SELECT 7 FROM generate_series(1, 100); ROLLBACK;
});
$node->safe_psql('postgres', 'INSERT INTO flush_marker VALUES (1)');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(DISTINCT record_type, ',' ORDER BY record_type)
	FROM pg_get_wal_records_info_till_end_of_wal('$redo')
	WHERE resource_manager = 'pmhash'}),
	'BUILD_END,CREATE,DELETE,DROP,INSERT',
	'pmhash records of every kind since the last checkpoint');
$node->stop('immediate');
$node->start;
wait_rebuilt($node, 'after crash recovery', 'postgres', 'c_k', 'e_k', 'f_k');
plans_agree($node, 'after crash recovery, c_k', table => 'c', hi => 2100, min_keys => 1900);
plans_agree($node, 'after crash recovery, e_k', table => 'e', hi => 400, min_keys => 300);
plans_agree($node, 'after crash recovery, f_k', table => 'f', hi => 600, min_keys => 500);
is($node->safe_psql('postgres', q{SELECT to_regclass('e_k_old') IS NULL}), 't',
	'the index dropped after the checkpoint stays dropped');
$node->safe_psql('postgres', q{INSERT INTO c (k) SELECT g FROM generate_series(1, 100) g});
plans_agree($node, 'after crash recovery and more inserts, c_k', table => 'c',
	hi => 2100, min_keys => 1900);
$node->stop;

# ------------------------------------------------------------------------
# wal_level = minimal

my $min = PostgreSQL::Test::Cluster->new('minimal');
$min->init;    # wal_level = minimal, max_wal_senders = 0
$min->append_conf('postgresql.conf', q{
autovacuum = off
checkpoint_timeout = 1h
});
$min->start;
is($min->safe_psql('postgres', 'SHOW wal_level'), 'minimal', 'wal_level is minimal');
$min->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	BEGIN;
	CREATE TABLE m1 (k int4);
	CREATE INDEX m1_k ON m1 USING pmhash (k);
	INSERT INTO m1 SELECT g % 1000 FROM generate_series(1, 20000) g;
	COMMIT;
	BEGIN;
	SET LOCAL wal_skip_threshold = 0;
	CREATE TABLE m2 (k int4);
	INSERT INTO m2 SELECT g % 1000 FROM generate_series(1, 20000) g;
	CREATE INDEX m2_k ON m2 USING pmhash (k);
	INSERT INTO m2 SELECT g % 1000 FROM generate_series(1, 5000) g;
	COMMIT;
	CREATE TABLE m3 (k int4);
	INSERT INTO m3 SELECT g % 1000 FROM generate_series(1, 5000) g;
	CREATE INDEX m3_k ON m3 USING pmhash (k);
	BEGIN;
	TRUNCATE m3;
	INSERT INTO m3 SELECT g % 1000 FROM generate_series(1, 7000) g;
	COMMIT;
	BEGIN;
	CREATE TABLE m4 (k int4);
	CREATE INDEX m4_k ON m4 USING pmhash (k);
	INSERT INTO m4 SELECT g FROM generate_series(1, 1000) g;
	ROLLBACK;
	INSERT INTO m1 SELECT g % 1000 FROM generate_series(1, 3000) g;
	INSERT INTO m2 SELECT g % 1000 FROM generate_series(1, 3000) g;
});
for my $t ('m1', 'm2', 'm3')
{
	plans_agree($min, "wal_level minimal, $t", table => $t, hi => 1100, min_keys => 1000);
}
$min->stop('immediate');
$min->start;
wait_rebuilt($min, 'wal_level minimal after a crash', 'postgres', 'm1_k', 'm2_k', 'm3_k');
is($min->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT (SELECT count(*) FROM m1), (SELECT count(*) FROM m2), (SELECT count(*) FROM m3)}),
	'23000|28000|7000', 'wal_level minimal: every committed row is there after the crash');
for my $t ('m1', 'm2', 'm3')
{
	plans_agree($min, "wal_level minimal after a crash, $t", table => $t,
		hi => 1100, min_keys => 1000);
}
$min->safe_psql('postgres', q{INSERT INTO m1 SELECT g FROM generate_series(1, 100) g});
plans_agree($min, 'wal_level minimal after a crash and more inserts, m1', table => 'm1',
	hi => 1100, min_keys => 1000);
$min->stop;

done_testing();
