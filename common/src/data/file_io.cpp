#include "mlip/data/file_io.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mlip/error.h"

namespace mlip {

namespace {
// strerror(errno), and after EMFILE what the limit is (open_files_hint).
std::string errno_text() {
  const int error = errno;
  return std::strerror(error) + open_files_hint(error);
}
}  // namespace

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path.string() + ": cannot open for writing: " + errno_text());
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "short write";
      ::close(fd);
      throw Error(path.string() + ": write failed after " + std::to_string(done) + " of " +
                  std::to_string(bytes.size()) + " bytes: " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error(path.string() + ": fsync failed: " + why);
  }
  if (::close(fd) != 0) throw Error(path.string() + ": close failed: " + errno_text());
}

std::string read_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open for reading: " + errno_text());
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      throw Error(path.string() + ": read failed after " + std::to_string(bytes.size()) + " bytes: " + why);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

long allow_open_files() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  const rlim_t want = r.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : std::min<rlim_t>(r.rlim_max, rlim_t{1} << 20);
  if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= want) return static_cast<long>(r.rlim_cur);
  const rlim_t before = r.rlim_cur;
  r.rlim_cur = want;
  return static_cast<long>(::setrlimit(RLIMIT_NOFILE, &r) == 0 ? want : before);
}

std::string open_files_hint(int error) {
  if (error != EMFILE) return "";
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  return " (this process may have " + std::to_string(r.rlim_cur) + " open files: raise `ulimit -n`)";
}

}  // namespace mlip
