// neuralops C++ API: every op's forward and backward, and differentiable versions for libtorch
// autograd. Link neuralops::neuralops (find_package(neuralops)); see the README's C++ section.
#pragma once

#include <string>

#include "neuralops/export.h"
#include "neuralops/gqa.h"
#include "neuralops/linear_attn.h"
#include "neuralops/low_rank.h"

namespace neuralops {

// The library's build description as JSON (version, torch, archs, kernels per op).
NEURALOPS_API std::string build_info();

}  // namespace neuralops
