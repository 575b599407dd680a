
# Copyright (c) pmhash authors
#
# Rebuilding the shared state from a pool whose backup log holds more
# pending entries for a full segment than its D-bucket takes: the rebuild
# must relocate, find no room and split the segment -- all inside the one
# load.  (Found by 012_kill9_torture: a load started by a scan, under the
# index lock taken for a shared user, released the lock for the split and
# loaded the index a second time inside the first load, which then placed
# the rest of the log again: backup-log slots pending twice, the pending
# count off.)
#
# The pool is written by hand while the server is down: one full segment
# (1024 entries, depth 0) and 40 log entries with the hashes of real keys
# and heap TIDs past the end of the heap, as a crash leaves the entries of
# inserts whose WAL never reached the disk.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pmhash'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE t (k int4);
	INSERT INTO t SELECT generate_series(1, 1024);
	CREATE INDEX t_k ON t USING pmhash (k);
});
is($node->safe_psql('postgres',
	q{SELECT segments, entries, pending_entries FROM pmhash_stats('t_k')}),
	'1|1024|0', 'one full segment, nothing pending');

my $path = $node->safe_psql('postgres', q{SELECT pool_path FROM pmhash_stats('t_k')});
# the 64-bit hashes of keys 2001 .. 2040, as pmhash computes them
my @hashes = split(/\n/, $node->safe_psql('postgres', q{
	SELECT hashint4extended(g, 0) FROM generate_series(2001, 2040) g ORDER BY g}));
$node->stop;

# 40 live log entries in lines 0 .. 2 (offset 4096, 16 slots of 16 bytes
# each): tag = 0xA5 marker, the hash's low byte, block 100000 + i, offset 1
open(my $fh, '+<:raw', $path) or die "$path: $!";
for my $i (0 .. $#hashes)
{
	my $h = unpack('Q<', pack('q<', $hashes[$i]));
	my $tag = (0xA5 << 56) | (($h & 0xff) << 48) | ((100000 + $i) << 16) | 1;
	seek($fh, 4096 + 16 * $i, 0) or die;
	print $fh pack('Q<Q<', $h, $tag) or die;
}
close($fh) or die;

$node->start;
# the first user is a scan: the load runs under the index lock a shared
# user asked for
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM t WHERE k = 2001}), '0',
	'entries past the end of the heap are not returned');
is($node->safe_psql('postgres', q{SELECT * FROM pmhash_check('t_k')}), '',
	'pmhash_check finds nothing after the rebuild split the segment');
is($node->safe_psql('postgres',
	q{SELECT segments > 1, entries, pending_entries <= 40 FROM pmhash_stats('t_k')}),
	't|1064|t', 'the rebuild split the segment and counts every entry once');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM generate_series(1, 2100) p JOIN t ON t.k = p}), '1024',
	'every row is found through the index');

# VACUUM's index pass (a dead row asks for one) removes the entries that
# point past the end of the heap
$node->safe_psql('postgres', 'DELETE FROM t WHERE k = 1; VACUUM t');
is($node->safe_psql('postgres', q{SELECT entries FROM pmhash_stats('t_k')}),
	'1023', 'VACUUM removed them');
is($node->safe_psql('postgres', q{SELECT * FROM pmhash_check('t_k')}), '',
	'and the index is consistent');
$node->restart;
is($node->safe_psql('postgres', q{SELECT * FROM pmhash_check('t_k')}), '',
	'and consistent after a restart');

$node->stop;
done_testing();
