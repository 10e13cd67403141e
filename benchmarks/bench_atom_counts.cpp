// What a source's atom counts cost (batch.atoms needs every frame's before the first step):
// FrameReader::atom_counts() against reading every frame, for any source open_frame_reader
// opens (a folder of .aselmdb files, with or without fairchem's metadata.npz, a pack, ...).
// Repeats alternate the two; the figures are medians, with the range.
//
//   build/bin/bench_atom_counts SOURCE [--repeats R]      (default 3)
//
// A data set for it: benchmarks/make_aselmdb_set.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mlip/data/io.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void report(const char* what, std::vector<double> s, std::size_t frames) {
  std::sort(s.begin(), s.end());
  std::printf("%-28s %8.3f s (%.3f-%.3f)  %8.2f us a frame\n", what, s[s.size() / 2], s.front(), s.back(),
              1e6 * s[s.size() / 2] / static_cast<double>(frames));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_atom_counts SOURCE [--repeats R]\n");
    return 2;
  }
  int repeats = 3;
  for (int k = 2; k + 1 < argc; k += 2)
    if (std::string(argv[k]) == "--repeats") repeats = std::max(1, std::atoi(argv[k + 1]));
  try {
    const auto reader = mlip::open_frame_reader(argv[1]);
    std::vector<double> counts, frames;
    std::size_t sum_counts = 0, sum_frames = 0;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = Clock::now();
      const std::vector<uint32_t> c = reader->atom_counts();
      counts.push_back(since(t0));
      sum_counts = 0;
      for (const uint32_t n : c) sum_counts += n;
      t0 = Clock::now();
      sum_frames = 0;
      for (std::size_t i = 0; i < reader->size(); ++i) sum_frames += reader->frame(i).size();
      frames.push_back(since(t0));
    }
    std::printf("%s: %zu frames, %zu atoms\n", argv[1], reader->size(), sum_counts);
    report("atom_counts()", counts, reader->size());
    report("every frame read", frames, reader->size());
    if (sum_counts != sum_frames) {
      std::fprintf(stderr, "the counts sum to %zu atoms, the frames hold %zu\n", sum_counts, sum_frames);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_atom_counts: %s\n", e.what());
    return 1;
  }
}
