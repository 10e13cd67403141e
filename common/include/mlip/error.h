// Errors raised by mlip's core. Every message names where the problem is (file, line or frame, key).
#pragma once

#include <stdexcept>
#include <string>

namespace mlip {

/// The one exception type of mlip's core. Consumers (LAMMPS, the trainer) catch it and add context.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mlip
