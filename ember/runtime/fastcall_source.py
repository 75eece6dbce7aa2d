"""The C source of ember's call extension (ember.runtime.fastcall): a CPython extension type,
`Caller`, that checks a call's arguments against a model's signature and runs its entry function.

It takes only the common case: every input an exact numpy.ndarray (or an exact CPU torch.Tensor,
once `attach_torch` gave it torch's types) of the expected dtype, C-contiguous, of the expected
rank and sizes; every output and the workspace allocated. Anything else (a wrong count, dtype or
shape, a copy to make, an allocation that fails) returns NotImplemented before any native code
runs, and the Python path redoes the call: it copies what needs copying and raises the named
errors, so both paths accept the same calls and raise the same messages.

Dimensions are coded as (kind, value) pairs: kind 0 a constant, 1 a symbol (its index), 2 a
polynomial of symbols (its index in `polys`, each a list of (coefficient, symbol indices)).
Symbols are bound from the first input dimension that is that symbol, in input order, then
checked against their range (lo, hi; hi < 0: none), as CompiledModel._bind does.
"""

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 64

typedef int (*entry_fn)(void* const*, void* const*, char*, const int64_t*, void* const*, const int64_t*, int);

static unsigned long forked_ident = 0; /* the thread that forked this process, when libgomp was loaded */

typedef struct {
  int n_terms;
  int64_t* coeff;
  int* degree;
  int* syms; /* sum of degrees entries */
} poly_t;

typedef struct {
  int ndim;
  int64_t* kind;
  int64_t* value;
  PyArray_Descr* descr;
  PyObject* torch_dtype; /* NULL until attach_torch */
  int is_complex;        /* only a complex tensor can carry torch's lazy conjugate bit */
} tensor_t;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  entry_fn entry;
  void* const* weights;
  int n_in, n_out, n_sym, n_sizes, n_poly;
  tensor_t* in;
  tensor_t* out;
  int64_t* lo;
  int64_t* hi;
  poly_t* polys;
  PyObject* layout;     /* (offsets ndarray, bytes) when static, else callable(sizes tuple) */
  PyObject* last_key;   /* the sizes of the latest layout asked for, and its answer */
  PyObject* last_layout;
  PyObject* status_error;
  PyObject* tensor_type;  /* torch.Tensor, torch.from_numpy, torch.strided: NULL until attach_torch */
  PyObject* from_numpy;
  PyObject* strided;
  void** pool;           /* free workspaces (one per concurrent call at most) and their sizes */
  size_t* pool_size;
  int n_pool, cap_pool;
  int align;             /* bytes a workspace starts at: the model's target's alignment */
} Caller;

static PyObject *s_dtype, *s_is_cpu, *s_layout, *s_is_contiguous, *s_is_neg, *s_is_conj, *s_shape, *s_data_ptr;

static int read_dims(PyObject* seq, tensor_t* t) {
  PyObject* fast = PySequence_Fast(seq, "dims");
  if (!fast) return -1;
  t->ndim = (int)PySequence_Fast_GET_SIZE(fast);
  t->kind = PyMem_Calloc(t->ndim + 1, sizeof(int64_t));
  t->value = PyMem_Calloc(t->ndim + 1, sizeof(int64_t));
  for (int k = 0; k < t->ndim; ++k) {
    PyObject* pair = PySequence_Fast_GET_ITEM(fast, k);
    if (!PyArg_ParseTuple(pair, "LL", &t->kind[k], &t->value[k])) { Py_DECREF(fast); return -1; }
  }
  Py_DECREF(fast);
  return t->ndim > MAX_RANK ? (PyErr_SetString(PyExc_ValueError, "rank too large"), -1) : 0;
}

static int read_tensors(PyObject* list, tensor_t** out, int* n) {
  PyObject* fast = PySequence_Fast(list, "tensors");
  if (!fast) return -1;
  *n = (int)PySequence_Fast_GET_SIZE(fast);
  *out = PyMem_Calloc(*n + 1, sizeof(tensor_t));
  for (int i = 0; i < *n; ++i) {
    PyObject *descr, *dims;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "O!O", &PyArrayDescr_Type, &descr, &dims)
        || read_dims(dims, &(*out)[i]) < 0) { Py_DECREF(fast); return -1; }
    Py_INCREF(descr);
    (*out)[i].descr = (PyArray_Descr*)descr;
  }
  Py_DECREF(fast);
  return 0;
}

static int read_polys(Caller* c, PyObject* list) {
  PyObject* fast = PySequence_Fast(list, "polys");
  if (!fast) return -1;
  c->n_poly = (int)PySequence_Fast_GET_SIZE(fast);
  c->polys = PyMem_Calloc(c->n_poly + 1, sizeof(poly_t));
  for (int p = 0; p < c->n_poly; ++p) {
    PyObject* terms = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, p), "terms");
    if (!terms) { Py_DECREF(fast); return -1; }
    poly_t* q = &c->polys[p];
    q->n_terms = (int)PySequence_Fast_GET_SIZE(terms);
    q->coeff = PyMem_Calloc(q->n_terms + 1, sizeof(int64_t));
    q->degree = PyMem_Calloc(q->n_terms + 1, sizeof(int));
    int total = 0;
    for (int t = 0; t < q->n_terms; ++t)
      total += (int)PySequence_Size(PySequence_Fast_GET_ITEM(PySequence_Fast_GET_ITEM(terms, t), 1));
    q->syms = PyMem_Calloc(total + 1, sizeof(int));
    int at = 0;
    for (int t = 0; t < q->n_terms; ++t) {
      PyObject *syms;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(terms, t), "LO", &q->coeff[t], &syms)) {
        Py_DECREF(terms); Py_DECREF(fast); return -1;
      }
      q->degree[t] = (int)PySequence_Size(syms);
      for (int d = 0; d < q->degree[t]; ++d) {
        PyObject* s = PySequence_GetItem(syms, d);
        q->syms[at++] = (int)PyLong_AsLong(s);
        Py_XDECREF(s);
      }
    }
    Py_DECREF(terms);
  }
  Py_DECREF(fast);
  return PyErr_Occurred() ? -1 : 0;
}

static PyObject* Caller_vcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);

/* Caller(entry, weights, inputs, outputs, ranges, n_sizes, polys, layout, status_error, align) */
static int Caller_init(Caller* c, PyObject* args, PyObject* kw) {
  PyObject *entry, *weights, *ins, *outs, *ranges, *polys;
  if (!PyArg_ParseTuple(args, "OOOOOiOOOi", &entry, &weights, &ins, &outs, &ranges, &c->n_sizes, &polys,
                        &c->layout, &c->status_error, &c->align))
    return -1;
  Py_INCREF(c->layout);
  Py_INCREF(c->status_error);
  c->vectorcall = Caller_vcall;
  c->entry = (entry_fn)PyLong_AsVoidPtr(entry);
  c->weights = (void* const*)PyLong_AsVoidPtr(weights);
  if (PyErr_Occurred() || read_tensors(ins, &c->in, &c->n_in) < 0 || read_tensors(outs, &c->out, &c->n_out) < 0
      || read_polys(c, polys) < 0)
    return -1;
  PyObject* fast = PySequence_Fast(ranges, "ranges");
  if (!fast) return -1;
  c->n_sym = (int)PySequence_Fast_GET_SIZE(fast);
  c->lo = PyMem_Calloc(c->n_sym + 1, sizeof(int64_t));
  c->hi = PyMem_Calloc(c->n_sym + 1, sizeof(int64_t));
  for (int s = 0; s < c->n_sym; ++s)
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, s), "LL", &c->lo[s], &c->hi[s])) {
      Py_DECREF(fast);
      return -1;
    }
  Py_DECREF(fast);
  return 0;
}

static void free_tensors(tensor_t* t, int n) {
  if (!t) return;
  for (int i = 0; i < n; ++i) {
    PyMem_Free(t[i].kind); PyMem_Free(t[i].value);
    Py_XDECREF(t[i].descr); Py_XDECREF(t[i].torch_dtype);
  }
  PyMem_Free(t);
}

static void Caller_dealloc(Caller* c) {
  free_tensors(c->in, c->n_in);
  free_tensors(c->out, c->n_out);
  for (int p = 0; c->polys && p < c->n_poly; ++p) {
    PyMem_Free(c->polys[p].coeff); PyMem_Free(c->polys[p].degree); PyMem_Free(c->polys[p].syms);
  }
  PyMem_Free(c->polys); PyMem_Free(c->lo); PyMem_Free(c->hi);
  for (int k = 0; k < c->n_pool; ++k) free(c->pool[k]);
  PyMem_Free(c->pool); PyMem_Free(c->pool_size);
  Py_XDECREF(c->layout); Py_XDECREF(c->last_key); Py_XDECREF(c->last_layout); Py_XDECREF(c->status_error);
  Py_XDECREF(c->tensor_type); Py_XDECREF(c->from_numpy); Py_XDECREF(c->strided);
  Py_TYPE(c)->tp_free((PyObject*)c);
}

/* The value of a dimension for the bound symbols; -1 when it has none (unbound, overflow, negative). */
static int64_t dim_value(Caller* c, int64_t kind, int64_t value, const int64_t* sym, const char* bound) {
  if (kind == 0) return value;
  if (kind == 1) return bound[value] ? sym[value] : -1;
  poly_t* q = &c->polys[value];
  int64_t total = 0;
  int at = 0;
  for (int t = 0; t < q->n_terms; ++t) {
    int64_t term = q->coeff[t];
    for (int d = 0; d < q->degree[t]; ++d, ++at) {
      if (!bound[q->syms[at]] || __builtin_mul_overflow(term, sym[q->syms[at]], &term)) return -1;
    }
    if (__builtin_add_overflow(total, term, &total)) return -1;
  }
  return total < 0 ? -1 : total;
}

/* Input i's data pointer and sizes, or 0 when it is not the common case (the Python path decides). */
static int torch_input(Caller* c, int i, PyObject* x, void** data, int64_t* shape) {
  tensor_t* t = &c->in[i];
  if (!t->torch_dtype) return 0;
  int ok = 0;
  PyObject *dtype = NULL, *cpu = NULL, *layout = NULL, *contig = NULL, *neg = NULL, *conj = NULL, *size = NULL,
           *ptr = NULL;
  if (!(dtype = PyObject_GetAttr(x, s_dtype)) || dtype != t->torch_dtype) goto done;
  if (!(cpu = PyObject_GetAttr(x, s_is_cpu)) || cpu != Py_True) goto done;
  if (!(layout = PyObject_GetAttr(x, s_layout)) || layout != c->strided) goto done;
  if (!(contig = PyObject_CallMethodNoArgs(x, s_is_contiguous)) || contig != Py_True) goto done;
  if (!(neg = PyObject_CallMethodNoArgs(x, s_is_neg)) || neg != Py_False) goto done;
  if (t->is_complex && (!(conj = PyObject_CallMethodNoArgs(x, s_is_conj)) || conj != Py_False)) goto done;
  if (!(size = PyObject_GetAttr(x, s_shape)) || !PyTuple_Check(size) || PyTuple_GET_SIZE(size) != t->ndim) goto done;
  for (int k = 0; k < t->ndim; ++k) {
    shape[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(size, k));
    if (shape[k] < 0) goto done;
  }
  if (!(ptr = PyObject_CallMethodNoArgs(x, s_data_ptr))) goto done;
  *data = PyLong_AsVoidPtr(ptr);
  ok = !PyErr_Occurred();
done:
  Py_XDECREF(dtype); Py_XDECREF(cpu); Py_XDECREF(layout); Py_XDECREF(contig); Py_XDECREF(neg); Py_XDECREF(conj);
  Py_XDECREF(size); Py_XDECREF(ptr);
  PyErr_Clear();
  return ok;
}

static void* take_workspace(Caller* c, size_t nbytes, size_t* have) {
  if (c->n_pool > 0) {
    --c->n_pool;
    void* p = c->pool[c->n_pool];
    if (c->pool_size[c->n_pool] >= nbytes) { *have = c->pool_size[c->n_pool]; return p; }
    free(p);
  }
  void* p = NULL;
  if (nbytes < (size_t)c->align) nbytes = (size_t)c->align;
  if (posix_memalign(&p, (size_t)c->align, nbytes) != 0) return NULL;
  *have = nbytes;
  return p;
}

static void give_workspace(Caller* c, void* p, size_t size) {
  if (c->n_pool == c->cap_pool) {
    int cap = c->cap_pool ? 2 * c->cap_pool : 4;
    void** pool = PyMem_Realloc(c->pool, cap * sizeof(void*));
    if (pool) c->pool = pool;
    size_t* sizes = pool ? PyMem_Realloc(c->pool_size, cap * sizeof(size_t)) : NULL;
    if (sizes) c->pool_size = sizes;
    if (!pool || !sizes) { free(p); return; }
    c->cap_pool = cap;
  }
  c->pool[c->n_pool] = p;
  c->pool_size[c->n_pool++] = size;
}

/* The layout (offsets ndarray, workspace bytes) for these sizes, a new reference; NULL: ask Python. */
static PyObject* layout_for(Caller* c, const int64_t* sizes) {
  if (!PyCallable_Check(c->layout)) { Py_INCREF(c->layout); return c->layout; }
  PyObject* key = PyTuple_New(c->n_sizes);
  if (!key) return NULL;
  for (int s = 0; s < c->n_sizes; ++s) PyTuple_SET_ITEM(key, s, PyLong_FromLongLong(sizes[s]));
  if (c->last_key) {
    int same = PyObject_RichCompareBool(key, c->last_key, Py_EQ);
    if (same == 1) { Py_DECREF(key); Py_INCREF(c->last_layout); return c->last_layout; }
  }
  PyObject* layout = PyObject_CallOneArg(c->layout, key);
  if (!layout) { Py_DECREF(key); return NULL; }
  Py_XSETREF(c->last_key, key);
  Py_INCREF(layout);
  Py_XSETREF(c->last_layout, layout);
  return layout;
}

static PyObject* Caller_call(Caller* c, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "Caller(inputs tuple, num_threads)");
    return NULL;
  }
  PyObject* inputs = args[0];
  int num_threads = (int)PyLong_AsLong(args[1]);
  if (num_threads == -1 && PyErr_Occurred()) return NULL;
  if (PyTuple_GET_SIZE(inputs) != c->n_in) Py_RETURN_NOTIMPLEMENTED;
  void* in_ptrs[c->n_in + 1];
  void* out_ptrs[c->n_out + 1];
  int64_t sym[c->n_sym + 1];
  char bound[c->n_sym + 1];
  memset(bound, 0, sizeof(bound));
  int torch_out = 0;
  for (int i = 0; i < c->n_in; ++i) {
    PyObject* x = PyTuple_GET_ITEM(inputs, i);
    tensor_t* t = &c->in[i];
    int64_t shape[MAX_RANK];
    if (PyArray_CheckExact(x)) {
      PyArrayObject* a = (PyArrayObject*)x;
      if (PyArray_DESCR(a) != t->descr || PyArray_NDIM(a) != t->ndim || !PyArray_IS_C_CONTIGUOUS(a))
        Py_RETURN_NOTIMPLEMENTED;
      for (int k = 0; k < t->ndim; ++k) shape[k] = PyArray_DIMS(a)[k];
      in_ptrs[i] = PyArray_DATA(a);
    } else if (c->tensor_type && Py_TYPE(x) == (PyTypeObject*)c->tensor_type) {
      if (!torch_input(c, i, x, &in_ptrs[i], shape)) Py_RETURN_NOTIMPLEMENTED;
      torch_out = 1;
    } else {
      Py_RETURN_NOTIMPLEMENTED;
    }
    for (int k = 0; k < t->ndim; ++k) {
      int64_t kind = t->kind[k], v = t->value[k];
      if (kind == 0) {
        if (shape[k] != v) Py_RETURN_NOTIMPLEMENTED;
      } else if (kind == 1 && !bound[v]) {
        if (shape[k] < c->lo[v] || (c->hi[v] >= 0 && shape[k] > c->hi[v])) Py_RETURN_NOTIMPLEMENTED;
        sym[v] = shape[k];
        bound[v] = 1;
      } else if (kind == 1 && sym[v] != shape[k]) {
        Py_RETURN_NOTIMPLEMENTED;
      }
    }
  }
  /* dimensions that are expressions of symbols, once every symbol is bound */
  for (int i = 0; i < c->n_in; ++i) {
    tensor_t* t = &c->in[i];
    for (int k = 0; k < t->ndim; ++k) {
      if (t->kind[k] != 2) continue;
      PyObject* x = PyTuple_GET_ITEM(inputs, i);
      int64_t got;
      if (PyArray_CheckExact(x)) {
        got = PyArray_DIMS((PyArrayObject*)x)[k];
      } else {
        PyObject* size = PyObject_GetAttr(x, s_shape);
        got = size ? PyLong_AsLongLong(PyTuple_GET_ITEM(size, k)) : -2;
        Py_XDECREF(size);
        PyErr_Clear();
      }
      if (dim_value(c, 2, t->value[k], sym, bound) != got) Py_RETURN_NOTIMPLEMENTED;
    }
  }
  for (int s = 0; s < c->n_sizes; ++s)
    if (!bound[s]) Py_RETURN_NOTIMPLEMENTED;
  PyObject* layout = layout_for(c, sym);
  if (!layout) { PyErr_Clear(); Py_RETURN_NOTIMPLEMENTED; }
  PyObject* offsets = PyTuple_GET_ITEM(layout, 0);
  long long nbytes = PyLong_AsLongLong(PyTuple_GET_ITEM(layout, 1));
  PyObject* outs = PyTuple_New(c->n_out);
  void* workspace = NULL;
  size_t have = 0;
  if (!outs || nbytes < 0) goto fallback;
  for (int o = 0; o < c->n_out; ++o) {
    tensor_t* t = &c->out[o];
    npy_intp shape[MAX_RANK];
    for (int k = 0; k < t->ndim; ++k)
      if ((shape[k] = (npy_intp)dim_value(c, t->kind[k], t->value[k], sym, bound)) < 0) goto fallback;
    Py_INCREF(t->descr);
    PyObject* a = PyArray_Empty(t->ndim, shape, t->descr, 0);
    if (!a) goto fallback;
    PyTuple_SET_ITEM(outs, o, a);
    out_ptrs[o] = PyArray_DATA((PyArrayObject*)a);
  }
  if (!(workspace = take_workspace(c, (size_t)nbytes, &have))) goto fallback;
  int threads = forked_ident && PyThread_get_thread_ident() == forked_ident ? 1 : num_threads;
  const int64_t* offs = PyArray_DATA((PyArrayObject*)offsets);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = c->entry(in_ptrs, out_ptrs, workspace, offs, c->weights, sym, threads);
  Py_END_ALLOW_THREADS
  give_workspace(c, workspace, have);
  Py_DECREF(layout);
  if (rc != 0) {
    Py_DECREF(outs);
    PyObject* e = PyObject_CallFunction(c->status_error, "i", rc);
    if (e) { PyErr_SetObject((PyObject*)Py_TYPE(e), e); Py_DECREF(e); }
    return NULL;
  }
  if (torch_out) {
    for (int o = 0; o < c->n_out; ++o) {
      PyObject* t = PyObject_CallOneArg(c->from_numpy, PyTuple_GET_ITEM(outs, o));
      if (!t) { Py_DECREF(outs); return NULL; }
      Py_SETREF(PyTuple_GET_ITEM(outs, o), t);
    }
  }
  if (c->n_out == 1) {
    PyObject* one = PyTuple_GET_ITEM(outs, 0);
    Py_INCREF(one);
    Py_DECREF(outs);
    return one;
  }
  return outs;
fallback:
  PyErr_Clear();
  Py_XDECREF(outs);
  Py_DECREF(layout);
  Py_RETURN_NOTIMPLEMENTED;
}

static PyObject* Caller_vcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames)) {
    PyErr_SetString(PyExc_TypeError, "Caller takes no keywords");
    return NULL;
  }
  return Caller_call((Caller*)self, args, PyVectorcall_NARGS(nargsf));
}

/* attach_torch(torch.Tensor, torch.from_numpy, torch.strided, (torch dtype, is complex) of each input) */
static PyObject* Caller_attach_torch(Caller* c, PyObject* args) {
  PyObject *type, *from_numpy, *strided, *dtypes;
  if (!PyArg_ParseTuple(args, "OOOO", &type, &from_numpy, &strided, &dtypes)) return NULL;
  if (PySequence_Size(dtypes) != c->n_in) return PyErr_Format(PyExc_ValueError, "one dtype per input");
  for (int i = 0; i < c->n_in; ++i) {
    PyObject *pair = PySequence_GetItem(dtypes, i), *dtype;
    int is_complex;
    if (!pair || !PyArg_ParseTuple(pair, "Op", &dtype, &is_complex)) { Py_XDECREF(pair); return NULL; }
    Py_INCREF(dtype);
    Py_XSETREF(c->in[i].torch_dtype, dtype);
    c->in[i].is_complex = is_complex;
    Py_DECREF(pair);
  }
  Py_INCREF(type); Py_XSETREF(c->tensor_type, type);
  Py_INCREF(from_numpy); Py_XSETREF(c->from_numpy, from_numpy);
  Py_INCREF(strided); Py_XSETREF(c->strided, strided);
  Py_RETURN_NONE;
}

static PyObject* Caller_pooled(Caller* c, PyObject* unused) { return PyLong_FromLong(c->n_pool); }

static PyObject* set_forked(PyObject* module, PyObject* arg) {
  forked_ident = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef Caller_methods[] = {
  {"attach_torch", (PyCFunction)Caller_attach_torch, METH_VARARGS, "take CPU torch tensors too"},
  {"pooled", (PyCFunction)Caller_pooled, METH_NOARGS, "free workspaces held"},
  {NULL}
};

static PyTypeObject CallerType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "_ember_fastcall.Caller",
  .tp_basicsize = sizeof(Caller),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
  .tp_new = PyType_GenericNew,
  .tp_init = (initproc)Caller_init,
  .tp_dealloc = (destructor)Caller_dealloc,
  .tp_call = PyVectorcall_Call,
  .tp_vectorcall_offset = offsetof(Caller, vectorcall),
  .tp_methods = Caller_methods,
};

static PyMethodDef module_methods[] = {
  {"set_forked", set_forked, METH_O, "the thread that forked this process (0: none)"},
  {NULL}
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_ember_fastcall", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__ember_fastcall(void) {
  import_array();
  if (PyType_Ready(&CallerType) < 0) return NULL;
  s_dtype = PyUnicode_InternFromString("dtype");
  s_is_cpu = PyUnicode_InternFromString("is_cpu");
  s_layout = PyUnicode_InternFromString("layout");
  s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
  s_is_neg = PyUnicode_InternFromString("is_neg");
  s_is_conj = PyUnicode_InternFromString("is_conj");
  s_shape = PyUnicode_InternFromString("shape");
  s_data_ptr = PyUnicode_InternFromString("data_ptr");
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return NULL;
  Py_INCREF(&CallerType);
  if (PyModule_AddObject(m, "Caller", (PyObject*)&CallerType) < 0) return NULL;
  return m;
}
"""
