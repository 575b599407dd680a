
# Copyright (c) pmhash authors
#
# pmhash under Citus: a coordinator and two workers (Unix sockets only),
# every DDL and DML that Citus runs against pmhash indexes through the
# coordinator (plain and multi-shard CREATE INDEX on distributed and
# reference tables, tables distributed with an index, a worker added
# later, routed and multi-shard writes, VACUUM, REINDEX, DROP, TRUNCATE,
# column type changes, UNIQUE and EXCLUDE, alter_distributed_table, shard
# moves and the rebalancer), and a worker killed inside a distributed
# transaction and between Citus's PREPARE and COMMIT PREPARED.  After each
# step, on every node: the pool files are exactly one per pmhash index
# storage of the catalogs (every database, every tablespace), no
# two-phase state file is left, every
# pmhash index of a shard or a local table answers as a sequential scan
# (forced index and bitmap scans, with EXPLAIN showing the index) and
# pmhash_check() finds nothing; through the coordinator, distributed
# queries forced onto the indexes answer as a sequential scan, and a
# worker's plan uses the index.  What Citus refuses for every access
# method is shown with btree alongside.
#
# Skipped when Citus is not installed (see README, "Sharding with Citus").

use strict;
use warnings;

use File::Path qw(make_path);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pkglibdir = `pg_config --pkglibdir 2>/dev/null` // '';
chomp $pkglibdir;
if ($pkglibdir eq '' || !-f "$pkglibdir/citus.so")
{
	plan skip_all =>
	  "Citus is not installed (no citus.so in "
	  . ($pkglibdir eq '' ? 'pg_config --pkglibdir' : $pkglibdir)
	  . "): build Citus 13.2.2 for PostgreSQL 15 (see README 'Sharding with Citus')";
}

my $t_start = time;

# ---------------------------------------------------------------- nodes ---

my $coord = PostgreSQL::Test::Cluster->new('coord');
my $w1 = PostgreSQL::Test::Cluster->new('worker1');
my $w2 = PostgreSQL::Test::Cluster->new('worker2');
my @nodes = ($coord, $w1, $w2);
my %running;
my $host = $coord->host;    # one socket directory for all nodes

for my $n (@nodes)
{
	$n->init;
	# PostgreSQL 15.20 lists the libraries that may be logical decoding
	# output plugins; Citus's shard moves and concurrent distribution
	# decode through its own library "citus"
	my $plugins = '';
	if (run_log([ 'postgres', '-D', $n->data_dir, '-C', 'output_plugin_libraries' ]))
	{
		$plugins = "output_plugin_libraries = 'pgoutput, test_decoding, citus'";
	}
	$n->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'citus,pmhash'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
max_prepared_transactions = 20
max_worker_processes = 16
autovacuum = off
citus.local_hostname = '$host'
citus.shard_count = 4
# Citus drops the shards it leaves behind (create_distributed_table_concurrently,
# shard moves) in its maintenance daemon; the test does it between its steps
citus.defer_shard_delete_interval = -1
$plugins
});
}
# a commit on the coordinator waits for this standby, which does not exist,
# only in a session that sets synchronous_commit = on (see below)
$coord->append_conf('postgresql.conf', q{
synchronous_standby_names = 'nobody'
synchronous_commit = local
});
for my $n (@nodes)
{
	$n->start;
	$running{ $n->name } = 1;
}

# statements of a script run one by one (psql reads it from stdin)
sub sql
{
	my ($n, $q, $db) = @_;
	return $n->safe_psql($db // 'postgres', $q);
}

for my $n (@nodes)
{
	my $ts = $n->basedir . '/ts';
	make_path($ts);
	sql($n, qq{
		CREATE EXTENSION citus;
		SET citus.enable_ddl_propagation = off;
		CREATE TABLESPACE ts LOCATION '$ts';
	});
}
note 'Citus ' . sql($coord, 'SELECT citus_version()');
sql($coord, qq{
	SELECT citus_set_coordinator_host('$host', ${\ $coord->port });
	SELECT citus_add_node('$host', ${\ $w1->port });
	CREATE EXTENSION pmhash;
});
is(sql($w1, q{SELECT extversion FROM pg_extension WHERE extname = 'pmhash'}),
	sql($coord, q{SELECT extversion FROM pg_extension WHERE extname = 'pmhash'}),
	'CREATE EXTENSION pmhash reached the worker');

# ------------------------------------------------------------- checks ---

# "dboid/spc_relfilenode.pool" of every pool file of a node
sub pool_files
{
	my ($n) = @_;
	my $dir = $n->data_dir . '/pmhash';
	my @f;
	opendir(my $d, $dir) or return ();
	for my $db (grep { /^\d+$/ } readdir($d))
	{
		opendir(my $dd, "$dir/$db") or next;
		push @f, map { "$db/$_" } grep { /\.pool$/ } readdir($dd);
		closedir($dd);
	}
	closedir($d);
	return sort @f;
}

# the pool files the catalogs of every database of a node call for: one
# per pmhash index storage (shards hidden by Citus included)
sub expected_pools
{
	my ($n) = @_;
	my @f;
	for my $row (split /\n/, sql($n,
		q{SELECT oid || ' ' || datname FROM pg_database WHERE datallowconn}))
	{
		my ($oid, $db) = split / /, $row, 2;
		my $l = sql($n, qq{
			SET citus.override_table_visibility = off;
			SELECT '$oid/' || c.reltablespace || '_' || c.relfilenode || '.pool'
			FROM pg_class c JOIN pg_am a ON a.oid = c.relam
			WHERE a.amname = 'pmhash' AND c.relkind = 'i'}, $db);
		push @f, grep { $_ ne '' } split /\n/, $l;
	}
	return sort @f;
}

sub state_files
{
	my ($n) = @_;
	opendir(my $d, $n->data_dir . '/pmhash/twophase') or return ();
	my @f = grep { !/^\.\.?$/ } readdir($d);
	closedir($d);
	return @f;
}

# what a state file says (pmhashtwophase.c: magic, database, full xid, GID
# length, storages, CRC, padding, then the GID), for diagnostics
sub state_file_info
{
	my ($n, $f) = @_;
	open(my $fh, '<:raw', $n->data_dir . "/pmhash/twophase/$f")
	  or return "$f: gone";
	local $/;
	my $b = <$fh>;
	close($fh);
	return "$f: too short" if length($b) < 32;
	my (undef, $db, $fxid, $gidlen, $nst) = unpack('L L Q L L', $b);
	return "$f: GID '" . substr($b, 32, $gidlen) . "', xid $fxid, database $db, $nst storage(s)";
}

# every pmhash index of a shard or of a local table of the node (not those
# of Citus's shell tables, whose queries go to the shards): a few keys of
# the table and one absent key, through a forced index scan and a forced
# bitmap scan (EXPLAIN must show the index), against a sequential scan;
# and pmhash_check()
my $answer_check = q{
SET citus.override_table_visibility = off;
DO $chk$
DECLARE
	ix record;
	nidx int := 0;
	nprobe int := 0;
	nfound int := 0;
	cols text;
	tmpl text;
	pred text;
	clause text;
	clauses text[];
	q text;
	a_seq text;
	a_idx text;
	kind text;
	plan text;
	line text;
	r text;
BEGIN
	FOR ix IN
		SELECT c.oid, c.relname, i.indrelid::regclass::text AS tbl,
		       i.indnkeyatts AS natts, pg_get_expr(i.indpred, i.indrelid) AS pred,
		       (SELECT atttypid FROM pg_attribute
		        WHERE attrelid = c.oid AND attnum = 1) AS typ
		FROM pg_class c JOIN pg_am a ON a.oid = c.relam
		     JOIN pg_index i ON i.indexrelid = c.oid
		WHERE a.amname = 'pmhash' AND c.relkind = 'i' AND i.indisvalid
		  AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p
		                  WHERE p.logicalrelid = i.indrelid)
		ORDER BY c.relname
	LOOP
		nidx := nidx + 1;
		cols := '';
		tmpl := '';
		FOR k IN 1 .. ix.natts LOOP
			IF k > 1 THEN
				tmpl := tmpl || ' AND ';
				cols := cols || ', ';
			END IF;
			tmpl := tmpl || '(' || replace(pg_get_indexdef(ix.oid, k, false), '%', '%%') || ') = %L';
			cols := cols || '(' || pg_get_indexdef(ix.oid, k, false) || ')::text';
		END LOOP;
		pred := coalesce(ix.pred, 'true');
		EXECUTE format('SELECT array_agg(w) FROM (SELECT DISTINCT format(%L, %s) AS w FROM %s
		                WHERE %s AND num_nulls(%s) = 0 LIMIT 4) s',
		               tmpl, cols, ix.tbl, pred, cols) INTO clauses;
		clauses := coalesce(clauses, '{}');
		IF ix.natts = 1 AND ix.typ IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) THEN
			clauses := clauses || format(tmpl, '-987654321');
		END IF;
		FOREACH clause IN ARRAY clauses LOOP
			nprobe := nprobe + 1;
			q := format('SELECT coalesce(string_agg(ctid::text, '','' ORDER BY ctid), '''') FROM %s WHERE %s AND %s',
			            ix.tbl, clause, pred);
			PERFORM set_config('enable_seqscan', 'on', true);
			PERFORM set_config('enable_indexscan', 'off', true);
			PERFORM set_config('enable_bitmapscan', 'off', true);
			EXECUTE q INTO a_seq;
			IF a_seq <> '' THEN
				nfound := nfound + 1;
			END IF;
			-- an index scan, then a bitmap scan
			PERFORM set_config('enable_seqscan', 'off', true);
			FOREACH kind IN ARRAY ARRAY['index', 'bitmap'] LOOP
				PERFORM set_config('enable_indexscan',
								   CASE WHEN kind = 'index' THEN 'on' ELSE 'off' END, true);
				PERFORM set_config('enable_bitmapscan',
								   CASE WHEN kind = 'bitmap' THEN 'on' ELSE 'off' END, true);
				plan := '';
				FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
					plan := plan || line || ' / ';
				END LOOP;
				IF plan !~ (CASE WHEN kind = 'index'
							THEN 'Index Scan using ' || ix.relname || ' on '
							ELSE 'Bitmap Index Scan on ' || ix.relname || '( |$)' END) THEN
					RAISE NOTICE 'pmhash-problem: %: % scan not used for %: %',
						ix.relname, kind, clause, plan;
				END IF;
				EXECUTE q INTO a_idx;
				IF a_idx IS DISTINCT FROM a_seq THEN
					RAISE NOTICE 'pmhash-problem: %: % scan for % found (%), a seqscan (%)',
						ix.relname, kind, clause, a_idx, a_seq;
				END IF;
			END LOOP;
			PERFORM set_config('enable_seqscan', 'on', true);
			PERFORM set_config('enable_indexscan', 'on', true);
		END LOOP;
		FOR r IN SELECT * FROM pmhash_check(ix.oid) LOOP
			RAISE NOTICE 'pmhash-problem: %: pmhash_check: %', ix.relname, r;
		END LOOP;
	END LOOP;
	RAISE NOTICE 'pmhash-checked: % indexes, % probes, % with rows', nidx, nprobe, nfound;
END
$chk$;
};

# probes through the coordinator: [table, condition, ordering column,
# regexp that the EXPLAIN of the forced index scan must match]
my %dist_probes;

sub dist_answer
{
	my ($t, $cond, $col, $mode) = @_;
	my $set =
	    $mode eq 'index'  ? 'SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;'
	  : $mode eq 'bitmap' ? 'SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off;'
	  :                     'SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off;';
	my $q = "SELECT 'answer:' || coalesce(string_agg($col\::text, ',' ORDER BY $col), '') FROM $t WHERE $cond";
	my ($ret, $out, $err) = $coord->psql('postgres', qq{
		SET citus.propagate_set_commands = 'local';
		BEGIN; $set
		EXPLAIN (COSTS OFF) $q;
		$q;
		COMMIT;}, on_error_stop => 1);
	return (undef, $err) if $ret != 0;
	my ($ans) = ($out =~ /^answer:(.*)$/m);
	(my $plan = $out) =~ s/^answer:.*$//m;
	return ($ans, $plan);
}

sub wait_no_prepared
{
	my ($what) = @_;
	my $t0 = time;
	while (1)
	{
		my @busy;
		for my $n (grep { $running{ $_->name } } @nodes)
		{
			my $c = sql($n, q{SELECT count(*) FROM pg_prepared_xacts});
			push @busy, $n->name . ": $c" if $c ne '0';
		}
		return 1 if !@busy;
		if (time - $t0 > 60)
		{
			fail("$what: prepared transactions still open after 60 s (@busy)");
			return 0;
		}
		# Citus ends the prepared transactions of a failed commit in its
		# maintenance daemon; do it now
		sql($coord, 'SELECT recover_prepared_transactions()') if time - $t0 > 2;
		usleep(200_000);
	}
}

# "spc_relfilenode" of every relation file of database postgres on disk (0
# for the database's default tablespace), as pools are named
sub relation_files
{
	my ($n) = @_;
	my $dboid = sql($n, q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
	my %f;
	my @dirs = ([ 0, $n->data_dir . "/base/$dboid" ]);
	for my $spc (split /\n/, sql($n, q{SELECT oid FROM pg_tablespace WHERE spcname = 'ts'}))
	{
		push @dirs, map { [ $spc, $_ ] } glob($n->data_dir . "/pg_tblspc/$spc/PG_*/$dboid");
	}
	for my $d (@dirs)
	{
		opendir(my $dh, $d->[1]) or next;
		for (readdir($dh))
		{
			# (an empty main fork: a dropped relation's, until a checkpoint)
			$f{"$d->[0]_$1"} = 1 if /^(\d+)$/ && -s "$d->[1]/$_";
		}
		closedir($dh);
	}
	return \%f;
}

# relation files of database postgres that no relation of its catalog has
sub orphan_relation_files
{
	my ($n) = @_;
	my $f = relation_files($n);
	delete $f->{$_} for split /\n/, sql($n, q{
		SET citus.override_table_visibility = off;
		SELECT reltablespace || '_' || pg_relation_filenode(oid) FROM pg_class
		WHERE pg_relation_filenode(oid) IS NOT NULL});
	return $f;
}


sub check_pools
{
	my ($n, $what) = @_;
	my @got = pool_files($n);
	my @exp = expected_pools($n);
	my $ok = is(join(' ', @got), join(' ', @exp),
		"$what: " . $n->name . ': one pool per pmhash index storage ('
		  . scalar(@exp) . ')');
	if (!$ok)
	{
		my %g = map { $_ => 1 } @got;
		my %e = map { $_ => 1 } @exp;
		diag($n->name . ': pools without an index storage: '
			  . join(' ', grep { !$e{$_} } @got));
		diag($n->name . ': index storages without a pool: '
			  . join(' ', grep { !$g{$_} } @exp));
		diag(sql($n, q{
			SET citus.override_table_visibility = off;
			SELECT string_agg(c.relname || '=' || c.reltablespace || '_' || c.relfilenode, ' ')
			FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'pmhash'}));
	}
	return $ok;
}

# the checks after a step
sub check_all
{
	my ($what) = @_;
	wait_no_prepared($what);
	sql($coord, 'CALL citus_cleanup_orphaned_resources()');
	for my $n (grep { $running{ $_->name } } @nodes)
	{
		my $pools_ok = check_pools($n, $what);
		my @sf = state_files($n);
		is(scalar(@sf), 0, "$what: " . $n->name . ': no two-phase state file left')
		  or diag(join("\n", map { 'state file ' . state_file_info($n, $_) } @sf),
			"\nprepared transactions: ",
			sql($n, q{SELECT string_agg(gid || ' (' || transaction || ')', ' ') FROM pg_prepared_xacts}));
		if (!$pools_ok || @sf)
		{
			# transient (something still running) or left for good?
			sleep(3);
			diag($n->name . ' 3 s later: pools '
				  . (join(' ', pool_files($n)) eq join(' ', expected_pools($n)) ? 'now match' : 'still differ')
				  . ', state files: ' . join(' ', state_files($n)));
		}

		my ($ret, $out, $err) = $n->psql('postgres', $answer_check, on_error_stop => 1);
		my @problems = ($err =~ /pmhash-problem: (.*)/g);
		my ($summary) = ($err =~ /pmhash-checked: (.*)/);
		ok($ret == 0 && defined $summary && !@problems,
			"$what: " . $n->name . ': pmhash indexes answer as a seqscan ('
			  . ($summary // 'not run') . ')')
		  or diag($ret != 0 ? "answer check failed: $err" : join("\n", @problems));
	}
	# through the coordinator, on the shards
	for my $t (sort keys %dist_probes)
	{
		for my $p (@{ $dist_probes{$t} })
		{
			my ($cond, $col, $re) = @$p;
			my ($seq, $e0) = dist_answer($t, $cond, $col, 'seq');
			my ($idx, $plan) = dist_answer($t, $cond, $col, 'index');
			my ($bmp, $bplan) = dist_answer($t, $cond, $col, 'bitmap');
			if (!defined $seq || !defined $idx || !defined $bmp)
			{
				fail("$what: coordinator: $t WHERE $cond failed");
				diag($e0 // '', $plan // '', $bplan // '');
				next;
			}
			ok($seq ne '' && $idx eq $seq && $bmp eq $seq,
				"$what: coordinator: $t WHERE $cond: index and bitmap scans answer as a seqscan")
			  or diag("seqscan: $seq\nindex scan: $idx\nbitmap scan: $bmp");
			like($plan, $re, "$what: coordinator: a worker's plan for $t WHERE $cond uses the index");
		}
	}
}

# a step through the coordinator that must succeed
sub step
{
	my ($what, $q) = @_;
	my $t0 = time;
	my ($ret, $out, $err) = $coord->psql('postgres', $q, on_error_stop => 1);
	ok($ret == 0, "$what: runs through the coordinator")
	  or diag("$what failed:\n$err");
	note(sprintf('%s: %.1f s', $what, time - $t0));
	return $out;
}

# a statement through the coordinator that must fail with an error matching
# $re; returns the error
sub step_fails
{
	my ($what, $q, $re) = @_;
	my ($ret, $out, $err) = $coord->psql('postgres', $q, on_error_stop => 1);
	ok($ret != 0, "$what: fails") or diag("$what did not fail: $out");
	like($err, $re, "$what: with the expected error");
	return $err;
}

sub shard_placements
{
	my ($t) = @_;
	return map { [ split /\|/ ] } split /\n/, sql($coord, qq{
		SELECT s.shardid, p.nodeport FROM pg_dist_shard s
		JOIN pg_dist_placement pl ON pl.shardid = s.shardid
		JOIN pg_dist_node p ON p.groupid = pl.groupid
		WHERE s.logicalrelid = '$t'::regclass ORDER BY s.shardid});
}

check_all('empty cluster');

# ------------------------------------------------------------ the steps ---

# --- CREATE INDEX on a distributed table and on a reference table
step('CREATE INDEX on a distributed table', q{
	CREATE TABLE d (id int8, k int4, v text);
	SELECT create_distributed_table('d', 'id');
	INSERT INTO d SELECT g, g % 100, 'v' || (g % 7) FROM generate_series(1, 2000) g;
	CREATE INDEX d_k ON d USING pmhash (k);
});
$dist_probes{d} = [ [ q{k = ANY ('{3,7,42,99,12345}')}, 'id',
	qr/Index Scan using d_k_\d+ on d_\d+/ ] ];
check_all('CREATE INDEX, distributed table');

step('CREATE INDEX on a reference table', q{
	CREATE TABLE r (k int4, v text);
	SELECT create_reference_table('r');
	INSERT INTO r SELECT g, 'r' || g FROM generate_series(1, 500) g;
	CREATE INDEX r_k ON r USING pmhash (k);
});
$dist_probes{r} = [ [ q{k = ANY ('{1,250,500,501}')}, 'k',
	qr/Index Scan using r_k_\d+ on r_\d+/ ] ];
check_all('CREATE INDEX, reference table');

# --- distributing tables that have a pmhash index
step('create_distributed_table of a table with a pmhash index', q{
	CREATE TABLE p (id int8, k int4);
	INSERT INTO p SELECT g, g % 50 FROM generate_series(1, 1000) g;
	CREATE INDEX p_k ON p USING pmhash (k);
	SELECT create_distributed_table('p', 'id');
});
$dist_probes{p} = [ [ q{k = ANY ('{0,17,49}')}, 'id',
	qr/Index Scan using p_k_\d+ on p_\d+/ ] ];
check_all('create_distributed_table');

step('create_distributed_table_concurrently of a table with a pmhash index', q{
	CREATE TABLE cc (id int8, k int4);
	INSERT INTO cc SELECT g, g % 30 FROM generate_series(1, 1000) g;
	CREATE INDEX cc_k ON cc USING pmhash (k);
	SELECT create_distributed_table_concurrently('cc', 'id');
});
$dist_probes{cc} = [ [ q{k = ANY ('{1,29}')}, 'id',
	qr/Index Scan using cc_k_\d+ on cc_\d+/ ] ];
check_all('create_distributed_table_concurrently');

# --- UNIQUE on the distribution column
step('CREATE UNIQUE INDEX on the distribution column', q{
	CREATE UNIQUE INDEX d_id_u ON d USING pmhash (id);
});
step_fails('a duplicate of the distribution column',
	q{INSERT INTO d VALUES (1, 1, 'dup')},
	qr/duplicate key value violates unique constraint "d_id_u_\d+".*Key \(id\)=\(1\) already exists/s);
# Citus refuses a unique index without the distribution column, whatever
# the access method: btree and pmhash get the same error
step_fails('a unique btree index without the distribution column',
	q{CREATE UNIQUE INDEX d_k_ub ON d USING btree (k)},
	qr/creating unique indexes on non-partition columns is currently unsupported/);
step_fails('a unique pmhash index without the distribution column',
	q{CREATE UNIQUE INDEX d_k_up ON d USING pmhash (k)},
	qr/creating unique indexes on non-partition columns is currently unsupported/);
push @{ $dist_probes{d} }, [ q{id = ANY ('{1,5,1999,77777}')}, 'id',
	qr/Index Scan using d_id_u_\d+ on d_\d+/ ];
check_all('CREATE UNIQUE INDEX');

# --- an index in another tablespace.  Citus refuses CREATE INDEX ...
# TABLESPACE for every access method; default_tablespace, propagated with
# SET LOCAL, places the shards' indexes there.
step_fails('CREATE INDEX ... TABLESPACE (btree)',
	q{CREATE INDEX d_ts_b ON d USING btree ((k + 1)) TABLESPACE ts},
	qr/specifying tablespaces with CREATE INDEX statements is currently unsupported/);
step_fails('CREATE INDEX ... TABLESPACE (pmhash)',
	q{CREATE INDEX d_ts ON d USING pmhash ((k + 1)) TABLESPACE ts},
	qr/specifying tablespaces with CREATE INDEX statements is currently unsupported/);
step('CREATE INDEX in tablespace ts through default_tablespace', q{
	SET citus.propagate_set_commands = 'local';
	BEGIN;
	SET LOCAL default_tablespace = ts;
	CREATE INDEX d_ts ON d USING pmhash ((k + 1));
	COMMIT;
});
is(sql($w1, q{SET citus.override_table_visibility = off;
	SELECT count(*) > 0 AND bool_and(t.spcname = 'ts') FROM pg_class c
	JOIN pg_tablespace t ON t.oid = c.reltablespace WHERE c.relname LIKE 'd_ts_%'}),
	't', 'the shards of d_ts are in tablespace ts');
push @{ $dist_probes{d} }, [ q{k + 1 = ANY ('{4,8}')}, 'id',
	qr/Index Scan using d_ts_\d+ on d_\d+/ ];
check_all('CREATE INDEX in a tablespace');

# --- several columns, CREATE INDEX CONCURRENTLY
step('CREATE INDEX CONCURRENTLY on two columns', q{
	CREATE TABLE x (id int8, a int4, b text);
	SELECT create_distributed_table('x', 'id');
	INSERT INTO x SELECT g, g % 40, 'b' || (g % 3) FROM generate_series(1, 1200) g;
	CREATE INDEX CONCURRENTLY x_ab ON x USING pmhash (a, b);
});
$dist_probes{x} = [ [ q{a = 4 AND b = 'b1'}, 'id',
	qr/Index Scan using x_ab_\d+ on x_\d+/ ] ];
check_all('CREATE INDEX CONCURRENTLY');

# --- a second worker: metadata sync creates the shell tables and their
# indexes in a two-phase transaction
step('citus_add_node of a second worker',
	qq{SELECT citus_add_node('$host', ${\ $w2->port })});
is(sql($w2, q{SELECT count(*) FROM pg_extension WHERE extname = 'pmhash'}), '1',
	'the new worker has the pmhash extension');
check_all('citus_add_node');

# --- writes
step('routed inserts', q{
	INSERT INTO d VALUES (3001, 7, 'n1');
	INSERT INTO d VALUES (3002, 42, 'n2'), (3003, 42, 'n3');
	INSERT INTO r VALUES (250, 'again');
	INSERT INTO x VALUES (2001, 4, 'b1');
});
step('multi-shard INSERT ... SELECT, UPDATE and DELETE', q{
	INSERT INTO d SELECT id + 10000, k, v FROM d WHERE id <= 600;
	INSERT INTO x SELECT id + 5000, a, b FROM x WHERE id % 2 = 0;
	INSERT INTO cc SELECT id + 5000, k FROM cc;
	UPDATE d SET k = k + 1 WHERE k % 10 = 3;
	UPDATE x SET b = 'b9' WHERE a = 5;
	DELETE FROM d WHERE k % 10 = 5;
	DELETE FROM p WHERE k = 17;
	UPDATE r SET k = k + 1000 WHERE k % 50 = 0;
});
check_all('routed and multi-shard writes');

step('VACUUM', q{VACUUM d; VACUUM r; VACUUM x; VACUUM p;});
check_all('VACUUM');

# --- a worker crashes in the middle of a distributed transaction that
# built indexes on it, before Citus's PREPARE: the transaction fails, the
# worker comes back.  PostgreSQL keeps the relation files that a
# transaction in progress at a crash created (orphaned, btree's as well as
# pmhash's); pmhash's sweep at start removes the pools of storages that no
# pg_class row names.
{
	my $dboid = sql($w1, q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
	my $storages = 1 + grep { $_->[1] == $w1->port } shard_placements('d');
	sql($w1, 'CHECKPOINT');    # the files of earlier drops go
	my $orphans_before = orphan_relation_files($w1);
	my $bg = $coord->background_psql('postgres', on_error_stop => 0);
	$bg->query_safe('BEGIN');
	$bg->query_safe('CREATE INDEX d_v ON d USING pmhash (v)');
	$bg->query_safe('CREATE INDEX d_vb ON d USING btree (v)');
	$bg->query_safe('INSERT INTO d SELECT id + 20000, k, v FROM d WHERE id <= 100');
	$w1->stop('immediate');
	$running{ $w1->name } = 0;
	$bg->query('COMMIT');
	my $err = $bg->{stderr};
	$bg->quit;
	like($err, qr/server closed the connection|connection to the remote node/,
		'COMMIT of a distributed transaction with a worker down fails');
	my $offset = -s $w1->logfile;
	$w1->start;
	$running{ $w1->name } = 1;
	# the first run of the background worker after a start sweeps orphans
	$w1->wait_for_log(qr/pmhash prewarm: database $dboid:/, $offset);
	is(sql($coord, q{SELECT count(*) FROM pg_indexes WHERE indexname IN ('d_v', 'd_vb')}),
		'0', 'the indexes of the failed transaction do not exist');
	is(sql($coord, q{SELECT count(*) FROM d WHERE id > 20000}), '0', 'nor its rows');

	my $orphans = orphan_relation_files($w1);
	my %new_orphans = map { $_ => 1 } grep { !$orphans_before->{$_} } keys %$orphans;
	my %exp = map { $_ => 1 } expected_pools($w1);
	my @extra = grep { !$exp{$_} } pool_files($w1);
	is(scalar(keys %new_orphans), 2 * $storages,
		'PostgreSQL kept the relation files of the btree and pmhash index storages '
		  . "that the crashed transaction created on the worker ($storages each)");
	my @not_orphan = grep { m{^\d+/(\d+_\d+)\.pool$} && !$new_orphans{$1} } @extra;
	is(join(' ', @not_orphan), '',
		'every pool without an index storage in the catalog belongs to such a relation file');
	is(join(' ', @extra), '',
		'a worker crashed during a distributed transaction: worker1: no pool without an index storage in the catalog');
}
check_all('a worker crashed during a distributed transaction');

# --- a worker crashes after Citus prepared a DDL transaction on it, before
# COMMIT PREPARED: the coordinator's commit is held in a wait for a
# synchronous standby that does not exist (synchronous_standby_names names
# one, the session sets synchronous_commit = on), the worker stops, the
# wait is cancelled (the transaction has committed on the coordinator).
# After the worker's restart Citus's recovery commits the prepared
# transactions, and pmhash removes the pools of the storages they replaced.
{
	# Citus's maintenance daemon would end the prepared transactions itself
	sql($coord, q{
		ALTER SYSTEM SET citus.recover_2pc_interval = -1;
		SELECT pg_reload_conf();
	});
	my $bg = $coord->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query_safe('SET synchronous_commit = on');
	$bg->query_safe('BEGIN');
	$bg->query_safe('REINDEX INDEX d_id_u');
	$bg->{stdin} .= "COMMIT;\n";
	$bg->{run}->pump_nb();
	ok($coord->poll_query_until('postgres', qq{
		SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = $pid}),
		'the coordinator waits in its commit, after PREPARE on the workers');
	$w1->stop('immediate');
	$running{ $w1->name } = 0;
	sql($coord, "SELECT pg_cancel_backend($pid)");
	$bg->query('SELECT 1');
	my $err = $bg->{stderr};
	$bg->quit;
	like($err, qr/canceling wait for synchronous replication/, 'the wait was cancelled');
	note("COMMIT said: $err");
	$w1->start;
	$running{ $w1->name } = 1;
	# (one prepared transaction per connection that Citus opened to the
	# worker; those that reindexed shards wrote a state file, the others
	# did nothing)
	my $prepared = sql($w1, 'SELECT count(*) FROM pg_prepared_xacts');
	ok($prepared >= 1, "the worker has the prepared transactions after its restart ($prepared)");
	my $nsf = scalar(state_files($w1));
	ok($nsf >= 1 && $nsf <= $prepared, "and pmhash state files of those that reindexed ($nsf)");
	is(sql($coord, 'SELECT recover_prepared_transactions()'), $prepared,
		"Citus's recovery ended them");
	is(sql($w1, 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'no prepared transaction left');
	sql($coord, q{
		ALTER SYSTEM RESET citus.recover_2pc_interval;
		SELECT pg_reload_conf();
	});
}
check_all('a worker crashed between PREPARE and COMMIT PREPARED');

step('writes after the crash', q{
	INSERT INTO d SELECT g, g % 100, 'c' FROM generate_series(4001, 4400) g;
	INSERT INTO r VALUES (7, 'after crash');
});
check_all('writes after the worker crash');

# --- REINDEX
step('REINDEX INDEX', q{REINDEX INDEX d_k});
check_all('REINDEX INDEX');
step('REINDEX TABLE', q{REINDEX TABLE d; REINDEX TABLE r});
check_all('REINDEX TABLE');
step('REINDEX INDEX CONCURRENTLY', q{REINDEX INDEX CONCURRENTLY x_ab});
check_all('REINDEX INDEX CONCURRENTLY');

# --- DROP INDEX
step('DROP INDEX', q{DROP INDEX d_ts});
$dist_probes{d} = [ grep { $_->[2] !~ /d_ts/ } @{ $dist_probes{d} } ];
check_all('DROP INDEX');

# --- TRUNCATE
step('TRUNCATE', q{
	TRUNCATE cc;
	INSERT INTO cc SELECT g, g % 30 FROM generate_series(1, 600) g;
});
check_all('TRUNCATE');

# --- a column type change rewrites the table and its indexes
step('ALTER TABLE ... ALTER COLUMN ... TYPE', q{ALTER TABLE d ALTER COLUMN k TYPE int8});
is(sql($w1, q{SET citus.override_table_visibility = off;
	SELECT DISTINCT format_type(atttypid, atttypmod) FROM pg_attribute
	WHERE attrelid IN (SELECT oid FROM pg_class WHERE relname ~ '^d_k_\d+$')}),
	'bigint', 'the shards of d_k index an int8 column');
check_all('ALTER COLUMN TYPE');

# --- exclusion constraint on the distribution column
step('ADD CONSTRAINT ... EXCLUDE USING pmhash',
	q{ALTER TABLE x ADD CONSTRAINT x_excl EXCLUDE USING pmhash (id WITH =)});
step_fails('a row conflicting with the exclusion constraint',
	q{INSERT INTO x VALUES (7, 1, 'dup')},
	qr/conflicting key value violates exclusion constraint "x_excl_\d+"/);
step('a row not conflicting', q{INSERT INTO x VALUES (999999, 1, 'b0')});
push @{ $dist_probes{x} }, [ q{id = ANY ('{7,999999,123456789}')}, 'id',
	qr/Index Scan using x_excl_\d+ on x_\d+/ ];
check_all('EXCLUDE constraint');

# --- the rebalancer, then single shard moves
step('citus_rebalance_start + citus_rebalance_wait', q{
	SELECT citus_rebalance_start(shard_transfer_mode := 'block_writes');
	SELECT citus_rebalance_wait();
});
my %per_node;
$per_node{ $_->[1] }++ for shard_placements('d');
ok($per_node{ $w1->port } && $per_node{ $w2->port },
	'the rebalancer put shards of d on both workers')
  or diag(explain \%per_node);
check_all('rebalance');

{
	my ($s) = grep { $_->[1] == $w1->port } shard_placements('d');
	# Citus's default transfer mode (auto) replicates a shard logically and
	# refuses tables without a replica identity, whatever their indexes: a
	# table with a unique btree index is refused the same way.  A pmhash
	# index cannot be the replica identity (pmhash refuses it, see
	# "Usage"); a btree primary key, REPLICA IDENTITY FULL, or the modes
	# block_writes and force_logical serve.
	step_fails('a shard move in mode auto of tables without a replica identity',
		qq{SELECT citus_move_shard_placement($s->[0], '$host', ${\ $w1->port },
			'$host', ${\ $w2->port })},
		qr/cannot use logical replication to transfer shards of the relation \w+ since it doesn't have a REPLICA IDENTITY or PRIMARY KEY/);
	step('a table with a unique btree index only', q{
		CREATE TABLE bt (id int8, k int4);
		SELECT create_distributed_table('bt', 'id', colocate_with := 'none');
		CREATE UNIQUE INDEX bt_u ON bt USING btree (id);
	});
	my ($b) = grep { $_->[1] == $w1->port } shard_placements('bt');
	step_fails('a shard move in mode auto of a table with a unique btree index only',
		qq{SELECT citus_move_shard_placement($b->[0], '$host', ${\ $w1->port },
			'$host', ${\ $w2->port })},
		qr/cannot use logical replication to transfer shards of the relation bt since it doesn't have a REPLICA IDENTITY or PRIMARY KEY/);
	step_fails('REPLICA IDENTITY USING INDEX of a pmhash index',
		q{ALTER TABLE d REPLICA IDENTITY USING INDEX d_id_u},
		qr/pmhash index "d_id_u(_\d+)?" cannot be a replica identity/);
	step('DROP TABLE bt', q{DROP TABLE bt});

	# the source's shards are dropped later, by Citus's deferred cleanup:
	# run it at once
	step('citus_move_shard_placement (block_writes)', qq{
		SELECT citus_move_shard_placement($s->[0], '$host', ${\ $w1->port },
			'$host', ${\ $w2->port }, shard_transfer_mode := 'block_writes');
		CALL citus_cleanup_orphaned_resources();
	});
	my $left = qq{SET citus.override_table_visibility = off;
		SELECT count(*) FROM pg_class WHERE relname = 'd_$s->[0]'};
	is(sql($w1, $left) . sql($w2, $left), '01', 'the shard moved and its source was dropped');
	check_all('shard move, block_writes');
	step('citus_move_shard_placement back (force_logical)', qq{
		SELECT citus_move_shard_placement($s->[0], '$host', ${\ $w2->port },
			'$host', ${\ $w1->port }, shard_transfer_mode := 'force_logical');
		CALL citus_cleanup_orphaned_resources();
	});
	is(sql($w1, $left) . sql($w2, $left), '10', 'the shard moved back and its source was dropped');
	check_all('shard move, force_logical');
}
step('rebalance_table_shards', q{
	SELECT rebalance_table_shards(shard_transfer_mode := 'block_writes');
});
check_all('rebalance_table_shards');

# --- alter_distributed_table: new shards, colocated tables along
step('alter_distributed_table (shard_count 8, colocated tables along)', q{
	SELECT alter_distributed_table('d', shard_count := 8, cascade_to_colocated := true);
});
is(sql($coord, q{SELECT shard_count FROM citus_tables WHERE table_name = 'x'::regclass}),
	'8', 'the colocated table x has 8 shards too');
step_fails('the exclusion constraint after alter_distributed_table',
	q{INSERT INTO x VALUES (7, 1, 'dup')},
	qr/conflicting key value violates exclusion constraint "x_excl_\d+"/);
step_fails('the unique index after alter_distributed_table',
	q{INSERT INTO d VALUES (1, 1, 'dup')},
	qr/duplicate key value violates unique constraint "d_id_u_\d+"/);
check_all('alter_distributed_table');

# --- 32 shards, Citus's default citus.shard_count
step('a table of 32 shards', q{
	CREATE TABLE t32 (id int8, k int4);
	SELECT create_distributed_table('t32', 'id', shard_count := 32);
	INSERT INTO t32 SELECT g, g % 20 FROM generate_series(1, 3200) g;
	CREATE INDEX t32_k ON t32 USING pmhash (k);
});
$dist_probes{t32} = [ [ q{k = ANY ('{1,19}')}, 'id',
	qr/Index Scan using t32_k_\d+ on t32_\d+/ ] ];
check_all('32 shards');

# --- DROP TABLE
step('DROP TABLE', q{DROP TABLE t32; DROP TABLE p});
delete @dist_probes{qw(t32 p)};
check_all('DROP TABLE');

# --- every node restarted cleanly
for my $n (@nodes)
{
	$n->restart;
}
check_all('after a clean restart of every node');

note(sprintf('total %.1f s', time - $t_start));
$_->stop for @nodes;
done_testing();
