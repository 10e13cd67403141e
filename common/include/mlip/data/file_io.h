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

/// Raises this process's soft limit on open files to its hard limit (at most 2^20), for data
/// read from many files at once (each pack keeps up to 16 shards open, two files each; each ASE
/// database one or two); returns the limit now in force. The default soft limit is often 1024.
long allow_open_files();

/// " (this process may have N open files: raise `ulimit -n`)" after errno EMFILE, else "".
std::string open_files_hint(int error);

}  // namespace mlip
