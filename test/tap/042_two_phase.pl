
# Copyright (c) pmhash authors
#
# Two-phase commit of transactions that create, replace or drop pmhash
# index storage (pmhashtwophase.c), as Citus runs every multi-shard DDL:
# the pool of each storage ends as it would without two-phase commit, one
# pool per index storage, whether COMMIT or ROLLBACK PREPARED comes from
# another session, after a clean restart or after a crash; a standby
# follows; a state file left by a crash at the wrong moment is resolved
# at the next start; PREPARE fails cleanly when its state file cannot be
# written.

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashPools;

my $node = PostgreSQL::Test::Cluster->new('twophase');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
max_prepared_transactions = 10
autovacuum = off
pmhash.prewarm = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT g FROM generate_series(1, 2000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
});
my $dboid = $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'});

my $standby;
$node->backup('b');
$standby = PostgreSQL::Test::Cluster->new('twophase_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;

# the pool files of a server, and those the catalog implies
sub pools { my ($n) = @_; return pool_files($n, $dboid); }
sub expected_pools { return catalog_pools($node, 'postgres'); }

sub state_files
{
	my $dir = $node->data_dir . "/pmhash/twophase";
	opendir(my $d, $dir) or return 0;
	my @f = grep { /^\d+$/ } readdir($d);
	closedir($d);
	return scalar(@f);
}

# answers of the index and of a seqscan agree for a few keys
sub check_answers
{
	my ($what) = @_;
	is($node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE k IN (1, 500, 1999, 5000)}),
		$node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM t WHERE k IN (1, 500, 1999, 5000)}),
		"$what: index answers equal a seqscan's");
}

# --- CREATE INDEX prepared, committed from another session
$node->safe_psql('postgres', q{
	BEGIN; CREATE INDEX t_k2 ON t USING pmhash ((k + 1));
	INSERT INTO t VALUES (5000);
	PREPARE TRANSACTION 'c1'});
is(state_files(), 1, 'PREPARE wrote a state file');
$node->safe_psql('postgres', q{COMMIT PREPARED 'c1'});
is(pools($node), expected_pools(), 'COMMIT PREPARED of CREATE INDEX: one pool per index');
is(state_files(), 0, 'the state file is gone');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k + 1 = 5001}), '1', 'the new index answers');

# --- DROP INDEX prepared, a clean restart, rolled back
$node->safe_psql('postgres', q{BEGIN; DROP INDEX t_k2; PREPARE TRANSACTION 'd1'});
$node->restart;
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'd1'});
is(pools($node), expected_pools(), 'ROLLBACK PREPARED of DROP INDEX after a restart: pools kept');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k + 1 = 5001}), '1', 'the index kept answers');

# --- REINDEX prepared, a crash, committed
$node->safe_psql('postgres', q{
	BEGIN; REINDEX TABLE t; INSERT INTO t VALUES (5000);
	PREPARE TRANSACTION 'r1'});
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres', q{COMMIT PREPARED 'r1'});
is(pools($node), expected_pools(), 'COMMIT PREPARED of REINDEX after a crash: one pool per index');
check_answers('after REINDEX committed prepared');
is(state_files(), 0, 'no state file left');

# --- TRUNCATE and DROP TABLE prepared, rolled back and committed
$node->safe_psql('postgres', q{BEGIN; TRUNCATE t; PREPARE TRANSACTION 't1'});
$node->safe_psql('postgres', q{ROLLBACK PREPARED 't1'});
is(pools($node), expected_pools(), 'ROLLBACK PREPARED of TRUNCATE: the old pools stay, the new go');
check_answers('after TRUNCATE rolled back prepared');

# --- a standby follows
$node->wait_for_catchup($standby);
is(pools($standby), pools($node), 'the standby has the same pools');
$node->safe_psql('postgres', q{
	BEGIN; CREATE INDEX t_k3 ON t USING pmhash (k); PREPARE TRANSACTION 's1'});
$node->safe_psql('postgres', q{ROLLBACK PREPARED 's1'});
$node->safe_psql('postgres', q{
	BEGIN; DROP INDEX t_k2; PREPARE TRANSACTION 's2'});
$node->safe_psql('postgres', q{COMMIT PREPARED 's2'});
$node->wait_for_catchup($standby);
is(pools($node), expected_pools(), 'primary: one pool per index');
is(pools($standby), pools($node), 'the standby removed the pools too');

# --- a crash after COMMIT PREPARED, before the pool went: the state file
# and the pool are put back as they were before the statement, the server
# crashes, and the next start resolves the state file
$node->safe_psql('postgres', q{
	CREATE INDEX t_k4 ON t USING pmhash (k);
	BEGIN; DROP INDEX t_k4; PREPARE TRANSACTION 'x1'});
my $poolfile = $node->safe_psql('postgres', q{
	SELECT '0_' || relfilenode || '.pool' FROM pg_class WHERE relname = 't_k4'});
my $tpdir = $node->data_dir . '/pmhash/twophase';
opendir(my $d, $tpdir) or die;
my ($sf) = grep { /^\d+$/ } readdir($d);
closedir($d);
copy("$tpdir/$sf", "$tpdir/../saved_state") or die;
copy($node->data_dir . "/pmhash/$dboid/$poolfile", "$tpdir/../saved_pool") or die;
$node->safe_psql('postgres', q{COMMIT PREPARED 'x1'});
move("$tpdir/../saved_state", "$tpdir/$sf") or die;
move("$tpdir/../saved_pool", $node->data_dir . "/pmhash/$dboid/$poolfile") or die;
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres', q{SELECT 1});
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) = 0 FROM pg_ls_dir('pmhash/twophase', true, false) f
	WHERE f = '$sf'}), 'the next start resolved the stale state file');
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) = 0 FROM pg_ls_dir('pmhash/$dboid', true, false) f
	WHERE f = '$poolfile'}), '... and removed the pool of the dropped index');
is(pools($node), expected_pools(), 'one pool per index');

# --- a prepared transaction's pools survive the start's orphan sweep (the
# prewarm worker logs its first run of the database after the sweep)
$node->safe_psql('postgres', q{
	BEGIN; CREATE INDEX t_k5 ON t USING pmhash (k); PREPARE TRANSACTION 'k1'});
my $log_offset = -s $node->logfile;
$node->restart;
ok(eval { $node->wait_for_log(qr/pmhash prewarm: database $dboid:/, $log_offset); 1 },
	'the first worker run after the restart swept the database');
$node->safe_psql('postgres', q{COMMIT PREPARED 'k1'});
is(pools($node), expected_pools(), 'the prepared CREATE INDEX kept its pool across the restart');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 1999}), '1', 'and the index answers');

# --- a PREPARE that fails after its state file was written (a GID in
# use) leaves no state file
$node->safe_psql('postgres', q{
	CREATE TABLE other (k int4);
	BEGIN; INSERT INTO other VALUES (1); PREPARE TRANSACTION 'dup'});
my ($r0, $o0, $e0) = $node->psql('postgres', q{
	BEGIN; CREATE INDEX t_k7 ON t USING pmhash (k); PREPARE TRANSACTION 'dup'});
like($e0, qr/transaction identifier "dup" is already in use/, 'a PREPARE with a GID in use fails');
is(state_files(), 0, 'and leaves no state file');
is(pools($node), expected_pools(), 'nor a pool');
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'dup'});

# --- PREPARE fails cleanly when its state file cannot be written
ok(rmdir($tpdir), 'the state directory is empty');
open(my $fh, '>', $tpdir) or die;
close($fh);
my ($ret, $out, $err) = $node->psql('postgres', q{
	BEGIN; CREATE INDEX t_k6 ON t USING pmhash (k); PREPARE TRANSACTION 'e1'});
like($err, qr/could not write pmhash state file .* of prepared transaction "e1"/,
	'PREPARE fails with an error naming the state file');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'e1'}), '0',
	'nothing was prepared');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_class WHERE relname = 't_k6'}), '0',
	'the index was rolled back');
is(pools($node), expected_pools(), 'and so was its pool');
unlink($tpdir);

$standby->stop;
$node->stop;
done_testing();
