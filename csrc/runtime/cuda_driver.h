// The CUDA driver API, loaded on first use.
//
// The library never links libcuda: a machine without an NVIDIA driver must still be able to load
// it (import neuralops, run the CPU paths, read build_info). The driver is dlopen'ed the first time
// a kernel is launched; if that fails, the launch raises a RuntimeError saying what to do.
#pragma once

#include <cuda.h>

namespace neuralops::runtime {

struct CudaDriver {
  decltype(&::cuInit) cuInit;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion;
  decltype(&::cuGetErrorName) cuGetErrorName;
  decltype(&::cuGetErrorString) cuGetErrorString;
  decltype(&::cuDeviceGet) cuDeviceGet;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent;
  decltype(&::cuModuleLoadData) cuModuleLoadData;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute;
  decltype(&::cuLaunchKernel) cuLaunchKernel;
  decltype(&::cuStreamIsCapturing) cuStreamIsCapturing;
  // Null in drivers too old to have it: a launch that asks for programmatic dependent launch is
  // then a plain cuLaunchKernel.
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx;
};

// The loaded driver. Throws c10::Error (RuntimeError in Python) when libcuda.so.1 cannot be loaded
// or initialized; the failure is remembered, so later calls fail fast with the same message.
const CudaDriver& driver();

// Empty when the driver loads; otherwise why it does not. Never throws.
const char* driver_load_error();

// Throws a RuntimeError naming `what` and the driver's error when `result` is not CUDA_SUCCESS.
void check(CUresult result, const char* what);

}  // namespace neuralops::runtime
