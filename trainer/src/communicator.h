// How ranks of a data-parallel run talk: a small interface so that MPI (CPU) and NCCL (GPU)
// implementations are interchangeable. The trainer calls it once per step for gradients (one
// flat all-reduce) and for exact validation sums.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace mlip::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In-place sum over ranks.
  virtual void allreduce_sum(double* data, std::size_t n) = 0;
  virtual void allreduce_sum(float* data, std::size_t n) = 0;
  /// Rank 0's bytes to every rank (resized on the receivers).
  virtual void broadcast(std::string& bytes) = 0;
  virtual void barrier() = 0;
  bool is_root() const { return rank() == 0; }
};

/// A single process.
class SerialCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(double*, std::size_t) override {}
  void allreduce_sum(float*, std::size_t) override {}
  void broadcast(std::string&) override {}
  void barrier() override {}
};

/// MPI_COMM_WORLD; initialises MPI if needed and finalises it if it did.
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);

}  // namespace mlip::trainer
