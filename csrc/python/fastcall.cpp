// neuralops._fastcall: the ops' eager entry from Python, for the host time of small calls.
//
// Calling torch.ops.neuralops.<op>.default parses every argument against the schema into a boxed
// stack and calls the op's boxed kernel. With a kernel that does nothing, that took 6.7 us for
// linear_attn_fwd's 12 arguments on the CPU machine, against 1.9 us for a 2-argument op. Most of
// it was the boxed call (5.8 us through callBoxed against 2.9 through the typed handle, parsed
// alike). This module makes, for each op of ops/dispatch.h, a builtin that takes the schema's
// arguments positionally, keyword-only ones too, in schema order. It converts each Python object
// straight to the C++ type of the op's signature and calls the op's typed handle. That is the same
// dispatcher entry, so autograd, devices, dispatch modes and errors are as through torch.ops. The
// GIL is released around the call, as torch.ops does.
//
// A call this path does not take exactly goes to the op's overload, unchanged:
//   - a Tensor subclass other than Parameter (its __torch_function__ must run);
//   - an active torch function mode;
//   - a Python value of another type than the one the signature converts (a float for a float
//     argument, an exact int for an int, an ASCII str for a str, True or False for a bool);
//   - keyword arguments, or another number of arguments.
// Dynamo does not trace builtins: under torch.compile the Python layer calls the overload itself.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "ops/dispatch.h"

namespace neuralops::python {
namespace {

// A Python object as the signature's argument type T: ok() says whether it converts exactly, get()
// converts it (GIL held). Held is what the call keeps until the op returns.
template <typename T>
struct Arg;

template <>
struct Arg<const at::Tensor&> {
  using Held = const at::Tensor&;
  static bool ok(PyObject* o) { return THPVariable_CheckExact(o); }
  static Held get(PyObject* o) { return THPVariable_Unpack(o); }
};

template <>
struct Arg<const std::optional<at::Tensor>&> {
  using Held = std::optional<at::Tensor>;
  static bool ok(PyObject* o) { return o == Py_None || THPVariable_CheckExact(o); }
  static Held get(PyObject* o) { return o == Py_None ? Held() : Held(THPVariable_Unpack(o)); }
};

template <>
struct Arg<c10::string_view> {
  using Held = c10::string_view;
  // ASCII strings hold their UTF-8 form already: no conversion, no failure.
  static bool ok(PyObject* o) { return PyUnicode_CheckExact(o) && PyUnicode_IS_ASCII(o); }
  static Held get(PyObject* o) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(o, &size);
    return Held(data, static_cast<size_t>(size));
  }
};

template <>
struct Arg<bool> {
  using Held = bool;
  static bool ok(PyObject* o) { return PyBool_Check(o); }
  static Held get(PyObject* o) { return o == Py_True; }
};

template <>
struct Arg<double> {
  using Held = double;
  static bool ok(PyObject* o) { return PyFloat_CheckExact(o); }
  static Held get(PyObject* o) { return PyFloat_AS_DOUBLE(o); }
};

template <>
struct Arg<int64_t> {
  using Held = int64_t;
  static bool ok(PyObject* o) {
    if (!PyLong_CheckExact(o)) return false;
    int overflow = 0;
    PyLong_AsLongLongAndOverflow(o, &overflow);
    return overflow == 0;
  }
  static Held get(PyObject* o) { return PyLong_AsLongLong(o); }
};

// The op's results as Python objects (an undefined or absent tensor is None, as through torch.ops).
PyObject* wrap(at::Tensor t) {
  return THPVariable_Wrap(std::move(t));
}

PyObject* wrap(std::optional<at::Tensor> t) {
  if (!t.has_value()) {
    Py_RETURN_NONE;
  }
  return THPVariable_Wrap(std::move(*t));
}

template <typename... Ts, size_t... I>
PyObject* wrap_tuple(std::tuple<Ts...>&& t, std::index_sequence<I...>) {
  PyObject* items[] = {wrap(std::move(std::get<I>(t)))...};
  PyObject* out = PyTuple_New(sizeof...(Ts));
  bool ok = out != nullptr;
  for (PyObject* item : items) ok = ok && item != nullptr;
  if (!ok) {
    for (PyObject* item : items) Py_XDECREF(item);
    Py_XDECREF(out);
    return nullptr;
  }
  for (size_t i = 0; i < sizeof...(Ts); ++i) PyTuple_SET_ITEM(out, i, items[i]);
  return out;
}

template <typename... Ts>
PyObject* wrap(std::tuple<Ts...> t) {
  return wrap_tuple(std::move(t), std::index_sequence_for<Ts...>());
}

class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() { PyEval_RestoreThread(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// A bound function's `self`: (overload, names of the schema's keyword-only arguments).
PyObject* call_overload(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                        Py_ssize_t schema_args) {
  PyObject* overload = PyTuple_GET_ITEM(self, 0);
  PyObject* kw_only = PyTuple_GET_ITEM(self, 1);
  const Py_ssize_t n_kw = PyTuple_GET_SIZE(kw_only);
  if (kwnames == nullptr && nargs == schema_args && n_kw > 0) {
    // This path's positional form: the trailing keyword-only arguments go as keywords.
    return PyObject_Vectorcall(overload, args, schema_args - n_kw, kw_only);
  }
  return PyObject_Vectorcall(overload, args, nargs, kwnames);
}

template <typename Op, typename Signature = typename Op::Signature>
struct Fast;

template <typename Op, typename R, typename... A>
struct Fast<Op, R(A...)> {
  static constexpr Py_ssize_t kArgs = sizeof...(A);

  template <size_t... I>
  static bool convertible(PyObject* const* args, std::index_sequence<I...>) {
    return (Arg<A>::ok(args[I]) && ...);
  }

  template <size_t... I>
  static R call(PyObject* const* args, std::index_sequence<I...>) {
    static const auto handle = ops::op<Op>();
    std::tuple<typename Arg<A>::Held...> held(Arg<A>::get(args[I])...);
    GilRelease released;
    return handle.call(std::get<I>(held)...);
  }

  static PyObject* entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (kwnames != nullptr || nargs != kArgs || at::impl::torch_function_mode_enabled() ||
        !convertible(args, std::index_sequence_for<A...>())) {
      return call_overload(self, args, nargs, kwnames, kArgs);
    }
    HANDLE_TH_ERRORS
    return wrap(call(args, std::index_sequence_for<A...>()));
    END_HANDLE_TH_ERRORS
  }

  static PyMethodDef* method() {
    static PyMethodDef def{Op::name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&entry)),
                           METH_FASTCALL | METH_KEYWORDS,
                           "The op's eager fast path; takes the schema's arguments positionally."};
    return &def;
  }
};

// The schema's keyword-only argument names, in order (they follow the others in every schema).
PyObject* keyword_only_names(const char* name) {
  const auto& arguments = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").schema().arguments();
  PyObject* names = PyList_New(0);
  for (const auto& argument : arguments) {
    if (names == nullptr || !argument.kwarg_only()) continue;
    PyObject* s = PyUnicode_FromString(argument.name().c_str());
    if (s == nullptr || PyList_Append(names, s) != 0) Py_CLEAR(names);
    Py_XDECREF(s);
  }
  if (names == nullptr) return nullptr;
  PyObject* tuple = PyList_AsTuple(names);
  Py_DECREF(names);
  return tuple;
}

template <typename Op>
PyObject* bind_if(const char* name, PyObject* overload, bool& found) {
  if (found || std::strcmp(name, Op::name) != 0) return nullptr;
  found = true;
  PyObject* kw_only = keyword_only_names(Op::name);
  if (kw_only == nullptr) return nullptr;
  PyObject* self = PyTuple_Pack(2, overload, kw_only);
  Py_DECREF(kw_only);
  if (self == nullptr) return nullptr;
  PyObject* function = PyCFunction_New(Fast<Op>::method(), self);
  Py_DECREF(self);
  return function;
}

template <typename... Ops>
PyObject* bind_any(const char* name, PyObject* overload, std::tuple<Ops...>*) {
  bool found = false;
  PyObject* function = nullptr;
  ((function = function ? function : bind_if<Ops>(name, overload, found)), ...);
  if (!found) {
    PyErr_Format(PyExc_KeyError, "neuralops._fastcall: no fast path for op %s", name);
  }
  return function;
}

PyObject* bind(PyObject*, PyObject* args) {
  const char* name = nullptr;
  PyObject* overload = nullptr;
  if (!PyArg_ParseTuple(args, "sO:bind", &name, &overload)) return nullptr;
  HANDLE_TH_ERRORS
  return bind_any(name, overload, static_cast<ops::AllOps*>(nullptr));
  END_HANDLE_TH_ERRORS
}

PyMethodDef kMethods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(name, overload): a function taking the op's arguments positionally that calls the op "
     "through its typed dispatcher handle, or `overload` for what it does not convert exactly."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "neuralops._fastcall",
                       "The ops' eager fast path from Python (csrc/python/fastcall.cpp).", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace neuralops::python

PyMODINIT_FUNC PyInit__fastcall() {
  return PyModule_Create(&neuralops::python::kModule);
}
