// How ranks of a data-parallel run talk: a small interface so that MPI (CPU) and NCCL (GPU)
// implementations are interchangeable. The trainer all-reduces gradients through it (in buckets,
// gradient_reducer.h) and sums metrics for exact validation RMSEs. MPI carries everything on
// the host; NCCL, where built (MLIP_NCCL), carries the gradients of a GPU run on the device.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace mlip::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The rank among this job's ranks on the same node (picks the GPU, mlip/model/device.h).
  virtual int local_rank() const { return rank(); }
  /// How many of this job's ranks run on this node.
  virtual int local_size() const { return 1; }
  /// How many of this node's ranks may run on each CPU (index: the CPU's number), from their CPU
  /// affinities (mlip::fair_threads); empty where unknown, as for a single process (each CPU 1).
  virtual std::vector<int> ranks_on_cpus() const { return {}; }
  /// "serial", "mpi" or "nccl", for logs.
  virtual std::string name() const = 0;
  /// In-place sum over ranks of a contiguous float32/float64 tensor. The MPI backend reduces
  /// host memory (a GPU tensor goes through a host copy); NCCL reduces GPU tensors on the
  /// current CUDA stream.
  virtual void allreduce_sum(torch::Tensor& t) = 0;
  /// In-place sum over ranks.
  virtual void allreduce_sum(double* data, std::size_t n) = 0;
  virtual void allreduce_sum(float* data, std::size_t n) = 0;
  /// Rank 0's bytes to every rank (resized on the receivers).
  virtual void broadcast(std::string& bytes) = 0;
  virtual void barrier() = 0;
  /// Ends every rank of the job (after this rank printed why): one failing rank must not leave
  /// the others waiting in a collective.
  virtual void abort(int code) { std::exit(code); }
  /// The work enqueued so far on the current device stream holds this communicator's
  /// collectives (a step's all-reduces, or a replayed recording of them): a backend that times
  /// out collectives (NCCL: communication.timeout) watches it. `what` names it in the error.
  virtual void watch_enqueued(const char* /*what*/) {}
  /// Why a CUDA graph cannot record this communicator's tensor all-reduces, "" when it can: a
  /// host backend's go through the host; NCCL's need NCCL 2.9.6 or later.
  virtual std::string unrecordable() const { return "these ranks sum over " + name() + ", through the host"; }
  bool is_root() const { return rank() == 0; }
};

/// Every rank's `mine` (as long on every rank), rank after rank, on every rank: one all-reduce of
/// a sum in which each rank fills its own row.
std::vector<double> gather_rows(Communicator& comm, const std::vector<double>& mine);

/// LibTorch threads per rank where --threads is not given: mlip::fair_threads of this rank's CPU
/// affinity among the node's ranks; where the affinity is unknown, the node's cores over its ranks.
int default_threads(const Communicator& comm);

/// A single process.
class SerialCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "serial"; }
  void allreduce_sum(torch::Tensor&) override {}
  void allreduce_sum(double*, std::size_t) override {}
  void allreduce_sum(float*, std::size_t) override {}
  void broadcast(std::string&) override {}
  void barrier() override {}
};

/// MPI_COMM_WORLD; initialises MPI if needed and finalises it if it did.
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);

/// "" when NCCL of version code `code` (ncclGetVersion) records its all-reduces in CUDA graphs
/// (2.9.6 and later), else what it is ("the NCCL loaded is 2.8.4").
std::string nccl_unrecordable(int code);

/// Whether this build has the NCCL backend (CMake found NCCL and LibTorch's CUDA libraries).
bool nccl_available();

/// Which physical GPU `device` is: the node's name and the GPU's PCI bus id (the same under any
/// CUDA_VISIBLE_DEVICES), or just the node's name and the device in a build without NCCL.
std::string gpu_identity(const torch::Device& device);

/// How the ranks of a run use GPUs: how many train on one, and whether no two of them share one
/// (what NCCL needs).
struct GpuSharing {
  int on_gpu = 0;
  bool distinct = true;
  int with_mine = 1;   // ranks on this rank's GPU, itself included (1 on the CPU)
  bool every_rank_its_own(int ranks) const { return on_gpu == ranks && distinct; }
};
/// GpuSharing of the ranks of `comm`, a collective of all of them; `identity` is gpu_identity()
/// of the rank's device, empty on the CPU.
GpuSharing gpu_sharing(Communicator& comm, const std::string& identity);

/// NCCL among the ranks of `host` (which carries the unique id and keeps doing everything but
/// tensor all-reduces), each on its GPU `device`. Throws mlip::Error naming the rank and the
/// NCCL call that failed, or saying that this build has no NCCL. A watchdog ends the rank's
/// process with an error when NCCL reports an asynchronous error or an all-reduce stays unfinished for
/// `timeout_s` seconds (0: no limit).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const torch::Device& device, double timeout_s);

}  // namespace mlip::trainer
