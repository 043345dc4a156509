// LibTorch's CPU unary ops on contiguous float and double tensors (exp, log, sqrt, tanh, erf, ...)
// call MKL's vector math (VML), which picks each function's kernel on that function's first call.
// When that first call runs on several intra-op threads at once, one thread's chunk can run a
// low-accuracy kernel although high accuracy was asked for (pytorch/pytorch#188792, oneMKL
// 2024.2 as in the 2.11 wheel). Measured here: 1 process in 50 got exp_ of float64 wrong by
// 3e-9 relative (about 10^7 ulp) on its first call, and every later call right; in float32 the
// error reaches thousands of ulp. Ranks are separate processes, so one rank's first step could
// differ from the others' and from one process.
#pragma once

namespace ddpd::kernels {

// Calls each VML-routed unary op once on a one-element float and double tensor, on the calling
// thread only (one element never splits across threads), so every kernel choice is made before
// any op runs in parallel. Idempotent and thread-safe; later calls cost one atomic load. Call it
// before the first parallel op of a process: the Trainer and flash_attention do.
void warm_up_vector_math();

}  // namespace ddpd::kernels
