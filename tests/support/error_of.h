// The message of the mlip::Error a piece of code throws, for tests of bad input.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "mlip/error.h"

namespace mlip::testing {

/// The message of the mlip::Error that `f` throws ("" and a test failure if it throws none, or
/// another exception).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-mlip exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an mlip::Error";
  return "";
}

/// Whether `text` contains `part`.
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace mlip::testing
