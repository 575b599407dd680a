
# Copyright (c) pmhash authors
#
# pmhash's shared memory grows past pmhash.shared_memory into dynamic shared
# memory, up to pmhash.max_shared_memory (pmhashshmem.c): an index grows
# far past the preallocated part with its inserts never failing, a WARNING
# says once that growth began, backends that started before and after the
# growth (and lookups without the index lock) find every entry while
# others insert, and the state is rebuilt after a crash and a restart.  A
# lower limit set by a reload is a clear ERROR for the insert that needs
# more, with nothing lost, and raising it again needs no restart.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('growth');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
pmhash.shared_memory = 1MB
pmhash.prewarm = off
autovacuum = off
});
$node->start;

my $forced = 'SET enable_seqscan = off; SET enable_bitmapscan = off;';

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE TABLE small (k int4);
	INSERT INTO small SELECT generate_series(1, 100);
	CREATE INDEX small_k ON small USING pmhash (k);
});

# a session that attached to the index before the growth, kept open
my $early = $node->background_psql('postgres');
$early->query_safe("$forced SELECT count(*) FROM t WHERE k = 1");

# every row of t is found through the index, in a new session
sub all_found
{
	my ($n) = @_;
	return $n->safe_psql('postgres', qq{
		$forced
		SELECT (SELECT count(*) FROM t) = count(*)
		FROM (SELECT DISTINCT k FROM t) g JOIN t ON t.k = g.k});
}

# 1. grow from empty to well past the 1 MB set aside
my ($ret, $out, $err) = $node->psql('postgres',
	'INSERT INTO t SELECT generate_series(1, 200000)');
is($ret, 0, 'inserts that outgrow pmhash.shared_memory succeed');
like($err, qr/WARNING:  pmhash shared memory grew beyond pmhash.shared_memory/,
	'a WARNING says that the shared memory grew');
like($err, qr/HINT:  Set pmhash.shared_memory higher/, 'with what to do');
for my $i (1 .. 3)
{
	($ret, $out, $err) = $node->psql('postgres',
		"INSERT INTO t SELECT generate_series($i * 200000 + 1, ($i + 1) * 200000)");
	is($ret, 0, "growth goes on (step $i)");
}
unlike($err, qr/WARNING/, 'the WARNING is given once');
cmp_ok($node->safe_psql('postgres',
		q{SELECT shmem_bytes FROM pmhash_stats('t_k')}),
	'>', 4 * 1024 * 1024, 'the index holds several times the preallocated memory');
is(all_found($node), 't', 'a new session finds every row');
is($early->query_safe(qq{
		SELECT count(*) FROM generate_series(1, 800000, 997) g
		JOIN t ON t.k = g}), '803',
	'a session that started before the growth finds them too');
is($node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM generate_series(1, 800000, 13) g JOIN t ON t.k = g;
		SELECT lookups > 10 * lookups_locked FROM pmhash_stats('t_k')}),
	"61539\nt", 'lookups in grown memory mostly take no lock');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing wrong');

# 2. inserts and lookups at once while the area grows
$node->safe_psql('postgres', 'CREATE TABLE done (n int)');
$node->pgbench(
	'--no-vacuum --client=2 --transactions=400',
	0,
	[qr{processed: 800/800}],
	[qr{^$}],
	'concurrent inserts and lookups while the memory grows',
	{
		'044_insert' => q{
			\set base random(1, 100000000)
			INSERT INTO t SELECT :base + g FROM generate_series(1, 500) g;
		},
		'044_lookup' => q{
			\set k random(1, 800000)
			SELECT count(*) FROM t WHERE k = :k;
		}
	});
is(all_found($node), 't', 'every row is found after the concurrent run');

# 3. a crash reinitialisation and a restart start the memory over
$node->stop('immediate');
$node->start;
is(all_found($node), 't', 'after a crash, the state rebuilt in grown memory is right');
$node->restart;
is(all_found($node), 't', 'after a restart too');

# 4. a limit lowered by a reload: a clear ERROR, nothing lost
$node->safe_psql('postgres', "$forced SELECT count(*) FROM small WHERE k = 7");
my $used = $node->safe_psql('postgres',
	q{SELECT shmem_bytes FROM pmhash_stats('t_k')});
$node->append_conf('postgresql.conf',
	sprintf("pmhash.max_shared_memory = %dMB\n", int($used / 1048576) + 2));
$node->reload;
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
($ret, $out, $err) = $node->psql('postgres',
	'INSERT INTO t SELECT generate_series(2000001, 3000000)');
isnt($ret, 0, 'an insert that needs more than the lowered limit fails');
like($err, qr/ERROR:  out of pmhash shared memory/, 'the error says what ran out');
like($err, qr/HINT:  Increase pmhash.max_shared_memory and reload/,
	'and how to get more');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows,
	'the failed insert added nothing');
is(all_found($node), 't', 'and every committed row is still found');
is($node->safe_psql('postgres', "$forced SELECT count(*) FROM small WHERE k = 7"),
	'1', 'other indexes keep working');

$node->append_conf('postgresql.conf', "pmhash.max_shared_memory = -1\n");
$node->reload;
($ret, $out, $err) = $node->psql('postgres',
	'INSERT INTO t SELECT generate_series(2000001, 3000000)');
is($ret, 0, 'with the limit raised by a reload, the insert works') or diag($err);
is(all_found($node), 't', 'and every row is found');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('t_k')}),
	'0', 'pmhash_check finds nothing wrong');

# 5. memory given back by DROP INDEX is used again
$node->safe_psql('postgres', 'DROP INDEX t_k');
$node->safe_psql('postgres', 'CREATE INDEX t_k ON t USING pmhash (k)');
is(all_found($node), 't', 'an index built again after DROP finds every row');

$early->quit;
$node->stop;
done_testing();
