// Whole-file reads and checked writes: every write error names the file and its cause (a full
// disk says "No space left on device"), never an exception out of a destructor or a silent
// short file.
#pragma once

#include <filesystem>
#include <string>

namespace mlip {

/// Writes `bytes` to `path` (created or truncated), then fsyncs it. Throws mlip::Error naming the
/// file and the cause on any failed or short write.
void write_file(const std::filesystem::path& path, const std::string& bytes);

/// The bytes of `path`; throws mlip::Error naming the file and the cause if it cannot be read.
std::string read_file(const std::filesystem::path& path);

}  // namespace mlip
