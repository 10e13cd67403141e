// libFuzzer targets for the data readers, one binary per format (MLIP_FUZZ_READER picks it at
// compile time): extxyz, npy, n2p2, fitsnap. scripts/fuzz.sh builds and runs them.
#include "fuzz_input.h"
#include "mlip/data/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mlip;
#if MLIP_FUZZ_READER == 1
  const std::string path = fuzz::as_file(data, size, ".xyz");
  return fuzz::expect_clear_errors([&] { read_extxyz(path); });
#elif MLIP_FUZZ_READER == 2
  const std::string path = fuzz::as_file(data, size, ".npy");
  return fuzz::expect_clear_errors([&] { read_npy(path); });
#elif MLIP_FUZZ_READER == 3
  const std::string path = fuzz::as_file(data, size, ".data");
  return fuzz::expect_clear_errors([&] { read_n2p2(path); });
#elif MLIP_FUZZ_READER == 4
  const std::string path = fuzz::as_file(data, size, ".json");
  return fuzz::expect_clear_errors([&] { read_fitsnap_json(path); });
#else
#error "MLIP_FUZZ_READER must be 1 (extxyz), 2 (npy), 3 (n2p2) or 4 (fitsnap)"
#endif
}
