// Process-wide runtime settings for LibTorch on the CPU, chosen from measurements on this
// project's models. The trainer, the pair styles and the benchmarks call them first thing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
/// trainer's batch prefetching): ATen gives each new thread the process's count, so their
/// operators start a second OpenMP team of that size, and on cores the step's team fills, each
/// time the OS runs one of them, a thread of the step's team waits at its barrier: training on 2
/// threads of 2 cores ran at less than half the speed (docs/benchmarks.md, "Speed and memory
/// across the stacks"). Where mlip was built without OpenMP, it does nothing.
void use_one_thread_here();

/// The CPUs this process may run on (its CPU affinity: what mpirun's binding, srun's
/// --cpu-bind, taskset or a container's cpuset left it), in order; empty where that is unknown.
std::vector<int> affinity_cpus();

/// LibTorch threads for a rank that may run on `mine` (affinity_cpus()), where `ranks_on[c]` of
/// the node's ranks may run on CPU c (this one included): its share of each of its CPUs, summed,
/// rounded down, at least 1. A rank bound to its own cores gets them all (Open MPI binds a rank to
/// one core by default: 1 thread; `--map-by slot:PE=4`: 4), unbound ranks split the node's. More
/// threads than that put two of a step's team on a core, and the team waits for the slower: in
/// this project's measurements, slower than 1 thread.
int fair_threads(const std::vector<int>& mine, const std::vector<int>& ranks_on);

/// "" when `threads` LibTorch threads fit the CPUs this process may run on, else a note saying
/// they do not and how to give a rank more cores.
std::string threads_beyond_cores(int threads);

/// The most resident memory this process has had, in bytes (getrusage; -1 where the platform does
/// not report it).
int64_t peak_resident_bytes();

}  // namespace mlip
