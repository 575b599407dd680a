/* pmhash--0.2.sql */
\echo Use "CREATE EXTENSION pmhash" to load this file. \quit

CREATE FUNCTION pmhash_handler(internal)
RETURNS index_am_handler
AS 'MODULE_PATHNAME', 'pmhash_handler'
LANGUAGE C STRICT;

CREATE ACCESS METHOD pmhash TYPE INDEX HANDLER pmhash_handler;
COMMENT ON ACCESS METHOD pmhash IS 'persistent-memory extendible hash index';

CREATE FUNCTION pmhash_stats(index regclass,
	OUT entries bigint, OUT pool_path text, OUT pool_bytes bigint,
	OUT shmem_bytes bigint, OUT load_factor float8, OUT global_depth int,
	OUT segments bigint, OUT pending_entries bigint, OUT log_lines_in_use int,
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_stats'
LANGUAGE C STRICT;

-- persist traffic of all pmhash pools and what the media model makes of it
-- (needs pg_read_all_stats); pmhash_reset_stats() zeroes it all
CREATE FUNCTION pmhash_media_stats(
	OUT user_bytes bigint, OUT media_bytes_written bigint,
	OUT media_bytes_read bigint, OUT flushes bigint, OUT fences bigint,
	OUT lines_whole bigint, OUT lines_partial bigint,
	OUT write_amplification float8, OUT buffer_lines int,
	OUT track_reads bool, OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'pmhash_media_stats'
LANGUAGE C STRICT;

CREATE FUNCTION pmhash_reset_stats()
RETURNS void
AS 'MODULE_PATHNAME', 'pmhash_reset_stats'
LANGUAGE C STRICT;

REVOKE EXECUTE ON FUNCTION pmhash_reset_stats() FROM PUBLIC;

CREATE FUNCTION pmhash_check(index regclass)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'pmhash_check'
LANGUAGE C STRICT;

-- both functions check that the caller owns the index or is a member of
-- pg_monitor (superusers are both)

/*
 * Operator families and classes.
 *
 * These mirror the operator families and classes that PostgreSQL 15's hash
 * access method has (pg_opfamily.dat, pg_opclass.dat, pg_amop.dat and
 * pg_amproc.dat): same names, same families, same default flags, same
 * operators and the same hash functions.  pmhash keys its entries by support
 * function 2, the 64-bit seeded ("extended") hash; support function 1, the
 * 32-bit hash, is optional and is registered only to keep the classes
 * identical to hash's.
 *
 * Where hash registers a function whose declared argument type is only
 * physically compatible with the class's type (hashint4 for date, xid and
 * cid, hashint8 for xid8, timestamp_hash for timestamptz, hashchar for bool,
 * hashvarlena for bytea), so do we: in CREATE OPERATOR CLASS a support
 * function is registered for the class's input type whatever its argument
 * type, and pmhash's amvalidate accepts exactly these combinations.
 *
 * Members of a family that hold several types are cross-type: an equality
 * operator for every pair of its types, and the hash functions of all its
 * types agree for equal values, so e.g. an int8 column can be probed with an
 * int4 value.
 */

-- integers: int2, int4 and int8, with all cross-type equalities
CREATE OPERATOR FAMILY integer_ops USING pmhash;

CREATE OPERATOR CLASS int2_ops
DEFAULT FOR TYPE int2 USING pmhash FAMILY integer_ops AS
	OPERATOR	1	= (int2, int2),
	FUNCTION	1	hashint2(int2),
	FUNCTION	2	hashint2extended(int2, int8);

CREATE OPERATOR CLASS int4_ops
DEFAULT FOR TYPE int4 USING pmhash FAMILY integer_ops AS
	OPERATOR	1	= (int4, int4),
	FUNCTION	1	hashint4(int4),
	FUNCTION	2	hashint4extended(int4, int8);

CREATE OPERATOR CLASS int8_ops
DEFAULT FOR TYPE int8 USING pmhash FAMILY integer_ops AS
	OPERATOR	1	= (int8, int8),
	FUNCTION	1	hashint8(int8),
	FUNCTION	2	hashint8extended(int8, int8);

ALTER OPERATOR FAMILY integer_ops USING pmhash ADD
	OPERATOR	1	= (int2, int4),
	OPERATOR	1	= (int2, int8),
	OPERATOR	1	= (int4, int2),
	OPERATOR	1	= (int4, int8),
	OPERATOR	1	= (int8, int2),
	OPERATOR	1	= (int8, int4);

-- floating point: float4 and float8, with cross-type equalities
CREATE OPERATOR FAMILY float_ops USING pmhash;

CREATE OPERATOR CLASS float4_ops
DEFAULT FOR TYPE float4 USING pmhash FAMILY float_ops AS
	OPERATOR	1	= (float4, float4),
	FUNCTION	1	hashfloat4(float4),
	FUNCTION	2	hashfloat4extended(float4, int8);

CREATE OPERATOR CLASS float8_ops
DEFAULT FOR TYPE float8 USING pmhash FAMILY float_ops AS
	OPERATOR	1	= (float8, float8),
	FUNCTION	1	hashfloat8(float8),
	FUNCTION	2	hashfloat8extended(float8, int8);

ALTER OPERATOR FAMILY float_ops USING pmhash ADD
	OPERATOR	1	= (float4, float8),
	OPERATOR	1	= (float8, float4);

-- numeric
CREATE OPERATOR CLASS numeric_ops
DEFAULT FOR TYPE numeric USING pmhash AS
	OPERATOR	1	= (numeric, numeric),
	FUNCTION	1	hash_numeric(numeric),
	FUNCTION	2	hash_numeric_extended(numeric, int8);

-- oid and oidvector
CREATE OPERATOR CLASS oid_ops
DEFAULT FOR TYPE oid USING pmhash AS
	OPERATOR	1	= (oid, oid),
	FUNCTION	1	hashoid(oid),
	FUNCTION	2	hashoidextended(oid, int8);

CREATE OPERATOR CLASS oidvector_ops
DEFAULT FOR TYPE oidvector USING pmhash AS
	OPERATOR	1	= (oidvector, oidvector),
	FUNCTION	1	hashoidvector(oidvector),
	FUNCTION	2	hashoidvectorextended(oidvector, int8);

-- text and name, with cross-type equalities; varchar uses text's class
CREATE OPERATOR FAMILY text_ops USING pmhash;

CREATE OPERATOR CLASS text_ops
DEFAULT FOR TYPE text USING pmhash FAMILY text_ops AS
	OPERATOR	1	= (text, text),
	FUNCTION	1	hashtext(text),
	FUNCTION	2	hashtextextended(text, int8);

CREATE OPERATOR CLASS name_ops
DEFAULT FOR TYPE name USING pmhash FAMILY text_ops AS
	OPERATOR	1	= (name, name),
	FUNCTION	1	hashname(name),
	FUNCTION	2	hashnameextended(name, int8);

ALTER OPERATOR FAMILY text_ops USING pmhash ADD
	OPERATOR	1	= (name, text),
	OPERATOR	1	= (text, name);

-- varchar is binary-coercible to text: a non-default alias of text_ops
CREATE OPERATOR CLASS varchar_ops
FOR TYPE text USING pmhash FAMILY text_ops AS
	STORAGE		text;

-- blank-padded char
CREATE OPERATOR CLASS bpchar_ops
DEFAULT FOR TYPE bpchar USING pmhash AS
	OPERATOR	1	= (bpchar, bpchar),
	FUNCTION	1	hashbpchar(bpchar),
	FUNCTION	2	hashbpcharextended(bpchar, int8);

-- the pattern classes of hash (non-default; plain equality, as in hash)
CREATE OPERATOR FAMILY text_pattern_ops USING pmhash;

CREATE OPERATOR CLASS text_pattern_ops
FOR TYPE text USING pmhash FAMILY text_pattern_ops AS
	OPERATOR	1	= (text, text),
	FUNCTION	1	hashtext(text),
	FUNCTION	2	hashtextextended(text, int8);

CREATE OPERATOR CLASS varchar_pattern_ops
FOR TYPE text USING pmhash FAMILY text_pattern_ops AS
	STORAGE		text;

CREATE OPERATOR CLASS bpchar_pattern_ops
FOR TYPE bpchar USING pmhash AS
	OPERATOR	1	= (bpchar, bpchar),
	FUNCTION	1	hashbpchar(bpchar),
	FUNCTION	2	hashbpcharextended(bpchar, int8);

-- bytea: hashed as a plain varlena
CREATE OPERATOR CLASS bytea_ops
DEFAULT FOR TYPE bytea USING pmhash AS
	OPERATOR	1	= (bytea, bytea),
	FUNCTION	1	hashvarlena(internal),
	FUNCTION	2	hashvarlenaextended(internal, int8);

-- "char", and bool, which hashes like a one-byte "char"
CREATE OPERATOR CLASS char_ops
DEFAULT FOR TYPE "char" USING pmhash AS
	OPERATOR	1	= ("char", "char"),
	FUNCTION	1	hashchar("char"),
	FUNCTION	2	hashcharextended("char", int8);

CREATE OPERATOR CLASS bool_ops
DEFAULT FOR TYPE bool USING pmhash AS
	OPERATOR	1	= (bool, bool),
	FUNCTION	1	hashchar("char"),
	FUNCTION	2	hashcharextended("char", int8);

-- uuid
CREATE OPERATOR CLASS uuid_ops
DEFAULT FOR TYPE uuid USING pmhash AS
	OPERATOR	1	= (uuid, uuid),
	FUNCTION	1	uuid_hash(uuid),
	FUNCTION	2	uuid_hash_extended(uuid, int8);

-- date/time types; date hashes as an int4, timestamptz as a timestamp
CREATE OPERATOR CLASS date_ops
DEFAULT FOR TYPE date USING pmhash AS
	OPERATOR	1	= (date, date),
	FUNCTION	1	hashint4(int4),
	FUNCTION	2	hashint4extended(int4, int8);

CREATE OPERATOR CLASS time_ops
DEFAULT FOR TYPE time USING pmhash AS
	OPERATOR	1	= (time, time),
	FUNCTION	1	time_hash(time),
	FUNCTION	2	time_hash_extended(time, int8);

CREATE OPERATOR CLASS timetz_ops
DEFAULT FOR TYPE timetz USING pmhash AS
	OPERATOR	1	= (timetz, timetz),
	FUNCTION	1	timetz_hash(timetz),
	FUNCTION	2	timetz_hash_extended(timetz, int8);

CREATE OPERATOR CLASS timestamp_ops
DEFAULT FOR TYPE timestamp USING pmhash AS
	OPERATOR	1	= (timestamp, timestamp),
	FUNCTION	1	timestamp_hash(timestamp),
	FUNCTION	2	timestamp_hash_extended(timestamp, int8);

CREATE OPERATOR CLASS timestamptz_ops
DEFAULT FOR TYPE timestamptz USING pmhash AS
	OPERATOR	1	= (timestamptz, timestamptz),
	FUNCTION	1	timestamp_hash(timestamp),
	FUNCTION	2	timestamp_hash_extended(timestamp, int8);

CREATE OPERATOR CLASS interval_ops
DEFAULT FOR TYPE interval USING pmhash AS
	OPERATOR	1	= (interval, interval),
	FUNCTION	1	interval_hash(interval),
	FUNCTION	2	interval_hash_extended(interval, int8);

-- network addresses: inet, and cidr (binary-coercible to inet)
CREATE OPERATOR FAMILY network_ops USING pmhash;

CREATE OPERATOR CLASS inet_ops
DEFAULT FOR TYPE inet USING pmhash FAMILY network_ops AS
	OPERATOR	1	= (inet, inet),
	FUNCTION	1	hashinet(inet),
	FUNCTION	2	hashinetextended(inet, int8);

CREATE OPERATOR CLASS cidr_ops
FOR TYPE inet USING pmhash FAMILY network_ops AS
	STORAGE		inet;

CREATE OPERATOR CLASS macaddr_ops
DEFAULT FOR TYPE macaddr USING pmhash AS
	OPERATOR	1	= (macaddr, macaddr),
	FUNCTION	1	hashmacaddr(macaddr),
	FUNCTION	2	hashmacaddrextended(macaddr, int8);

CREATE OPERATOR CLASS macaddr8_ops
DEFAULT FOR TYPE macaddr8 USING pmhash AS
	OPERATOR	1	= (macaddr8, macaddr8),
	FUNCTION	1	hashmacaddr8(macaddr8),
	FUNCTION	2	hashmacaddr8extended(macaddr8, int8);

-- jsonb
CREATE OPERATOR CLASS jsonb_ops
DEFAULT FOR TYPE jsonb USING pmhash AS
	OPERATOR	1	= (jsonb, jsonb),
	FUNCTION	1	jsonb_hash(jsonb),
	FUNCTION	2	jsonb_hash_extended(jsonb, int8);

-- polymorphic classes: arrays, enums, ranges, multiranges, composites
CREATE OPERATOR CLASS array_ops
DEFAULT FOR TYPE anyarray USING pmhash AS
	OPERATOR	1	= (anyarray, anyarray),
	FUNCTION	1	hash_array(anyarray),
	FUNCTION	2	hash_array_extended(anyarray, int8);

CREATE OPERATOR CLASS enum_ops
DEFAULT FOR TYPE anyenum USING pmhash AS
	OPERATOR	1	= (anyenum, anyenum),
	FUNCTION	1	hashenum(anyenum),
	FUNCTION	2	hashenumextended(anyenum, int8);

CREATE OPERATOR CLASS range_ops
DEFAULT FOR TYPE anyrange USING pmhash AS
	OPERATOR	1	= (anyrange, anyrange),
	FUNCTION	1	hash_range(anyrange),
	FUNCTION	2	hash_range_extended(anyrange, int8);

CREATE OPERATOR CLASS multirange_ops
DEFAULT FOR TYPE anymultirange USING pmhash AS
	OPERATOR	1	= (anymultirange, anymultirange),
	FUNCTION	1	hash_multirange(anymultirange),
	FUNCTION	2	hash_multirange_extended(anymultirange, int8);

CREATE OPERATOR CLASS record_ops
DEFAULT FOR TYPE record USING pmhash AS
	OPERATOR	1	= (record, record),
	FUNCTION	1	hash_record(record),
	FUNCTION	2	hash_record_extended(record, int8);

-- system types
CREATE OPERATOR CLASS aclitem_ops
DEFAULT FOR TYPE aclitem USING pmhash AS
	OPERATOR	1	= (aclitem, aclitem),
	FUNCTION	1	hash_aclitem(aclitem),
	FUNCTION	2	hash_aclitem_extended(aclitem, int8);

CREATE OPERATOR CLASS pg_lsn_ops
DEFAULT FOR TYPE pg_lsn USING pmhash AS
	OPERATOR	1	= (pg_lsn, pg_lsn),
	FUNCTION	1	pg_lsn_hash(pg_lsn),
	FUNCTION	2	pg_lsn_hash_extended(pg_lsn, int8);

CREATE OPERATOR CLASS xid_ops
DEFAULT FOR TYPE xid USING pmhash AS
	OPERATOR	1	= (xid, xid),
	FUNCTION	1	hashint4(int4),
	FUNCTION	2	hashint4extended(int4, int8);

CREATE OPERATOR CLASS xid8_ops
DEFAULT FOR TYPE xid8 USING pmhash AS
	OPERATOR	1	= (xid8, xid8),
	FUNCTION	1	hashint8(int8),
	FUNCTION	2	hashint8extended(int8, int8);

CREATE OPERATOR CLASS cid_ops
DEFAULT FOR TYPE cid USING pmhash AS
	OPERATOR	1	= (cid, cid),
	FUNCTION	1	hashint4(int4),
	FUNCTION	2	hashint4extended(int4, int8);

CREATE OPERATOR CLASS tid_ops
DEFAULT FOR TYPE tid USING pmhash AS
	OPERATOR	1	= (tid, tid),
	FUNCTION	1	hashtid(tid),
	FUNCTION	2	hashtidextended(tid, int8);
