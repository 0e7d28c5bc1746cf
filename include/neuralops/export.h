// Symbol visibility for the public C++ API (the library hides everything else).
#pragma once

#define NEURALOPS_API __attribute__((visibility("default")))
