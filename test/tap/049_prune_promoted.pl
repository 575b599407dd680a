
# Copyright (c) pmhash authors
#
# A standby can hold entries its primary never had: an INSERT ... ON
# CONFLICT logs its entries before it places them, and when placing fails
# (here: no pmhash shared memory for an overflow segment) and the
# statement aborts, the primary has no entries to delete later, while the
# standby keeps them.  Their heap slots are freed by VACUUM.  A pool that
# redo made is therefore stale, as one loaded during recovery is: after a
# promotion, scans give it no hints and inserts prune nothing there, so
# the freed slots' entries are neither an error (the heap's checks of a
# prune's TIDs) nor a wrong answer.  Found by a review, which got "index
# corrupted" errors from every insert of the key on the promoted node.
#   - the failed upsert leaves an INSERT record of its entries;
#   - a transaction whose flush failed inside a block that caught the
#     error commits once memory is freed: the standby, which got the outer
#     rows' entries twice in the WAL, finds each row once;
#   - on the promoted node: index scans of the key, then 30,000 inserts of
#     it (enough to fill its chain many times), all succeed; the index
#     finds what a sequential scan finds; pmhash_check is empty;
#   - scans there hint nothing (the pool is stale): a second scan over 100
#     dead rows returns them all again.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashHints;
use PmhashShmem;

my $p = PostgreSQL::Test::Cluster->new('pp');
$p->init(allows_streaming => 1);
$p->append_conf('postgresql.conf', small_shmem_conf());
$p->start;
$p->safe_psql('postgres', 'CREATE EXTENSION pmhash; CREATE EXTENSION pg_walinspect;');
$p->backup('b');
my $s = PostgreSQL::Test::Cluster->new('ps');
$s->init_from_backup($p, 'b', has_streaming => 1);
$s->append_conf('postgresql.conf', q{
pmhash.shared_memory = 16MB
hot_standby_feedback = off
});
$s->start;

# the index is made after the standby started: its pool there is redo's;
# then the primary's shared memory is used up by other indexes, and rows
# of key -5 fill the key's chain until an overflow segment cannot be had
$p->safe_psql('postgres', q{
	CREATE TABLE x (k int4);
	CREATE INDEX x_k ON x USING pmhash (k);
	INSERT INTO x SELECT -5 FROM generate_series(1, 500);
});
my ($small, $ret, $out, $err) = create_until_full($p, 's');
my $filled = 0;
for my $b (1 .. 60)
{
	($ret, $out, $err) = $p->psql('postgres',
		'INSERT INTO x SELECT -5 FROM generate_series(1, 500)');
	last if $ret != 0;
	$filled++;
}
like($err, qr/out of pmhash shared memory/, "rows of key -5 fill its chain ($filled batches)");
my $from = $p->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
($ret, $out, $err) = $p->psql('postgres', q{
	INSERT INTO x SELECT -5 FROM generate_series(1, 20) ON CONFLICT DO NOTHING});
like($err, qr/out of pmhash shared memory/, 'an upsert fails while placing its entries');
$p->safe_psql('postgres', 'CHECKPOINT');
cmp_ok($p->safe_psql('postgres', qq{
	SELECT count(*) FROM pg_get_wal_records_info('$from', pg_current_wal_flush_lsn())
	WHERE resource_manager = 'pmhash' AND record_type = 'INSERT'}), '>=', 1,
	'its entries reached the WAL');
# a transaction's flush fails in a block that catches the error: its
# outer rows (an upsert's, so their entries went to the WAL at the failed
# flush) go back into its collecting log; memory is freed before COMMIT,
# which places them and logs them again.  The standby applies both
# records and must find each row once.
my $before = $p->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
my $bg = $p->background_psql('postgres', on_error_stop => 0);
$bg->query_safe('BEGIN');
$bg->query_safe(q{
	INSERT INTO x SELECT -5 FROM generate_series(1, 12) ON CONFLICT DO NOTHING});
$bg->query(caught_insert_block('x', -5));
like($bg->{stderr}, qr/NOTICE:  caught: out of pmhash shared memory/,
	'a block caught the failed flush of the outer rows');
$bg->{stderr} = '';
$p->safe_psql('postgres', 'DROP TABLE ' . join(', ', map { "s$_" } 1 .. $small));
$bg->query(q{COMMIT});
is($bg->{stderr}, '', 'COMMIT placed them once memory was freed');
$bg->quit;
cmp_ok($p->safe_psql('postgres', qq{
	SELECT sum(substring(description FROM ', (\\d+) entries')::int)
	FROM pg_get_wal_records_info('$before', pg_current_wal_flush_lsn())
	WHERE resource_manager = 'pmhash' AND record_type = 'INSERT'}), '>=', 24,
	'the WAL lists the 12 outer rows twice');
$p->wait_for_catchup($s, 'replay');
my $rows = $p->safe_psql('postgres', "$SEQ_SCAN SELECT count(*) FROM x WHERE k = -5");
is($p->safe_psql('postgres', "$INDEX_SCAN SELECT count(*) FROM x WHERE k = -5"),
	$rows, "the primary's index finds the $rows rows of the key");
is($s->safe_psql('postgres', "$INDEX_SCAN SELECT count(*) FROM x WHERE k = -5"),
	$rows, "so does the standby's, each row once");
is($s->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('x_k')}), '0',
	"pmhash_check finds nothing on the standby");

# rows after the aborted ones keep their pages from truncation
$p->safe_psql('postgres', 'INSERT INTO x SELECT NULL FROM generate_series(1, 3000)');
$p->safe_psql('postgres', 'VACUUM x');
$p->wait_for_catchup($s, 'replay');
$s->promote;
$s->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';

sub agree
{
	my ($label) = @_;
	is($s->safe_psql('postgres', "$INDEX_SCAN SELECT count(*) FROM x WHERE k = -5"),
		$s->safe_psql('postgres', "$SEQ_SCAN SELECT count(*) FROM x WHERE k = -5"),
		"$label: the index finds what a sequential scan finds");
}

$s->safe_psql('postgres', 'DELETE FROM x WHERE k = -5');
$s->safe_psql('postgres', "$INDEX_SCAN SELECT count(*) FROM x WHERE k = -5") for 1 .. 2;
my $errs = '';
for my $b (1 .. 60)
{
	($ret, $out, $err) = $s->psql('postgres',
		'INSERT INTO x SELECT -5 FROM generate_series(1, 500)');
	if ($ret != 0) { $errs = $err; last; }
	$s->psql('postgres', "$INDEX_SCAN SELECT count(*) FROM x WHERE k = -5");
	if ($b % 20 == 0)
	{
		$s->safe_psql('postgres', 'DELETE FROM x WHERE k = -5');
		$s->psql('postgres', "$INDEX_SCAN SELECT count(*) FROM x WHERE k = -5");
	}
}
is($errs, '', 'on the promoted node every insert of the key succeeds');
agree('promoted');
is($s->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('x_k')}), '0',
	'pmhash_check finds nothing');

# the pool is stale: a scan that finds 100 dead rows hints none of them,
# so the next scan returns them all again
$s->safe_psql('postgres', q{
	INSERT INTO x SELECT -7 FROM generate_series(1, 100);
	DELETE FROM x WHERE k = -7});
my $reads = $s->safe_psql('postgres', qq{
	$INDEX_SCAN
	SELECT count(*) FROM x WHERE k = -7;
	SELECT pg_stat_force_next_flush();
	SELECT 'before ' || idx_tup_read FROM pg_stat_all_indexes WHERE indexrelname = 'x_k';
	SELECT count(*) FROM x WHERE k = -7;
	SELECT pg_stat_force_next_flush();
	SELECT 'after ' || idx_tup_read FROM pg_stat_all_indexes WHERE indexrelname = 'x_k';});
my ($before) = $reads =~ /^before (\d+)$/m;
my ($after) = $reads =~ /^after (\d+)$/m;
cmp_ok($after - $before, '>=', 100,
	'the pool redo made is stale: scans leave no hints ('
	  . ($after - $before) . ' TIDs)');

$s->stop;
$p->stop;
done_testing();
