/*-------------------------------------------------------------------------
 *
 * fuzz_format.h
 *	  The input formats of the fuzz targets (fuzz_pool.c, fuzz_ops.c), shared
 *	  with the seed generator (fuzz_seeds.c).  See the targets' header
 *	  comments for the meaning of each operation's arguments.
 *
 *-------------------------------------------------------------------------
 */
#ifndef FUZZ_FORMAT_H
#define FUZZ_FORMAT_H

/* ---- fuzz_pool: a script that builds a pool image ---- */

#define FP_MAX_SEGS			64

/* byte 1 of the preamble */
#define FP_VALID_HEADER		0x01	/* start from pmh_header_init's header */
#define FP_FIX_CHECKSUM		0x02	/* recompute the checksum at the end */
#define FP_STATE_LINE		0x04	/* a state line that keeps the count */
#define FP_REPLAY_LOG		0x08	/* replay the backup log after recovery */
#define FP_LEN_MODE(m)		((m) << 4)	/* bits 4-6: see image_length */
#define FP_STATE_BEHIND		0x80	/* the state line's count is not ours */

typedef enum FpOp
{
	FP_OP_RAW = 0,				/* u32 offset, u8 n-1, n bytes */
	FP_OP_HEADER,				/* u8 field, u64 value */
	FP_OP_PRIMARY,				/* u8 seg, u8 depth, u64 prefix */
	FP_OP_OVERFLOW,				/* u8 seg */
	FP_OP_LOGSEG,				/* u8 seg, u16 extension */
	FP_OP_WORD,					/* u8 seg, u64 raw word */
	FP_OP_LINK,					/* u8 seg, u32 ovf_next (segno + 1) */
	FP_OP_FILL,					/* u8 seg, u16 count, u8 seed, u8 kind,
								 * u8 owner seg */
	FP_OP_ENTRY,				/* u8 seg, u16 slot, u64 tag/TID, u8 mode,
								 * u64 hash */
	FP_OP_LOG,					/* u16 line, u8 first, u8 n, u8 seed, u8 src */
	FP_OP_STATE,				/* u8 crash count, u8 flags */
	FP_OP_ZERO,					/* u8 seg */
	FP_OP_COPY,					/* u8 from, u8 to, u8 whole */
	FP_NOPS
} FpOp;

/* FP_OP_FILL kinds */
#define FP_FILL_OWN			0x01	/* prefix of the segment's own word */
#define FP_FILL_DUPS		0x02	/* four TIDs per hash */
#define FP_FILL_ONEHASH		0x04	/* one hash for all */
#define FP_FILL_DEAD		0x08	/* every 7th entry dead, torn or foreign */
#define FP_FILL_OFFSET		0x10	/* start at bucket "seed" */

/* ---- fuzz_ops: a sequence of operations on a small pool ---- */

/* byte 0 of the preamble */
#define FO_LOG_LINES(f)		(((f) & 7) + 1) /* fixed log lines used */
#define FO_LOG_EXTS(f)		(((f) >> 3) & 3)	/* log segments allowed */
#define FO_INSERT_NEW		0x20	/* new pairs go through pmh_insert_new */

typedef enum FoOp
{
	FO_OP_INSERT = 0,			/* u8 key, u8 tid: pmh_insert */
	FO_OP_LOG_INSERT,			/* u8 key, u8 tid: backup log, D-bucket */
	FO_OP_LOG_BATCH,			/* u8 n, u8 key, u8 key step, u8 tid */
	FO_OP_DELETE,				/* u16 index into the model */
	FO_OP_DELETE_KEY,			/* u8 key: every TID of the key */
	FO_OP_LOOKUP,				/* u8 key */
	FO_OP_RELOCATE,				/* u8 key: the D-bucket of its segment */
	FO_OP_RELOCATE_ALL,
	FO_OP_SPLIT,				/* u8 key: split its segment */
	FO_OP_OVERFLOW,				/* u8 key: extend its segment's chain */
	FO_OP_BULK,					/* u8 key, u8 count, u8 mode */
	FO_OP_RESTART,				/* clean restart: recover the image */
	FO_OP_CRASH,				/* crash: recover the image, crash count + 1 */
	FO_OP_POWERFAIL,			/* u8 k: recover what was persisted, now
								 * (k = 0) or at the k-th fence of the next
								 * operation */
	FO_OP_LOG_EXTEND,			/* add a log segment */
	FO_NOPS
} FoOp;

/* FO_OP_BULK modes */
#define FO_BULK_DUPS		0x01	/* four TIDs per hash */
#define FO_BULK_ONEHASH		0x02	/* one hash for all */
#define FO_BULK_FPCOLLIDE	0x04	/* one fingerprint for all */

#endif							/* FUZZ_FORMAT_H */
