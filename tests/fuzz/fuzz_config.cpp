// libFuzzer target for mlip-trainer's YAML config reader (trainer/src/config.cpp).
#include "config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = mlip::fuzz::as_file(data, size, ".yaml");
  return mlip::fuzz::expect_clear_errors([&] { mlip::trainer::read_config(path); });
}
