-- Operator classes: one for every type that PostgreSQL's hash index supports,
-- each used by index and bitmap scans with the same answers as a seqscan.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pmhash;
RESET client_min_messages;

CREATE SCHEMA pmh_opc;
SET search_path = pmh_opc, public;

--
-- The catalog
--

-- every class, its family, and amvalidate's verdict
SELECT c.opcname, f.opfname, c.opcintype::regtype, c.opcdefault,
	amvalidate(c.oid)
FROM pg_opclass c JOIN pg_opfamily f ON f.oid = c.opcfamily
WHERE c.opcmethod = (SELECT oid FROM pg_am WHERE amname = 'pmhash')
ORDER BY c.opcname;

SELECT bool_and(amvalidate(oid)) AS all_valid, count(*) AS classes
FROM pg_opclass
WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'pmhash');

-- the same classes, operators and functions as hash (no rows: no difference)
CREATE FUNCTION oc_classes(am text) RETURNS TABLE (opcname name, opfname name,
	opcintype regtype, opcdefault bool)
LANGUAGE sql STABLE AS $$
	SELECT c.opcname, f.opfname, c.opcintype, c.opcdefault
	FROM pg_opclass c JOIN pg_opfamily f ON f.oid = c.opcfamily
	WHERE c.opcmethod = (SELECT oid FROM pg_am WHERE amname = am)
$$;
CREATE FUNCTION oc_operators(am text) RETURNS TABLE (opfname name,
	lefttype regtype, righttype regtype, strategy int2, opr regoperator,
	purpose "char")
LANGUAGE sql STABLE AS $$
	SELECT f.opfname, o.amoplefttype, o.amoprighttype, o.amopstrategy,
		o.amopopr, o.amoppurpose
	FROM pg_amop o JOIN pg_opfamily f ON f.oid = o.amopfamily
	WHERE f.opfmethod = (SELECT oid FROM pg_am WHERE amname = am)
$$;
CREATE FUNCTION oc_functions(am text) RETURNS TABLE (opfname name,
	lefttype regtype, righttype regtype, procnum int2, proc regprocedure)
LANGUAGE sql STABLE AS $$
	SELECT f.opfname, p.amproclefttype, p.amprocrighttype, p.amprocnum,
		p.amproc
	FROM pg_amproc p JOIN pg_opfamily f ON f.oid = p.amprocfamily
	WHERE f.opfmethod = (SELECT oid FROM pg_am WHERE amname = am)
$$;

(SELECT 'only hash' AS side, * FROM oc_classes('hash')
	EXCEPT SELECT 'only hash', * FROM oc_classes('pmhash'))
UNION ALL
(SELECT 'only pmhash', * FROM oc_classes('pmhash')
	EXCEPT SELECT 'only pmhash', * FROM oc_classes('hash'))
ORDER BY 1, 2;
(SELECT 'only hash' AS side, * FROM oc_operators('hash')
	EXCEPT SELECT 'only hash', * FROM oc_operators('pmhash'))
UNION ALL
(SELECT 'only pmhash', * FROM oc_operators('pmhash')
	EXCEPT SELECT 'only pmhash', * FROM oc_operators('hash'))
ORDER BY 1, 2, 3, 4;
(SELECT 'only hash' AS side, * FROM oc_functions('hash')
	EXCEPT SELECT 'only hash', * FROM oc_functions('pmhash'))
UNION ALL
(SELECT 'only pmhash', * FROM oc_functions('pmhash')
	EXCEPT SELECT 'only pmhash', * FROM oc_functions('hash'))
ORDER BY 1, 2, 3, 5;

-- the cross-type families, in full
SELECT opfname, lefttype, righttype, opr FROM oc_operators('pmhash')
WHERE opfname IN ('integer_ops', 'float_ops', 'text_ops')
ORDER BY 1, 2, 3;

-- support function 2 (the 64-bit hash) is a class member, function 1 and
-- cross-type operators are loose members of the family
SELECT f.opfname, p.amproclefttype::regtype, p.amprocnum, d.deptype,
	coalesce(c.opcname, f2.opfname) AS depends_on
FROM pg_amproc p
	JOIN pg_opfamily f ON f.oid = p.amprocfamily
	JOIN pg_depend d ON d.classid = 'pg_amproc'::regclass AND d.objid = p.oid
		AND d.refclassid IN ('pg_opclass'::regclass, 'pg_opfamily'::regclass)
	LEFT JOIN pg_opclass c ON d.refclassid = 'pg_opclass'::regclass
		AND c.oid = d.refobjid
	LEFT JOIN pg_opfamily f2 ON d.refclassid = 'pg_opfamily'::regclass
		AND f2.oid = d.refobjid
WHERE f.opfmethod = (SELECT oid FROM pg_am WHERE amname = 'pmhash')
	AND f.opfname IN ('integer_ops', 'bool_ops')
ORDER BY 1, 2, 3;
SELECT f.opfname, o.amopopr::regoperator, d.deptype,
	coalesce(c.opcname, f2.opfname) AS depends_on
FROM pg_amop o
	JOIN pg_opfamily f ON f.oid = o.amopfamily
	JOIN pg_depend d ON d.classid = 'pg_amop'::regclass AND d.objid = o.oid
		AND d.refclassid IN ('pg_opclass'::regclass, 'pg_opfamily'::regclass)
	LEFT JOIN pg_opclass c ON d.refclassid = 'pg_opclass'::regclass
		AND c.oid = d.refobjid
	LEFT JOIN pg_opfamily f2 ON d.refclassid = 'pg_opfamily'::regclass
		AND f2.oid = d.refobjid
WHERE f.opfmethod = (SELECT oid FROM pg_am WHERE amname = 'pmhash')
	AND f.opfname = 'text_ops'
ORDER BY 1, 2;

--
-- One table per type: duplicates (also equal values spelled differently),
-- NULLs, and a pmhash index with the type's default class.
--
CREATE TABLE oc_int2 (id serial, v int2);
INSERT INTO oc_int2 (v) VALUES (2), (-32768), (NULL), (2), (32767), (0), (NULL), (2);
CREATE INDEX ON oc_int2 USING pmhash (v);

CREATE TABLE oc_int4 (id serial, v int4);
INSERT INTO oc_int4 (v) VALUES (42), (-2147483648), (NULL), (42), (2147483647), (0), (NULL), (7);
CREATE INDEX ON oc_int4 USING pmhash (v);

CREATE TABLE oc_int8 (id serial, v int8);
INSERT INTO oc_int8 (v) VALUES (2), (4294967298), (NULL), (2), (-2), (9223372036854775807), (NULL), (2);
CREATE INDEX ON oc_int8 USING pmhash (v);

CREATE TABLE oc_float4 (id serial, v float4);
INSERT INTO oc_float4 (v) VALUES (1.5), ('-0'), (0), (NULL), (1.5), ('NaN'), ('NaN'), ('Infinity');
CREATE INDEX ON oc_float4 USING pmhash (v);

CREATE TABLE oc_float8 (id serial, v float8);
INSERT INTO oc_float8 (v) VALUES (1.5), ('-0'), (0), (NULL), (1.5), ('NaN'), ('NaN'), (0.1);
CREATE INDEX ON oc_float8 USING pmhash (v);

CREATE TABLE oc_numeric (id serial, v numeric);
INSERT INTO oc_numeric (v) VALUES (1), (1.0), (1.000), (NULL), (-1), ('NaN'), ('NaN'), (123456789012345678901234567890.5);
CREATE INDEX ON oc_numeric USING pmhash (v);

CREATE TABLE oc_oid (id serial, v oid);
INSERT INTO oc_oid (v) VALUES (1), (4294967295), (NULL), (1), (0);
CREATE INDEX ON oc_oid USING pmhash (v);

CREATE TABLE oc_oidvector (id serial, v oidvector);
INSERT INTO oc_oidvector (v) VALUES ('1 2 3'), ('3 2 1'), (NULL), ('1 2 3'), ('');
CREATE INDEX ON oc_oidvector USING pmhash (v);

CREATE TABLE oc_text (id serial, v text);
INSERT INTO oc_text (v) VALUES ('abc'), ('ABC'), (NULL), ('abc'), (''), ('abc '), (repeat('z', 3000)), (repeat('z', 3000));
CREATE INDEX ON oc_text USING pmhash (v);

CREATE TABLE oc_varchar (id serial, v varchar(10));
INSERT INTO oc_varchar (v) VALUES ('abc'), ('ABC'), (NULL), ('abc'), (''), ('abc ');
CREATE INDEX ON oc_varchar USING pmhash (v);

CREATE TABLE oc_bpchar (id serial, v char(5));
INSERT INTO oc_bpchar (v) VALUES ('ab'), ('ab   '), (NULL), ('ab '), ('abc'), ('');
CREATE INDEX ON oc_bpchar USING pmhash (v);

CREATE TABLE oc_name (id serial, v name);
INSERT INTO oc_name (v) VALUES ('abc'), ('ABC'), (NULL), ('abc'), ('');
CREATE INDEX ON oc_name USING pmhash (v);

CREATE TABLE oc_bytea (id serial, v bytea);
INSERT INTO oc_bytea (v) VALUES ('\x0102'), ('\x'), (NULL), ('\x0102'), ('\x010200');
CREATE INDEX ON oc_bytea USING pmhash (v);

CREATE TABLE oc_char (id serial, v "char");
INSERT INTO oc_char (v) VALUES ('a'), ('b'), (NULL), ('a'), ('A');
CREATE INDEX ON oc_char USING pmhash (v);

CREATE TABLE oc_bool (id serial, v bool);
INSERT INTO oc_bool (v) VALUES (true), (false), (NULL), (true), (true), (NULL);
CREATE INDEX ON oc_bool USING pmhash (v);

CREATE TABLE oc_uuid (id serial, v uuid);
INSERT INTO oc_uuid (v) VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
	('A0EEBC999C0B4EF8BB6D6BB9BD380A11'), (NULL),
	('00000000-0000-0000-0000-000000000000'),
	('{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12}');
CREATE INDEX ON oc_uuid USING pmhash (v);

CREATE TABLE oc_date (id serial, v date);
INSERT INTO oc_date (v) VALUES ('2024-02-29'), ('2024-03-01'), (NULL), ('2024-02-29'), ('infinity'), ('4713-01-01 BC');
CREATE INDEX ON oc_date USING pmhash (v);

CREATE TABLE oc_time (id serial, v time);
INSERT INTO oc_time (v) VALUES ('12:00'), ('12:00:00.000001'), (NULL), ('12:00:00'), ('24:00'), ('00:00');
CREATE INDEX ON oc_time USING pmhash (v);

CREATE TABLE oc_timetz (id serial, v timetz);
INSERT INTO oc_timetz (v) VALUES ('12:00+01'), ('11:00+00'), (NULL), ('12:00:00+01'), ('12:00-01');
CREATE INDEX ON oc_timetz USING pmhash (v);

CREATE TABLE oc_timestamp (id serial, v timestamp);
INSERT INTO oc_timestamp (v) VALUES ('2024-01-01 10:00'), ('2024-01-01 10:00:00.000001'), (NULL), ('2024-01-01 10:00:00'), ('infinity'), ('-infinity');
CREATE INDEX ON oc_timestamp USING pmhash (v);

CREATE TABLE oc_timestamptz (id serial, v timestamptz);
INSERT INTO oc_timestamptz (v) VALUES ('2024-01-01 10:00+00'), ('2024-01-01 11:00+01'), (NULL), ('2024-01-01 10:00+01'), ('infinity');
CREATE INDEX ON oc_timestamptz USING pmhash (v);

CREATE TABLE oc_interval (id serial, v interval);
INSERT INTO oc_interval (v) VALUES ('1 day'), ('24 hours'), (NULL), ('1 mon'), ('30 days'), ('1 day 1 second');
CREATE INDEX ON oc_interval USING pmhash (v);

CREATE TABLE oc_inet (id serial, v inet);
INSERT INTO oc_inet (v) VALUES ('10.0.0.1'), ('10.0.0.1/32'), (NULL), ('10.0.0.1/8'), ('::ffff:10.0.0.1'), ('2001:db8::1');
CREATE INDEX ON oc_inet USING pmhash (v);

CREATE TABLE oc_cidr (id serial, v cidr);
INSERT INTO oc_cidr (v) VALUES ('10.0.0.0/8'), ('10/8'), (NULL), ('10.0.0.0/16'), ('2001:db8::/32');
CREATE INDEX ON oc_cidr USING pmhash (v);

CREATE TABLE oc_macaddr (id serial, v macaddr);
INSERT INTO oc_macaddr (v) VALUES ('08:00:2b:01:02:03'), ('08002b010203'), (NULL), ('08-00-2B-01-02-04');
CREATE INDEX ON oc_macaddr USING pmhash (v);

CREATE TABLE oc_macaddr8 (id serial, v macaddr8);
INSERT INTO oc_macaddr8 (v) VALUES ('08:00:2b:01:02:03:04:05'), ('08002b0102030405'), (NULL), ('08:00:2b:01:02:03');
CREATE INDEX ON oc_macaddr8 USING pmhash (v);

CREATE TABLE oc_jsonb (id serial, v jsonb);
INSERT INTO oc_jsonb (v) VALUES ('{"a": 1, "b": [1, 2]}'), ('{"b":[1,2],"a":1}'), (NULL), ('{"a": 1.0, "b": [1, 2]}'), ('null'), ('[]'), ('{}');
CREATE INDEX ON oc_jsonb USING pmhash (v);

CREATE TABLE oc_int4array (id serial, v int4[]);
INSERT INTO oc_int4array (v) VALUES ('{1,2}'), ('{2,1}'), (NULL), ('{1,2}'), ('{}'), ('{NULL}'), ('{NULL}'), ('[0:1]={1,2}');
CREATE INDEX ON oc_int4array USING pmhash (v);

CREATE TABLE oc_textarray (id serial, v text[]);
INSERT INTO oc_textarray (v) VALUES ('{a,b}'), ('{"a","b"}'), (NULL), ('{a}'), ('{{a,b},{c,d}}');
CREATE INDEX ON oc_textarray USING pmhash (v);

CREATE TYPE oc_mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE oc_enum (id serial, v oc_mood);
INSERT INTO oc_enum (v) VALUES ('ok'), ('happy'), (NULL), ('ok'), ('sad'), ('ok');
CREATE INDEX ON oc_enum USING pmhash (v);

CREATE TABLE oc_int4range (id serial, v int4range);
INSERT INTO oc_int4range (v) VALUES ('[1,3)'), ('[1,2]'), (NULL), ('empty'), ('(0,3)'), ('[1,)'), ('[2,2)');
CREATE INDEX ON oc_int4range USING pmhash (v);

CREATE TABLE oc_numrange (id serial, v numrange);
INSERT INTO oc_numrange (v) VALUES ('[1.0,3)'), ('[1,3.00)'), (NULL), ('[1,3]'), ('empty');
CREATE INDEX ON oc_numrange USING pmhash (v);

CREATE TABLE oc_multirange (id serial, v int4multirange);
INSERT INTO oc_multirange (v) VALUES ('{[1,3)}'), ('{[1,2]}'), (NULL), ('{[1,2),[2,3)}'), ('{}'), ('{[1,3),[5,7)}');
CREATE INDEX ON oc_multirange USING pmhash (v);

CREATE TYPE oc_pair AS (a int4, b text);
CREATE TABLE oc_record (id serial, v oc_pair);
INSERT INTO oc_record (v) VALUES ('(1,x)'), ('(1,y)'), (NULL), ('(1,x)'), ('(,)'), ('(,)'), ('(2,x)');
CREATE INDEX ON oc_record USING pmhash (v);

CREATE TABLE oc_aclitem (id serial, v aclitem);
INSERT INTO oc_aclitem (v) VALUES (makeaclitem(0, 10, 'SELECT', false)),
	(makeaclitem(10, 10, 'SELECT', false)), (NULL),
	(makeaclitem(0, 10, 'SELECT', false)),
	(makeaclitem(0, 10, 'UPDATE', false)),
	(makeaclitem(0, 10, 'SELECT', true));
CREATE INDEX ON oc_aclitem USING pmhash (v);

CREATE TABLE oc_pg_lsn (id serial, v pg_lsn);
INSERT INTO oc_pg_lsn (v) VALUES ('0/16B3748'), ('0/16b3748'), (NULL), ('FFFFFFFF/FFFFFFFF'), ('0/0');
CREATE INDEX ON oc_pg_lsn USING pmhash (v);

CREATE TABLE oc_xid (id serial, v xid);
INSERT INTO oc_xid (v) VALUES ('42'), ('4294967295'), (NULL), ('42'), ('3');
CREATE INDEX ON oc_xid USING pmhash (v);

CREATE TABLE oc_xid8 (id serial, v xid8);
INSERT INTO oc_xid8 (v) VALUES ('42'), ('18446744073709551615'), (NULL), ('42'), ('4294967338');
CREATE INDEX ON oc_xid8 USING pmhash (v);

CREATE TABLE oc_cid (id serial, v cid);
INSERT INTO oc_cid (v) VALUES ('7'), ('4294967295'), (NULL), ('7'), ('0');
CREATE INDEX ON oc_cid USING pmhash (v);

CREATE TABLE oc_tid (id serial, v tid);
INSERT INTO oc_tid (v) VALUES ('(0,1)'), ('(1,0)'), (NULL), ('(0,1)'), ('(4294967295,65535)');
CREATE INDEX ON oc_tid USING pmhash (v);

-- a domain uses the class of its base type
CREATE DOMAIN oc_posint AS int4 CHECK (VALUE > 0);
CREATE TABLE oc_domain (id serial, v oc_posint);
INSERT INTO oc_domain (v) VALUES (5), (6), (NULL), (5);
CREATE INDEX ON oc_domain USING pmhash (v);

-- which class each index got
SELECT ic.relname AS index, opc.opcname, opc.opcdefault
FROM pg_index i
	JOIN pg_class ic ON ic.oid = i.indexrelid
	JOIN pg_opclass opc ON opc.oid = i.indclass[0]
WHERE ic.relnamespace = 'pmh_opc'::regnamespace
ORDER BY 1;

--
-- Index scans
--
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM oc_int4 WHERE v = 42;
SELECT id, v FROM oc_int4 WHERE v = 42 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_text WHERE v = 'abc';
SELECT id, v FROM oc_text WHERE v = 'abc' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_uuid WHERE v = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11';
SELECT id, v FROM oc_uuid WHERE v = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_varchar WHERE v = 'abc';
SELECT id, v FROM oc_varchar WHERE v = 'abc' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_enum WHERE v = 'ok';
SELECT id, v FROM oc_enum WHERE v = 'ok' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_record WHERE v = '(1,x)'::oc_pair;
SELECT id, v FROM oc_record WHERE v = '(1,x)'::oc_pair ORDER BY id;

-- cross-type probes: the integer, float and text families
EXPLAIN (COSTS OFF) SELECT id FROM oc_int8 WHERE v = 2::int4;
SELECT id, v FROM oc_int8 WHERE v = 2::int4 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_int8 WHERE v = 2::int2;
SELECT id, v FROM oc_int8 WHERE v = 2::int2 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_int2 WHERE v = 2::int8;
SELECT id, v FROM oc_int2 WHERE v = 2::int8 ORDER BY id;
SELECT id, v FROM oc_int2 WHERE v = 4294967298::int8 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_float8 WHERE v = 1.5::float4;
SELECT id, v FROM oc_float8 WHERE v = 1.5::float4 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_name WHERE v = 'abc'::text;
SELECT id, v FROM oc_name WHERE v = 'abc'::text ORDER BY id;
-- text = name compares under the collation of neither side (text's default
-- and name's "C" conflict), so it cannot use the index (nor a hash index)
-- unless the collation is made explicit
EXPLAIN (COSTS OFF) SELECT id FROM oc_text WHERE v = 'abc'::name;
EXPLAIN (COSTS OFF) SELECT id FROM oc_text WHERE v = 'abc'::name COLLATE "default";
SELECT id, v FROM oc_text WHERE v = 'abc'::name COLLATE "default" ORDER BY id;
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;

-- bitmap scans
SET enable_seqscan = off; SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM oc_int4 WHERE v = 42;
SELECT id, v FROM oc_int4 WHERE v = 42 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_jsonb WHERE v = '{"a": 1, "b": [1, 2]}';
SELECT id, v FROM oc_jsonb WHERE v = '{"a": 1, "b": [1, 2]}' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_int8 WHERE v = 2::int4;
SELECT id, v FROM oc_int8 WHERE v = 2::int4 ORDER BY id;
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;

--
-- Every type: the index scan, the bitmap scan and a seqscan find the same
-- rows.  index_scan and bitmap_scan tell that the plans used the index.
--
CREATE FUNCTION oc_probe(tab regclass, probe text,
	OUT index_scan bool, OUT bitmap_scan bool, OUT nrows int, OUT same bool)
LANGUAGE plpgsql AS $$
DECLARE
	q text := format('SELECT array_agg(id ORDER BY id) FROM %s WHERE v = %s',
					 tab, probe);
	plan text;
	line text;
	via_index int[];
	via_bitmap int[];
	via_seq int[];
BEGIN
	SET LOCAL enable_seqscan = off;
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_indexscan = on;
	plan := '';
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
		plan := plan || line || E'\n';
	END LOOP;
	index_scan := plan LIKE '%Index Scan using %';
	EXECUTE q INTO via_index;

	SET LOCAL enable_indexscan = off;
	SET LOCAL enable_bitmapscan = on;
	plan := '';
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
		plan := plan || line || E'\n';
	END LOOP;
	bitmap_scan := plan LIKE '%Bitmap Index Scan on %';
	EXECUTE q INTO via_bitmap;

	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_seqscan = on;
	EXECUTE q INTO via_seq;

	nrows := coalesce(cardinality(via_seq), 0);
	same := via_index IS NOT DISTINCT FROM via_seq AND
		via_bitmap IS NOT DISTINCT FROM via_seq;
END
$$;

SELECT p.tab, p.probe, r.*
FROM (VALUES
	('oc_int2'::regclass, '2::int2'), ('oc_int2', '(-32768)::int2'), ('oc_int2', '5::int2'),
	('oc_int2', '2::int4'), ('oc_int2', '2::int8'),
	('oc_int4', '42'), ('oc_int4', '2147483647'), ('oc_int4', '43'),
	('oc_int4', '42::int2'), ('oc_int4', '42::int8'),
	('oc_int8', '2::int8'), ('oc_int8', '4294967298'), ('oc_int8', '-2::int2'),
	('oc_int8', '2::int4'), ('oc_int8', '2::int2'), ('oc_int8', '3'),
	('oc_float4', '1.5::float4'), ('oc_float4', '0::float4'), ('oc_float4', '''NaN''::float4'),
	('oc_float4', '1.5::float8'), ('oc_float4', '''-0''::float8'),
	('oc_float8', '1.5::float8'), ('oc_float8', '''-0''::float8'), ('oc_float8', '''NaN''::float8'),
	('oc_float8', '1.5::float4'), ('oc_float8', '0.1::float8'), ('oc_float8', '0.1::float4'),
	('oc_numeric', '1::numeric'), ('oc_numeric', '1.00000::numeric'), ('oc_numeric', '''NaN''::numeric'),
	('oc_numeric', '123456789012345678901234567890.50::numeric'), ('oc_numeric', '2::numeric'),
	('oc_oid', '1::oid'), ('oc_oid', '4294967295::oid'), ('oc_oid', '2::oid'),
	('oc_oidvector', '''1 2 3''::oidvector'), ('oc_oidvector', '''''::oidvector'), ('oc_oidvector', '''1 2''::oidvector'),
	('oc_text', '''abc''::text'), ('oc_text', '''''::text'), ('oc_text', 'repeat(''z'', 3000)'),
	('oc_text', '''abc''::name COLLATE "default"'), ('oc_text', '''abd''::text'),
	('oc_varchar', '''abc''::varchar'), ('oc_varchar', '''abc ''::varchar'), ('oc_varchar', '''x''::varchar'),
	('oc_bpchar', '''ab''::bpchar'), ('oc_bpchar', '''''::bpchar'), ('oc_bpchar', '''abcd''::bpchar'),
	('oc_name', '''abc''::name'), ('oc_name', '''abc''::text'), ('oc_name', '''''::name'), ('oc_name', '''x''::name'),
	('oc_bytea', '''\x0102''::bytea'), ('oc_bytea', '''\x''::bytea'), ('oc_bytea', '''\x01''::bytea'),
	('oc_char', '''a''::"char"'), ('oc_char', '''A''::"char"'), ('oc_char', '''z''::"char"'),
	('oc_bool', '(SELECT true)'), ('oc_bool', '(SELECT false)'),
	('oc_uuid', '''a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11''::uuid'), ('oc_uuid', '''00000000-0000-0000-0000-000000000000''::uuid'),
	('oc_uuid', '''a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13''::uuid'),
	('oc_date', '''2024-02-29''::date'), ('oc_date', '''infinity''::date'), ('oc_date', '''2024-02-28''::date'),
	('oc_time', '''12:00''::time'), ('oc_time', '''24:00''::time'), ('oc_time', '''12:01''::time'),
	('oc_timetz', '''12:00+01''::timetz'), ('oc_timetz', '''11:00+00''::timetz'), ('oc_timetz', '''13:00+02''::timetz'),
	('oc_timestamp', '''2024-01-01 10:00''::timestamp'), ('oc_timestamp', '''-infinity''::timestamp'),
	('oc_timestamp', '''2024-01-01 10:01''::timestamp'),
	('oc_timestamptz', '''2024-01-01 12:00+02''::timestamptz'), ('oc_timestamptz', '''infinity''::timestamptz'),
	('oc_timestamptz', '''2024-01-01 10:00+02''::timestamptz'),
	('oc_interval', '''1 day''::interval'), ('oc_interval', '''720 hours''::interval'), ('oc_interval', '''1 hour''::interval'),
	('oc_inet', '''10.0.0.1''::inet'), ('oc_inet', '''10.0.0.1/8''::inet'), ('oc_inet', '''10.0.0.2''::inet'),
	('oc_cidr', '''10.0.0.0/8''::cidr'), ('oc_cidr', '''2001:db8::/32''::cidr'), ('oc_cidr', '''10.0.0.0/8''::inet'),
	('oc_cidr', '''11.0.0.0/8''::cidr'),
	('oc_macaddr', '''08:00:2b:01:02:03''::macaddr'), ('oc_macaddr', '''08:00:2b:01:02:05''::macaddr'),
	('oc_macaddr8', '''08:00:2b:01:02:03:04:05''::macaddr8'), ('oc_macaddr8', '''08:00:2b:ff:fe:01:02:03''::macaddr8'),
	('oc_macaddr8', '''08:00:2b:01:02:03:04:06''::macaddr8'),
	('oc_jsonb', '''{"a":1,"b":[1,2]}''::jsonb'), ('oc_jsonb', '''null''::jsonb'), ('oc_jsonb', '''{"a":2}''::jsonb'),
	('oc_int4array', '''{1,2}''::int4[]'), ('oc_int4array', '''{NULL}''::int4[]'), ('oc_int4array', '''{}''::int4[]'),
	('oc_int4array', '''{3}''::int4[]'),
	('oc_textarray', '''{a,b}''::text[]'), ('oc_textarray', '''{{a,b},{c,d}}''::text[]'), ('oc_textarray', '''{b}''::text[]'),
	('oc_enum', '''ok''::oc_mood'), ('oc_enum', '''sad''::oc_mood'), ('oc_enum', '''happy''::oc_mood'),
	('oc_int4range', '''[1,3)''::int4range'), ('oc_int4range', '''empty''::int4range'), ('oc_int4range', '''[1,)''::int4range'),
	('oc_int4range', '''[1,4)''::int4range'),
	('oc_numrange', '''[1,3)''::numrange'), ('oc_numrange', '''[1,3]''::numrange'), ('oc_numrange', '''(1,3)''::numrange'),
	('oc_multirange', '''{[1,3)}''::int4multirange'), ('oc_multirange', '''{}''::int4multirange'),
	('oc_multirange', '''{[5,7),[1,3)}''::int4multirange'), ('oc_multirange', '''{[1,4)}''::int4multirange'),
	('oc_record', '''(1,x)''::oc_pair'), ('oc_record', '''(,)''::oc_pair'), ('oc_record', 'ROW(2, ''x'')::oc_pair'),
	('oc_record', '''(3,x)''::oc_pair'),
	('oc_aclitem', 'makeaclitem(0, 10, ''SELECT'', false)'), ('oc_aclitem', 'makeaclitem(0, 10, ''SELECT'', true)'),
	('oc_aclitem', 'makeaclitem(0, 10, ''UPDATE'', false)'),
	('oc_pg_lsn', '''0/16B3748''::pg_lsn'), ('oc_pg_lsn', '''FFFFFFFF/FFFFFFFF''::pg_lsn'), ('oc_pg_lsn', '''0/1''::pg_lsn'),
	('oc_xid', '''42''::xid'), ('oc_xid', '''4294967295''::xid'), ('oc_xid', '''43''::xid'),
	('oc_xid8', '''42''::xid8'), ('oc_xid8', '''4294967338''::xid8'), ('oc_xid8', '''43''::xid8'),
	('oc_cid', '''7''::cid'), ('oc_cid', '''0''::cid'), ('oc_cid', '''8''::cid'),
	('oc_tid', '''(0,1)''::tid'), ('oc_tid', '''(4294967295,65535)''::tid'), ('oc_tid', '''(0,2)''::tid'),
	('oc_domain', '5'), ('oc_domain', '5::oc_posint'), ('oc_domain', '7')
	) AS p(tab, probe),
	LATERAL oc_probe(p.tab, p.probe) r
ORDER BY p.tab::text, p.probe;

-- the non-default classes can be named
CREATE INDEX oc_varchar_v_varchar_ops ON oc_varchar USING pmhash (v varchar_ops);
DROP INDEX oc_varchar_v_idx;
CREATE INDEX oc_cidr_v_cidr_ops ON oc_cidr USING pmhash (v cidr_ops);
DROP INDEX oc_cidr_v_idx;
CREATE TABLE oc_pattern (id serial, t text, c char(5), v varchar(10));
INSERT INTO oc_pattern (t, c, v) VALUES ('abc', 'abc', 'abc'), ('abd', 'abd', 'abd'), (NULL, NULL, NULL), ('abc', 'abc  ', 'abc');
CREATE INDEX ON oc_pattern USING pmhash (t text_pattern_ops);
CREATE INDEX ON oc_pattern USING pmhash (c bpchar_pattern_ops);
CREATE INDEX ON oc_pattern USING pmhash (v varchar_pattern_ops);
SELECT ic.relname AS index, opc.opcname, opc.opcdefault
FROM pg_index i
	JOIN pg_class ic ON ic.oid = i.indexrelid
	JOIN pg_opclass opc ON opc.oid = i.indclass[0]
WHERE ic.relnamespace = 'pmh_opc'::regnamespace AND NOT opc.opcdefault
ORDER BY 1;
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM oc_varchar WHERE v = 'abc';
SELECT id FROM oc_varchar WHERE v = 'abc' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_pattern WHERE t = 'abc';
SELECT id FROM oc_pattern WHERE t = 'abc' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_pattern WHERE c = 'abc';
SELECT id FROM oc_pattern WHERE c = 'abc' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_pattern WHERE v = 'abc';
SELECT id FROM oc_pattern WHERE v = 'abc' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_cidr WHERE v = '10.0.0.0/8';
SELECT id FROM oc_cidr WHERE v = '10.0.0.0/8' ORDER BY id;
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;

-- bool: the planner turns "v = true" into "v" and matches a bare boolean
-- column only to the built-in btree and hash bool families (PostgreSQL 15's
-- IsBooleanOpfamily), so pmhash is used when the value is not a constant
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM oc_bool WHERE v = true;
EXPLAIN (COSTS OFF) SELECT id FROM oc_bool WHERE v = (SELECT true);
SELECT id FROM oc_bool WHERE v = (SELECT true) ORDER BY id;
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;

-- IS NULL (and = NULL) are not answered by the index: NULLs are not indexed
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM oc_int4 WHERE v IS NULL;
SELECT id FROM oc_int4 WHERE v IS NULL ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id FROM oc_text WHERE v IS NOT NULL;
SELECT count(*) FROM oc_int4 WHERE v = NULL;
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;

-- after more rows and a REINDEX the answers stay the same
INSERT INTO oc_int4 (v) SELECT g % 50 FROM generate_series(1, 2000) g;
INSERT INTO oc_text (v) SELECT 'abc' FROM generate_series(1, 100);
REINDEX TABLE oc_int4;
SELECT p.tab, p.probe, r.*
FROM (VALUES ('oc_int4'::regclass, '42'), ('oc_int4', '0::int8'), ('oc_int4', '49::int2'),
	('oc_text', '''abc''::text'), ('oc_text', '''abc''::name COLLATE "default"')) AS p(tab, probe),
	LATERAL oc_probe(p.tab, p.probe) r
ORDER BY p.tab::text, p.probe;

--
-- Errors
--

-- a type without a class
CREATE TABLE oc_point (id serial, v point);
CREATE INDEX ON oc_point USING pmhash (v);
-- a class of another type
CREATE INDEX ON oc_int4 USING pmhash (v text_ops);
-- only strategy 1, only support functions 1 and 2
CREATE OPERATOR CLASS oc_bad_strategy FOR TYPE int4 USING pmhash AS
	OPERATOR 2 = (int4, int4);
CREATE OPERATOR CLASS oc_bad_support FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 3 hashint4extended(int4, int8);
-- no ordering operators
CREATE OPERATOR CLASS oc_bad_order FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4) FOR ORDER BY integer_ops;

--
-- amvalidate on classes that are wrong
--

-- no function 2: pmhash cannot hash the type (function 1 is not enough)
CREATE OPERATOR CLASS oc_no_extended FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 1 hashint4(int4);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_no_extended';

-- function 1 is optional
CREATE OPERATOR CLASS oc_only_extended FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 2 hashint4extended(int4, int8);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_only_extended';

-- wrong signatures: 32-bit hash as function 2, a function of another type,
-- a binary-compatible function for a type hash does not allow it for
CREATE OPERATOR CLASS oc_wrong_sig FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 2 hashint4(int4);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_wrong_sig';
CREATE OPERATOR CLASS oc_wrong_type FOR TYPE int4 USING pmhash AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 1 hashtext(text),
	FUNCTION 2 hashtextextended(text, int8);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_wrong_type';
CREATE OPERATOR CLASS oc_wrong_hack FOR TYPE int2 USING pmhash AS
	OPERATOR 1 = (int2, int2),
	FUNCTION 2 hashint4extended(int4, int8);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_wrong_hack';

-- a family with two types but no cross-type operators, and a cross-type
-- hash function
CREATE OPERATOR FAMILY oc_incomplete USING pmhash;
CREATE OPERATOR CLASS oc_incomplete4 FOR TYPE int4 USING pmhash
FAMILY oc_incomplete AS
	OPERATOR 1 = (int4, int4),
	FUNCTION 2 hashint4extended(int4, int8);
CREATE OPERATOR CLASS oc_incomplete8 FOR TYPE int8 USING pmhash
FAMILY oc_incomplete AS
	OPERATOR 1 = (int8, int8),
	FUNCTION 2 hashint8extended(int8, int8);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_incomplete4';
ALTER OPERATOR FAMILY oc_incomplete USING pmhash ADD
	OPERATOR 1 = (int4, int8),
	OPERATOR 1 = (int8, int4);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_incomplete4';
ALTER OPERATOR FAMILY oc_incomplete USING pmhash ADD
	FUNCTION 2 (int4, int8) hashint4extended(int4, int8);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_incomplete8';
ALTER OPERATOR FAMILY oc_incomplete USING pmhash DROP
	FUNCTION 2 (int4, int8);
-- an operator whose right type has no hash function in the family
ALTER OPERATOR FAMILY oc_incomplete USING pmhash ADD
	OPERATOR 1 = (int4, int2);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_incomplete4';
ALTER OPERATOR FAMILY oc_incomplete USING pmhash DROP
	OPERATOR 1 (int4, int2);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_incomplete4';
-- functions without an operator
ALTER OPERATOR FAMILY oc_incomplete USING pmhash ADD
	FUNCTION 2 (text, text) hashtextextended(text, int8);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_incomplete4';

-- members added before their class are loose members of the family; the
-- class created afterwards still validates
CREATE OPERATOR FAMILY oc_later USING pmhash;
ALTER OPERATOR FAMILY oc_later USING pmhash ADD
	OPERATOR 1 = (int4, int4),
	FUNCTION 1 (int4, int4) hashint4(int4),
	FUNCTION 2 (int4, int4) hashint4extended(int4, int8);
CREATE OPERATOR CLASS oc_later FOR TYPE int4 USING pmhash FAMILY oc_later AS
	STORAGE int4;
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_later';
SELECT classid::regclass, deptype, refclassid::regclass
FROM pg_depend
WHERE (classid = 'pg_amop'::regclass AND objid IN
		(SELECT o.oid FROM pg_amop o JOIN pg_opfamily f ON f.oid = o.amopfamily
		 WHERE f.opfname = 'oc_later'))
	OR (classid = 'pg_amproc'::regclass AND objid IN
		(SELECT p.oid FROM pg_amproc p JOIN pg_opfamily f ON f.oid = p.amprocfamily
		 WHERE f.opfname = 'oc_later'))
ORDER BY 1, 3;
-- and an index with it works
CREATE TABLE oc_later_t (id serial, v int4);
INSERT INTO oc_later_t (v) SELECT g % 10 FROM generate_series(1, 100) g;
CREATE INDEX oc_later_i ON oc_later_t USING pmhash (v oc_later);
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM oc_later_t WHERE v = 7;
SELECT count(*) FROM oc_later_t WHERE v = 7;
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;

-- dropping a class takes its own members with it, not the family's
DROP OPERATOR CLASS oc_incomplete4 USING pmhash;
SELECT o.amopopr::regoperator::text AS opr
FROM pg_amop o JOIN pg_opfamily f ON f.oid = o.amopfamily
WHERE f.opfname = 'oc_incomplete'
ORDER BY 1;
SELECT p.amproc::regprocedure::text AS proc
FROM pg_amproc p JOIN pg_opfamily f ON f.oid = p.amprocfamily
WHERE f.opfname = 'oc_incomplete'
ORDER BY 1;

RESET search_path;
SET client_min_messages = warning;
DROP SCHEMA pmh_opc CASCADE;
RESET client_min_messages;
