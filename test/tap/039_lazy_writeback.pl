
# Copyright (c) pmhash authors
#
# Deferred write-back of pools on ordinary files (pmhash.lazy_writeback):
#  - inserts into a pool whose write-back mark is set make no sync at all;
#    the mark (the kernel's boot id, at offset 2112 of the pool) is set
#    durably before the first deferred store, and cleared by
#    pmhash_writeback(), by the launcher once the pool is idle, and at a
#    clean shutdown;
#  - a crash of the server alone (same boot) keeps the pool: the page cache
#    held every store;
#  - a crash of the operating system is simulated by a new boot id and a
#    pool file that lost writes: what the device held when the mark was
#    set, plus a random part of the pages written since.  The pool is not
#    trusted, it is rebuilt from the table, and every answer equals a
#    sequential scan's;
#  - a pool written back before the "reboot" is trusted;
#  - pmhash.lazy_writeback = off syncs at every persist; an unreadable boot
#    id turns deferral off; pmhash_writeback() needs pg_checkpoint.
#
# Run through test/run_tests.sh (suite "tap").

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PmhashReplica;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
my $boot_file = $node->basedir . '/boot_id';

# pretend the kernel booted with this id
sub set_boot
{
	my ($id) = @_;
	open(my $fh, '>', $boot_file) or die "$boot_file: $!";
	print $fh "$id\n";
	close($fh);
}
set_boot('11111111-2222-3333-4444-555555555555');

$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
restart_after_crash = on
pmhash.boot_id_path = '$boot_file'
pmhash.writeback_delay = '1h'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4, payload text);
	INSERT INTO t SELECT g % 3000, 'r' || g FROM generate_series(1, 20000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
});
my $pool = $node->safe_psql('postgres', "SELECT pool_path FROM pmhash_stats('t_k')");

# the write-back mark of the pool file, as 32 hex digits (0s: none)
sub mark
{
	open(my $fh, '<:raw', $pool) or die "$pool: $!";
	seek($fh, 2112, 0) or die;
	read($fh, my $buf, 16) == 16 or die "short read of $pool";
	close($fh);
	return join('', map { sprintf('%016x', $_) } unpack('Q<Q<', $buf));
}

sub stat_of
{
	my ($col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM pmhash_stats('t_k')");
}

sub insert_rows
{
	my ($from, $to) = @_;
	$node->safe_psql('postgres',
		"INSERT INTO t SELECT g % 3000, 'r' || g FROM generate_series($from, $to) g");
}

# --- the mark, and no syncs while it is set ---
is(mark(), '11111111222233334444555555555555',
	'a new pool carries the boot id as its write-back mark');
is(stat_of('writeback_pending'), 't', 'pmhash_stats says write-back is pending');

my $s0 = stat_of('syncs');
insert_rows(20001, 60000);
is(stat_of('syncs'), $s0, '40000 inserts (splits, relocations, log lines) make no sync');
ok(plans_agree($node, 'after deferred inserts'), 'answers agree after deferred inserts');

# --- pmhash_writeback() ---
is($node->safe_psql('postgres', 'SELECT pmhash_writeback()'), '1',
	'pmhash_writeback() writes back the one pending pool');
is(mark(), '0' x 32, 'the mark is cleared on the device');
is(stat_of('writeback_pending'), 'f', 'nothing is pending any more');
ok(stat_of('syncs') > $s0, 'the write-back counts its syncs');
is($node->safe_psql('postgres', 'SELECT pmhash_writeback()'), '0',
	'a second call finds nothing to write back');

# what the device holds now (everything: it was just written back)
my $device = slurp_file($pool);

$s0 = stat_of('syncs');
insert_rows(60001, 61000);
is(mark(), '11111111222233334444555555555555', 'the next insert sets the mark again');
is(stat_of('syncs') - $s0, 1, 'setting the mark is the only sync');
insert_rows(61001, 90000);
$node->safe_psql('postgres', 'DELETE FROM t WHERE k % 7 = 0');
$node->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) t');
is(stat_of('syncs') - $s0, 1, 'inserts and VACUUM after that make no sync');

# --- a crash of the server alone: the pool is kept ---
my $log_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
ok(plans_agree($node, 'after a server crash'), 'answers agree after a server crash');
ok(slurp_file($node->logfile) !~ /will be rebuilt/, 'a server crash rebuilds nothing');
is($node->safe_psql('postgres',
	"SELECT rebuilding FROM pmhash_rebuild_progress('t_k')"), 'f',
	'the pool is trusted after a server crash');

# --- a crash of the operating system: lost writes, a new boot ---
insert_rows(90001, 120000);
$node->stop('immediate');
my $now = slurp_file($pool);
ok(length($now) >= length($device), 'the pool grew since the write-back');
# the device: what it had at the write-back, the mark the first deferred
# store set, and a random half of the 4 kB pages written since
srand(39);
my $torn = $device . substr($now, length($device));
for (my $off = 0; $off < length($device); $off += 4096)
{
	substr($torn, $off, 4096) = substr($now, $off, 4096) if rand() < 0.5;
}
substr($torn, 2112, 16) = substr($now, 2112, 16);
open(my $fh, '>:raw', $pool) or die "$pool: $!";
print $fh $torn;
close($fh);
set_boot('99999999-8888-7777-6666-555555555555');
$log_offset = -s $node->logfile;
$node->start;
# the first use loads (and replaces) the pool; the launcher rebuilds it
$node->safe_psql('postgres', "SELECT count(*) FROM pmhash_stats('t_k')");
wait_rebuilt($node, 'after an operating-system crash', 'postgres', 't_k');
ok(plans_agree($node, 'after an operating-system crash'),
	'answers agree after an operating-system crash');
like(substr(slurp_file($node->logfile), $log_offset),
	qr/its pool will be rebuilt.*\n.*operating system restarted before it was written back/,
	'a pool left unwritten by a crashed kernel is rebuilt, and the log says why');
is($node->safe_psql('postgres', "SELECT count(*) FROM t WHERE k = 1"),
	$node->safe_psql('postgres', "SET enable_indexscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM t WHERE k = 1"),
	'a count through the rebuilt index equals a sequential scan');

# --- written back before the "reboot": trusted ---
insert_rows(120001, 125000);
$node->safe_psql('postgres', 'SELECT pmhash_writeback()');
$node->stop('immediate');
set_boot('aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee');
$log_offset = -s $node->logfile;
$node->start;
$node->safe_psql('postgres', "SELECT count(*) FROM pmhash_stats('t_k')");
is($node->safe_psql('postgres',
	"SELECT rebuilding FROM pmhash_rebuild_progress('t_k')"), 'f',
	'a pool written back before the reboot is trusted');
ok(substr(slurp_file($node->logfile), $log_offset) !~ /will be rebuilt/,
	'and not rebuilt');
ok(plans_agree($node, 'after a reboot of a written-back pool'),
	'answers agree after a reboot of a written-back pool');

# --- a clean shutdown writes back ---
insert_rows(125001, 130000);
is(stat_of('writeback_pending'), 't', 'write-back pending before a clean shutdown');
$node->stop('fast');
is(mark(), '0' x 32, 'a clean shutdown writes the pool back and clears its mark');
set_boot('bbbbbbbb-bbbb-cccc-dddd-eeeeeeeeeeee');
$node->start;
is($node->safe_psql('postgres',
	"SELECT rebuilding FROM pmhash_rebuild_progress('t_k')"), 'f',
	'a pool written back at shutdown is trusted after a reboot');

# --- the launcher writes back an idle pool ---
$node->append_conf('postgresql.conf', "pmhash.writeback_delay = 1\n");
$node->reload;
insert_rows(130001, 131000);
ok($node->poll_query_until('postgres',
	"SELECT NOT writeback_pending FROM pmhash_stats('t_k')"),
	'the launcher writes back an idle pool');
# (the flag clears before the last sync; the mark is stored after it)
my $cleared = 0;
for (my $i = 0; $i < 10 * $PostgreSQL::Test::Utils::timeout_default; $i++)
{
	last if ($cleared = mark() eq '0' x 32);
	usleep(100_000);
}
ok($cleared, 'and clears its mark');

# --- pmhash_writeback() needs pg_checkpoint ---
$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
my ($ret, $out, $err) = $node->psql('postgres',
	'SET ROLE plain; SELECT pmhash_writeback()');
like($err, qr/permission denied to write back pmhash pools/,
	'pmhash_writeback() is refused to a plain role');
$node->safe_psql('postgres', 'GRANT pg_checkpoint TO plain');
($ret, $out, $err) = $node->psql('postgres',
	'SET ROLE plain; SELECT pmhash_writeback() >= 0');
is($out, 't', 'a member of pg_checkpoint may write back');

# --- lazy_writeback off: every persist syncs ---
$node->append_conf('postgresql.conf',
	"pmhash.lazy_writeback = off\npmhash.writeback_delay = '1h'\n");
$node->reload;
$s0 = stat_of('syncs');
insert_rows(131001, 141000);
ok(stat_of('syncs') - $s0 > 10, 'with lazy_writeback off, inserts sync');
ok(plans_agree($node, 'lazy_writeback off'), 'answers agree with lazy_writeback off');

# --- no boot id: no deferral ---
$node->append_conf('postgresql.conf',
	"pmhash.lazy_writeback = on\npmhash.boot_id_path = '/nonexistent/boot_id'\n");
$log_offset = -s $node->logfile;
$node->restart;
ok(substr(slurp_file($node->logfile), $log_offset) =~ /could not read the boot id/,
	'an unreadable boot id is logged');
$s0 = stat_of('syncs');
insert_rows(141001, 151000);
ok(stat_of('syncs') - $s0 > 10, 'without a boot id, inserts sync');
ok(plans_agree($node, 'without a boot id'), 'answers agree without a boot id');

$node->stop;
done_testing();
