#include "communicator.h"

#include <mpi.h>

#include "mlip/error.h"

namespace mlip::trainer {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(std::string("MPI ") + what + " failed: " + std::string(msg, len));
  }
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
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
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
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}

}  // namespace mlip::trainer
