// Linked into the test binaries that compute with LibTorch in their own process: MKL's vector
// math is warmed before the first test (ddpd/kernels/vector_math_warm_up.h), so that a test
// comparing bits or float64 results is not the one process in fifty whose first parallel exp,
// log or sqrt ran a low-accuracy kernel. The rank processes they start warm it themselves (the
// Trainer does).
#include <gtest/gtest.h>

#include "ddpd/kernels/vector_math_warm_up.h"

namespace {

class WarmVectorMathFirst : public ::testing::Environment {
 public:
  void SetUp() override { ddpd::kernels::warm_up_vector_math(); }
};

// gtest owns the environment; registered before main() runs the tests.
[[maybe_unused]] ::testing::Environment* const kRegistered =
    ::testing::AddGlobalTestEnvironment(new WarmVectorMathFirst);

}  // namespace
