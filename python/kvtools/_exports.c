/*
 * kvtools._exports: the buffer exports of a batch's blocks, taken by one
 * C loop.  put_many and get_many hand libkv an array of addresses and one
 * of lengths; doing that in Python costs a memoryview and a ctypes object
 * per block, kept alive for the call, and at a thousand 16 KiB blocks
 * those objects and the garbage collector's passes over them cost as much
 * as the copies.  Here one object holds every export until it is freed.
 *
 * The limited API (3.11 has the buffer protocol in it): one build serves
 * every CPython from 3.11 on.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
	PyObject_HEAD
	Py_ssize_t n;		/* exports held */
	Py_buffer *views;
	uintptr_t *addrs;	/* what libkv reads: void *[n] ... */
	size_t *lens;		/* ... and size_t[n] */
} Exports;

static PyTypeObject *exports_type;

/* The address handed over for an empty buffer, whose own may be NULL. */
static char empty_block;

static void exports_release(Exports *e)
{
	for (Py_ssize_t i = 0; i < e->n; i++)
		PyBuffer_Release(&e->views[i]);
	e->n = 0;
	PyMem_Free(e->views);
	PyMem_Free(e->addrs);
	PyMem_Free(e->lens);
	e->views = NULL;
	e->addrs = NULL;
	e->lens = NULL;
}

static void exports_dealloc(PyObject *self)
{
	PyTypeObject *type = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);

	exports_release((Exports *)self);
	tp_free(self);
	Py_DECREF(type);
}

static PyType_Slot exports_slots[] = {
	{ Py_tp_dealloc, exports_dealloc },
	{ Py_tp_doc, "The buffer exports of one batch, released when this is freed." },
	{ 0, NULL },
};

static PyType_Spec exports_spec = {
	.name = "kvtools._exports.Exports",
	.basicsize = sizeof(Exports),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = exports_slots,
};

/* exports(blocks, writable) -> (holder, addresses, lengths): blocks a
 * list or tuple of C-contiguous buffers (writable ones if asked), held
 * exported while holder lives; addresses and lengths are those of its
 * two C arrays.  Raises what the buffer protocol raises (BufferError,
 * TypeError, ValueError) for a block that is not such a buffer. */
static PyObject *exports(PyObject *module, PyObject *args)
{
	PyObject *blocks, *seq, *ret = NULL;
	int writable;
	Exports *e;
	Py_ssize_t n;

	(void)module;
	if (!PyArg_ParseTuple(args, "Op:exports", &blocks, &writable))
		return NULL;
	seq = PySequence_Fast(blocks, "blocks must be a list or tuple of buffers");
	if (!seq)
		return NULL;
	n = PySequence_Size(seq);
	e = (Exports *)PyType_GenericAlloc(exports_type, 0);
	if (n < 0 || !e)
		goto out;
	e->views = PyMem_Calloc(n ? n : 1, sizeof(*e->views));
	e->addrs = PyMem_Calloc(n ? n : 1, sizeof(*e->addrs));
	e->lens = PyMem_Calloc(n ? n : 1, sizeof(*e->lens));
	if (!e->views || !e->addrs || !e->lens) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		/* Borrowed: seq holds its items. */
		PyObject *item = PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i);
		Py_buffer *v = &e->views[i];

		if (!item || PyObject_GetBuffer(item, v, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE))
			goto out;
		e->n = i + 1;
		e->addrs[i] = (uintptr_t)(v->len ? v->buf : &empty_block);
		e->lens[i] = (size_t)v->len;
	}
	ret = Py_BuildValue("(ONN)", (PyObject *)e, PyLong_FromVoidPtr(e->addrs),
			    PyLong_FromVoidPtr(e->lens));
out:
	Py_XDECREF((PyObject *)e);
	Py_DECREF(seq);
	return ret;
}

static PyMethodDef methods[] = {
	{ "exports", exports, METH_VARARGS,
	  "exports(blocks, writable) -> (holder, addresses, lengths)" },
	{ NULL, NULL, 0, NULL },
};

static int exec_module(PyObject *module)
{
	exports_type = (PyTypeObject *)PyType_FromSpec(&exports_spec);
	if (!exports_type)
		return -1;
	return PyModule_AddObjectRef(module, "Exports", (PyObject *)exports_type);
}

static PyModuleDef_Slot module_slots[] = {
	{ Py_mod_exec, exec_module },
	{ 0, NULL },
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvtools._exports",
	.m_doc = "A batch's buffer exports in one C loop (kvtools' put_many, get_many).",
	.m_methods = methods,
	.m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__exports(void)
{
	return PyModuleDef_Init(&module_def);
}
