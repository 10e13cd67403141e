// Shared by the fuzz targets: the input as a file (the readers take paths), and the rule they
// check: bad input may only end in mlip::Error (a message naming the problem). Any other
// exception, a crash, a hang or a sanitizer report is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "mlip/error.h"

namespace mlip::fuzz {

/// A file in /dev/shm (or /tmp) holding `data`, named with `suffix` (readers look at extensions).
inline std::string as_file(const uint8_t* data, std::size_t size, const std::string& suffix) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  const std::string path = dir + "/mlip-fuzz-" + std::to_string(getpid()) + suffix;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  return path;
}

/// Runs `read`; mlip::Error is the expected outcome of bad input and is swallowed.
template <typename F> int expect_clear_errors(F&& read) {
  try {
    read();
  } catch (const mlip::Error&) {
  }
  return 0;
}

}  // namespace mlip::fuzz
