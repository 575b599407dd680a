
# Copyright (c) pmhash authors
#
# DDL of pmhash indexes while a base backup runs.  A base backup copies the
# files of a running server, the pool files among them, at moments nobody
# controls; the WAL from the backup's start to its end makes the copy
# consistent.  To control what the copy holds, this test takes the backup
# through the low-level API (pg_backup_start, a file copy, pg_backup_stop,
# the WAL), and runs between the copy and pg_backup_stop: a CREATE INDEX
# (the copy has no pool for it), a DROP INDEX (the copy has a pool for a
# storage that is gone), a REINDEX (both), a TRUNCATE and inserts.
#
# Three servers are restored from that backup:
#   - a clone (crash recovery from the backup label to the end of the
#     backup, no archive, no standby),
#   - a hot standby (streaming),
#   - the same hot standby after its promotion, which happens while a
#     CREATE INDEX is in progress on the primary (its pool may stay behind
#     only with the relation file PostgreSQL itself leaves then).
# Each must end with every pmhash index usable and agreeing with its heap
# per key (forced index and bitmap scans against a seqscan; pmhash_check()
# empty) with no manual step, and with exactly the pool files of its pmhash
# indexes: no pool of a dropped storage left behind.  An unlogged table's
# pmhash index comes back empty, like its table, and works.

use strict;
use warnings;

use File::Basename;
use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', q{
shared_buffers = 32MB
autovacuum = off
log_statement = ddl
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (id int4, k int4, k2 int4, k3 int4);
	INSERT INTO t SELECT g, g % 500, g % 400, g % 300 FROM generate_series(1, 10000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE INDEX t_k2 ON t USING pmhash (k2);
	CREATE TABLE u (k int4);
	INSERT INTO u SELECT g % 500 FROM generate_series(1, 5000) g;
	CREATE INDEX u_k ON u USING pmhash (k);
	CREATE UNLOGGED TABLE ul (k int4);
	INSERT INTO ul SELECT g % 100 FROM generate_series(1, 2000) g;
	CREATE INDEX ul_k ON ul USING pmhash (k);
	ANALYZE;
});

# ------------------------------------------------------------------------
# the backup, by hand

my $backup = $primary->backup_dir . '/manual';
my $session = $primary->background_psql('postgres');
$session->query_safe(q{SELECT pg_backup_start('manual', true)});
PostgreSQL::Test::RecursiveCopy::copypath(
	$primary->data_dir, $backup,
	filterfn => sub {
		my $p = shift;
		return $p !~ m{^(pg_wal/.|postmaster\.(pid|opts)$|pg_replslot/.)};
	});

# what the copy does not know
$primary->safe_psql('postgres', q{
	CREATE INDEX t_k3 ON t USING pmhash (k3);
	DROP INDEX t_k2;
	REINDEX INDEX t_k;
	TRUNCATE u;
	INSERT INTO u SELECT g % 500 FROM generate_series(1, 3000) g;
	INSERT INTO t SELECT g, g % 500, g % 400, g % 300 FROM generate_series(1, 2000) g;
});

my $label = $session->query_safe(q{SELECT labelfile FROM pg_backup_stop(false)});
$session->quit;
PostgreSQL::Test::Utils::append_to_file("$backup/backup_label", "$label\n");
# the WAL up to the backup's end (and beyond)
for my $f (glob($primary->data_dir . '/pg_wal/*'))
{
	next unless basename($f) =~ /^[0-9A-F]{24}$|\.history$/;
	copy($f, "$backup/pg_wal/" . basename($f)) or die "copy $f: $!";
}

# the pool files below $node's pool directory: "dboid/name"
sub pool_files
{
	my ($node) = @_;
	my $dir = $node->data_dir . '/pmhash';
	return join("\n", sort map { basename(dirname($_)) . '/' . basename($_) }
		  glob("$dir/*/*.pool"));
}

# the pool files $node's catalog calls for, of its indexes of persistence
# $persistence ('p', 'u')
sub expected_pools
{
	my ($node, $persistence) = @_;
	return join("\n", sort split(/\n/, $node->safe_psql('postgres', qq{
		SELECT (SELECT oid FROM pg_database WHERE datname = current_database())
				|| '/' || c.reltablespace || '_' || pg_relation_filenode(c.oid) || '.pool'
		FROM pg_class c JOIN pg_am a ON a.oid = c.relam
		WHERE a.amname = 'pmhash' AND c.relpersistence = '$persistence'})));
}

# $leak: a pool ("dboid/name") that may stay as long as the relation file
# of its storage stays too (PostgreSQL leaves the files of a storage whose
# creating transaction never ended, and so may pmhash)
sub check
{
	my ($node, $label, $leak) = @_;
	wait_rebuilt($node, $label, 'postgres', 't_k', 't_k3', 'u_k');
	is($node->safe_psql('postgres', q{
		SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class
		WHERE relname IN ('t_k', 't_k2', 't_k3', 'u_k')}),
		't_k,t_k3,u_k', "$label: the indexes of the end of the backup");
	plans_agree($node, "$label, t_k", hi => 600, min_keys => 500);
	plans_agree($node, "$label, t_k3", index => 't_k3', col => 'k3', hi => 600,
		min_keys => 300);
	plans_agree($node, "$label, u_k", table => 'u', hi => 600, min_keys => 500);
	my $pools = pool_files($node);
	if (defined $leak)
	{
		my ($db, $spc, $relnode) = $leak =~ m{^(\d+)/(\d+)_(\d+)\.pool$};
		if (-e $node->data_dir . "/base/$db/$relnode")
		{
			note("$label: $leak may stay, as its relation file does");
			$pools = join("\n", grep { $_ ne $leak } split(/\n/, $pools));
		}
	}
	# an unlogged index's pool may be missing until its first use (a
	# standby has no main fork of an unlogged index either; after the
	# reset at the end of recovery the pool is made empty when used)
	my %unlogged = map { $_ => 1 } split(/\n/, expected_pools($node, 'u'));
	$pools = join("\n", grep { !$unlogged{$_} } split(/\n/, $pools));
	is($pools, expected_pools($node, 'p'),
		"$label: exactly the pools of its permanent pmhash indexes, and maybe of its unlogged ones");
	return;
}

# an unlogged table comes back empty from a backup (its init fork): so
# must its pmhash index, and then work
sub check_unlogged
{
	my ($node, $label) = @_;
	is(seq_count($node, 'ul', 'true'), '0', "$label: the unlogged table is empty");
	is(forced_count($node, 'ul', 'k = 3'), '0', "$label: its pmhash index finds nothing");
	is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('ul_k')}),
		'0', "$label: its pmhash index is empty");
	$node->safe_psql('postgres', q{INSERT INTO ul SELECT 3 FROM generate_series(1, 50)});
	is(forced_count($node, 'ul', 'k = 3'), '50', "$label: the unlogged index finds new rows");
	my $ulpool = expected_pools($node, 'u');
	ok((grep { $_ eq $ulpool } split(/\n/, pool_files($node))),
		"$label: now its pool $ulpool is there");
	plans_agree($node, "$label, ul_k", table => 'ul', hi => 10, min_keys => 1);
	return;
}

check($primary, 'primary');

# ------------------------------------------------------------------------
# a clone

my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($primary, 'manual');
$clone->start;
is($clone->safe_psql('postgres', 'SELECT count(*) FROM t'), '12000',
	'the clone has the rows of the end of the backup');
check($clone, 'clone');
check_unlogged($clone, 'clone');
my ($ret, $out, $err) = $clone->psql('postgres', q{
	INSERT INTO t SELECT g, g % 500, g % 400, g % 300 FROM generate_series(1, 1000) g;
	INSERT INTO u SELECT g % 500 FROM generate_series(1, 1000) g});
is($ret, 0, 'the clone takes inserts') or diag($err);
check($clone, 'clone after inserts');
$clone->restart;
check($clone, 'clone after a restart');
$clone->stop;

# ------------------------------------------------------------------------
# a hot standby, then promoted

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'manual', has_streaming => 1);
$standby->start;
$primary->safe_psql('postgres', q{
	INSERT INTO t SELECT g, g % 500, g % 400, g % 300 FROM generate_series(1, 1000) g});
$primary->wait_for_catchup($standby);
check($standby, 'standby');

# promoted while a CREATE INDEX is in progress on the primary: the standby
# replayed its pool's creation and build, never its commit.  PostgreSQL
# leaves the storage's relation file behind then (as after a crash of the
# primary in the same state), and pmhash may leave its pool with it.
my $open = $primary->background_psql('postgres');
$open->query_safe(q{BEGIN; CREATE INDEX t_open ON t USING pmhash (id)});
my $open_pool = $open->query_safe(q{
	SELECT (SELECT oid FROM pg_database WHERE datname = current_database())
		|| '/0_' || pg_relation_filenode('t_open') || '.pool'});
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
check($standby, 'promoted standby', $open_pool);
check_unlogged($standby, 'promoted standby');
$standby->restart;
check($standby, 'promoted standby after a restart', $open_pool);
$open->quit;

$standby->stop;
$primary->stop;
done_testing();
