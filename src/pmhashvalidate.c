/*-------------------------------------------------------------------------
 *
 * pmhashvalidate.c
 *	  Operator class validation (amvalidate) and the placement of new
 *	  operator family members (amadjustmembers) for pmhash.
 *
 * A pmhash operator family has one strategy, equality (strategy 1), and two
 * support functions per data type:
 *
 *	1. the 32-bit hash, "int4 f(type)": optional, pmhash never calls it;
 *	2. the 64-bit seeded hash, "int8 f(type, int8)": required for every data
 *	   type that appears in one of the family's operators, since entries are
 *	   keyed by it and a scan hashes its key with the function of the key's
 *	   own type.
 *
 * As in hash, a family with several data types must have the equality
 * operators of all their pairs, and the hash functions of those types must
 * agree on equal values (that part cannot be checked here).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/amvalidate.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_amop.h"
#include "catalog/pg_amproc.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "parser/parse_coerce.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "pmhash.h"

#define PMHASH_AM_NAME	"pmhash"

static bool pmhash_proc_signature_ok(Oid funcid, int16 procnum, Oid argtype);
static bool pmhash_physically_compatible(Oid funcid, Oid argtype);
static bool pmhash_pair_has_equality(List *groups, Oid lefttype,
									 Oid righttype);


/*
 * Is the built-in hash function funcid one that the core hash opclasses
 * register for argtype although argtype is not binary-coercible to the
 * function's declared argument type?  The layouts match, so the function
 * hashes such values correctly.  The functions are named one by one, not
 * matched by argument type, because e.g. accepting every function that takes
 * "internal" would let through functions that would crash on the datum.
 */
static bool
pmhash_physically_compatible(Oid funcid, Oid argtype)
{
	switch (funcid)
	{
		case F_HASHINT4:
		case F_HASHINT4EXTENDED:
			/* date, xid and cid are 4-byte integers */
			return argtype == DATEOID || argtype == XIDOID ||
				argtype == CIDOID;
		case F_HASHINT8:
		case F_HASHINT8EXTENDED:
			/* xid8 is an 8-byte integer */
			return argtype == XID8OID;
		case F_TIMESTAMP_HASH:
		case F_TIMESTAMP_HASH_EXTENDED:
			/* timestamptz is stored like timestamp */
			return argtype == TIMESTAMPTZOID;
		case F_HASHCHAR:
		case F_HASHCHAREXTENDED:
			/* bool is one byte like "char" */
			return argtype == BOOLOID;
		case F_HASHVARLENA:
		case F_HASHVARLENAEXTENDED:
			/* hashvarlena hashes the bytes of any plain varlena */
			return argtype == BYTEAOID;
		default:
			return false;
	}
}

/*
 * Does function funcid have the signature of support function procnum for
 * data type argtype?  Function 1 is "int4 f(argtype)", function 2 is
 * "int8 f(argtype, int8)"; neither may return a set.
 */
static bool
pmhash_proc_signature_ok(Oid funcid, int16 procnum, Oid argtype)
{
	HeapTuple	tup;
	Form_pg_proc procform;
	Oid			restype;
	int			nargs;
	bool		result = true;

	if (procnum == PMHASH_STANDARD_PROC)
	{
		restype = INT4OID;
		nargs = 1;
	}
	else
	{
		Assert(procnum == PMHASH_EXTENDED_PROC);
		restype = INT8OID;
		nargs = 2;
	}

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", funcid);
	procform = (Form_pg_proc) GETSTRUCT(tup);

	if (procform->prorettype != restype || procform->proretset ||
		procform->pronargs != nargs)
		result = false;
	else
	{
		Oid			keytype = procform->proargtypes.values[0];

		if (!IsBinaryCoercible(argtype, keytype) &&
			!pmhash_physically_compatible(funcid, argtype))
			result = false;

		/* the second argument of the extended hash is the 64-bit seed */
		if (nargs == 2 && procform->proargtypes.values[1] != INT8OID)
			result = false;
	}

	ReleaseSysCache(tup);
	return result;
}

/*
 * Does the list of operator/function groups have an equality operator for
 * the data type pair (lefttype, righttype)?
 */
static bool
pmhash_pair_has_equality(List *groups, Oid lefttype, Oid righttype)
{
	ListCell   *lc;

	foreach(lc, groups)
	{
		OpFamilyOpFuncGroup *group = (OpFamilyOpFuncGroup *) lfirst(lc);

		if (group->lefttype == lefttype && group->righttype == righttype)
			return (group->operatorset &
					((uint64) 1 << PMHASH_EQUAL_STRATEGY)) != 0;
	}
	return false;
}

/*
 * amvalidate: check an operator class and its whole operator family.
 *
 * Problems are reported at INFO level, one message each, and make the result
 * false.  The family-wide checks are repeated for every class of a family,
 * which is cheap enough not to complicate matters.  It is one long function
 * in the shape of PostgreSQL's hashvalidate and btvalidate -- a pass over
 * the family's support functions, one over its operators, then the
 * cross-checks -- so that the three can be read against theirs.
 */
bool
pmhashvalidate(Oid opclassoid)
{
	bool		result = true;
	HeapTuple	classtup;
	Form_pg_opclass classform;
	HeapTuple	familytup;
	Form_pg_opfamily familyform;
	Oid			opfamilyoid;
	Oid			opcintype;
	char	   *opclassname;
	char	   *opfamilyname;
	CatCList   *oprlist;
	CatCList   *proclist;
	List	   *groups;
	List	   *hashabletypes = NIL;
	bool		found_class_group = false;
	ListCell   *lc;
	int			i;

	classtup = SearchSysCache1(CLAOID, ObjectIdGetDatum(opclassoid));
	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for operator class %u", opclassoid);
	classform = (Form_pg_opclass) GETSTRUCT(classtup);
	opfamilyoid = classform->opcfamily;
	opcintype = classform->opcintype;
	opclassname = NameStr(classform->opcname);

	familytup = SearchSysCache1(OPFAMILYOID, ObjectIdGetDatum(opfamilyoid));
	if (!HeapTupleIsValid(familytup))
		elog(ERROR, "cache lookup failed for operator family %u", opfamilyoid);
	familyform = (Form_pg_opfamily) GETSTRUCT(familytup);
	opfamilyname = NameStr(familyform->opfname);

	oprlist = SearchSysCacheList1(AMOPSTRATEGY, ObjectIdGetDatum(opfamilyoid));
	proclist = SearchSysCacheList1(AMPROCNUM, ObjectIdGetDatum(opfamilyoid));

	/* support functions: numbers, signatures; collect the hashable types */
	for (i = 0; i < proclist->n_members; i++)
	{
		HeapTuple	proctup = &proclist->members[i]->tuple;
		Form_pg_amproc procform = (Form_pg_amproc) GETSTRUCT(proctup);

		/* a hash function hashes one type: no cross-type registrations */
		if (procform->amproclefttype != procform->amprocrighttype)
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s contains support function %s with different left and right input types",
							opfamilyname, PMHASH_AM_NAME,
							format_procedure(procform->amproc))));
			result = false;
		}

		if (procform->amprocnum != PMHASH_STANDARD_PROC &&
			procform->amprocnum != PMHASH_EXTENDED_PROC)
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s contains function %s with invalid support number %d",
							opfamilyname, PMHASH_AM_NAME,
							format_procedure(procform->amproc),
							procform->amprocnum)));
			result = false;
			continue;
		}

		if (!pmhash_proc_signature_ok(procform->amproc, procform->amprocnum,
									  procform->amproclefttype))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s contains function %s with wrong signature for support number %d",
							opfamilyname, PMHASH_AM_NAME,
							format_procedure(procform->amproc),
							procform->amprocnum)));
			result = false;
			continue;
		}

		/* only the 64-bit hash makes a type usable by pmhash */
		if (procform->amprocnum == PMHASH_EXTENDED_PROC &&
			procform->amproclefttype == procform->amprocrighttype)
			hashabletypes = list_append_unique_oid(hashabletypes,
												   procform->amproclefttype);
	}

	/* operators: strategy, purpose, signature, and a hash for their types */
	for (i = 0; i < oprlist->n_members; i++)
	{
		HeapTuple	oprtup = &oprlist->members[i]->tuple;
		Form_pg_amop oprform = (Form_pg_amop) GETSTRUCT(oprtup);

		if (oprform->amopstrategy != PMHASH_EQUAL_STRATEGY)
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s contains operator %s with invalid strategy number %d",
							opfamilyname, PMHASH_AM_NAME,
							format_operator(oprform->amopopr),
							oprform->amopstrategy)));
			result = false;
		}

		/* pmhash returns entries in no particular order */
		if (oprform->amoppurpose != AMOP_SEARCH ||
			OidIsValid(oprform->amopsortfamily))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s contains invalid ORDER BY specification for operator %s",
							opfamilyname, PMHASH_AM_NAME,
							format_operator(oprform->amopopr))));
			result = false;
		}

		if (!check_amop_signature(oprform->amopopr, BOOLOID,
								  oprform->amoplefttype,
								  oprform->amoprighttype))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s contains operator %s with wrong signature",
							opfamilyname, PMHASH_AM_NAME,
							format_operator(oprform->amopopr))));
			result = false;
		}

		/* both sides of the operator must be hashable by function 2 */
		if (!list_member_oid(hashabletypes, oprform->amoplefttype) ||
			!list_member_oid(hashabletypes, oprform->amoprighttype))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s lacks support function %d for operator %s",
							opfamilyname, PMHASH_AM_NAME,
							PMHASH_EXTENDED_PROC,
							format_operator(oprform->amopopr))));
			result = false;
		}
	}

	/*
	 * Every group of members for one pair of data types must consist of the
	 * equality operator (plus, for a single type, its hash functions): a
	 * group with functions but no operator is useless, and one with other
	 * strategies was reported above.
	 */
	groups = identify_opfamily_groups(oprlist, proclist);
	foreach(lc, groups)
	{
		OpFamilyOpFuncGroup *group = (OpFamilyOpFuncGroup *) lfirst(lc);

		if (group->lefttype == opcintype && group->righttype == opcintype)
			found_class_group = true;

		if (group->operatorset != ((uint64) 1 << PMHASH_EQUAL_STRATEGY))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("operator family \"%s\" of access method %s is missing operator(s) for types %s and %s",
							opfamilyname, PMHASH_AM_NAME,
							format_type_be(group->lefttype),
							format_type_be(group->righttype))));
			result = false;
		}
	}

	/* the class's own type must be covered (checked above if present) */
	if (!found_class_group)
	{
		ereport(INFO,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("operator class \"%s\" of access method %s is missing operator(s)",
						opclassname, PMHASH_AM_NAME)));
		result = false;
	}

	/*
	 * Like hash, insist that a family with several types be complete: an
	 * equality operator for every ordered pair of its hashable types.
	 */
	foreach(lc, hashabletypes)
	{
		Oid			lefttype = lfirst_oid(lc);
		ListCell   *lc2;

		foreach(lc2, hashabletypes)
		{
			Oid			righttype = lfirst_oid(lc2);

			if (lefttype == righttype)
				continue;		/* reported above if missing */
			if (!pmhash_pair_has_equality(groups, lefttype, righttype))
			{
				ereport(INFO,
						(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
						 errmsg("operator family \"%s\" of access method %s is missing cross-type operator for types %s and %s",
								opfamilyname, PMHASH_AM_NAME,
								format_type_be(lefttype),
								format_type_be(righttype))));
				result = false;
			}
		}
	}

	ReleaseCatCacheList(proclist);
	ReleaseCatCacheList(oprlist);
	ReleaseSysCache(familytup);
	ReleaseSysCache(classtup);

	return result;
}

/*
 * amadjustmembers: choose the dependencies of operators and support
 * functions being added to a pmhash operator family.
 *
 * As in hash: a cross-type member, or an optional support function (here
 * function 1), is a "soft" member of the family, which survives dropping an
 * operator class.  An equality operator or function 2 for a single type
 * belongs to that type's operator class in the family, if there is one, and
 * otherwise (ALTER OPERATOR FAMILY before CREATE OPERATOR CLASS) falls back
 * to a soft family dependency rather than failing.
 */
void
pmhashadjustmembers(Oid opfamilyoid, Oid opclassoid, List *operators,
					List *functions)
{
	Oid			amoid = InvalidOid;
	Oid			classtype = InvalidOid;
	Oid			classoid = InvalidOid;
	List	   *members;
	ListCell   *lc;

	if (OidIsValid(opclassoid))
	{
		/* in CREATE OPERATOR CLASS the new pg_opclass row is not yet visible */
		CommandCounterIncrement();
		classoid = opclassoid;
		classtype = get_opclass_input_type(opclassoid);
	}

	members = list_concat_copy(operators, functions);
	foreach(lc, members)
	{
		OpFamilyMember *member = (OpFamilyMember *) lfirst(lc);

		if ((member->is_func && member->number != PMHASH_EXTENDED_PROC) ||
			member->lefttype != member->righttype)
		{
			/* optional function or cross-type member: soft, on the family */
			member->ref_is_hard = false;
			member->ref_is_family = true;
			member->refobjid = opfamilyoid;
			continue;
		}

		/* a single-type member: look for the family's class for its type */
		if (member->lefttype != classtype)
		{
			if (!OidIsValid(amoid))
			{
				HeapTuple	familytup;

				familytup = SearchSysCache1(OPFAMILYOID,
											ObjectIdGetDatum(opfamilyoid));
				if (!HeapTupleIsValid(familytup))
					elog(ERROR, "cache lookup failed for operator family %u",
						 opfamilyoid);
				amoid = ((Form_pg_opfamily) GETSTRUCT(familytup))->opfmethod;
				ReleaseSysCache(familytup);
			}
			/* remember the result, even a failed lookup, for the next one */
			classtype = member->lefttype;
			classoid = opclass_for_family_datatype(amoid, opfamilyoid,
												   classtype);
		}

		if (OidIsValid(classoid))
		{
			member->ref_is_hard = true;
			member->ref_is_family = false;
			member->refobjid = classoid;
		}
		else
		{
			member->ref_is_hard = false;
			member->ref_is_family = true;
			member->refobjid = opfamilyoid;
		}
	}
	list_free(members);
}
