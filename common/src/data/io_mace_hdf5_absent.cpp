// MACE's HDF5 data files in a build without the HDF5 library (-DMLIP_WITH_HDF5=OFF, or no
// libhdf5-dev): reading one says so.
#include "io_detail.h"
#include "mlip/error.h"

namespace mlip {
namespace {

[[noreturn]] void absent(const std::string& path) {
  throw Error(path + ": MACE HDF5 data, but this mlip was built without HDF5 (install libhdf5-dev and rebuild; "
                     "scripts/install-deps.sh does)");
}

}  // namespace

std::unique_ptr<FrameReader> io_detail::open_mace_hdf5(const std::string& path, const ReadOptions&) { absent(path); }

std::vector<Structure> read_mace_hdf5(const std::string& path, const ReadOptions&) { absent(path); }

}  // namespace mlip
