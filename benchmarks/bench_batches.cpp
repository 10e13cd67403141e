// What a training batch costs to build before the step, per frame: from frames held in memory
// (neighbour lists built once, at start) and from a pack (each frame read, and its neighbour
// list built, when a batch needs it: what the prefetching thread does while a step runs). Split
// by stage: reading a record, the neighbour list, make_frame (validation, list and copies),
// then make_batch and the batch's tensors. One thread; repeats alternate the two sources.
//
//   build/bin/bench_batches PACK [--cutoff RC] [--frames N] [--batch B] [--repeats R]
//
// Defaults: cutoff 5 Å (examples/configs/water-se_e2_a.yaml), the pack's first 2000 frames,
// batches of 2 frames, 3 repeats; float32 tensors.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "frame_source.h"
#include "mlip/data/dataset.h"
#include "mlip/data/pack.h"
#include "mlip/graph/neighbor_list.h"
#include "training.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Args {
  std::string pack;
  double cutoff = 5.0;
  std::size_t frames = 2000, batch = 2;
  int repeats = 3;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int k = 1; k < argc; ++k) {
    const std::string arg = argv[k];
    const bool value = k + 1 < argc;
    if (arg == "--cutoff" && value) a.cutoff = std::atof(argv[++k]);
    else if (arg == "--frames" && value) a.frames = std::strtoul(argv[++k], nullptr, 10);
    else if (arg == "--batch" && value) a.batch = std::strtoul(argv[++k], nullptr, 10);
    else if (arg == "--repeats" && value) a.repeats = std::atoi(argv[++k]);
    else if (a.pack.empty() && arg[0] != '-') a.pack = arg;
    else {
      std::fprintf(stderr, "usage: %s PACK [--cutoff RC] [--frames N] [--batch B] [--repeats R]\n", argv[0]);
      std::exit(2);
    }
  }
  if (a.pack.empty() || a.batch == 0 || a.frames < a.batch) {
    std::fprintf(stderr, "bench_batches: give a pack, and --frames >= --batch >= 1\n");
    std::exit(2);
  }
  return a;
}

// Per frame, in ms: a pack's records read, their neighbour lists, make_frame. Returns the frames.
std::vector<mlip::Frame> stages(const mlip::PackReader& reader, const Args& a) {
  double read = 0, list = 0, frame = 0;
  std::vector<mlip::Frame> frames;
  std::size_t edges = 0, atoms = 0;
  for (std::size_t i = 0; i < a.frames; ++i) {
    auto t0 = Clock::now();
    mlip::Structure s = reader.frame(i);
    read += since(t0);
    t0 = Clock::now();
    mlip::NeighborOptions o;
    o.sort = false;
    o.vectors = false;
    edges += mlip::build_neighbor_list(s, a.cutoff, o).size();
    list += since(t0);
    atoms += s.size();
    t0 = Clock::now();
    frames.push_back(mlip::make_frame(std::move(s), a.cutoff));
    frame += since(t0);
  }
  const double n = static_cast<double>(a.frames);
  std::printf("%zu frames, %.0f atoms and %.0f edges a frame (cutoff %.2f A)\n", a.frames, atoms / n, edges / n, a.cutoff);
  std::printf("per frame (ms): read %.4f | neighbour list %.4f | make_frame (validation, list, copies) %.4f\n",
              1e3 * read / n, 1e3 * list / n, 1e3 * frame / n);
  return frames;
}

// Per frame, in ms: batches of `a.batch` frames from `source`, as the trainer builds them.
void batches(const char* name, const mlip::trainer::FrameSource& source, const mlip::SpeciesMap& species, const Args& a) {
  double frames_and_batch = 0, tensors = 0;
  for (std::size_t first = 0; first + a.batch <= a.frames; first += a.batch) {
    std::vector<int64_t> idx(a.batch);
    for (std::size_t k = 0; k < a.batch; ++k) idx[k] = static_cast<int64_t>(first + k);
    std::vector<mlip::Frame> storage;
    auto t0 = Clock::now();
    const mlip::GraphBatch b = mlip::make_batch(source.frames(idx, storage), species);
    frames_and_batch += since(t0);
    t0 = Clock::now();
    const mlip::trainer::BatchTensors t = mlip::trainer::to_tensors(b, torch::kFloat32);
    tensors += since(t0);
  }
  const double n = static_cast<double>(a.frames / a.batch * a.batch);
  std::printf("%-7s batch %.4f ms a frame: frames and make_batch %.4f, tensors %.4f\n", name,
              1e3 * (frames_and_batch + tensors) / n, 1e3 * frames_and_batch / n, 1e3 * tensors / n);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  at::set_num_threads(1);
  const mlip::PackReader reader(a.pack);
  a.frames = std::min<std::size_t>(a.frames, reader.size());
  const mlip::SpeciesMap species(reader.manifest().species());
  auto memory = mlip::trainer::memory_source(stages(reader, a));
  auto pack = mlip::trainer::pack_source(a.pack, 1.0, a.cutoff);
  for (int r = 0; r < a.repeats; ++r) {
    batches("memory", *memory, species, a);
    batches("pack", *pack, species, a);
  }
  return 0;
}
