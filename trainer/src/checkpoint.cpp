#include "checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mlip/error.h"
#include "mlip/data/file_io.h"

namespace mlip::trainer::checkpoint {
namespace {

std::string errno_text() { return std::strerror(errno); }

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t at = 0;
  while (at < bytes.size()) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<std::size_t>(bytes.size() - at, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), n);
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

constexpr const char* kDigests = "digests.json";

}  // namespace

void sync(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void seal(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != kDigests) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    const std::string bytes = read_file(p);
    files[p.filename().string()] = {{"bytes", bytes.size()}, {"crc32", crc32_of(bytes)}};
  }
  write_file(dir / kDigests, nlohmann::json{{"files", files}}.dump(2));
  sync(dir);
}

std::string verify(const fs::path& dir) {
  const fs::path list = dir / kDigests;
  if (!fs::is_regular_file(list)) return "no " + std::string(kDigests) + " (incomplete or from an older mlip)";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::ifstream(list));
  } catch (const nlohmann::json::exception& e) {
    return std::string(kDigests) + " is damaged: " + e.what();
  }
  if (!j.contains("files") || !j["files"].is_object() || j["files"].empty()) return std::string(kDigests) + " lists no files";
  for (const auto& [name, d] : j["files"].items()) {
    if (!fs::is_regular_file(dir / name)) return name + " is missing";
    std::string bytes;
    try {
      bytes = read_file(dir / name);
    } catch (const Error&) {
      return name + " cannot be read";
    }
    if (!d.is_object() || !d.contains("bytes") || !d.contains("crc32") || !d["bytes"].is_number_unsigned() ||
        !d["crc32"].is_number_unsigned()) {
      return std::string(kDigests) + " entry for " + name + " is damaged";
    }
    if (bytes.size() != d["bytes"].get<std::size_t>()) {
      return name + " has " + std::to_string(bytes.size()) + " bytes, " + std::to_string(d["bytes"].get<std::size_t>()) +
             " were written";
    }
    if (crc32_of(bytes) != d["crc32"].get<uint32_t>()) return name + " does not match its CRC-32 (altered bytes)";
  }
  return "";
}

void replace_folder(const fs::path& src, const fs::path& dst) {
  if (!fs::exists(dst)) {
    fs::rename(src, dst);
  } else if (::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(), RENAME_EXCHANGE) == 0) {
    fault_point("best-exchanged", -1);
    fs::remove_all(src);  // now the old one
  } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
    // File systems without the exchange (NFS, Lustre): move the old one aside first; a kill in
    // between leaves DST.old, which restore_set_aside() puts back.
    const fs::path old = dst.string() + ".old";
    fs::remove_all(old);
    fs::rename(dst, old);
    sync(dst.parent_path());
    fault_point("best-set-aside", -1);
    fs::rename(src, dst);
    fs::remove_all(old);
  } else {
    throw Error(dst.string() + ": cannot exchange with " + src.string() + ": " + errno_text());
  }
  sync(dst.parent_path());
}

void restore_set_aside(const fs::path& dst) {
  const fs::path old = dst.string() + ".old";
  if (!fs::exists(dst) && fs::exists(old)) fs::rename(old, dst);
  fs::remove_all(old);
}

std::vector<fs::path> epoch_folders(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("epoch-", 0) == 0 && n.find(".tmp") == std::string::npos) out.push_back(e.path());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

void fault_point(const std::string& name, long epoch) {
  static const char* spec = std::getenv("MLIP_FAULT_POINT");
  static long current_epoch = -1;
  if (epoch >= 0) current_epoch = epoch;
  if (spec == nullptr) return;
  const std::string s = spec;
  const auto at = s.find('@');
  if (s.substr(0, at) != name) return;
  if (at != std::string::npos && std::atol(s.c_str() + at + 1) != current_epoch) return;
  std::fprintf(stderr, "mlip-trainer: fault injected at '%s' (MLIP_FAULT_POINT)\n", name.c_str());
  std::fflush(stderr);
  std::_Exit(86);
}

}  // namespace mlip::trainer::checkpoint
