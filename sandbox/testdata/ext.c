/* A CPython extension module with one function, triple(n) = 3 * n, compiled for
 * Pyodide as an Emscripten side module (-fPIC, linked with wasm-ld -shared, which
 * writes the dylink.0 section Pyodide's loader reads) without Pyodide's own headers:
 * the few declarations it needs are written here as CPython 3.14 lays them out on
 * wasm32 (4-byte Py_ssize_t and pointers, the default non-free-threaded build).
 * MODULE is the module's name (-DMODULE=name). */
typedef long Py_ssize_t;
typedef struct _object {
	Py_ssize_t ob_refcnt;
	void *ob_type;
} PyObject;
typedef PyObject *(*PyCFunction)(PyObject *, PyObject *);
typedef struct {
	const char *ml_name;
	PyCFunction ml_meth;
	int ml_flags;
	const char *ml_doc;
} PyMethodDef;
typedef struct {
	PyObject ob_base;
	PyObject *(*m_init)(void);
	Py_ssize_t m_index;
	PyObject *m_copy;
} PyModuleDef_Base;
typedef struct {
	PyModuleDef_Base m_base;
	const char *m_name;
	const char *m_doc;
	Py_ssize_t m_size;
	PyMethodDef *m_methods;
	void *m_slots, *m_traverse, *m_clear, *m_free;
} PyModuleDef;

#define METH_O 0x0008
#define PYTHON_API_VERSION 1013
#define STR(x) #x
#define NAME(x) STR(x)
#define CAT(a, b) a##b
#define INIT(m) CAT(PyInit_, m)

PyObject *PyModule_Create2(PyModuleDef *, int);
PyObject *PyLong_FromLong(long);
long PyLong_AsLong(PyObject *);

static PyObject *triple(PyObject *self, PyObject *n) { return PyLong_FromLong(3 * PyLong_AsLong(n)); }

static PyMethodDef methods[] = {{"triple", triple, METH_O, "3 * n"}, {0, 0, 0, 0}};
static PyModuleDef def = {{{1, 0}, 0, 0, 0}, NAME(MODULE), "compiled for the sandbox's tests", -1, methods, 0, 0, 0, 0};

__attribute__((visibility("default"))) PyObject *INIT(MODULE)(void) { return PyModule_Create2(&def, PYTHON_API_VERSION); }
