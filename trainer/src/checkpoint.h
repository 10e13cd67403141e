// The checkpoint protocol's file operations: every write checked and fsynced, a folder sealed
// with the CRC-32 and size of each file (digests.json) and verified before it is trusted, folders
// replaced atomically, and named fault points for the tests that kill the trainer at each step.
//
// A checkpoint folder is written as NAME.tmp/, sealed, fsynced and renamed to NAME/: a kill at
// any instant leaves the complete NAME/ or none. best/ is replaced by exchanging it with a
// complete copy (renameat2 RENAME_EXCHANGE), so it is always the old best or the new one.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "mlip/data/file_io.h"

namespace mlip::trainer::checkpoint {

namespace fs = std::filesystem;

/// Writes `bytes` to `path` (created or truncated), then fsyncs it. Throws mlip::Error naming
/// the file and the cause (e.g. "No space left on device") on any failed or short write.
using mlip::write_file;

/// Flushes a file's or folder's entries to disk (best effort: folders on some file systems
/// refuse it).
void sync(const fs::path& path);

/// Writes digests.json into `dir`: size and CRC-32 of every other file in it.
void seal(const fs::path& dir);

/// "" when every file that digests.json lists is there with its size and CRC-32; else why not.
std::string verify(const fs::path& dir);

/// Puts the complete folder `src` in place of `dst` atomically (an exchange, then the old one is
/// removed; a plain rename when `dst` does not exist).
void replace_folder(const fs::path& src, const fs::path& dst);

/// After a kill inside replace_folder's fallback (no exchange on this file system): puts
/// DST.old back where DST is missing, and removes a leftover DST.old.
void restore_set_aside(const fs::path& dst);

/// Epoch checkpoint folders (epoch-NNNNNN) in `root`, newest first; *.tmp excluded.
std::vector<fs::path> epoch_folders(const fs::path& root);

/// Fault injection for the tests: with MLIP_FAULT_POINT=NAME or NAME@EPOCH in the environment,
/// the process ends at once (exit status 86, no clean-up: as a kill) when it reaches point NAME
/// (while saving epoch EPOCH, if given).
void fault_point(const std::string& name, long epoch);

}  // namespace mlip::trainer::checkpoint
