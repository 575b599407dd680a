
# Copyright (c) pmhash authors
#
# Every DDL that creates, replaces or removes a pmhash index's storage,
# replayed by a hot standby: TRUNCATE, VACUUM FULL, CLUSTER, a column type
# change that rewrites the table, ALTER INDEX ... SET TABLESPACE (a block
# copy) and back, CREATE INDEX CONCURRENTLY, REINDEX INDEX CONCURRENTLY,
# DROP INDEX CONCURRENTLY, DROP TABLE, ALTER TABLE ... SET LOGGED of an
# unlogged table, CREATE DATABASE from a template with pmhash indexes (both
# strategies) and DROP DATABASE; also rolled-back savepoints and prepared
# transactions that insert.  Afterwards, on the standby, every pmhash index
# agrees with its heap per key (forced index and bitmap scans against a
# sequential scan on one snapshot; pmhash_check() empty), and the standby's
# pool files are exactly those of the primary's permanent pmhash indexes: no
# orphan, no stray.  Then the same after a restart of the standby.
#
# Also a standby whose pool directory is outside its data directory, so
# that it starts with no pools at all: it rebuilds them and then replays.

use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my @pools_to_remove;
END { system('rm', '-rf', $_) for @pools_to_remove; }

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', wal_test_conf() . q{
max_standby_streaming_delay = 2s
allow_in_place_tablespaces = on
});
$primary->start;

# tables a .. j in database db1 (and in postgres: the test's own), each
# with a pmhash index <table>_k on k, 5000 rows of 500 keys
my @tables = qw(a b c d e f g h x);
my $setup = "CREATE EXTENSION pmhash;\n";
for my $t (@tables)
{
	$setup .= qq{
		CREATE TABLE $t (id int4, k int4, k2 int4);
		INSERT INTO $t SELECT g, g % 500, g % 300 FROM generate_series(1, 5000) g;
		CREATE INDEX ${t}_k ON $t USING pmhash (k);
	};
}
$setup .= q{
	CREATE INDEX c_id ON c (id);
	CREATE INDEX g_k2 ON g USING pmhash (k2);
	ANALYZE;
};
$primary->safe_psql('postgres', 'CREATE DATABASE db1');
$primary->safe_psql('postgres', 'CREATE DATABASE db4');
$primary->safe_psql($_, $setup) for ('db1', 'db4');

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# a standby whose pools live outside its data directory: it has none
my $outside = PostgreSQL::Test::Utils::tempdir() . '/pools';
push @pools_to_remove, $outside;
mkdir($outside, 0700) or die "mkdir $outside: $!";
my $bare = PostgreSQL::Test::Cluster->new('bare');
$bare->init_from_backup($primary, 'b', has_streaming => 1);
$bare->append_conf('postgresql.conf', "pmhash.pool_dir = '$outside'\n");
$bare->start;

wait_rebuilt($standby, 'standby', 'db1', map { "${_}_k" } @tables);
wait_rebuilt($bare, 'standby with no pools', 'db1', map { "${_}_k" } @tables);

# ------------------------------------------------------------------------
# the DDL, on the primary

$primary->safe_psql('db1', q{
	SET allow_in_place_tablespaces = on;
	CREATE TABLESPACE ts LOCATION '';
});
$primary->safe_psql('db1', q{
	TRUNCATE a;
	INSERT INTO a SELECT g, g % 500, g % 300 FROM generate_series(1, 3000) g;
	VACUUM FULL b;
	CLUSTER c USING c_id;
	ALTER TABLE d ALTER COLUMN k TYPE int8;
	ALTER INDEX e_k SET TABLESPACE ts;
	INSERT INTO e SELECT g, g % 500, g % 300 FROM generate_series(1, 1000) g;
});
$primary->safe_psql('db1', q{ALTER INDEX e_k SET TABLESPACE pg_default});
$primary->safe_psql('db1', q{
	INSERT INTO e SELECT g, g % 500, g % 300 FROM generate_series(1, 1000) g;
	DROP INDEX f_k;
});
$primary->safe_psql('db1', q{CREATE INDEX CONCURRENTLY f_k ON f USING pmhash (k)});
$primary->safe_psql('db1', q{INSERT INTO f SELECT g, g % 500, g % 300 FROM generate_series(1, 1000) g});
$primary->safe_psql('db1', q{REINDEX INDEX CONCURRENTLY f_k});
$primary->safe_psql('db1', q{DROP INDEX CONCURRENTLY g_k2});
$primary->safe_psql('db1', q{
	BEGIN;
	INSERT INTO h SELECT g, 7, 0 FROM generate_series(1, 30) g;
	SAVEPOINT s1;
	INSERT INTO h SELECT g, 8, 0 FROM generate_series(1, 40) g;
	ROLLBACK TO SAVEPOINT s1;
	INSERT INTO h SELECT g, 9, 0 FROM generate_series(1, 5) g;
	COMMIT;
	BEGIN;
	INSERT INTO h SELECT g, 11, 0 FROM generate_series(1, 50) g;
	PREPARE TRANSACTION 'p1';
	BEGIN;
	INSERT INTO h SELECT g, 12, 0 FROM generate_series(1, 50) g;
	PREPARE TRANSACTION 'p2';
});
$primary->wait_for_catchup($standby);
# prepared but not committed: not visible on the standby either
is(seq_count($standby, 'h', 'k = 11', 'db1'), '10', 'standby: a prepared insert is not visible yet');
$primary->safe_psql('db1', q{COMMIT PREPARED 'p1'; ROLLBACK PREPARED 'p2'});
$primary->safe_psql('db1', q{
	DROP TABLE x;
	CREATE UNLOGGED TABLE j (id int4, k int4);
	INSERT INTO j SELECT g, g % 500 FROM generate_series(1, 5000) g;
	CREATE INDEX j_k ON j USING pmhash (k);
	ALTER TABLE j SET LOGGED;
	INSERT INTO j SELECT g, g % 500 FROM generate_series(1, 1000) g;
});
$primary->safe_psql('postgres', q{
	CREATE DATABASE db2 TEMPLATE db1 STRATEGY wal_log;
	CREATE DATABASE db3 TEMPLATE db1 STRATEGY file_copy;
	DROP DATABASE db4;
});
$primary->safe_psql('db2', q{INSERT INTO a SELECT g, g % 500, g % 300 FROM generate_series(1, 700) g});
$primary->safe_psql('db3', q{INSERT INTO b SELECT g, g % 500, g % 300 FROM generate_series(1, 700) g});
$primary->wait_for_catchup($standby);
$primary->wait_for_catchup($bare);

# ------------------------------------------------------------------------
# checks

my @now = qw(a b c d e f g h j);

# every pmhash index of db1, db2, db3 agrees with its heap on $node
sub all_agree
{
	my ($node, $label) = @_;
	for my $db ('db1', 'db2', 'db3')
	{
		wait_rebuilt($node, "$label, $db", $db);
		for my $t (@now)
		{
			plans_agree($node, "$label, $db.${t}_k", db => $db, table => $t,
				hi => 600, min_keys => 500);
		}
	}
	return;
}

# the pool files below $dir: "dboid/name"
sub pool_files
{
	my ($dir) = @_;
	return join("\n", sort map { basename(dirname($_)) . '/' . basename($_) }
		  glob("$dir/*/*.pool"));
}

# the pool files the primary's catalogs call for ($persistence: 'p' or
# 'pu')
sub expected_pools
{
	my ($persistence) = @_;
	my @files;
	for my $db (split(/\n/, $primary->safe_psql('postgres',
		q{SELECT datname FROM pg_database WHERE datallowconn ORDER BY 1})))
	{
		push @files, split(/\n/, $primary->safe_psql($db, qq{
			SELECT (SELECT oid FROM pg_database WHERE datname = current_database())
				|| '/' || c.reltablespace || '_' || pg_relation_filenode(c.oid) || '.pool'
			FROM pg_class c JOIN pg_am a ON a.oid = c.relam
			WHERE a.amname = 'pmhash' AND position(c.relpersistence::text in '$persistence') > 0}));
	}
	return join("\n", sort @files);
}

is(seq_count($standby, 'h', 'k = 7', 'db1'), '40', 'standby: the savepoint\'s survivors');
is(seq_count($standby, 'h', 'k = 8', 'db1'), '10', 'standby: the rolled-back savepoint\'s rows are not there');
is(forced_count($standby, 'h', 'k = 11', 'db1'), '60', 'standby: the committed prepared rows, through the index');
is(forced_count($standby, 'h', 'k = 12', 'db1'), '10', 'standby: no rolled-back prepared rows, through the index');
is($standby->safe_psql('db1', q{SELECT to_regclass('x_k') IS NULL AND to_regclass('g_k2') IS NULL}),
	't', 'standby: the dropped indexes are gone');
all_agree($standby, 'standby');
all_agree($bare, 'standby with no pools');
is(pool_files($primary->data_dir . '/pmhash'), expected_pools('pu'),
	'the primary has exactly the pools of its pmhash indexes');
is(pool_files($standby->data_dir . '/pmhash'), expected_pools('p'),
	'the standby has exactly the pools of the primary\'s permanent pmhash indexes');
is(pool_files($outside), expected_pools('p'),
	'so has the standby with its pools outside its data directory');

$standby->restart;
all_agree($standby, 'standby after a restart');
is(pool_files($standby->data_dir . '/pmhash'), expected_pools('p'),
	'after a restart, still exactly those pools');

$bare->stop;
$standby->stop;
$primary->stop;
done_testing();
