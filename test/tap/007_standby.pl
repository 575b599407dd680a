
# Copyright (c) pmhash authors
#
# Standbys, promotion and restored base backups (issue 29: pmhash in the
# WAL).  The pools a base backup copied are rebuilt from the heap by a
# background worker, also with pmhash.prewarm off: meanwhile the planner
# avoids the index and a forced use answers right or is a clear error.
# Then a hot standby uses its pmhash index and follows its primary through
# the WAL (rows inserted after the backup are found); promotion keeps the
# index usable with nothing done; a clone restored from the backup rebuilds
# its pools by itself and keeps them across a restart.  No REINDEX anywhere.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# first uses are what this test is about: no background loading
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n"
	. "pmhash.prewarm = off\n");
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 10000);
	CREATE INDEX t_k ON t USING pmhash (k);
	ANALYZE t;
});
$primary->backup('b');
# rows the pool copied by the backup does not have
$primary->safe_psql('postgres', q{INSERT INTO t SELECT 77 FROM generate_series(1, 5)});

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
probe_while_rebuilding($standby, 'standby right after its start',
	'SELECT * FROM t WHERE k = 77', hi => 10100, min_keys => 10000);
wait_rebuilt($standby, 'standby', 'postgres', 't_k');
$primary->wait_for_catchup($standby);

my $plan = $standby->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77});
like($plan, qr/t_k/, 'the standby planner uses the pmhash index');
is(forced_count($standby, 't', 'k = 77'), '6',
	'the standby finds, through the index, the rows inserted after the backup');
is(seq_count($standby, 't', 'k = 77'), '6', 'its sequential scan agrees');
plans_agree($standby, 'standby', hi => 10100, min_keys => 10000);

# the primary goes on; the standby follows
$primary->safe_psql('postgres', q{INSERT INTO t SELECT 77 FROM generate_series(1, 3)});
$primary->wait_for_catchup($standby);
is(forced_count($standby, 't', 'k = 77'), '9', 'the standby follows its primary');

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
# nothing done after the promotion
like($standby->safe_psql('postgres',
	q{EXPLAIN (COSTS OFF) SELECT count(*) FROM t WHERE k = 77}),
	qr/t_k/, 'after promotion the planner uses the index');
is(forced_count($standby, 't', 'k = 77'), '9',
	'after promotion the index answers right, no REINDEX');
$standby->safe_psql('postgres', q{INSERT INTO t VALUES (77)});
is(forced_count($standby, 't', 'k = 77'), '10', 'and takes new rows');

# every answer above agrees with a sequential scan on the same server
is(seq_count($standby, 't', 'k = 77'), '10',
	$standby->name . ': sequential scan finds the same rows');
is(seq_count($primary, 't', 'k = 77'), '9',
	$primary->name . ': sequential scan finds the same rows');

# the primary is unaffected
is(forced_count($primary, 't', 'k = 77'), '9', 'primary still right');

# a base backup restored without archive recovery stays on the same
# timeline: its copied pools are rebuilt all the same
my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($primary, 'b');
$clone->start;
wait_rebuilt($clone, 'clone', 'postgres', 't_k');
is(forced_count($clone, 't', 'k = 77'), '1',
	'the restored server answers right with no REINDEX (the clone stops at the backup)');
$clone->restart;
wait_rebuilt($clone, 'clone after a restart', 'postgres', 't_k');
is(forced_count($clone, 't', 'k = 77'), '1',
	'and the rebuilt pool is accepted after a restart');
is(seq_count($clone, 't', 'k = 77'), '1', 'the clone\'s sequential scan agrees');
$clone->safe_psql('postgres', q{INSERT INTO t VALUES (77)});
is(forced_count($clone, 't', 'k = 77'), '2', 'the clone takes new rows');
plans_agree($clone, 'clone', hi => 10100, min_keys => 10000);
$clone->stop;

$standby->stop;
$primary->stop;
done_testing();
