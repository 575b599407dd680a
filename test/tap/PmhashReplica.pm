
# Copyright (c) pmhash authors
#
# Helpers of the TAP tests of pmhash in the WAL (030, 031, 032, 007): a
# per-key comparison of what a pmhash index finds with what a sequential
# scan finds on the same snapshot, waiting for the background rebuild of
# pools that came with a base backup, a look at an index while it is being
# rebuilt, background pgbench workloads and a power-cut kill of a node.
#
# Nothing here decides a verdict on a timing: polls wait (up to
# PostgreSQL::Test::Utils' default timeout) for a state, and the look at an
# index during its rebuild asserts only what holds whenever it runs.

package PmhashReplica;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(plans_agree wait_rebuilt probe_while_rebuilding
  start_pgbench wait_pgbench workload_scripts power_cut forced_count
  seq_count start_primary group_members wal_test_conf compare_t
  by_key differences);

# planner settings of the three plans, each complete (they are SET LOCAL in
# one transaction, one after the other)
my $NL = 'SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; '
  . 'SET LOCAL enable_mergejoin = off; SET LOCAL enable_memoize = off; '
  . 'SET LOCAL enable_material = off; SET LOCAL enable_nestloop = on; '
  . 'SET LOCAL enable_indexonlyscan = off;';
my %SETTINGS = (
	index => "$NL SET LOCAL enable_indexscan = on; SET LOCAL enable_bitmapscan = off;",
	bitmap => "$NL SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = on;",
	seq => 'SET LOCAL enable_seqscan = on; SET LOCAL enable_hashjoin = on; '
	  . 'SET LOCAL enable_mergejoin = on; SET LOCAL enable_memoize = on; '
	  . 'SET LOCAL enable_material = on; SET LOCAL enable_nestloop = on; '
	  . 'SET LOCAL enable_indexonlyscan = off; '
	  . 'SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off;');

# the per-key query: probe keys lo..hi, each key's heap tuples as a sorted
# ctid array (a tuple found twice shows twice)
sub _probe_sql
{
	my (%o) = @_;
	return qq{SELECT p.k, array_agg(x.ctid ORDER BY x.ctid)
		FROM generate_series($o{lo}, $o{hi}) p(k)
		JOIN $o{table} x ON x.$o{col} = $o{probe}
		GROUP BY p.k ORDER BY p.k};
}

sub _defaults
{
	my (%o) = @_;
	$o{db} //= 'postgres';
	$o{table} //= 't';
	$o{index} //= $o{table} . '_k';
	$o{col} //= 'k';
	$o{probe} //= 'p.k';
	$o{lo} //= 0;
	$o{hi} //= 3100;
	$o{min_keys} //= 1;
	$o{check} //= 1;
	$o{tries} //= 30;
	return %o;
}

# key => "{ctid,...}" of the lines "k|{...}"
sub by_key
{
	my ($lines) = @_;
	my %rows;
	for my $line (@$lines)
	{
		my ($k, $ctids) = split(/\|/, $line, 2);
		$rows{$k} = $ctids;
	}
	return \%rows;
}

# the keys whose lists differ, and how, at most 10 of them
sub differences
{
	my ($got, $want) = @_;
	my %keys = map { $_ => 1 } (keys %$got, keys %$want);
	my @diff;
	for my $k (sort { $a <=> $b } keys %keys)
	{
		my $g = $got->{$k} // '(none)';
		my $w = $want->{$k} // '(none)';
		next if $g eq $w;
		my $show = sub {
			my $s = shift;
			return length($s) > 300 ? substr($s, 0, 300) . '...' : $s;
		};
		push @diff, "key $k: via index " . $show->($g) . ", via seqscan " . $show->($w);
		last if @diff >= 10;
	}
	return @diff;
}

my %PLAN_NAME = (index => 'an index scan', bitmap => 'a bitmap scan');
my %PLAN_RE = (
	index => sub { qr/Index Scan using $_[0] on/ },
	bitmap => sub { qr/Bitmap Index Scan on $_[0]\b/ });

# Runs, in one REPEATABLE READ transaction (one snapshot, also on a hot
# standby that goes on replaying), the EXPLAIN of the forced plans @plans
# and the per-key query under the sequential plan and under @plans.
# Returns ($sections, $stderr): $sections->{name} = [lines], or undef and
# the error.  A query cancelled by a recovery conflict (legitimate on a
# standby) is retried.
sub _one_snapshot
{
	my ($node, $label, $plans, %o) = @_;
	my $sql = _probe_sql(%o);
	my $tx = "BEGIN ISOLATION LEVEL REPEATABLE READ;\n";
	for my $plan (@$plans)
	{
		$tx .= "SELECT '\@explain_$plan';\n$SETTINGS{$plan}\n"
		  . "EXPLAIN (COSTS OFF) $sql;\n";
	}
	for my $plan ('seq', @$plans)
	{
		$tx .= "SELECT '\@$plan';\n$SETTINGS{$plan}\n$sql;\n";
	}
	$tx .= "COMMIT;\n";

	my ($ret, $out, $err);
	for my $try (1 .. $o{tries})
	{
		($ret, $out, $err) = $node->psql($o{db}, $tx);
		last if $ret == 0;
		last unless $err =~ /conflict with recovery/;
		note("$label: cancelled by a recovery conflict (try $try), again");
		usleep(200_000);
	}
	return (undef, $err) if $ret != 0;

	my %sections;
	my $cur;
	for my $line (split(/\n/, $out))
	{
		if ($line =~ /^\@(\w+)$/)
		{
			$cur = $1;
			$sections{$cur} = [];
			next;
		}
		push @{ $sections{$cur} }, $line if defined $cur;
	}
	return (\%sections, '');
}

# the EXPLAIN of the forced plan $plan (outside any snapshot)
sub _explain
{
	my ($node, $plan, %o) = @_;
	my ($ret, $out, $err) = $node->psql($o{db},
		"BEGIN; $SETTINGS{$plan} EXPLAIN (COSTS OFF) " . _probe_sql(%o) . '; COMMIT;');
	return $ret == 0 ? $out : "ERROR: $err";
}

# plans_agree($node, $label, %o): on one snapshot, every key lo..hi has the
# same heap tuples (ctids, each once) through a forced index scan and a
# forced bitmap scan of $o{index} as through a sequential scan; the forced
# plans really use $o{index}; pmhash_check() finds nothing.
#   table (t), index (<table>_k), col (k), probe (SQL of the key value from
#   p.k, default p.k), lo (0), hi (3100), db (postgres), min_keys (keys the
#   seqscan must find, 1), check (1: also pmhash_check), allow_error (0:
#   with 1, a planner that does not use the index, or a clear ERROR of the
#   forced plans, is accepted; see probe_while_rebuilding)
# Returns 1 when all agreed.
sub plans_agree
{
	my ($node, $label, %o) = @_;
	%o = _defaults(%o);
	my $ok = 1;

	# a forced plan that does not use the index would be a nested loop over
	# a sequential scan: only the plans that use it are run
	my @plans;
	for my $plan ('index', 'bitmap')
	{
		my $explain = _explain($node, $plan, %o);
		if ($explain =~ $PLAN_RE{$plan}->($o{index}))
		{
			push @plans, $plan;
		}
		elsif ($o{allow_error})
		{
			if ($explain =~ /^ERROR: (.*)/s)
			{
				$ok &= _clear_error("$label: planning the $plan scan", $1, $o{index});
			}
			else
			{
				note("$label: the forced $plan plan does not use $o{index}");
			}
		}
		else
		{
			$ok &= fail("$label: the forced plan is $PLAN_NAME{$plan} of $o{index}");
			diag($explain);
		}
	}
	return $ok if !@plans;

	my ($s, $err) = _one_snapshot($node, $label, \@plans, %o);
	if (!$s)
	{
		return _clear_error($label, $err, $o{index}) if $o{allow_error};
		fail("$label: the comparison ran");
		diag("error: $err");
		return 0;
	}

	for my $plan (@plans)
	{
		$ok &= like(join("\n", @{ $s->{"explain_$plan"} }), $PLAN_RE{$plan}->($o{index}),
			"$label: the forced plan is $PLAN_NAME{$plan} of $o{index}");
	}
	my $seq = by_key($s->{seq});
	$ok &= cmp_ok(scalar(keys %$seq), '>=', $o{min_keys},
		"$label: the sequential scan finds at least $o{min_keys} of the keys");
	for my $plan (@plans)
	{
		my @diff = differences(by_key($s->{$plan}), $seq);
		$ok &= ok(!@diff,
			"$label: the $plan scan of $o{index} finds each key's rows exactly once")
		  or diag(join("\n", @diff));
	}
	if ($o{check})
	{
		my ($ret, $out, $cerr) = $node->psql($o{db},
			"SELECT * FROM pmhash_check('$o{index}')");
		$ok &= ok($ret == 0 && $out eq '',
			"$label: pmhash_check('$o{index}') finds nothing")
		  or diag("pmhash_check: ret $ret, out: $out, err: $cerr");
	}
	return $ok;
}

# an ERROR of a forced use of an index that cannot be used right now must
# be clear: an ERROR (not a lost connection) that names the index
sub _clear_error
{
	my ($label, $err, $index) = @_;
	return ok($err =~ /ERROR:/ && $err =~ /\Q$index\E/
		  && $err !~ /server closed the connection|terminat/,
		"$label: the forced use of $index is a clear error")
	  || diag("error: $err");
}

# the pmhash indexes (permanent ones: an unlogged index cannot be read on a
# standby) of a database that are being rebuilt
my $REBUILDING_FROM = q{
	FROM pg_class c JOIN pg_am a ON a.oid = c.relam,
		LATERAL pmhash_rebuild_progress(c.oid::regclass) r
	WHERE a.amname = 'pmhash' AND c.relpersistence = 'p' AND r.rebuilding};

# wait_rebuilt($node, $label, [$db, @indexes]): wait until no pmhash index
# of the database is being rebuilt; @indexes must exist and be done
sub wait_rebuilt
{
	my ($node, $label, $db, @indexes) = @_;
	$db //= 'postgres';
	# without the function there is nothing to wait for
	my ($ret, $out, $err) = $node->psql($db,
		q{SELECT 'pmhash_rebuild_progress(regclass)'::regprocedure});
	if ($ret != 0)
	{
		fail("$label: pmhash_rebuild_progress() exists");
		diag($err);
		return 0;
	}
	# poll; an ERROR other than a recovery conflict ends the wait at once
	# (it would not go away: a pool that cannot be loaded, say)
	my $done = 0;
	my $q = "SELECT count(*) $REBUILDING_FROM";
	my $polls = 10 * $PostgreSQL::Test::Utils::timeout_default;
	for (my $i = 0; $i < $polls; $i++)
	{
		($ret, $out, $err) = $node->psql($db, $q);
		if ($ret == 0 && $out eq '0')
		{
			$done = 1;
			last;
		}
		last if $ret != 0 && $err !~ /conflict with recovery/;
		usleep(100_000);
	}
	ok($done, "$label: the rebuild of every pmhash index ends")
	  or diag($ret != 0 ? "error: $err" : 'still rebuilding: ' . ($node->psql($db,
		"SELECT string_agg(c.relname || ' ' || r.blocks_done || '/' || r.blocks_total, ', ') $REBUILDING_FROM"))[1]);
	for my $i (@indexes)
	{
		($ret, $out, $err) = $node->psql($db,
			"SELECT rebuilding FROM pmhash_rebuild_progress('$i'::regclass)");
		ok($ret == 0 && $out eq 'f', "$label: $i is not being rebuilt")
		  or diag("rebuilding: $out; error: $err");
	}
	return $done;
}

sub _rebuilding
{
	my ($node, $db, $index) = @_;
	my ($ret, $out, $err) = $node->psql($db,
		"SELECT rebuilding FROM pmhash_rebuild_progress('$index'::regclass)");
	return undef if $ret != 0;
	return $out eq 't' ? 1 : 0;
}

# probe_while_rebuilding($node, $label, $point_sql, %o): meant for right
# after the start of a server whose pools are rebuilt.  If the index is
# being rebuilt before and after the EXPLAIN of $point_sql, the plan must
# not use it; the forced plans must answer every key right or give a clear
# ERROR naming the index (whenever they run).  Also notes whether
# pg_stat_progress_create_index showed the rebuild.  (What the rebuild
# state is when this runs depends on timing; what is asserted holds in
# either state.)
sub probe_while_rebuilding
{
	my ($node, $label, $point_sql, %o) = @_;
	%o = _defaults(%o);
	my $before = _rebuilding($node, $o{db}, $o{index});
	my $progress = $node->safe_psql($o{db}, qq{
		SELECT command || ' ' || phase || ' ' || blocks_done || '/' || blocks_total
		FROM pg_stat_progress_create_index
		WHERE index_relid = '$o{index}'::regclass});
	my $plan = $node->safe_psql($o{db}, "EXPLAIN (COSTS OFF) $point_sql");
	my $after = _rebuilding($node, $o{db}, $o{index});
	if (!defined($before) || !defined($after))
	{
		fail("$label: pmhash_rebuild_progress('$o{index}') answers");
		return;
	}
	note("$label: $o{index} rebuilding before/after the EXPLAIN: $before/$after; "
		  . 'pg_stat_progress_create_index: ' . ($progress eq '' ? '(no row)' : $progress));
	if ($before && $after)
	{
		unlike($plan, qr/\b$o{index}\b/,
			"$label: while $o{index} is rebuilt the planner avoids it");
	}
	plans_agree($node, "$label (during or after the rebuild)", %o,
		allow_error => 1, check => 0);
	return;
}

# count(*) of $where on $table through a forced index scan / a seqscan
sub forced_count
{
	my ($node, $table, $where, $db) = @_;
	return $node->safe_psql($db // 'postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM $table WHERE $where});
}

sub seq_count
{
	my ($node, $table, $where, $db) = @_;
	return $node->safe_psql($db // 'postgres', qq{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM $table WHERE $where});
}

# The pgbench scripts of the tests' workload on a table
# t (id bigserial, k int4, s text) with s = 'v' || k: inserts of many keys
# 1 .. :maxkey + 19 (segments split), a hot key 0 with many rows (overflow
# chains), aborted inserts, deletes, updates of keys, lookups.
my %SCRIPTS = (
	'insert@10' => q{
\set k random(1, :maxkey)
INSERT INTO t (k, s) SELECT :k + g, 'v' || (:k + g) FROM generate_series(0, 19) g;
},
	'insert_hot@2' => q{
INSERT INTO t (k, s) SELECT 0, 'v0' FROM generate_series(1, 10);
},
	'trim_hot@1' => q{
\set r random(0, 99)
DELETE FROM t WHERE k = 0 AND id % 100 = :r;
},
	'insert_abort@1' => q{
\set k random(1, :maxkey)
BEGIN;
INSERT INTO t (k, s) SELECT :k + g, 'v' || (:k + g) FROM generate_series(0, 39) g;
ROLLBACK;
},
	'delete@4' => q{
\set k random(1, :maxkey)
DELETE FROM t WHERE k = :k OR k = :k + 1;
},
	'update@2' => q{
\set k random(1, :maxkey)
\set k2 random(1, :maxkey)
UPDATE t SET k = :k2, s = 'v' || :k2 WHERE k = :k;
},
	'select@2' => q{
\set k random(1, :maxkey)
SELECT count(*) FROM t WHERE k = :k;
},);

sub workload_scripts
{
	return {%SCRIPTS};
}

# the settings every WAL test gives its primary (and, through base
# backups, its standbys), without a trailing newline's worth of others
sub wal_test_conf
{
	return q{
shared_buffers = 32MB
max_connections = 30
autovacuum = off
log_statement = ddl
hot_standby_feedback = on
};
}

# both pmhash indexes of start_primary's table agree with the heap on
# $node, for keys 0 .. $hi
sub compare_t
{
	my ($node, $label, $hi, %o) = @_;
	plans_agree($node, "$label, t_k", hi => $hi, min_keys => 1000, %o);
	plans_agree($node, "$label, t_s", index => 't_s', col => 's',
		probe => q{'v' || p.k}, hi => $hi, min_keys => 1000, %o);
	return;
}

# start_primary($primary, $maxkey, $more_sql): the settings the WAL tests
# share (copied into standbys by their base backups, harmless on the
# primary), start, and the table t (keys 1..maxkey and a hot key 0 with
# 3000 rows) with pmhash indexes t_k on k and t_s on s; more_sql runs in
# the same statement, before ANALYZE
sub start_primary
{
	my ($primary, $maxkey, $more_sql) = @_;
	$primary->append_conf('postgresql.conf', wal_test_conf() . q{
checkpoint_timeout = 1h
max_standby_streaming_delay = 2s
});
	$primary->start;
	$primary->safe_psql('postgres', qq{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (id bigserial, k int4, s text);
	INSERT INTO t (k, s) SELECT 1 + g % $maxkey, 'v' || (1 + g % $maxkey)
		FROM generate_series(1, 30000) g;
	INSERT INTO t (k, s) SELECT 0, 'v0' FROM generate_series(1, 3000);
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE INDEX t_s ON t USING pmhash (s);
	} . ($more_sql // '') . q{
	ANALYZE t;
});
	return;
}

# start_pgbench($node, %o): pgbench in the background, connected when this
# returns.  o: scripts ({ 'name@weight' => text }), clients (2), seconds
# (run time, -T), rate (transactions per second, -R; default none),
# defines ({ var => value }), db (postgres), tag (a name for the script
# files and application_name)
sub start_pgbench
{
	my ($node, %o) = @_;
	my $clients = $o{clients} // 2;
	my $tag = $o{tag} // 'pgb';
	my @files;
	for my $s (sort keys %{ $o{scripts} })
	{
		my ($file, $weight) = split(/@/, $s);
		my $path = $node->basedir . "/${tag}_$file.sql";
		unlink($path);
		PostgreSQL::Test::Utils::append_to_file($path, $o{scripts}{$s});
		push @files, '-f', "$path\@" . ($weight // 1);
	}
	my @rate = defined $o{rate} ? ('-R', $o{rate}) : ();
	my @defines = map { ('-D', "$_=$o{defines}{$_}") } sort keys %{ $o{defines} // {} };
	my ($out, $err) = ('', '');
	my @cmd = (
		'pgbench', '--no-vacuum', '-h', $node->host, '-p', $node->port,
		"--client=$clients", "--jobs=$clients", '-T', $o{seconds} // 5,
		'--max-tries=100', @rate, @defines, @files, $o{db} // 'postgres');
	local $ENV{PGAPPNAME} = $tag;
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	$node->poll_query_until($o{db} // 'postgres', qq{
		SELECT count(*) >= $clients FROM pg_stat_activity
		WHERE application_name = '$tag'})
	  or die "pgbench did not connect: $err";
	return { h => $h, out => \$out, err => \$err, tag => $tag };
}

# wait for pgbench's end; returns the number of transactions it processed
sub wait_pgbench
{
	my ($w) = @_;
	eval { $w->{h}->finish; };
	my ($n) = ${ $w->{out} } =~ /number of transactions actually processed: (\d+)/;
	my ($failed) = ${ $w->{out} } =~ /(number of failed transactions: .*)/;
	note("pgbench $w->{tag}: " . ($n // 'no summary') . ' transactions'
		  . ($failed ? ", $failed" : '')
		  . (${ $w->{err} } =~ /aborted/ ? "; stderr: ${ $w->{err} }" : ''));
	return $n // 0;
}

# processes (not zombies) whose parent and process group pass $want
sub _procs
{
	my ($want) = @_;
	my @pids;
	opendir(my $dh, '/proc') or die "/proc: $!";
	for my $p (grep { /^[0-9]+$/ } readdir($dh))
	{
		open(my $fh, '<', "/proc/$p/stat") or next;
		my $stat = <$fh>;
		close($fh);
		next unless defined $stat;
		$stat =~ s/^.*\) //s;
		my ($state, $ppid, $pgrp) = split(' ', $stat);
		push @pids, $p if $state ne 'Z' && $want->($ppid, $pgrp);
	}
	closedir($dh);
	return @pids;
}

# processes (not zombies) of process group $pgid
sub group_members
{
	my ($pgid) = @_;
	return _procs(sub { $_[1] == $pgid });
}

# power_cut($node): SIGKILL the postmaster and every process of the server
# at once (as a power cut stops everything), wait until they are gone; the
# node can then be started again.  The postmaster's children each lead a
# process group of their own (PostgreSQL's InitPostmasterChild), so the
# postmaster is stopped first (it forks no more), then every group of it
# and of its children is killed: none goes on working after the postmaster
# is gone, not even for as long as it takes to notice, and a stopped one
# goes too.
sub power_cut
{
	my ($node) = @_;
	open(my $pf, '<', $node->data_dir . '/postmaster.pid') or die "postmaster.pid: $!";
	my $pm = <$pf>;
	close($pf);
	chomp($pm);
	die "the postmaster $pm does not lead its process group"
	  unless getpgrp($pm) == $pm;
	kill('STOP', $pm);
	my @groups = ($pm, _procs(sub { $_[0] == $pm }));
	kill('KILL', map { -$_ } @groups);
	$node->kill9;
	for (my $i = 0; $i < 600 && grep { group_members($_) } @groups; $i++)
	{
		usleep(100_000);
	}
	for (my $i = 0; $i < 600 && kill(0, $pm); $i++)
	{
		usleep(100_000);
	}
	return;
}

1;
