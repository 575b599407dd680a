
# Copyright (c) pmhash authors
#
# kill -9 torture.  pgbench clients insert (plain, aborted, savepoints,
# prepared transactions, many rows of one key), delete, update keys, scan
# and VACUUM a table with a pmhash index, plus an unlogged one, and upsert,
# abort and delete in a table with a UNIQUE pmhash index; at a random
# moment the test SIGKILLs
#   - the postmaster alone (its backends run on until they notice, then the
#     server is started again),
#   - the postmaster's whole process group at once (as a power cut would
#     stop everything), or
#   - one pgbench backend (the postmaster reinitialises shared memory),
# and after the restart checks, for every key, that the heap tuples (ctids)
# found through the index -- by an index scan and by a bitmap scan -- are
# exactly those a sequential scan finds (none missing, none twice), that
# pmhash_check() finds nothing, that the crash was counted, and that the
# unlogged table's pmhash index is empty and usable.  The unique index must
# keep every key once, let every absent key in (an entry a crash left for a
# lost insert never blocks it) and refuse present ones.
#
# Three persistence modes: the pools on tmpfs (/dev/shm) with
# PMEM_IS_PMEM_FORCE=1 (libpmem's CPU-flush path); an ordinary file in the
# data directory persisted with msync (pmhash.lazy_writeback = off); and
# the default, an ordinary file with deferred write-back.  (kill -9 loses
# no CPU cache and no page cache, so it tests ordering and recovery, not
# missing flushes; a lost page cache is TAP 039's.)
#
# Knobs (doc/TESTING.md, "Crash testing"):
#   PMHASH_TORTURE_CYCLES  crash cycles per mode (default 3)
#   PMHASH_TORTURE_SEED    seed of the run (default: random, printed)
#   PMHASH_TORTURE_MODES   comma list of "pmem", "msync", "lazy" (default
#                          all three)
#
# Nothing here depends on timing for its verdict: the random delay only
# chooses when the kill lands.

use strict;
use warnings;

use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PmhashReplica;

my $cycles = $ENV{PMHASH_TORTURE_CYCLES} // 3;
my $seed = $ENV{PMHASH_TORTURE_SEED} // (time() ^ ($$ << 8)) % 1000000007;
my @modes = split(/,/, $ENV{PMHASH_TORTURE_MODES} // 'pmem,msync,lazy');
die "PMHASH_TORTURE_CYCLES must be a positive integer\n"
  unless $cycles =~ /^[0-9]+$/ && $cycles > 0;
die "PMHASH_TORTURE_SEED must be an integer\n" unless $seed =~ /^[0-9]+$/;

diag("kill -9 torture: seed $seed, $cycles cycles per mode, modes @modes "
	  . "(reproduce with PMHASH_TORTURE_SEED=$seed)");
srand($seed);

my $clients = 4;

# the pgbench scripts; :maxkey grows by cycle so that segments keep
# splitting, key 0 collects many rows (overflow chains)
my %scripts = (
	'insert@10' => q{
\set k random(1, :maxkey)
INSERT INTO c (k) SELECT :k + g FROM generate_series(0, 19) g;
},
	'insert_abort@2' => q{
\set k random(1, :maxkey)
BEGIN;
INSERT INTO c (k) SELECT :k + g FROM generate_series(0, 39) g;
ROLLBACK;
},
	'insert_savepoint@2' => q{
\set k random(1, :maxkey)
BEGIN;
INSERT INTO c (k) SELECT :k + g % 20 FROM generate_series(0, 39) g;
SAVEPOINT s;
INSERT INTO c (k) SELECT :k + g FROM generate_series(0, 9) g;
ROLLBACK TO SAVEPOINT s;
INSERT INTO c (k) VALUES (:k);
COMMIT;
},
	'insert_prepared@1' => q{
\set k random(1, :maxkey)
\set r random(1, 1000000000)
BEGIN;
INSERT INTO c (k) SELECT :k + g FROM generate_series(0, 4) g;
PREPARE TRANSACTION 'torture-:client_id-:r';
COMMIT PREPARED 'torture-:client_id-:r';
},
	'insert_hot_key@2' => q{
INSERT INTO c (k) SELECT 0 FROM generate_series(1, 10);
},
	'trim_hot_key@1' => q{
\set r random(0, 99)
DELETE FROM c WHERE k = 0 AND id % 100 = :r;
},
	'delete@4' => q{
\set k random(1, :maxkey)
DELETE FROM c WHERE k BETWEEN :k AND :k + 7;
},
	'update@2' => q{
\set k random(1, :maxkey)
\set k2 random(1, :maxkey)
UPDATE c SET k = :k2 WHERE k = :k;
},
	'select@3' => q{
\set k random(1, :maxkey)
SET enable_seqscan = off;
SELECT count(*) FROM c WHERE k = :k;
},
	'vacuum@1' => q{
VACUUM (TRUNCATE false) c;
},
	'unlogged@2' => q{
\set k random(1, :maxkey)
INSERT INTO u (k) SELECT :k + g FROM generate_series(0, 9) g;
},
	'unique_upsert@3' => q{
\set k random(1, :maxkey)
INSERT INTO q (k) SELECT :k + g FROM generate_series(0, 3) g
	ON CONFLICT (k) DO UPDATE SET n = q.n + 1;
},
	'unique_abort@1' => q{
\set k random(1, :maxkey)
BEGIN;
INSERT INTO q (k) SELECT :k + g FROM generate_series(0, 9) g
	ON CONFLICT (k) DO NOTHING;
ROLLBACK;
},
	'unique_delete@1' => q{
\set k random(1, :maxkey)
DELETE FROM q WHERE k BETWEEN :k AND :k + 5;
},);

my @pools_to_remove;
END { system('rm', '-rf', $_) for @pools_to_remove; }

# wait until no process of group $pgid is left; SIGKILL them after 60 s
sub wait_group_gone
{
	my ($pgid) = @_;
	for (my $i = 0; $i < 600; $i++)
	{
		return if !group_members($pgid);
		usleep(100_000);
	}
	note("processes of group $pgid still there after 60 s: SIGKILL");
	kill 'KILL', -$pgid;
	usleep(100_000) while group_members($pgid);
	return;
}

sub crash_count
{
	my ($epoch_file) = @_;
	open(my $fh, '<', $epoch_file) or die "$epoch_file: $!";
	my $line = <$fh>;
	close($fh);
	my (undef, $crashes) = split(' ', $line);
	return $crashes // 0;
}

# key => "ctid,ctid,..." for every key in 0 .. $maxkey, under the planner
# settings $settings
sub rows_by_key
{
	my ($node, $settings, $from, $maxkey) = @_;
	my $out = $node->safe_psql('postgres', qq{
		$settings
		SELECT c.k, array_agg(c.ctid ORDER BY c.ctid)
		$from GROUP BY c.k ORDER BY c.k});
	return by_key([ split(/\n/, $out) ]);
}

# every key's ctids by index scan and by bitmap scan equal the seqscan's;
# pmhash_check finds nothing
sub verify
{
	my ($node, $label, $maxkey) = @_;
	my $hi = $maxkey + 19;
	my $probe = qq{FROM generate_series(0, $hi) p(k) JOIN c ON c.k = p.k};
	my $nl = q{SET enable_seqscan = off; SET enable_hashjoin = off;
		SET enable_mergejoin = off; SET enable_memoize = off;};
	my $isettings = "$nl SET enable_bitmapscan = off;";
	my $bsettings = "$nl SET enable_indexscan = off;";

	like($node->safe_psql('postgres', "$isettings EXPLAIN (COSTS OFF) SELECT c.k $probe"),
		qr/Index Scan using c_k/, "$label: the plan probes c_k by index scan");
	like($node->safe_psql('postgres', "$bsettings EXPLAIN (COSTS OFF) SELECT c.k $probe"),
		qr/Bitmap Index Scan on c_k/, "$label: the plan probes c_k by bitmap scan");

	my $seq = rows_by_key($node,
		'SET enable_indexscan = off; SET enable_bitmapscan = off;',
		"FROM c WHERE c.k BETWEEN 0 AND $hi", $maxkey);
	is($node->safe_psql('postgres', qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM c WHERE k < 0 OR k > $hi}), '0',
		"$label: every key is in the probed range");
	for my $scan (['index scan', $isettings], ['bitmap scan', $bsettings])
	{
		my $got = rows_by_key($node, $scan->[1], $probe, $maxkey);
		my @diff = differences($got, $seq);
		ok(!@diff, "$label: $scan->[0] finds each key's rows exactly once")
		  or diag(join("\n", "seed $seed:", @diff));
	}
	my $check = $node->safe_psql('postgres', q{SELECT * FROM pmhash_check('c_k')});
	is($check, '', "$label: pmhash_check finds nothing");
	return;
}

# the unique index: each key's rows through the index are the seqscan's,
# no key is there twice, a key whose insert the crash lost (or that is
# absent) goes in without a false violation, and a present key is refused
sub verify_unique
{
	my ($node, $label, $maxkey) = @_;
	my $hi = $maxkey + 3;
	my $isettings = q{SET enable_seqscan = off; SET enable_hashjoin = off;
		SET enable_mergejoin = off; SET enable_memoize = off;
		SET enable_bitmapscan = off;};
	my $seq = rows_by_key($node,
		'SET enable_indexscan = off; SET enable_bitmapscan = off;',
		"FROM q c WHERE c.k BETWEEN 0 AND $hi", $maxkey);
	my $got = rows_by_key($node, $isettings,
		"FROM generate_series(0, $hi) p(k) JOIN q c ON c.k = p.k", $maxkey);
	my @diff = differences($got, $seq);
	ok(!@diff, "$label: the unique index finds each key's row")
	  or diag(join("\n", "seed $seed:", @diff));
	is($node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) - count(DISTINCT k) FROM q}), '0',
		"$label: no key is there twice");
	my $absent = $node->safe_psql('postgres', qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM generate_series(1, $hi) p(k)
		WHERE NOT EXISTS (SELECT FROM q WHERE q.k = p.k)});
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		INSERT INTO q (k) SELECT k FROM generate_series(1, $hi) p(k)
		WHERE NOT EXISTS (SELECT FROM q WHERE q.k = p.k)});
	is($ret, 0, "$label: the $absent absent keys insert without a violation")
	  or diag("seed $seed: $err");
	is($node->safe_psql('postgres', qq{
		DO \$\$
		DECLARE refused int := 0;
		BEGIN
			FOR i IN 1 .. 50 LOOP
				BEGIN
					INSERT INTO q (k) VALUES (1 + (i * 7919) % $hi);
				EXCEPTION WHEN unique_violation THEN
					refused := refused + 1;
				END;
			END LOOP;
			RAISE NOTICE 'refused %', refused;
			IF refused <> 50 THEN
				RAISE EXCEPTION 'only % of 50 duplicates refused', refused;
			END IF;
		END \$\$;
		SELECT 'ok'}), 'ok', "$label: present keys are refused");
	is($node->safe_psql('postgres', q{SELECT * FROM pmhash_check('q_k')}),
		'', "$label: pmhash_check finds nothing in the unique index");
	return;
}

# the unlogged table and its index are empty after a crash, and work
sub verify_unlogged
{
	my ($node, $label) = @_;
	is($node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM u}), '0', "$label: the unlogged table is empty");
	is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('u_k')}),
		'0', "$label: its pmhash index is empty");
	$node->safe_psql('postgres', q{INSERT INTO u VALUES (-1), (-1), (-2)});
	is($node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM u WHERE k = -1}), '2',
		"$label: the unlogged index finds new rows");
	is($node->safe_psql('postgres', q{SELECT * FROM pmhash_check('u_k')}),
		'', "$label: the unlogged index is consistent");
	$node->safe_psql('postgres', q{DELETE FROM u});
	return;
}

# the pgbench workload, in the background, connected when this returns
sub start_workload
{
	my ($node, $name, $cycle, $maxkey) = @_;
	my @files;
	for my $s (sort keys %scripts)
	{
		my ($file, $weight) = split(/@/, $s);
		my $path = $node->basedir . "/$file.sql";
		PostgreSQL::Test::Utils::append_to_file($path, $scripts{$s})
		  unless -e $path;
		push @files, '-f', "$path\@$weight";
	}
	my ($out, $err) = ('', '');
	my @cmd = (
		'pgbench', '--no-vacuum', '-h', $node->host, '-p', $node->port,
		"--client=$clients", '--jobs=2', '--transactions=10000000',
		'--max-tries=100', '--random-seed=' . int(rand(1 << 30)),
		'-D', "maxkey=$maxkey", @files, 'postgres');
	# (PostgreSQL::Test::Utils sets PGAPPNAME for everything else)
	local $ENV{PGAPPNAME} = 'torture';
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	$node->poll_query_until('postgres', qq{
		SELECT count(*) >= $clients FROM pg_stat_activity
		WHERE application_name = 'torture'})
	  or die "pgbench did not connect: $err";
	return { h => $h, out => \$out, err => \$err };
}

# let pgbench end (its connections are gone) and log what it said
sub end_workload
{
	my ($w, $label) = @_;
	my $h = $w->{h};
	for (my $i = 0; $i < 600 && $h->pumpable; $i++)
	{
		eval { $h->pump_nb; };
		usleep(100_000);
	}
	if ($h->pumpable)
	{
		note("$label: pgbench still running after 60 s, killed");
		$h->kill_kill;
	}
	eval { $h->finish; };
	my ($last) = ${ $w->{out} } =~ /(number of transactions actually processed: \S+)/;
	note("$label: pgbench: " . ($last // 'no summary'));
	return;
}

# the kinds of kill, each once in every three cycles, in a random order
my @kind_queue;

sub next_kind
{
	if (!@kind_queue)
	{
		my @kinds = ('postmaster', 'process group', 'backend');
		push @kind_queue, splice(@kinds, int(rand(@kinds)), 1) while @kinds;
	}
	return shift @kind_queue;
}

# one crash: start the workload, kill something at a random moment, bring
# the server back, check it all
sub cycle
{
	my ($node, $mode, $cycle, $epoch_file) = @_;
	my $maxkey = 2000 + 500 * ($cycle - 1);
	my $kind = next_kind();
	my $delay_ms = 200 + int(rand(2000));
	my $label = "$mode cycle $cycle (kill $kind after $delay_ms ms)";
	my $crashes = crash_count($epoch_file);

	my $w = start_workload($node, $mode, $cycle, $maxkey);
	usleep($delay_ms * 1000);

	open(my $pf, '<', $node->data_dir . '/postmaster.pid') or die;
	my $pm = <$pf>;
	close($pf);
	chomp($pm);

	if ($kind eq 'backend')
	{
		my @pids = split(/\n/, $node->safe_psql('postgres', q{
			SELECT pid FROM pg_stat_activity
			WHERE application_name = 'torture' ORDER BY pid}));
		my $victim = $pids[ int(rand(@pids)) ];
		note("$label: SIGKILL backend $victim");
		kill('KILL', $victim) or die "could not kill $victim: $!";
		end_workload($w, $label);
		# the postmaster reinitialises and runs crash recovery
		$node->poll_query_until('postgres', 'SELECT 1', '1')
		  or die "$label: the server did not come back";
	}
	else
	{
		die "the postmaster $pm does not lead its process group"
		  unless getpgrp($pm) == $pm;
		$node->kill9;
		kill('KILL', -$pm) if $kind eq 'process group';
		# orphaned backends finish what they do and exit
		wait_group_gone($pm);
		# and the dead postmaster must be reaped, or the new one takes
		# its zombie for a running server
		for (my $i = 0; $i < 600 && kill(0, $pm); $i++)
		{
			usleep(100_000);
		}
		end_workload($w, $label);
		$node->start;
	}

	is(crash_count($epoch_file), $crashes + 1, "$label: the crash was counted");

	# prepared transactions the crash caught between PREPARE and COMMIT
	for my $gid (split(/\n/, $node->safe_psql('postgres',
		q{SELECT gid FROM pg_prepared_xacts ORDER BY gid})))
	{
		note("$label: COMMIT PREPARED '$gid'");
		$node->safe_psql('postgres', "COMMIT PREPARED '$gid'");
	}

	verify($node, $label, $maxkey);
	verify_unique($node, $label, $maxkey);
	verify_unlogged($node, $label);
	return $maxkey;
}

for my $mode (@modes)
{
	die "unknown mode $mode (pmem, msync, lazy)\n" unless $mode =~ /^(pmem|msync|lazy)$/;
	@kind_queue = ();
	my $pool_dir;
	local $ENV{PMEM_IS_PMEM_FORCE};
	if ($mode eq 'pmem')
	{
		if (!-d '/dev/shm' || !-w '/dev/shm')
		{
			note('no writable /dev/shm: pmem mode skipped');
			next;
		}
		$pool_dir = "/dev/shm/pmhash-tap-012-$$";
		push @pools_to_remove, $pool_dir;
		$ENV{PMEM_IS_PMEM_FORCE} = '1';
	}
	else
	{
		delete $ENV{PMEM_IS_PMEM_FORCE};
	}

	my $node = PostgreSQL::Test::Cluster->new("torture_$mode");
	$node->init;
	$node->append_conf('postgresql.conf', "pmhash.pool_dir = '$pool_dir'\n")
	  if $pool_dir;
	# with msync pools the sessions load segments themselves after every
	# restart (lazily, concurrently); with pmem and lazy pools the prewarm
	# worker loads them in the background while the workload runs
	$node->append_conf('postgresql.conf', "pmhash.prewarm = off\n")
	  if $mode eq 'msync';
	$node->append_conf('postgresql.conf', "pmhash.lazy_writeback = off\n")
	  if $mode eq 'msync';
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
restart_after_crash = on
max_prepared_transactions = 10
autovacuum = off
shared_buffers = 64MB
log_min_messages = warning
log_statement = none
log_line_prefix = '%m [%p] %b '
});
	$node->start;
	my $epoch_file = ($pool_dir // $node->data_dir . '/pmhash') . '/PMHASH_EPOCH';

	$node->safe_psql('postgres', q{
		CREATE EXTENSION pmhash;
		CREATE TABLE c (id bigserial, k int8);
		INSERT INTO c (k) SELECT 1 + g % 2000 FROM generate_series(1, 20000) g;
		INSERT INTO c (k) SELECT 0 FROM generate_series(1, 3000);
		CREATE INDEX c_k ON c USING pmhash (k);
		CREATE UNLOGGED TABLE u (k int8);
		CREATE INDEX u_k ON u USING pmhash (k);
		CREATE TABLE q (k int8, n int DEFAULT 0);
		INSERT INTO q (k) SELECT g FROM generate_series(1, 2000, 2) g;
		CREATE UNIQUE INDEX q_k ON q USING pmhash (k);
	});
	verify($node, "$mode after build", 2000);
	verify_unique($node, "$mode after build", 2000);

	my $maxkey;
	$maxkey = cycle($node, $mode, $_, $epoch_file) for 1 .. $cycles;

	# heap truncation past entries of lost inserts, then once more
	$node->safe_psql('postgres', 'VACUUM c');
	verify($node, "$mode after VACUUM", $maxkey);
	is($node->safe_psql('postgres', q{
		SELECT entries >= (SELECT count(*) FROM c) FROM pmhash_stats('c_k')}),
		't', "$mode: every row has its entry");
	$node->restart;
	verify($node, "$mode after a clean restart", $maxkey);
	verify_unique($node, "$mode after a clean restart", $maxkey);
	$node->stop;
}

done_testing();
