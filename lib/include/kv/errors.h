#ifndef KV_ERRORS_H
#define KV_ERRORS_H

/*
 * libkv-specific failures, returned negated like errno values.  They sit
 * far above the errno range so kv_strerror() can tell them apart.
 */
enum {
	KV_EBADHASH = 4096,	/* block hash is not lowercase/uppercase hex */
	KV_EBADPATH,		/* path does not match the on-disk layout */
	KV_EBADCONFIG,		/* config.json malformed or missing a field */
	KV_ECHECKSUM,		/* payload does not match user.kv.xxh3 */
	KV_ESHORT,		/* file shorter than the requested tail */
	KV_EFINGERPRINT,	/* model dir name disagrees with config.json */
	KV_EPROTO,		/* malformed frame or record */
	KV_ENODEV,		/* no GPU or device for this operation */
	KV_ES3,			/* the object store refused (its code in the detail) */
	KV_ENOBUCKET,		/* no such bucket */
	KV_ERRMAX
};

#endif
