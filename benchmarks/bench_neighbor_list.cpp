// Neighbour-list build time per atom for liquid water (frame 0 of data/water-deepmd/data_0,
// replicated) at ~1k, 10k, 100k and 1M atoms, cutoff 6 Angstrom, side by side with ASE's
// neighbour list on the same structures (ASE up to --ase-max atoms; it needs ~100 bytes/edge).
//
//   build/bin/bench_neighbor_list [--ase-max N] [--no-ase]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlip/data/io.h"
#include "mlip/graph/neighbor_list.h"
#include "support/source_dir.h"

int main(int argc, char** argv) {
  long ase_max = 120000;
  bool ase = true;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--no-ase") ase = false;
    else if (arg == "--ase-max" && a + 1 < argc) ase_max = std::atol(argv[++a]);
    else {
      std::fprintf(stderr, "usage: %s [--ase-max N] [--no-ase]\n", argv[0]);
      return 2;
    }
  }
  const std::string system = mlip::testing::source_dir() + "/data/water-deepmd/data_0";
  const mlip::Structure frame = mlip::read_deepmd(system).at(0);
  const double cutoff = 6.0;
  const std::vector<int> reps = {2, 4, 8, 17};  // 1536, 12288, 98304, 943296 atoms

  std::map<long, nlohmann::json> ase_results;
  if (ase && std::system("/usr/bin/python3 -c 'import ase' 2>/dev/null") == 0) {
    std::string cmd = "/usr/bin/python3 " + mlip::testing::source_dir() + "/benchmarks/ase_neighbor_timing.py " +
                      system + " 6.0";
    for (int r : reps)
      if (static_cast<long>(frame.size()) * r * r * r <= ase_max) cmd += " " + std::to_string(r);
    std::fprintf(stderr, "running ASE: %s\n", cmd.c_str());
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof(line), p)) {
        const auto j = nlohmann::json::parse(line);
        ase_results[j["atoms"].get<long>()] = j;
      }
      pclose(p);
    }
  }

  std::printf("Neighbour list, liquid water (%s frame 0 replicated), cutoff %.1f A, 1 thread\n", system.c_str(),
              cutoff);
  std::printf("%9s %11s %10s %11s %10s %11s %12s\n", "atoms", "edges/atom", "mlip s", "mlip us/at", "ASE s",
              "ASE us/at", "ASE/mlip");
  for (int r : reps) {
    const mlip::Structure s = mlip::replicate(frame, r, r, r);
    const int repeats = s.size() < 20000 ? 3 : 1;
    double best = 1e30;
    std::size_t edges = 0;
    for (int k = 0; k < repeats; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      mlip::NeighborOptions opts;
      opts.sort = false;  // the order binning produces is already grouped by centre
      const mlip::NeighborList nl = mlip::build_neighbor_list(s, cutoff, opts);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      edges = nl.size();
    }
    const long n = static_cast<long>(s.size());
    std::printf("%9ld %11.1f %10.4f %11.3f", n, double(edges) / n, best, 1e6 * best / n);
    if (ase_results.count(n)) {
      const auto& j = ase_results[n];
      const double t = j["seconds"].get<double>();
      std::printf(" %10.4f %11.3f %12.1f%s\n", t, 1e6 * t / n, t / best,
                  j["edges"].get<std::size_t>() == edges ? "" : "  (edge counts differ!)");
    } else {
      std::printf(" %10s %11s %12s\n", "-", "-", "-");
    }
    std::fflush(stdout);
  }
  return 0;
}
