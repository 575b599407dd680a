
# Copyright (c) pmhash authors
#
# What the TAP tests of dead hints and pruning (047, 048) share: two
# tables whose key updates are never HOT, the plans that force or forbid
# index scans, and a loop of single-row updates of one key.

package PmhashHints;

use strict;
use warnings;

use Exporter 'import';

our @EXPORT = qw(hint_tables_sql update_key $INDEX_SCAN $SEQ_SCAN);

# plans: index scans only (the executor hints what they return), or none
our $INDEX_SCAN = 'SET enable_seqscan = off; SET enable_bitmapscan = off;';
our $SEQ_SCAN = 'SET enable_indexscan = off; SET enable_bitmapscan = off;';

# t (pmhash index t_k) and u (unique pmhash index u_k), keys 1..1000 with
# v = 0; updates of v are never HOT (v has a btree index)
sub hint_tables_sql
{
	return q{
	CREATE TABLE t (k int4, v int4);
	INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) g;
	CREATE INDEX t_k ON t USING pmhash (k);
	CREATE INDEX t_v ON t (v);
	CREATE TABLE u (k int4, v int4);
	INSERT INTO u SELECT g, 0 FROM generate_series(1, 1000) g;
	CREATE UNIQUE INDEX u_k ON u USING pmhash (k);
	CREATE INDEX u_v ON u (v);
	ANALYZE t, u;
};
}

# update_key($node, $table, $k, $n, $plan): n updates of key k on $node,
# each its own transaction, under the settings $plan
sub update_key
{
	my ($node, $table, $k, $n, $plan) = @_;
	$node->safe_psql('postgres',
		$plan . join('', map { "UPDATE $table SET v = v + 1 WHERE k = $k;\n" } 1 .. $n));
	return;
}

1;
