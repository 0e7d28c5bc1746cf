#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include <c10/util/Exception.h>

namespace neuralops::runtime {
namespace {

struct LoadedDriver {
  CudaDriver api{};
  std::string error;  // empty when loaded
};

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& error) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (out == nullptr) {
    error = std::string("the CUDA driver (libcuda.so.1) has no symbol ") + name +
        "; update the NVIDIA driver";
    return false;
  }
  return true;
}

LoadedDriver load() {
  LoadedDriver d;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    d.error = std::string("could not load the CUDA driver libcuda.so.1 (") +
        (why ? why : "unknown reason") +
        "). neuralops kernels need an NVIDIA GPU and driver; on other machines use CPU tensors "
        "(the PyTorch fallbacks run) or set NEURALOPS_DISABLE_KERNELS=1";
    return d;
  }
  auto& a = d.api;
  std::string& e = d.error;
  // Each resolve() stops the chain at the first missing symbol and records which.
  if (!(resolve(handle, "cuInit", a.cuInit, e) &&
        resolve(handle, "cuDriverGetVersion", a.cuDriverGetVersion, e) &&
        resolve(handle, "cuGetErrorName", a.cuGetErrorName, e) &&
        resolve(handle, "cuGetErrorString", a.cuGetErrorString, e) &&
        resolve(handle, "cuDeviceGet", a.cuDeviceGet, e) &&
        resolve(handle, "cuDeviceGetAttribute", a.cuDeviceGetAttribute, e) &&
        resolve(handle, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain, e) &&
        resolve(handle, "cuCtxGetCurrent", a.cuCtxGetCurrent, e) &&
        resolve(handle, "cuCtxSetCurrent", a.cuCtxSetCurrent, e) &&
        resolve(handle, "cuModuleLoadData", a.cuModuleLoadData, e) &&
        resolve(handle, "cuModuleGetFunction", a.cuModuleGetFunction, e) &&
        resolve(handle, "cuFuncSetAttribute", a.cuFuncSetAttribute, e) &&
        resolve(handle, "cuLaunchKernel", a.cuLaunchKernel, e) &&
        resolve(handle, "cuStreamIsCapturing", a.cuStreamIsCapturing, e))) {
    return d;
  }
  // Optional: see CudaDriver::cuLaunchKernelEx.
  a.cuLaunchKernelEx = reinterpret_cast<decltype(a.cuLaunchKernelEx)>(dlsym(handle, "cuLaunchKernelEx"));
  CUresult r = a.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    a.cuGetErrorName(r, &name);
    d.error = std::string("cuInit failed (") + (name ? name : "unknown error") +
        "): the NVIDIA driver is installed but no usable GPU was found";
  }
  return d;
}

const LoadedDriver& loaded() {
  // A function-local static is initialized once, thread-safely, on first use.
  static const LoadedDriver d = load();
  return d;
}

}  // namespace

const CudaDriver& driver() {
  const LoadedDriver& d = loaded();
  TORCH_CHECK(d.error.empty(), "neuralops: ", d.error);
  return d.api;
}

const char* driver_load_error() {
  return loaded().error.c_str();
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) {
    return;
  }
  const CudaDriver& d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  d.cuGetErrorName(result, &name);
  d.cuGetErrorString(result, &text);
  TORCH_CHECK(false, "neuralops: ", what, " failed: ", name ? name : "unknown CUDA error", " (",
              text ? text : "no description", ")");
}

}  // namespace neuralops::runtime
