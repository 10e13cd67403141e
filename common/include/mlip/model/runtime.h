// Process-wide runtime settings for LibTorch on the CPU, chosen from measurements on this
// project's models. The trainer, the pair styles and the benchmarks call them first thing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlip/system/cpu_affinity.h"   // CpuAffinity, cpu_affinity()

namespace mlip {

/// Asks for ATen's AVX512 kernels when the CPU has AVX512 F/VL/BW/DQ and ATEN_CPU_CAPABILITY is
/// unset. LibTorch 1.13 makes them opt-in (they lower the clock of some Intel parts); on the
/// machines here they run tanh and sigmoid 2x and se_e2_a 1.2x faster. ATen reads the choice on
/// its first operation and never again, so call this before any tensor operation.
/// ATEN_CPU_CAPABILITY=avx2 goes back to LibTorch's default.
void prefer_avx512_kernels();

/// The CPU kernel set ATen uses: "AVX512", "AVX2", "DEFAULT", ... (from at::show_config()).
std::string cpu_capability();

/// Makes glibc keep freed memory in the heap: mmap threshold 1 GiB, no trimming, 256 MiB top
/// pad. LibTorch allocates its autograd buffers (MBs each) afresh at every model call; with
/// glibc's adaptive mmap threshold they are mapped and unmapped every time and every call pays
/// the page faults, and with any finite trim threshold a call whose buffers exceed it (PaiNN:
/// GBs) hands them back to the kernel at the end and faults them in again at the next call.
/// The heap then stays at the peak of one call, which chunked evaluation bounds. Measured here:
/// pair_style mlip with the se_e2_a water model (1152 atoms, chunk 64) 370-400 -> 307
/// us/atom-step, without a higher peak; PaiNN in chunks of 128 (bench_potentials, 1536 atoms)
/// with a 1 GiB trim threshold 9652 us/atom-step and 3.4 M page faults, untrimmed 2685 and
/// 0.5 M; a Python loop driving a training step 1.7x, mlip-trainer 4%.
/// Leaves malloc alone and returns false where the user set MALLOC_MMAP_THRESHOLD_ or
/// MALLOC_TRIM_THRESHOLD_, or the C library is not glibc.
bool keep_freed_memory();

/// Gives the calling thread a team of one for LibTorch's CPU operators, leaving every other
/// thread's count as it was. For background threads beside a step that has the cores (the
/// trainer's batch prefetching on the CPU): ATen gives each new thread the process's count, so
/// their operators start a second OpenMP team of that size, and on cores the step's team fills,
/// each time the OS runs one of them, a thread of the step's team waits at its barrier: training
/// on 2 threads of 2 cores ran at less than half the speed (docs/benchmarks.md, "Speed and memory
/// across the stacks"). Returns false, doing nothing, where mlip was built without OpenMP.
bool use_one_thread_here();


/// LibTorch threads for a rank that may run on `mine`, where `ranks_on[c]` of the node's ranks
/// may run on CPU c (this one included; CPUs beyond it: 1): its share of each of its CPUs, summed,
/// in physical cores, rounded down, at least 1. A rank bound to its own cores gets them all
/// (mpirun's binding of a rank to a core: 1 thread; `--map-by slot:PE=4`: 4), unbound ranks split
/// the node's. More threads than that put two of a step's team on a core, and the team waits for
/// the slower: in this project's measurements, slower than 1 thread.
int fair_threads(const CpuAffinity& mine, const std::vector<int>& ranks_on);

/// "" when `threads` LibTorch threads fit the cores this process may run on (or those are
/// unknown), else a note saying they do not and how to give a rank more cores.
std::string threads_beyond_cores(int threads);

/// The most resident memory this process has had, in bytes (getrusage; -1 where the platform does
/// not report it).
int64_t peak_resident_bytes();

}  // namespace mlip
