
# Copyright (c) pmhash authors
#
# A pool file that is missing, truncated, zero-filled, corrupt, unreadable,
# a symlink, or belongs to another index gives an ERROR naming the index and
# the file with a REINDEX hint; the server and other indexes keep working;
# the planner stops choosing the index until REINDEX (which repairs it) or
# until the file changes.

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# pool layout 2: 4 kB header, backup log of 2048 lines of 256 B, segments
my $seg0 = 4096 + 2048 * 256;

my $node = PostgreSQL::Test::Cluster->new('badpool');
$node->init;
# first uses are what this test is about: no background loading
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n"
	. "pmhash.prewarm = off\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE a (k int4);
	INSERT INTO a SELECT generate_series(1, 20000);
	CREATE INDEX a_k ON a USING pmhash (k);
	CREATE TABLE b (k int4);
	INSERT INTO b SELECT generate_series(1, 1000);
	CREATE INDEX b_k ON b USING pmhash (k);
});

sub pool_of
{
	my ($index) = @_;
	return $node->safe_psql('postgres',
		"SELECT pool_path FROM pmhash_stats('$index')");
}

# the pool of b_k, recorded while the server is up
my %paths = (b_k => pool_of('b_k'));
sub pool_of_offline { return $paths{ $_[0] }; }

sub probe
{
	my ($table) = @_;
	return $node->psql('postgres', qq{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM $table WHERE k = 10});
}

# is a_k in the plan the planner makes for a probe (with seqscans off)?
sub plan_uses_index
{
	my $plan = $node->safe_psql('postgres', q{
		SET enable_seqscan = off;
		EXPLAIN (COSTS OFF) SELECT count(*) FROM a WHERE k = 10});
	return $plan =~ /a_k/ ? 1 : 0;
}

# damage the pool of a_k while the server is down (shared memory would
# otherwise keep serving the old state), then check error, others, REINDEX
sub damage_and_check
{
	my ($label, $damage, $pattern) = @_;
	my $path = pool_of('a_k');
	my ($file) = $path =~ m{([^/]+)$};
	$node->stop;
	$damage->($path);
	$node->start;

	is(plan_uses_index(), 1, "$label: the planner does not know yet");
	my ($ret, $out, $err) = probe('a');
	isnt($ret, 0, "$label: query through the index fails");
	like($err, qr/pmhash index "a_k"/, "$label: error names the index");
	like($err, qr/\Q$file\E/, "$label: error names the file");
	like($err, $pattern, "$label: error says what is wrong");
	like($err, qr/HINT:\s+REINDEX INDEX a_k/, "$label: error hints REINDEX");

	# the failed load told the planner; queries work without the index
	is(plan_uses_index(), 0, "$label: the planner no longer chooses the index");
	($ret, $out, $err) = probe('a');
	is($out, '1', "$label: queries work without it");
	($ret, $out, $err) = $node->psql('postgres', 'INSERT INTO a VALUES (10)');
	isnt($ret, 0, "$label: insert fails too");
	like($err, qr/pmhash index "a_k".*\n(.*\n)*HINT:\s+REINDEX INDEX a_k/,
		"$label: insert error names the index and hints REINDEX");
	# a session that tried once knows the index (relcache), but inserts
	# that join the collecting log without attaching must not hide the error
	($ret, $out, $err) = $node->psql('postgres', q{
		INSERT INTO a VALUES (10);
		INSERT INTO a VALUES (11);
		BEGIN; SAVEPOINT s; INSERT INTO a VALUES (12); ROLLBACK;},
		on_error_stop => 0);
	my @ins_errors = $err =~ /(ERROR:[^\n]*)/g;
	is(scalar(@ins_errors), 3, "$label: every insert of the session fails");
	($ret, $out) = probe('b');
	is($out, '1', "$label: another pmhash index still works");
	is($node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM a WHERE k = 10}),
		'1', "$label: the table is intact");
	$node->safe_psql('postgres', 'REINDEX INDEX a_k');
	is(plan_uses_index(), 1, "$label: after REINDEX the planner uses the index");
	($ret, $out) = probe('a');
	is($out, '1', "$label: REINDEX repairs the index");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('a_k')}),
		'0', "$label: repaired index is consistent");
	return;
}

sub write_at
{
	my ($path, $offset, $bytes) = @_;
	open(my $fh, '+<', $path) or die "open $path: $!";
	binmode $fh;
	seek($fh, $offset, 0) or die;
	print $fh $bytes;
	close $fh;
	return;
}

damage_and_check('missing', sub { unlink $_[0] or die },
	qr/could not open pool file.*No such file/);
damage_and_check('truncated', sub { truncate($_[0], 10000) or die },
	qr/truncated/);
damage_and_check('zero-filled', sub {
	write_at($_[0], 0, "\0" x 4096);
}, qr/bad magic/);
damage_and_check('bad magic', sub { write_at($_[0], 0, 'NOTAPOOL') },
	qr/bad magic/);
damage_and_check('bad checksum', sub { write_at($_[0], 40, "\x7f") },
	qr/checksum/);
damage_and_check('bad version', sub { write_at($_[0], 8, "\x09") },
	qr/version is not supported/);
damage_and_check('foreign pool', sub {
	my $other = pool_of_offline('b_k');
	unlink $_[0];
	system('cp', $other, $_[0]) == 0 or die;
}, qr/another index/);
damage_and_check('corrupt segment word', sub {
	# the word of segment 0 lives at $seg0 (after the header and backup log)
	write_at($_[0], $seg0, "\x13\x37\x13\x37\x13\x37\x13\x37");
}, qr/corrupt/);

# a symlink planted in place of the pool is refused, not followed: the
# file it points to (b_k's pool) is neither used nor changed
{
	my $other = pool_of_offline('b_k');
	my $before = slurp_file($other);
	damage_and_check('symlink planted', sub {
		unlink $_[0];
		symlink($other, $_[0]) or die;
	}, qr/could not open pool file(.*\n)*DETAIL:.*symbolic link/);
	ok(slurp_file($other) eq $before, 'symlink planted: its target is untouched');
}

# an unreadable pool (tests run as the server's own, non-root user): the
# error says so; a plan cached before the failure still errors clearly; a
# new plan avoids the index; once the file changes (here: readable again)
# the planner tries the index again, without REINDEX
SKIP:
{
	skip 'permission tests need a non-root user', 10 if $> == 0;
	my $path = pool_of('a_k');
	$node->stop;
	chmod(0000, $path) or die;
	$node->start;
	my ($ret, $out, $err) = $node->psql('postgres', q{
		SET plan_cache_mode = force_generic_plan;
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		PREPARE p(int4) AS SELECT count(*) FROM a WHERE k = $1;
		EXECUTE p(10);
		EXECUTE p(10);
		EXPLAIN (COSTS OFF) SELECT count(*) FROM a WHERE k = 10;
		SELECT count(*) FROM a WHERE k = 10;}, on_error_stop => 0);
	my @errors = $err =~ /(could not open pool file[^\n]*a_k[^\n]*Permission denied)/g;
	is(scalar(@errors), 2,
		'unreadable: the query fails, and so does its cached plan, naming index and reason');
	like($err, qr/HINT:\s+REINDEX INDEX a_k/, 'unreadable: error hints REINDEX');
	unlike($out, qr/a_k/, 'unreadable: a new plan does not use the index');
	like($out, qr/Seq Scan on a(.*\n)+1$/, 'unreadable: and answers the query');
	is(plan_uses_index(), 0, 'unreadable: other sessions avoid the index too');

	chmod(0600, $path) or die;
	is(plan_uses_index(), 1, 'readable again: the planner tries the index');
	($ret, $out) = probe('a');
	is($out, '1', 'readable again: the index works without REINDEX');
	($ret, $out, $err) = $node->psql('postgres', 'INSERT INTO a VALUES (20001)');
	is($ret, 0, 'readable again: inserts work');
	is($node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM a WHERE k = 20001}), '1',
		'readable again: the new row is found through the index');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('a_k')}),
		'0', 'readable again: the index is consistent');
}

# damage under a running server: shared memory still holds the old state,
# and pmhash_check reports where the pool disagrees with it
{
	my $path = pool_of('a_k');
	# segment 0's overflow link ($seg0 + 8), and a slot's tag in its first
	# bucket ($seg0 + 256 + 8) set to a live-looking garbage tag
	write_at($path, $seg0 + 8, pack('Q<', 12345));
	write_at($path, $seg0 + 256 + 8, pack('Q<', hex('A5000000FFFF0001')));
	my $problems = $node->safe_psql('postgres',
		q{SELECT string_agg(p, E'\n') FROM pmhash_check('a_k') p});
	like($problems, qr/disagree on its overflow chain/,
		'pmhash_check reports a changed overflow link');
	like($problems, qr/slot 0|fingerprint|live/,
		'pmhash_check reports a changed slot');
	$node->safe_psql('postgres', 'REINDEX INDEX a_k');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('a_k')}),
		'0', 'REINDEX repairs it');
}

# a pool file replaced under a session that has it mapped (the operator
# copied a file over it): when the pool must grow, the session notices
# that the file is another one, and says so rather than growing it
{
	$node->safe_psql('postgres', q{
		CREATE TABLE g (k int4);
		CREATE INDEX g_k ON g USING pmhash (k);
	});
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('INSERT INTO g VALUES (1)');
	my $path = pool_of('g_k');
	File::Copy::copy($path, "$path.tmp") or die "copy: $!";
	rename("$path.tmp", $path) or die "rename: $!";
	$s->query('INSERT INTO g SELECT generate_series(2, 100000)');
	like($s->{stderr}, qr/ERROR:  pool file "[^"]*" of pmhash index "g_k" was replaced while in use/,
		'a pool file replaced under a session is an error when it must grow');
	like($s->{stderr}, qr/HINT:  REINDEX INDEX g_k;/, 'with a REINDEX hint');
	$s->quit;
	$node->safe_psql('postgres', 'REINDEX INDEX g_k');
	$node->safe_psql('postgres', 'INSERT INTO g SELECT generate_series(2, 100000)');
	is($node->safe_psql('postgres', q{
		SET enable_seqscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM g WHERE k = 77777}), '1', 'REINDEX repairs it');
}

done_testing();
