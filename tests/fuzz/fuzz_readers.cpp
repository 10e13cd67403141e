// libFuzzer targets for the data readers, one binary per format (MLIP_FUZZ_READER picks it at
// compile time): extxyz, npy, n2p2, fitsnap, pack. scripts/fuzz.sh builds and runs them.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_input.h"
#include "mlip/data/io.h"
#include "mlip/data/pack.h"

namespace {

// A pack of one shard from the input: byte 0 gives the frames n (1-4), with bit 6 format
// version 2 (else 1) and with its top bit that the next 16 bytes are the manifest's frame count
// and shard size (any values); the next 8 (n - 1) bytes are the inner record offsets of the index
// (the first is 0 and the last the shard's size, as the reader checks before reading), then, in
// version 2, 4 n bytes of the index's atom counts; the rest is the shard. The manifest lists it
// with zero statistics; every frame is read.
void read_fuzzed_pack(const uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  if (size < 1) return;
  const uint64_t n = data[0] % 4 + 1;
  const bool odd = (data[0] & 0x80) != 0;
  const int version = (data[0] & 0x40) != 0 ? 2 : 1;
  const std::size_t counts = version == 2 ? 4 * n : 0;
  const std::size_t head = 1 + (odd ? 16 : 0) + 8 * (n - 1) + counts;
  if (size < head) return;
  uint64_t frames = n, bytes = size - head;
  if (odd) {
    std::memcpy(&frames, data + 1, 8);
    std::memcpy(&bytes, data + 9, 8);
  }
  const fs::path dir = fs::path(mlip::fuzz::as_file(data, 0, "-pack.d"));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<uint64_t> offsets(n + 1, 0);
  std::memcpy(offsets.data() + 1, data + head - counts - 8 * (n - 1), 8 * (n - 1));
  offsets[n] = size - head;
  std::string index(reinterpret_cast<const char*>(offsets.data()), 8 * (n + 1));
  index.append(reinterpret_cast<const char*>(data + head - counts), counts);
  std::ofstream(dir / "shard-00000.bin", std::ios::binary).write(reinterpret_cast<const char*>(data + head),
                                                                  static_cast<std::streamsize>(size - head));
  std::ofstream(dir / "shard-00000.idx", std::ios::binary) << index;
  std::ofstream(dir / "manifest.json")
      << R"({"format": "mlip-pack", "version": )" << version << R"(, "frames": )" << frames << R"(, "sources": ["fuzz"], "shards": [)"
      << R"({"data": "shard-00000.bin", "index": "shard-00000.idx", "first_frame": 0, "frames": )" << frames
      << R"(, "bytes": )" << bytes << R"(, "data_xxh3": "0", "index_xxh3": "0"}], "stats": {"atoms": 0, )"
      << R"("atoms_by_element": {}, "energy_frames": 0, "force_frames": 0, "virial_frames": 0, "e0_least_squares": )"
      << R"({"elements": [], "counts_counts": [], "counts_energy": [], "energy_squares": 0}, "force_squares": 0, )"
      << R"("force_components": 0}})";
  const mlip::PackReader reader(dir.string());
  reader.atom_counts();
  for (uint64_t i = 0; i < n; ++i) {
    reader.atoms(i);
    reader.frame(i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mlip;
#if MLIP_FUZZ_READER == 1
  const std::string path = fuzz::as_file(data, size, ".xyz");
  const int whole = fuzz::expect_clear_errors([&] { read_extxyz(path); });
  // The offset index and frame-by-frame parsing (streamed training) of the same bytes.
  const int indexed = fuzz::expect_clear_errors([&] {
    const ExtxyzFile file(path, {});
    for (std::size_t k = 0; k < file.size(); ++k) file.frame(k);
  });
  return whole | indexed;
#elif MLIP_FUZZ_READER == 2
  const std::string path = fuzz::as_file(data, size, ".npy");
  return fuzz::expect_clear_errors([&] { read_npy(path); });
#elif MLIP_FUZZ_READER == 3
  const std::string path = fuzz::as_file(data, size, ".data");
  return fuzz::expect_clear_errors([&] { read_n2p2(path); });
#elif MLIP_FUZZ_READER == 4
  const std::string path = fuzz::as_file(data, size, ".json");
  return fuzz::expect_clear_errors([&] { read_fitsnap_json(path); });
#elif MLIP_FUZZ_READER == 5
  return fuzz::expect_clear_errors([&] { read_fuzzed_pack(data, size); });
#else
#error "MLIP_FUZZ_READER must be 1 (extxyz), 2 (npy), 3 (n2p2), 4 (fitsnap) or 5 (pack)"
#endif
}
