
# Copyright (c) pmhash authors
#
# Lookups without the index lock (pmhashread.c).  Scans read a view of the
# index between two reads of its version, which is odd while anybody holds
# the index lock exclusively.  Here inserting sessions make the index do
# all of that while readers look up keys that are there from the start:
# the directory doubles many times (its old copy freed only once no reader
# is in a read section), the pool file grows (under the index lock
# exclusive, with an fsync: readers meet it), and rows of a few keys with
# many duplicates add overflow segments.  A lookup that misses an anchor
# key, or finds it twice, fails the pgbench run with a division by zero.
# Readers keep their connections, so after their first lookup they go
# without the lock; pmhash_stats says how many did (the server log says
# how many found the index changed under them and looked again under the
# lock: a matter of timing, only reported).  Then every key's rows through the index equal a
# sequential scan's, and pmhash_check finds nothing.  Bounded by
# transaction counts, never by time.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('unlocked');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pmhash'
autovacuum = off
max_connections = 30
pmhash.lazy_writeback = off
});
$node->start;

# 2000 anchor keys, each once, and 500 rows of key -1 (a chain of its own
# once the duplicates outgrow a segment), in an index that starts small
$node->safe_psql('postgres', q{
	CREATE EXTENSION pmhash;
	CREATE TABLE u (id bigserial, k int8);
	INSERT INTO u (k) SELECT -g - 1 FROM generate_series(1, 2000) g;
	INSERT INTO u (k) SELECT -1 FROM generate_series(1, 500);
	CREATE INDEX u_k ON u USING pmhash (k);
});
my $depth0 = $node->safe_psql('postgres',
	q{SELECT global_depth FROM pmhash_stats('u_k')});

my $log_offset = -s $node->logfile;

# writers: spread keys (splits, doublings, pool growth) and duplicates of
# four keys (overflow segments); readers: index and bitmap scans of the
# anchors (also 1000 at a time, in batches of 16 lookups), and of key -1,
# with DEBUG2 for the retries
$node->pgbench(
	'--no-vacuum --client=5 --jobs=2 --transactions=300',
	0,
	[qr{processed: 1500/1500}],
	[qr{^$}],
	'inserts growing the index while lookups go without its lock',
	{
		'pmhash_insert_spread@4' => q{
\set b random(0, 100000000)
INSERT INTO u (k) SELECT :b::int8 * 1000 + g FROM generate_series(0, 299) g;
},
		'pmhash_insert_dups@1' => q{
\set d random(1, 4)
INSERT INTO u (k) SELECT 1000000000000 + :d FROM generate_series(1, 200);
},
		'pmhash_index_scan@3' => q{
\set a random(2, 2001)
SET log_min_messages = debug2;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT 1 / (count(*) = 1)::int FROM u WHERE k = -:a;
SELECT 1 / (count(*) = 500)::int FROM u WHERE k = -1;
},
		'pmhash_bitmap_scan@2' => q{
\set a random(2, 2001)
SET log_min_messages = debug2;
SET enable_seqscan = off; SET enable_indexscan = off;
SELECT 1 / (count(*) = 3)::int
	FROM u WHERE k = ANY (ARRAY[-:a, -(:a % 2000 + 2), -((:a + 1) % 2000 + 2)]);
},
		'pmhash_array_scan@2' => q{
\set a random(2, 1001)
SET log_min_messages = debug2;
SET enable_seqscan = off;
SELECT 1 / (count(*) = 1000)::int
	FROM u WHERE k = ANY (ARRAY(SELECT -g FROM generate_series(:a, :a + 999) g));
},
	});

my $log = slurp_file($node->logfile, $log_offset);
my $retries = () = $log =~ /changed during a lookup without its lock; looking again under the lock/g;
cmp_ok($node->safe_psql('postgres',
	q{SELECT global_depth FROM pmhash_stats('u_k')}),
	'>=', $depth0 + 4, 'the directory doubled several times');
# (the pgbench backends publish the rest of their lookup counts as they
# exit, which may be just after pgbench returns)
ok($node->poll_query_until('postgres',
	q{SELECT lookups > 100000 FROM pmhash_stats('u_k')}),
	'scans looked hashes up');
my ($lookups, $locked) = split /\|/, $node->safe_psql('postgres',
	q{SELECT lookups, lookups_locked FROM pmhash_stats('u_k')});
# (how many took the lock depends on how often they met an exclusive holder)
note("lookups under the index lock during the run: $locked of $lookups");
# (how often a lookup meets an exclusive holder is a matter of timing: only
# reported)
note("lookups that found the index changed under them and looked again: $retries");

my $via_index = $node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SET enable_hashjoin = off; SET enable_mergejoin = off;
	SELECT count(*), sum(id) FROM (SELECT DISTINCT k FROM u) d JOIN u USING (k)});
my $via_seq = $node->safe_psql('postgres', q{
	SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT count(*), sum(id) FROM u});
is($via_index, $via_seq, 'index answers equal seqscan answers after the run');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pmhash_check('u_k')}),
	'0', 'pmhash_check finds nothing');
is($node->safe_psql('postgres',
	q{SELECT entries = (SELECT count(*) FROM u) FROM pmhash_stats('u_k')}),
	't', 'the entry count is exact');

# with nothing else running, a session's lookups after its first all go
# without the lock.  (The pgbench backends publish the rest of their
# counts in a before_shmem_exit callback; they leave pg_stat_activity
# after it: wait for that, so that none of theirs lands in this count.)
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()}),
	'the pgbench backends are gone');
my ($l0, $k0) = split /\|/, $node->safe_psql('postgres', q{
	SELECT lookups, lookups_locked FROM pmhash_stats('u_k')});
is($node->safe_psql('postgres', qq{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = -2;
	DO \$\$
	BEGIN
		FOR i IN 2..201 LOOP
			IF (SELECT count(*) FROM u WHERE k = -i) <> 1 THEN
				RAISE EXCEPTION 'key % missed', -i;
			END IF;
		END LOOP;
	END \$\$;
	SELECT lookups - $l0, lookups_locked - $k0 FROM pmhash_stats('u_k')}),
	"1\n201|1", 'a session looks up without the lock after its first lookup');

# a new session's first lookup attaches under the lock; its next ones go
# without it, and a lookup after DROP and re-CREATE finds the new storage
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM u WHERE k = -2;
	SELECT count(*) FROM u WHERE k = -3;
	DROP INDEX u_k;
	CREATE INDEX u_k ON u USING pmhash (k);
	SELECT count(*) FROM u WHERE k = -2;
	SELECT count(*) FROM u WHERE k = -4;
	SELECT lookups, lookups_locked FROM pmhash_stats('u_k')}),
	"1\n1\n1\n1\n2|1", 'a lookup after DROP and CREATE uses the new storage');

$node->stop;
done_testing();
