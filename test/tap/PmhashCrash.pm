
# Copyright (c) pmhash authors
#
# Helper of the TAP tests that kill a backend (002, 009, 010): the
# postmaster notices the death, stops every other process, reinitialises
# shared memory and runs crash recovery.  A query sent right after the
# kill can still reach the old server and succeed, and the next one then
# dies with it; so wait for the reinitialisation in the log, then for a
# query to succeed.

package PmhashCrash;

use strict;
use warnings;

use Exporter 'import';
use Test::More;

our @EXPORT = qw(kill_backend);

# kill_backend(NODE, PID): SIGKILL backend PID of NODE and return once the
# server has reinitialised and accepts queries again
sub kill_backend
{
	my ($node, $pid) = @_;
	my $off = -s $node->logfile;

	kill 'KILL', $pid or die "could not kill backend $pid: $!";
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$off);
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not come back after backend ' . $pid . ' was killed';
	return;
}

1;
