#include "runtime/kernel.h"

#include <string>

#include <c10/util/Exception.h>

#include "runtime/cuda_driver.h"

namespace neuralops::runtime {
namespace {

struct DeviceInfo {
  int capability = 0;
  int max_shared_optin = 0;
  int multiprocessors = 0;
  CUcontext primary = nullptr;
};

// Triton never needs more than a handful of scratch pointers; they are all null for AOT kernels
// (the build refuses kernels that need scratch memory).
constexpr int kMaxArgs = 64;

void check_device_index(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "neuralops: CUDA device index ", device,
              " is out of range (this build supports up to ", kMaxDevices, " devices)");
}

const DeviceInfo& device_info(int device) {
  check_device_index(device);
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<DeviceInfo, kMaxDevices> info;
  std::call_once(once[device], [device] {
    const CudaDriver& d = driver();
    CUdevice dev;
    check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    int major = 0, minor = 0, shared = 0, sms = 0;
    check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
          "reading the compute capability");
    check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
          "reading the compute capability");
    check(d.cuDeviceGetAttribute(&shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                 dev),
          "reading the shared memory limit");
    check(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
          "reading the multiprocessor count");
    CUcontext ctx;
    // PyTorch allocates in the primary context; kernels must be loaded and launched in it too.
    check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "retaining the primary context");
    info[device] = DeviceInfo{major * 10 + minor, shared, sms, ctx};
  });
  return info[device];
}

// Makes `device`'s primary context current on this thread. PyTorch's device guard normally has
// done so already; a thread that never touched the CUDA runtime, or a driver-API user that left
// another context current, still gets the right one.
void make_current(const CudaDriver& d, const DeviceInfo& info) {
  CUcontext current = nullptr;
  check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != info.primary) {
    check(d.cuCtxSetCurrent(info.primary), "cuCtxSetCurrent");
  }
}

std::string arch_list(const KernelVariant& v) {
  std::string s;
  for (int i = 0; i < v.num_images; ++i) {
    s += (i ? ", sm_" : "sm_") + std::to_string(v.images[i].arch);
  }
  return s.empty() ? "no architecture" : s;
}

// The index in v.images of the cubin that runs on a device of capability `cc`, or -1.
int find_image(const KernelVariant& v, int cc) {
  int archs[16];
  int n = 0;
  for (int i = 0; i < v.num_images && n < 16; ++i) {
    archs[n++] = v.images[i].arch;
  }
  const int arch = select_arch(archs, n, cc);
  for (int i = 0; i < n; ++i) {
    if (archs[i] == arch) {
      return i;
    }
  }
  return -1;
}

LoadedFunction load(const KernelVariant& v, int device) {
  const CudaDriver& d = driver();
  const DeviceInfo& info = device_info(device);
  const CubinImage* image = &v.images[image_index(v, device)];
  const int arch = image->arch;
  TORCH_CHECK(static_cast<int>(image->shared_bytes) <= info.max_shared_optin, "neuralops: kernel ",
              v.name, " needs ", image->shared_bytes, " bytes of shared memory but cuda:", device,
              " allows ", info.max_shared_optin, " per block");
  make_current(d, info);
  CUmodule module;
  std::string what = std::string("loading kernel ") + v.name + " (sm_" + std::to_string(arch) +
      ") on cuda:" + std::to_string(device);
  check(d.cuModuleLoadData(&module, image->data), what.c_str());
  LoadedFunction f;
  f.image = image;
  check(d.cuModuleGetFunction(&f.function, module, image->function), what.c_str());
  if (image->shared_bytes > 48 * 1024) {
    // Above 48 KB a kernel must opt in to the larger dynamic shared memory carve-out.
    check(d.cuFuncSetAttribute(f.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(image->shared_bytes)),
          what.c_str());
  }
  return f;
}

CUresult launch_function(const CudaDriver& d, const LoadedFunction& f, const LaunchConfig& c, void** params) {
  const unsigned block = 32 * f.image->num_warps;
  if (c.programmatic_dependency && d.cuLaunchKernelEx != nullptr && device_info(c.device).capability >= 90) {
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = c.grid[0];
    config.gridDimY = c.grid[1];
    config.gridDimZ = c.grid[2];
    config.blockDimX = block;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = f.image->shared_bytes;
    config.hStream = c.stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return d.cuLaunchKernelEx(&config, f.function, params, nullptr);
  }
  return d.cuLaunchKernel(f.function, c.grid[0], c.grid[1], c.grid[2], block, 1, 1, f.image->shared_bytes,
                          c.stream, params, nullptr);
}

}  // namespace

int select_arch(const int* archs, int num_archs, int cc) {
  int best = -1;
  for (int i = 0; i < num_archs; ++i) {
    int a = archs[i];
    if (a == cc) {
      return a;
    }
    bool portable = a < 90 && a / 10 == cc / 10 && a <= cc;
    if (portable && a > best) {
      best = a;
    }
  }
  return best;
}

bool runs_on(const KernelVariant& v, int device) {
  return find_image(v, device_info(device).capability) >= 0;
}

int image_index(const KernelVariant& v, int device) {
  const DeviceInfo& info = device_info(device);
  const int index = find_image(v, info.capability);
  TORCH_CHECK(index >= 0, "neuralops: kernel ", v.name, " has no cubin for cuda:", device,
              " (compute capability ", info.capability / 10, ".", info.capability % 10,
              "); this build has ", arch_list(v),
              ". Rebuild neuralops for this GPU with NEURALOPS_CUDA_ARCHS=\"", info.capability,
              "\" (see the README), or set NEURALOPS_DISABLE_KERNELS=1 to use the PyTorch "
              "fallbacks");
  return index;
}

int device_capability(int device) {
  return device_info(device).capability;
}

int multiprocessor_count(int device) {
  return device_info(device).multiprocessors;
}

bool stream_capturing(int device, CUstream stream) {
  const CudaDriver& d = driver();
  make_current(d, device_info(device));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(d.cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void launch(const KernelVariant& v, const LaunchConfig& c, void** args, int num_args) {
  if (c.grid[0] == 0 || c.grid[1] == 0 || c.grid[2] == 0) {
    return;
  }
  check_device_index(c.device);
  FunctionCache& cache = *v.cache;
  // call_once leaves the flag unset when load() throws, so a failed load is retried next time.
  std::call_once(cache.once[c.device], [&] { cache.loaded[c.device] = load(v, c.device); });
  const LoadedFunction& f = cache.loaded[c.device];
  const CudaDriver& d = driver();
  make_current(d, device_info(c.device));

  void* params[kMaxArgs];
  int total = num_args + static_cast<int>(f.image->scratch_args);
  TORCH_CHECK(total <= kMaxArgs, "neuralops: kernel ", v.name, " has too many arguments");
  CUdeviceptr null_scratch = 0;
  for (int i = 0; i < total; ++i) {
    params[i] = i < num_args ? args[i] : &null_scratch;
  }
  CUresult r = launch_function(d, f, c, params);
  if (r != CUDA_SUCCESS) {
    const std::string what = std::string("launching kernel ") + v.name + " on cuda:" + std::to_string(c.device) +
        " with grid (" + std::to_string(c.grid[0]) + ", " + std::to_string(c.grid[1]) + ", " +
        std::to_string(c.grid[2]) + ")";
    check(r, what.c_str());
  }
}

}  // namespace neuralops::runtime
