# pmhash: persistent-memory extendible-hash index access method (PGXS)

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config

MODULE_big = pmhash

# The server-independent core, one file per layer (see src/core/pmh_core.h):
# the server module, the unit tests, the fuzz targets and the core benchmark
# all build it from these two lists.
CORE_C = \
	src/core/pmh_pool.c \
	src/core/pmh_segment.c \
	src/core/pmh_split.c \
	src/core/pmh_dbucket.c \
	src/core/pmh_recover.c \
	src/core/pmh_writepath.c \
	src/core/pmh_logrecover.c
CORE_H = src/core/pmh_core.h src/core/pmh_segment.h src/core/pmh_core_int.h \
	src/core/pmh_writepath.h

OBJS = \
	$(CORE_C:.c=.o) \
	src/core/pmh_media.o \
	src/pmhash.o \
	src/pmhashattach.o \
	src/pmhashblog.o \
	src/pmhashbuild.o \
	src/pmhashcheck.o \
	src/pmhashdsa.o \
	src/pmhashinsert.o \
	src/pmhashlifecycle.o \
	src/pmhashpage.o \
	src/pmhashpool.o \
	src/pmhashpooldir.o \
	src/pmhashprune.o \
	src/pmhashrebuild.o \
	src/pmhashrecover.o \
	src/pmhashredo.o \
	src/pmhashscankey.o \
	src/pmhashsearch.o \
	src/pmhashread.o \
	src/pmhashseglock.o \
	src/pmhashshmem.o \
	src/pmhashsplit.o \
	src/pmhashtwophase.o \
	src/pmhashstats.o \
	src/pmhashvacuum.o \
	src/pmhashvalidate.o \
	src/pmhashworker.o \
	src/pmhashunique.o \
	src/pmhashwriteback.o \
	src/pmhashxact.o \
	src/pmhashxlog.o

EXTENSION = pmhash
DATA = pmhash--0.2.sql pmhash--0.1--0.2.sql pmhash--0.2--0.3.sql \
	pmhash--0.3--0.4.sql pmhash--0.4--0.5.sql pmhash--0.5--0.6.sql
PGFILEDESC = "pmhash - persistent-memory extendible hash index"

PG_CPPFLAGS = -I$(srcdir)/src -I$(srcdir)/src/core
PG_CFLAGS = -Werror
SHLIB_LINK = -lpmem

# pg_regress suites live in sql/ and expected/; they are run by
# test/run_tests.sh against a throwaway instance (PGXS "make check" is a
# no-op for extensions).
REGRESS_OPTS = --temp-config=$(srcdir)/test/pmhash.conf

# (set before pgxs.mk, which tests it when it is read; the lists it names
# are defined below)
EXTRA_CLEAN = $(UNIT_TESTS) test/bench/pmh_bench results regression.diffs \
	regression.out tmp_check tmp_install \
	$(FUZZ_TARGETS) test/fuzz/fuzz_seeds test/fuzz/seeds

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies
$(OBJS): $(CORE_H) src/core/pmh_media.h src/pmhash.h src/pmhash_xlog.h

# The data-structure core builds and runs without a server.
CORE_TEST_CFLAGS = -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter \
	-DFRONTEND -I$(srcdir)/src -I$(srcdir)/src/core \
	-I$(shell $(PG_CONFIG) --includedir) \
	-I$(shell $(PG_CONFIG) --includedir-server)
CORE_TEST_LIBS = -L$(shell $(PG_CONFIG) --libdir) \
	-L$(shell $(PG_CONFIG) --pkglibdir) -lpgcommon -lpgport -lpmem -lpthread
# the unit tests also check the core's assertions (not the benchmark)
UNIT_CFLAGS = $(CORE_TEST_CFLAGS) -DUSE_ASSERT_CHECKING

# test/unit/tpool.c is the harness the core's test programs share: test
# pools, the reference model and the checks
UNIT_HARNESS = test/unit/unit_check.c test/unit/unit_check.h test/unit/unit_util.h
CORE_HARNESS = $(UNIT_HARNESS) test/unit/tpool.c test/unit/tpool.h \
	test/unit/tlog.c $(CORE_C) $(CORE_H)

# test/unit/test_core: the core's unit tests, one source file per concern
# of the core (test_core.c runs them, test_core.h declares them)
CORE_TESTS = test/unit/test_core.c test/unit/test_core.h \
	test/unit/test_pool.c \
	test/unit/test_segment.c \
	test/unit/test_split.c \
	test/unit/test_log.c \
	test/unit/test_dbucket.c \
	test/unit/test_recover.c \
	test/unit/test_torn.c \
	test/unit/test_writepath.c

test/unit/test_core: $(CORE_TESTS) $(CORE_HARNESS)
	$(CC) $(UNIT_CFLAGS) -o $@ $(filter %.c,$^) $(CORE_TEST_LIBS)

# the persist-point crash simulator (see its header)
test/unit/test_crashsim: test/unit/test_crashsim.c $(CORE_HARNESS)
	$(CC) $(UNIT_CFLAGS) -o $@ $(filter %.c,$^) $(CORE_TEST_LIBS)

# so does the media-traffic model
test/unit/test_media: test/unit/test_media.c $(UNIT_HARNESS) src/core/pmh_media.c src/core/pmh_media.h
	$(CC) $(UNIT_CFLAGS) -o $@ $(filter %.c,$^) $(CORE_TEST_LIBS)

UNIT_TESTS = test/unit/test_core test/unit/test_media test/unit/test_crashsim

# run every unit test program even if an earlier one fails; each prints
# its own "N passed, N failed" line (test/run_tests.sh adds them up)
.PHONY: unit
unit: $(UNIT_TESTS)
	@rc=0; for t in $(UNIT_TESTS); do echo "./$$t"; ./$$t || rc=1; done; exit $$rc

# The benchmark driver of the core alone (test/bench/pmh_bench.c): the
# write path, searches and deletes without a server; see doc/BENCHMARKS.md,
# "core_bench.sh and pmh_bench".  Built, not run, by "make bench-core".
test/bench/pmh_bench: test/bench/pmh_bench.c test/unit/unit_util.h \
		$(CORE_C) $(CORE_H) src/core/pmh_media.c src/core/pmh_media.h
	$(CC) $(CORE_TEST_CFLAGS) -o $@ test/bench/pmh_bench.c $(CORE_C) \
		src/core/pmh_media.c $(CORE_TEST_LIBS) -lm

.PHONY: bench-core
bench-core: test/bench/pmh_bench


# Fuzz targets (libFuzzer, clang-14 with AddressSanitizer and UBSan): "make
# fuzz" builds them and writes the seed corpora to test/fuzz/seeds; see
# doc/TESTING.md "Fuzzing" and test/fuzz/run.sh.  The core's Assert()s are on
# (USE_ASSERT_CHECKING: in frontend code, assert()), so that the fuzzers
# check the write path's own invariants too.
FUZZ_CC = clang-14
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS = -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror \
	-Wmissing-prototypes -Wno-unused-parameter -Wno-ignored-attributes \
	-DFRONTEND -DUSE_ASSERT_CHECKING -I$(srcdir)/src -I$(srcdir)/src/core -I$(srcdir)/test/fuzz \
	-I$(shell $(PG_CONFIG) --includedir) \
	-I$(shell $(PG_CONFIG) --includedir-server)
FUZZ_COMMON = test/fuzz/fuzz_common.c $(CORE_C)
FUZZ_DEPS = $(FUZZ_COMMON) test/fuzz/fuzz_common.h test/fuzz/fuzz_format.h \
	$(CORE_H) test/fuzz/coverage_ignore.txt
FUZZ_TARGETS = test/fuzz/fuzz_pool test/fuzz/fuzz_ops

$(FUZZ_TARGETS): %: %.c $(FUZZ_DEPS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) \
		-fsanitize-coverage-ignorelist=$(srcdir)/test/fuzz/coverage_ignore.txt -o $@ $< \
		$(FUZZ_COMMON) $(CORE_TEST_LIBS)

test/fuzz/fuzz_seeds: test/fuzz/fuzz_seeds.c $(FUZZ_DEPS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -o $@ $< $(FUZZ_COMMON) $(CORE_TEST_LIBS)

test/fuzz/seeds/.stamp: test/fuzz/fuzz_seeds
	rm -rf test/fuzz/seeds
	./test/fuzz/fuzz_seeds test/fuzz/seeds
	touch $@

.PHONY: fuzz
fuzz: $(FUZZ_TARGETS) test/fuzz/seeds/.stamp

