
# Copyright (c) pmhash authors
#
# Helpers of the TAP tests that run pmhash out of shared memory (012,
# 049): the settings of a server whose pmhash area cannot grow past 1 MB,
# a loop that creates small indexed tables until CREATE INDEX fails, and
# a block that catches the error of an insert whose flush fails.

package PmhashShmem;

use strict;
use warnings;

use Exporter 'import';

our @EXPORT = qw(small_shmem_conf create_until_full caught_insert_block);

# postgresql.conf lines: pmhash preloaded, 1 MB of shared memory that does
# not grow, no background loading (first uses are what these tests are
# about), no autovacuum
sub small_shmem_conf
{
	return q{
shared_preload_libraries = 'pmhash'
pmhash.prewarm = off
pmhash.shared_memory = 1MB
pmhash.max_shared_memory = 0
pmhash.max_indexes = 200
autovacuum = off
};
}

# create_until_full(NODE, PREFIX): create small indexed tables <prefix>1,
# <prefix>2, ... until CREATE INDEX fails (each in one transaction);
# returns how many were made and the psql result of the last attempt
sub create_until_full
{
	my ($node, $prefix) = @_;
	my ($ret, $out, $err);
	my $made = 0;
	for my $i (1 .. 150)
	{
		($ret, $out, $err) = $node->psql('postgres', qq{
			BEGIN;
			CREATE TABLE $prefix$i (k int4);
			INSERT INTO $prefix$i SELECT generate_series(1, 100);
			CREATE INDEX $prefix${i}_k ON $prefix$i USING pmhash (k);
			COMMIT;});
		last if $ret != 0;
		$made = $i;
	}
	return ($made, $ret, $out, $err);
}

# caught_insert_block(TABLE, KEY): a DO block that inserts 100 rows of KEY
# into TABLE in a subtransaction and catches the error of placing them
# (out of pmhash shared memory), with a NOTICE "caught: <message>"
sub caught_insert_block
{
	my ($table, $key) = @_;
	return qq{
	DO \$\$
	BEGIN
		BEGIN
			INSERT INTO $table SELECT $key FROM generate_series(1, 100);
		EXCEPTION WHEN insufficient_resources OR out_of_memory THEN
			RAISE NOTICE 'caught: %', SQLERRM;
		END;
	END \$\$};
}

1;
