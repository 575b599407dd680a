
# Copyright (c) pmhash authors
#
# A pool file that is missing, truncated, zero-filled, corrupt, or belongs
# to another index gives an ERROR naming the index and the file with a
# REINDEX hint; the server and other indexes keep working; REINDEX repairs.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# pool layout 2: 4 kB header, backup log of 2048 lines of 256 B, segments
my $seg0 = 4096 + 2048 * 256;

my $node = PostgreSQL::Test::Cluster->new('badpool');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
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

# damage the pool of a_k while the server is down (shared memory would
# otherwise keep serving the old state), then check error, others, REINDEX
sub damage_and_check
{
	my ($label, $damage, $pattern) = @_;
	my $path = pool_of('a_k');
	$node->stop;
	$damage->($path);
	$node->start;

	my ($ret, $out, $err) = probe('a');
	isnt($ret, 0, "$label: query through the index fails");
	like($err, qr/pmhash index "a_k"/, "$label: error names the index");
	like($err, $pattern, "$label: error says what is wrong");
	like($err, qr/HINT:\s+REINDEX INDEX a_k/, "$label: error hints REINDEX");
	($ret, $out, $err) = $node->psql('postgres', 'INSERT INTO a VALUES (10)');
	isnt($ret, 0, "$label: insert fails too");
	($ret, $out) = probe('b');
	is($out, '1', "$label: another pmhash index still works");
	is($node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off;
		SELECT count(*) FROM a WHERE k = 10}),
		'1', "$label: the table is intact");
	$node->safe_psql('postgres', 'REINDEX INDEX a_k');
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

damage_and_check('missing', sub { unlink $_[0] or die }, qr/could not open pool file/);
damage_and_check('truncated', sub { truncate($_[0], 10000) or die },
	qr/truncated/);
damage_and_check('zero-filled', sub {
	my $size = -s $_[0];
	write_at($_[0], 0, "\0" x 4096);
}, qr/bad magic/);
damage_and_check('bad checksum', sub { write_at($_[0], 40, "\x7f") },
	qr/checksum/);
damage_and_check('bad version', sub { write_at($_[0], 8, "\x09") },
	qr/version|checksum/);
damage_and_check('foreign pool', sub {
	my $other = pool_of_offline('b_k');
	unlink $_[0];
	system('cp', $other, $_[0]) == 0 or die;
}, qr/another index/);
damage_and_check('symlink planted', sub {
	my $other = pool_of_offline('b_k');
	unlink $_[0];
	symlink($other, $_[0]) or die;
}, qr/could not open pool file/);
damage_and_check('corrupt segment word', sub {
	# the word of segment 0 lives at $seg0 (after the header and backup log)
	write_at($_[0], $seg0, "\x13\x37\x13\x37\x13\x37\x13\x37");
}, qr/corrupt/);

# damage under a running server: shared memory still holds the old state,
# and pmhash_check reports where the pool disagrees with it
{
	my $path = pool_of('a_k');
	# segment 0's overflow link ($seg0 + 8), and a slot's tag in its first
	# bucket ($seg0 + 256 + 8) set to a live-looking garbage tag
	write_at($path, $seg0 + 8, pack('Q<', 12345));
	write_at($path, $seg0 + 256 + 8, pack('Q<', 0xA5000000FFFF0001));
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

done_testing();
