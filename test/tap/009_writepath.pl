
# Copyright (c) pmhash authors
#
# The write path across restarts and crashes, and under concurrency:
#  - entries left in the backup log and D-buckets (not yet relocated) come
#    back after a clean restart and after a crash (immediate stop, and a
#    backend killed with SIGKILL);
#  - a prepared transaction's entries survive a crash between PREPARE and
#    COMMIT PREPARED (issued from another session);
#  - several sessions insert concurrently while others scan: every key's
#    rows found through the index equal those a sequential scan finds, and
#    pmhash_check() finds nothing;
#  - an aborted bulk load costs no PMem traffic beyond the lines it filled.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FindBin;
use lib $FindBin::RealBin;
use PmhashCrash;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('writepath');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
max_prepared_transactions = 5
restart_after_crash = on
});
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (id serial PRIMARY KEY, k int8);
	CREATE INDEX t_k ON t USING pmhash (k);
});

# every key: index nested loop vs. sequential scan, as (key, count, sum of
# ids) so that a duplicate or a missing row changes the answer
sub compare_all
{
	my ($label) = @_;
	my $via_index = $node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SET enable_hashjoin = off; SET enable_mergejoin = off;
		SELECT k, count(*), sum(id) FROM (SELECT DISTINCT k AS p FROM t) keys
		JOIN t ON t.k = keys.p GROUP BY k ORDER BY k});
	my $via_seq = $node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT k, count(*), sum(id) FROM t GROUP BY k ORDER BY k});
	is($via_index, $via_seq, "$label: index answers equal seqscan answers");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
		'0', "$label: pmhash_check finds nothing");
	return;
}

# small transactions: their entries wait in D-buckets (16 per segment
# before a relocation), so a restart finds many of them only in the log
$node->safe_psql('postgres',
	"INSERT INTO t (k) VALUES " . join(',', map { "($_)" } 1 .. 10) . ";")
  for 1 .. 20;
my $pending = $node->safe_psql('postgres',
	q{SELECT pending_entries FROM pmhash_stats('t_k')});
cmp_ok($pending, '>', 0, "entries wait in D-buckets before the restart ($pending)");
compare_all('before restart');

$node->restart;
is($node->safe_psql('postgres', q{SELECT pending_entries FROM pmhash_stats('t_k')}),
	$pending, 'a clean restart brings back the same pending entries');
compare_all('after clean restart');

# crash with a bulk load's lines and pending entries in the log
$node->safe_psql('postgres',
	q{INSERT INTO t (k) SELECT g % 700 FROM generate_series(1, 30000) g});
$node->safe_psql('postgres', q{INSERT INTO t (k) VALUES (424242)});
$node->stop('immediate');
$node->start;
compare_all('after immediate stop');
is($node->safe_psql('postgres', q{SELECT count(*) FROM t WHERE k = 424242}),
	'1', 'the last committed single row is found after the crash');

# a prepared transaction across a crash, committed from another session
$node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO t (k) SELECT 777777 FROM generate_series(1, 5);
	PREPARE TRANSACTION 'p1';
});
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'});
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 777777}),
	'5', 'prepared entries survive a crash and COMMIT PREPARED');
compare_all('after 2PC across a crash');

# a backend killed with SIGKILL while another session holds unflushed rows:
# the whole server restarts, the uncommitted rows are gone, committed stay
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe(q{BEGIN; INSERT INTO t (k) VALUES (31337), (31337);});
my $victim = $node->background_psql('postgres');
my $pid = $victim->query_safe(q{SELECT pg_backend_pid()});
kill_backend($node, $pid);
eval { $bg->quit; };
eval { $victim->quit; };
is($node->safe_psql('postgres', q{SELECT count(*) FROM t WHERE k = 31337}),
	'0', 'uncommitted rows of a session lost in the crash are gone');
compare_all('after SIGKILL of a backend');

# an aborted bulk load: only the whole lines it filled reached the pool
$node->safe_psql('postgres', q{SELECT pmhash_reset_stats()});
$node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO t (k) SELECT 5 FROM generate_series(1, 100);
	ROLLBACK;
});
my ($ub, $fences) = split /\|/, $node->safe_psql('postgres',
	q{SELECT user_bytes, fences FROM pmhash_stats('t_k')});
is($ub, 96 * 16, 'aborted 100-row load wrote its 6 full lines, not the tail of 4');
cmp_ok($fences, '>=', 6, 'one fence per full line at least');

# concurrent inserting sessions with scans in between
$node->safe_psql('postgres', q{
	CREATE TABLE c (id bigserial PRIMARY KEY, k int8);
	CREATE INDEX c_k ON c USING pmhash (k);
});
my $ins = $node->basedir . '/ins.sql';
my $sel = $node->basedir . '/sel.sql';
PostgreSQL::Test::Utils::append_to_file($ins, q{
\set k random(1, 2000)
BEGIN;
INSERT INTO c (k) VALUES (:k), (:k + 1), (:k + 2);
SELECT count(*) FROM c WHERE k = :k;
COMMIT;
});
PostgreSQL::Test::Utils::append_to_file($sel, q{
\set k random(1, 2000)
SELECT count(*) FROM c WHERE k = :k;
});
$node->command_ok(
	[
		'pgbench', '-n', '-c', '4', '-j', '2', '-t', '400',
		'-f', "$ins\@3", '-f', "$sel\@1",
		'-p', $node->port, '-h', $node->host, 'postgres'
	],
	'pgbench: concurrent inserts and scans');
my $cmp_index = $node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SET enable_hashjoin = off; SET enable_mergejoin = off;
	SELECT k, count(*), sum(id) FROM generate_series(1, 2002) p JOIN c ON c.k = p
	GROUP BY k ORDER BY k});
my $cmp_seq = $node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT k, count(*), sum(id) FROM c GROUP BY k ORDER BY k});
is($cmp_index, $cmp_seq, 'concurrent inserts: index answers equal seqscan answers');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('c_k')}),
	'0', 'concurrent inserts: pmhash_check finds nothing');
is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('c_k')}),
	$node->safe_psql('postgres', q{SELECT count(*) FROM c}),
	'concurrent inserts: the entry counter is exact');

$node->stop;
done_testing();
