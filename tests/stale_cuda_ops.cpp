// A stand-in for libmlip_cuda_ops.so built from other sources: this mlip's interface version, but
// functors of another layout (DeviceKernels.ALibraryOfAnotherLayoutIsRefused). Nothing in it runs.
#include <cstdint>

#include "../common/src/ops/kernel_layout.h"

extern "C" {
__attribute__((visibility("default"))) int mlip_cuda_version() { return mlip::kernels::kDeviceKernelsVersion; }
__attribute__((visibility("default"))) uint64_t mlip_cuda_layout() { return mlip::kernels::kernel_layout() + 1; }
__attribute__((visibility("default"))) int mlip_cuda_launch(int, int, const void*, int64_t, int) { return -1; }
__attribute__((visibility("default"))) const char* mlip_cuda_error() { return "stale"; }
__attribute__((visibility("default"))) int mlip_cuda_runs_on(int) { return -1; }
}
