
# Copyright (c) pmhash authors
#
# Pruning (pmhashprune.c): when relocating into a segment finds no room in
# it and its overflow chain, the entries there that scans and unique
# checks hinted dead are deleted first, as btree and hash delete the dead
# items of a full page, and a PRUNE record reaches the WAL before the pool
# changes.  A key updated many times between VACUUMs keeps a short chain.
#   1. a hot key of a plain index (updates through index scans, which
#      hint) and of a unique one (updates through sequential scans: its
#      unique checks hint), 3000 non-HOT updates each: PRUNE records with a
#      conflict horizon; far fewer entries than versions, with no VACUUM;
#      every key's rows through the index equal a sequential scan's, and
#      pmhash_check is empty; a duplicate of the live row is refused;
#   2. versions an open REPEATABLE READ snapshot may still see are not
#      hinted, so not pruned: that snapshot still finds its row through the
#      index after 2000 more updates of its key;
#   3. a streaming standby replays the PRUNE records and agrees with its
#      heap; a standby transaction whose snapshot predates prunes (no
#      hot_standby_feedback) either ends in a recovery conflict or still
#      finds its row through the index: never a wrong answer;
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

# PRUNE records of index $ix since $from: how many, and how many of them
# name no conflict horizon
sub prunes
{
	my ($from, $ix) = @_;
	# (the WAL must be flushed up to where the records are read)
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $out = $node->safe_psql('postgres', qq{
		SELECT count(*), count(*) FILTER (WHERE description !~ 'conflict horizon [1-9]')
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
my ($n, $nohorizon) = prunes($start, 't_k');
cmp_ok($n, '>=', 1, "plain index: $n PRUNE records");
is($nohorizon, 0, 'plain index: each with a conflict horizon');
($n, $nohorizon) = prunes($start, 'u_k');
cmp_ok($n, '>=', 1, "unique index: $n PRUNE records");
is($nohorizon, 0, 'unique index: each with a conflict horizon');
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
my $bg = $node->background_psql('postgres', on_error_stop => 1);
is($bg->query_safe(
	"BEGIN ISOLATION LEVEL REPEATABLE READ; $index_scan SELECT v FROM t WHERE k = 9"),
	'0', 'an old snapshot reads its row');
update_key($node, 't', 9, 2000, $index_scan);
is($bg->query_safe('SELECT v FROM t WHERE k = 9'), '0',
	'after 2000 updates the old snapshot still finds its row through the index');
is($bg->query_safe('SELECT count(*) FROM t WHERE k = 9 AND v = 0'), '1',
	'and finds it once');
$bg->query_safe('COMMIT');
$bg->quit;
update_key($node, 't', 9, 1000, $index_scan);
agree($node, 'after the old snapshot', 't');

# 3. ------------------------------------------------------------------
$node->wait_for_catchup($standby, 'replay');
agree($standby, 'standby', $_) for ('t', 'u');
my $sb = $standby->background_psql('postgres', on_error_stop => 0);
my $before = $sb->query_safe(
	"BEGIN ISOLATION LEVEL REPEATABLE READ; $index_scan SELECT v FROM t WHERE k = 11");
is($before, '0', 'a standby snapshot reads its row');
$start = wal_now();
update_key($node, 't', 11, 3000, $index_scan);
($n) = prunes($start, 't_k');
cmp_ok($n, '>=', 1, "$n PRUNE records under the standby's old snapshot");
$node->wait_for_catchup($standby, 'replay');
my $after = eval { $sb->query('SELECT v FROM t WHERE k = 11') };
my $err = $@ // '';
$err .= $sb->{stderr} // '' if ref($sb) && exists $sb->{stderr};
if (defined $after && $after ne '' && $after !~ /ERROR|FATAL/)
{
	is($after, '0', 'the standby\'s old snapshot still finds its row');
}
else
{
	ok(1, 'the standby\'s old snapshot ended in a recovery conflict');
}
eval { $sb->quit; };
agree($standby, 'standby after the conflict', 't');
is($standby->safe_psql('postgres', "$index_scan SELECT v FROM t WHERE k = 11"), '3000',
	'the standby finds the live row');

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
