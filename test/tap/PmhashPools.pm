
# Copyright (c) pmhash authors
#
# Helpers of the TAP tests that count pool files (042, 045): the pool files
# a server has in one database, and the ones its catalog says it should
# have, one per pmhash index storage, in the same form so that a test
# compares them with is().

package PmhashPools;

use strict;
use warnings;

use Exporter 'import';

our @EXPORT = qw(pool_files catalog_pools);

# pool_files(NODE, DBOID): the names of the pool files of database DBOID
# in NODE's default pool directory, sorted, joined by ','
sub pool_files
{
	my ($node, $dboid) = @_;
	my $dir = $node->data_dir . "/pmhash/$dboid";
	opendir(my $d, $dir) or return '';
	my @f = sort grep { /\.pool$/ } readdir($d);
	closedir($d);
	return join(',', @f);
}

# catalog_pools(NODE, DBNAME): the pool file names that database DBNAME's
# catalog implies, one per pmhash index storage (a partitioned index has
# none), in pool_files' form
sub catalog_pools
{
	my ($node, $dbname) = @_;
	return $node->safe_psql($dbname, q{
		SELECT coalesce(string_agg(f, ',' ORDER BY f COLLATE "C"), '')
		FROM (SELECT CASE WHEN c.reltablespace = 0 THEN '0'
		                  ELSE c.reltablespace::text END
		             || '_' || c.relfilenode || '.pool' AS f
		      FROM pg_class c JOIN pg_am a ON a.oid = c.relam
		      WHERE a.amname = 'pmhash' AND c.relkind = 'i') s});
}

1;
