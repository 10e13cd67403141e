#include "communicator.h"

#include <mpi.h>

#include <algorithm>
#include <string>
#include <thread>
#include <tuple>

#include "mlip/error.h"
#include "mlip/model/runtime.h"

namespace mlip::trainer {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    throw Error("rank " + std::to_string(rank) + ": MPI_" + what + " failed: " + std::string(msg, len));
  }
}

MPI_Datatype mpi_type(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kFloat64) return MPI_DOUBLE;
  if (t.scalar_type() == torch::kFloat32) return MPI_FLOAT;
  throw Error("all-reduce of a " + std::string(c10::toString(t.scalar_type())) + " tensor (float32/float64 only)");
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      check(MPI_Init(argc, argv), "MPI_Init");
      owns_ = true;
    }
    // Errors come back as return codes, checked and reported with the rank (check() above).
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "Comm_size");
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "Comm_split_type");
    const struct Freed {   // also where a check below throws
      MPI_Comm* comm;
      ~Freed() { MPI_Comm_free(comm); }
    } freed{&node};
    check(MPI_Comm_rank(node, &local_rank_), "Comm_rank");
    check(MPI_Comm_size(node, &local_size_), "Comm_size");
    count_ranks_on_cpus(node);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::vector<int> ranks_on_cpus() const override { return ranks_on_cpus_; }
  std::string name() const override { return "mpi"; }
  void allreduce_sum(torch::Tensor& t) override {
    if (size_ == 1) return;
    if (!t.is_contiguous()) throw Error("MPI all-reduce of a non-contiguous tensor");
    // MPI is not assumed CUDA-aware: device memory goes through the host.
    torch::Tensor host = t.is_cpu() ? t : t.cpu();
    check(MPI_Allreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()), mpi_type(host), MPI_SUM,
                        MPI_COMM_WORLD), "Allreduce");
    if (!t.is_cpu()) t.copy_(host);
  }
  void allreduce_sum(double* data, std::size_t n) override {
    if (size_ > 1) check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "Allreduce");
  }
  void allreduce_sum(float* data, std::size_t n) override {
    if (size_ > 1) check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "Allreduce");
  }
  void broadcast(std::string& bytes) override {
    if (size_ == 1) return;
    unsigned long long n = bytes.size();
    check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "Bcast");
    bytes.resize(n);
    check(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD), "Bcast");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "Barrier"); }
  void abort(int code) override {
    if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  // Each CPU's count of the node's ranks whose affinity has it: one sum over the node's ranks of
  // each one's 0/1 per CPU (every rank's vector as long: the largest CPU number any of them has).
  void count_ranks_on_cpus(MPI_Comm node) {
    const std::vector<int> mine = cpu_affinity().cpus;
    int cpus = mine.empty() ? 0 : mine.back() + 1;
    check(MPI_Allreduce(MPI_IN_PLACE, &cpus, 1, MPI_INT, MPI_MAX, node), "Allreduce");
    if (cpus == 0) return;
    ranks_on_cpus_.assign(static_cast<std::size_t>(cpus), 0);
    for (int c : mine) ranks_on_cpus_[static_cast<std::size_t>(c)] = 1;
    check(MPI_Allreduce(MPI_IN_PLACE, ranks_on_cpus_.data(), cpus, MPI_INT, MPI_SUM, node), "Allreduce");
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<int> ranks_on_cpus_;
  bool owns_ = false;
};

}  // namespace

int default_threads(const Communicator& comm) {
  const CpuAffinity mine = cpu_affinity();
  if (!mine.cpus.empty()) return fair_threads(mine, comm.ranks_on_cpus());
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, comm.local_size()));
}

std::string nccl_unrecordable(int code) {
  // NCCL_VERSION_CODE: major*1000 + minor*100 + patch before 2.9, major*10000 + minor*100 + patch since.
  const bool old_scheme = code < 10000;
  const int major = old_scheme ? code / 1000 : code / 10000, minor = (old_scheme ? code % 1000 : code % 10000) / 100,
            patch = code % 100;
  if (std::make_tuple(major, minor, patch) >= std::make_tuple(2, 9, 6)) return {};
  return "the NCCL loaded is " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::vector<double> gather_rows(Communicator& comm, const std::vector<double>& mine) {
  const std::size_t width = mine.size();
  std::vector<double> rows(static_cast<std::size_t>(comm.size()) * width, 0.0);
  std::copy(mine.begin(), mine.end(), rows.begin() + static_cast<std::ptrdiff_t>(comm.rank() * width));
  comm.allreduce_sum(rows.data(), rows.size());
  return rows;
}

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}

}  // namespace mlip::trainer
