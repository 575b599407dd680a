
# Copyright (c) pmhash authors
#
# Pruning (pmhashprune.c): when relocating into a segment finds no room in
# it and its overflow chain, the entries there that scans and unique
# checks hinted dead are deleted first, as btree and hash delete the dead
# items of a full page, and a PRUNE record reaches the WAL before the pool
# changes.  A key updated many times between VACUUMs keeps a short chain.
#   1. a hot key of a plain index (updates through index scans, which
#      hint) and of a unique one (updates through sequential scans: its
#      unique checks hint), 3000 non-HOT updates each: PRUNE records; far
#      fewer entries than versions, with no VACUUM; every key's rows
#      through the index equal a sequential scan's, and pmhash_check is
#      empty; a duplicate of the live row is refused;
#   2. prunes while a REPEATABLE READ snapshot is open spare the versions
#      it may see (they are never hinted): it still finds its row;
#   3. a streaming standby replays the PRUNE records and agrees with its
#      heap.  The conflict horizon: rows whose pages no heap record
#      touches in the window (checked), so that only the PRUNE's horizon
#      protects an old standby snapshot (no hot_standby_feedback): the
#      horizon is the deleter's xid, not a later one, and the standby's
#      older snapshot is cancelled by a recovery conflict (counted in
#      pg_stat_database_conflicts) or still counts every old row, never
#      fewer;
#   4. an immediate stop after prunes, and a restart (the pool kept the
#      prunes; its crash recovery does not apply pmhash records): the same
#      answers; the pool is stale then, and nothing is pruned there (no
#      PRUNE record, the dead versions' entries stay) until a REINDEX;
#   5. an UNLOGGED table's index prunes too, without writing any record.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashHints;
use PmhashReplica;

my $node = PostgreSQL::Test::Cluster->new('prune');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pmhash'
autovacuum = off
checkpoint_timeout = 1h
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE EXTENSION pg_walinspect;
});

# a standby that gets the tables through the WAL
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('prune_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', q{
hot_standby_feedback = off
max_standby_streaming_delay = 0
});
$standby->start;

$node->safe_psql('postgres', hint_tables_sql());

my $index_scan = $INDEX_SCAN;


sub wal_now
{
	return $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
}

# PRUNE records of index $ix since $from: how many, and the newest
# conflict horizon among them (0 if none)
sub prunes
{
	my ($from, $ix) = @_;
	# (the WAL must be flushed up to where the records are read)
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $out = $node->safe_psql('postgres', qq{
		SELECT count(*), coalesce(max(substring(description FROM 'conflict horizon (\\d+)')::bigint), 0)
		FROM pg_get_wal_records_info('$from', pg_current_wal_flush_lsn())
		WHERE resource_manager = 'pmhash' AND record_type = 'PRUNE'
		  AND description LIKE '%/' || pg_relation_filenode('$ix') || ' id %'});
	return split(/\|/, $out);
}

sub entries
{
	my ($ix) = @_;
	return $node->safe_psql('postgres', qq{SELECT entries FROM pmhash_stats('$ix')});
}

sub agree
{
	my ($on, $label, $table) = @_;
	plans_agree($on, "$label, $table", table => $table, lo => 1, hi => 1000,
		min_keys => 1000);
}

# 1. ------------------------------------------------------------------
my $start = wal_now();
update_key($node, 't', 7, 3000, $index_scan);
update_key($node, 'u', 7, 3000, $SEQ_SCAN);
my ($n) = prunes($start, 't_k');
cmp_ok($n, '>=', 1, "plain index: $n PRUNE records");
($n) = prunes($start, 'u_k');
cmp_ok($n, '>=', 1, "unique index: $n PRUNE records");
for my $ix ('t_k', 'u_k')
{
	my $e = entries($ix);
	cmp_ok($e, '<', 2500, "$ix: $e entries for 4000 versions, with no VACUUM");
}
agree($node, 'after prunes', $_) for ('t', 'u');
is($node->safe_psql('postgres', "$index_scan SELECT v FROM t WHERE k = 7"), '3000',
	'the hot key\'s live row through the index');
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'INSERT INTO u VALUES (7, 0)');
like($stderr, qr/duplicate key value violates unique constraint "u_k"/,
	'a duplicate of the live row is refused');

# 2. ------------------------------------------------------------------
# 200 keys fill an eighth of one segment; 700 hinted versions of key 9
# later make an insert that finds the segment full prune
$node->safe_psql('postgres', q{
	CREATE TABLE p (k int4, v int4);
	INSERT INTO p SELECT g, 0 FROM generate_series(1, 200) g;
	CREATE INDEX p_k ON p USING pmhash (k);
	CREATE INDEX p_v ON p (v);
	ANALYZE p;
});
update_key($node, 'p', 9, 700, $index_scan);
my $bg = $node->background_psql('postgres', on_error_stop => 1);
is($bg->query_safe(
	"BEGIN ISOLATION LEVEL REPEATABLE READ; $index_scan SELECT v FROM p WHERE k = 9"),
	'700', 'an old snapshot reads its row');
$start = wal_now();
update_key($node, 'p', 9, 1000, $index_scan);
($n) = prunes($start, 'p_k');
cmp_ok($n, '>=', 1, "$n PRUNE records while the snapshot is open");
is($bg->query_safe('SELECT v FROM p WHERE k = 9'), '700',
	'the old snapshot still finds its row through the index');
is($bg->query_safe('SELECT count(*) FROM p WHERE k = 9'), '1',
	'and finds it once');
$bg->query_safe('COMMIT');
$bg->quit;
update_key($node, 'p', 9, 100, $index_scan);
plans_agree($node, 'after the old snapshot, p', table => 'p', lo => 1,
	hi => 200, min_keys => 200);

# 3. ------------------------------------------------------------------
$node->wait_for_catchup($standby, 'replay');
agree($standby, 'standby', $_) for ('t', 'u');

# A table of 2000 rows of key 11 on pages that keep a third of their space
# free, so that neither an update (new versions on the same page) nor a
# read prunes a page; $prepare runs after the rows are updated once.
# Then index scans hint the old versions, and inserts of key 11 fill the
# segment until one prunes.  Returns the xid of the update, the WAL
# position before the scans, and how many PRUNE records followed.
sub old_versions_pruned
{
	my ($table, $prepare) = @_;
	$node->safe_psql('postgres', qq{
		CREATE TABLE $table (k int4, v int4);
		INSERT INTO $table SELECT CASE WHEN g % 3 = 0 THEN 11 ELSE 12 END, g
		  FROM generate_series(1, 6000) g;
		CREATE INDEX ${table}_k ON $table USING pmhash (k);
		CREATE INDEX ${table}_v ON $table (v);
		DELETE FROM $table WHERE k = 12;
		VACUUM $table;
		ANALYZE $table;
	});
	$node->wait_for_catchup($standby, 'replay');
	$prepare->(0);
	my $deleter = $node->safe_psql('postgres', qq{
		BEGIN; $index_scan UPDATE $table SET v = v + 100000 WHERE k = 11;
		SELECT txid_current(); COMMIT;});
	$prepare->(1);
	# transactions in between: a horizon of "now" would be newer (they
	# write, so their commits flush the WAL: the clog's commit LSNs, kept
	# per group of transactions, then let the scans set hint bits)
	$node->safe_psql('postgres', 'CREATE TABLE IF NOT EXISTS side (x int4)');
	$node->safe_psql('postgres', 'INSERT INTO side VALUES (1)') for 1 .. 10;
	my $from = wal_now();
	$node->safe_psql('postgres', "$index_scan SELECT count(*) FROM $table WHERE k = 11")
	  for 1 .. 2;
	my $got = 0;
	for my $i (1 .. 40)
	{
		my $lo = 500000 + $i * 50;
		$node->safe_psql('postgres',
			"INSERT INTO $table SELECT 11, g FROM generate_series($lo, $lo + 49) g");
		($got) = prunes($from, "${table}_k");
		last if $got > 0;
	}
	return ($deleter, $from, $got);
}

# records since $from that could cancel a standby query besides pmhash's
sub other_conflicts
{
	my ($from) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM pg_get_wal_records_info('$from', pg_current_wal_flush_lsn())
		WHERE (resource_manager = 'Heap2' AND record_type IN ('PRUNE', 'VACUUM', 'FREEZE_PAGE')
				AND description !~ 'latestRemovedXid 0 ')
		   OR (resource_manager IN ('Btree', 'Hash', 'Gist', 'SPGist') AND record_type ~ 'DELETE|VACUUM')});
}

# a standby snapshot older than the update
my $conflicts = $standby->safe_psql('postgres', q{
	SELECT confl_snapshot FROM pg_stat_database_conflicts WHERE datname = 'postgres'});
my $sb = $standby->background_psql('postgres', on_error_stop => 0);
my ($deleter, $from, $got) = old_versions_pruned('h1', sub {
	my ($updated) = @_;
	return if $updated;
	is($sb->query_safe(
		"BEGIN ISOLATION LEVEL REPEATABLE READ; $index_scan SELECT count(*) FROM h1 WHERE k = 11"),
		'2000', 'a standby snapshot sees the 2000 rows');
});
cmp_ok($got, '>=', 1, "$got PRUNE records of the old versions");
is(other_conflicts($from), '0', 'no heap or index record conflicts in the window');
my (undef, $horizon) = prunes($from, 'h1_k');
is($horizon, $deleter,
	"the conflict horizon is the rows' deleter ($deleter), as btree's would be");
$node->wait_for_catchup($standby, 'replay');
my $after = eval { $sb->query('SELECT count(*) FROM h1 WHERE k = 11') };
my $sberr = $@ || ($sb->{stderr} // '');
if ($sberr ne '')
{
	# (not a crash: the standby counts a snapshot conflict)
	ok($standby->poll_query_until('postgres', qq{
		SELECT confl_snapshot > $conflicts FROM pg_stat_database_conflicts
		WHERE datname = 'postgres'}),
		'the standby\'s older snapshot was cancelled by a recovery conflict');
}
else
{
	is($after, '2000', 'the standby\'s older snapshot still counts every old row');
}
eval { $sb->quit; };
agree($standby, 'standby after the conflict', 't');


# 4. ------------------------------------------------------------------
update_key($node, 't', 13, 2000, $index_scan);
$node->stop('immediate');
$node->start;
agree($node, 'after crash recovery', $_) for ('t', 'u');
$start = wal_now();
update_key($node, 't', 13, 2000, $index_scan);
($n) = prunes($start, 't_k');
is($n, 0, 'a stale pool is not pruned');
cmp_ok(entries('t_k'), '>=', 3000, 'stale pool: the dead versions\' entries stay');
is($node->safe_psql('postgres', "$index_scan SELECT v FROM t WHERE k = 13"), '4000',
	'stale pool: the live row');
$node->safe_psql('postgres', 'REINDEX INDEX t_k');
$start = wal_now();
update_key($node, 't', 13, 3000, $index_scan);
($n) = prunes($start, 't_k');
cmp_ok($n, '>=', 1, "after REINDEX: $n PRUNE records");
agree($node, 'after REINDEX', 't');

# 5. ------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE UNLOGGED TABLE w (k int4, v int4);
	INSERT INTO w SELECT g, 0 FROM generate_series(1, 1000) g;
	CREATE INDEX w_k ON w USING pmhash (k);
	CREATE INDEX w_v ON w (v);
	ANALYZE w;
});
$start = wal_now();
update_key($node, 'w', 5, 3000, $index_scan);
my $e = entries('w_k');
cmp_ok($e, '<', 2500, "unlogged: $e entries for 4000 versions");
is(join(',', prunes($start, 'w_k')), '0,0', 'unlogged: no PRUNE record');
agree($node, 'unlogged', 'w');

$standby->stop;
$node->stop;
done_testing();
