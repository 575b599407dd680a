
# Copyright (c) pmhash authors
#
# Inserts into a UNIQUE pmhash index while its pool is being rebuilt from
# the table (after a simulated crash of the operating system, as in TAP
# 039).  A unique check must see every row's entry, so such an insert
# waits for the rebuild, on the heavyweight lock the rebuild worker holds
# (which the deadlock detector sees).  The index is on gate(k), which is k,
# except that for k = 1 it waits while the file "rebuild_gate" exists in
# the data directory: so the rebuild, which computes the key of every row,
# can be held open from before the server starts.
#   - a new key's insert and a duplicate's wait for the rebuild, on its
#     lock; once it ends, the first goes in and the second fails with the
#     violation;
#   - afterwards the index is whole: each key once, duplicates refused.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PmhashReplica;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
my $boot_file = $node->basedir . '/boot_id';
my $boots = 0;

# pretend the kernel booted again (a new boot id)
sub new_boot
{
	$boots++;
	open(my $fh, '>', $boot_file) or die "$boot_file: $!";
	printf $fh "%08d-2222-3333-4444-555555555555\n", $boots;
	close($fh);
	return;
}
new_boot();

$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
pmhash.boot_id_path = '$boot_file'
pmhash.writeback_delay = '1h'
pmhash.prewarm = off
deadlock_timeout = '200ms'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE FUNCTION gate(k int4) RETURNS int4 LANGUAGE plpgsql IMMUTABLE AS $$
	BEGIN
		IF k = 1 THEN
			WHILE (pg_stat_file('rebuild_gate', true)).size IS NOT NULL LOOP
				PERFORM pg_sleep(0.01);
			END LOOP;
		END IF;
		RETURN k;
	END $$;
	CREATE TABLE u (k int4, v text);
	INSERT INTO u SELECT g, 'r' || g FROM generate_series(1, 20000) g;
	CREATE UNIQUE INDEX u_k ON u USING pmhash (gate(k));
});
my $gate = $node->data_dir . '/rebuild_gate';

# the server stops as in an operating-system crash: the pool carries the
# write-back mark of a boot that is over, so its first use replaces it
# with an empty pool that a background worker rebuilds from the table;
# the gate holds the rebuild at the table's first row
sub crash_and_reboot
{
	$node->stop('immediate');
	new_boot();
	PostgreSQL::Test::Utils::append_to_file($gate, 'closed');
	$node->start;
	return;
}

sub rebuilding
{
	return $node->safe_psql('postgres',
		"SELECT rebuilding FROM pmhash_rebuild_progress('u_k')");
}

# --- waits, then the insert goes in and the duplicate fails ---
$node->safe_psql('postgres', q{INSERT INTO u VALUES (20001, 'before')});
crash_and_reboot();
is(rebuilding(), 't', 'the pool of the crashed boot is being rebuilt, held at the gate');

my $ins = $node->background_psql('postgres', on_error_stop => 0);
$ins->query_until(qr/started/, qq{\\echo started\nINSERT INTO u VALUES (30000, 'new');\n});
my $dup = $node->background_psql('postgres', on_error_stop => 0);
$dup->query_until(qr/started/, qq{\\echo started\nINSERT INTO u VALUES (777, 'dup');\n});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 2 FROM pg_stat_activity
	WHERE wait_event = 'advisory' AND query LIKE 'INSERT INTO u%'}),
	'both inserts wait for the rebuild, on its lock');
is(rebuilding(), 't', 'the rebuild is still held');

unlink($gate) or die "$gate: $!";
is($ins->query_safe(q{SELECT 'done'}), 'done', 'the insert of a new key ends');
$dup->query(q{SELECT 'done'});
like($dup->{stderr}, qr/duplicate key value violates unique constraint "u_k"/,
	'the insert of a present key fails with the violation');
$_->quit for ($ins, $dup);
wait_rebuilt($node, 'after the held rebuild', 'postgres', 'u_k');
is($node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*), count(DISTINCT k), count(*) FILTER (WHERE k = 30000) FROM u}),
	'20002|20002|1', 'each key once, the new one included');

# --- the rebuilt index enforces uniqueness and finds every key ---
my ($ret, $out, $err) = $node->psql('postgres', q{INSERT INTO u VALUES (12345, 'x')});
like($err, qr/duplicate key value violates unique constraint "u_k"/,
	'the rebuilt index refuses a present key');
$node->safe_psql('postgres', q{INSERT INTO u VALUES (40000, 'after')});
my $probe = q{SELECT count(*) FROM generate_series(0, 40001) p(k) JOIN u ON gate(u.k) = p.k};
like($node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
	SET enable_bitmapscan = off; SET enable_memoize = off; EXPLAIN (COSTS OFF) $probe}),
	qr/Index Scan using u_k/, 'the probe goes through the rebuilt index');
is($node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
	SET enable_bitmapscan = off; SET enable_memoize = off; $probe}),
	'20003', 'every row is found through the rebuilt index, once');
$node->stop;
done_testing();
