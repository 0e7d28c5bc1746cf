// Ahead-of-time compiled Triton kernels: the tables the generated dispatchers fill in, and the
// launcher they call.
//
// Each kernel specialization (a KernelVariant) carries one cubin per GPU architecture it was built
// for. At launch the cubin for the device's compute capability is picked, loaded into that
// device's primary context once (thread-safe, per device, in any order), and launched on the
// given stream. Every failure raises a c10::Error (RuntimeError in Python); nothing exits.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace neuralops::runtime {

// Enough for any single host; a device index beyond it is refused with a clear error.
constexpr int kMaxDevices = 64;

struct CubinImage {
  int arch;                    // 80, 90, 100, 120: the sm_ target the cubin was compiled for
  const unsigned char* data;   // the cubin (an ELF image), embedded in this library
  std::size_t size;
  const char* function;        // the kernel's symbol in the cubin
  unsigned shared_bytes;       // dynamic shared memory the kernel needs
  unsigned num_warps;          // block size is 32 * num_warps
  unsigned scratch_args;       // trailing scratch pointers Triton appends to the parameters
};

// A loaded kernel on one device.
struct LoadedFunction {
  CUfunction function = nullptr;
  const CubinImage* image = nullptr;
};

// Per-device handles of one variant: filled on first use on each device, never unloaded (the
// driver reclaims modules at process exit; unloading earlier would race with other threads).
struct FunctionCache {
  std::array<std::once_flag, kMaxDevices> once;
  std::array<LoadedFunction, kMaxDevices> loaded;
};

struct KernelVariant {
  const char* name;            // e.g. "gqa_expand_fp16_BLOCK_D128_a16", used in messages
  const CubinImage* images;
  int num_images;
  FunctionCache* cache;
};

struct LaunchConfig {
  std::uint32_t grid[3];
  int device;                  // CUDA device index
  CUstream stream;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL): the kernel may
  // start before that one has finished, and must wait for it (griddepcontrol.wait) before reading
  // what it writes. Done on compute capability 9.0 and newer when the driver has cuLaunchKernelEx;
  // otherwise the launch is a plain, stream-ordered one, where that wait returns at once.
  bool programmatic_dependency = false;
};

// The architecture whose cubin runs on a device of compute capability `cc` (major * 10 + minor),
// or -1 when none of `archs` does. sm_90 and newer Triton cubins are arch-specific (sm_90a,
// sm_100a, ...) and run only on that exact capability; sm_8x cubins run on any later 8.x GPU.
int select_arch(const int* archs, int num_archs, int cc);

// Whether `variant` has a cubin that runs on CUDA device `device`. Loads the driver; throws on failure.
bool runs_on(const KernelVariant& variant, int device);

// The index in `variant.images` of the cubin that runs on CUDA device `device`: the one launched
// there, and whose constexprs the generated <name>_constexprs(key, device) returns. Throws when none does.
int image_index(const KernelVariant& variant, int device);

// Compute capability (major * 10 + minor) of a CUDA device. Loads the driver; throws on failure.
int device_capability(int device);

// Multiprocessors of a CUDA device (read once per device), for sizing grids.
int multiprocessor_count(int device);

// Whether work queued on `stream` (of CUDA device `device`) is being captured into a CUDA graph.
// Loads the driver; throws on failure.
bool stream_capturing(int device, CUstream stream);

// Whether a pointer satisfies Triton's 16-byte divisibility hint.
inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Launch `variant` with the kernel arguments `args` (pointers to each argument, in the kernel's
// order; Triton's trailing scratch pointers, all null, are appended here). A grid with a zero dimension is a
// no-op. Throws when the driver, a cubin for this device or the launch itself fails.
void launch(const KernelVariant& variant, const LaunchConfig& config, void** args, int num_args);

}  // namespace neuralops::runtime
