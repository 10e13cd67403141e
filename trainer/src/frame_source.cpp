#include "frame_source.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "mlip/error.h"

namespace mlip::trainer {
namespace {

PackStats stats_of(const std::vector<const Frame*>& frames) {
  std::vector<const Structure*> structures;
  structures.reserve(frames.size());
  for (const Frame* f : frames) structures.push_back(&f->structure);
  PackStats st;
  st.add_all(structures);
  return st;
}

class MemorySource final : public FrameSource {
 public:
  explicit MemorySource(std::vector<Frame> frames) : frames_(std::move(frames)) {
    std::vector<const Frame*> all;
    for (const Frame& f : frames_) all.push_back(&f);
    stats_ = stats_of(all);
  }
  std::size_t size() const override { return frames_.size(); }
  int64_t atoms(std::size_t i) const override { return static_cast<int64_t>(frames_.at(i).structure.size()); }
  std::vector<const Frame*> frames(const std::vector<int64_t>& idx, std::vector<Frame>&) const override {
    std::vector<const Frame*> out;
    out.reserve(idx.size());
    for (const int64_t i : idx) out.push_back(&frames_.at(static_cast<std::size_t>(i)));
    return out;
  }
  const PackStats& stats() const override { return stats_; }
  bool streamed() const override { return false; }

 private:
  std::vector<Frame> frames_;
  PackStats stats_;
};

// Frames read one at a time from a FrameReader (a pack, extended XYZ by its offset index, ASE
// databases). Statistics: given (a pack's manifest), or one pass when first asked for.
class ReaderSource final : public FrameSource {
 public:
  ReaderSource(std::unique_ptr<FrameReader> reader, double weight, double cutoff, int head, std::optional<PackStats> stats)
      : reader_(std::move(reader)), weight_(weight), cutoff_(cutoff), head_(head), stats_(std::move(stats)) {}
  std::size_t size() const override { return reader_->size(); }
  int64_t atoms(std::size_t i) const override {
    // Batches by atoms need every frame's count each epoch: 4 bytes a frame, kept from the pass
    // of the statistics where there is one, else (a pack) read from the indexes on first use.
    // A mutex, not std::call_once: threads ask at once, and the read may throw.
    if (!have_atoms_.load(std::memory_order_acquire)) {
      const std::lock_guard<std::mutex> lock(atoms_mutex_);
      if (!have_atoms_.load(std::memory_order_relaxed)) stats();   // its pass keeps them
      if (!have_atoms_.load(std::memory_order_relaxed)) {
        atoms_ = reader_->atom_counts();
        have_atoms_.store(true, std::memory_order_release);
      }
    }
    return atoms_.at(i);
  }
  std::vector<const Frame*> frames(const std::vector<int64_t>& idx, std::vector<Frame>& storage) const override {
    storage.clear();
    storage.reserve(idx.size());
    for (const int64_t i : idx) {
      Structure s = reader_->frame(static_cast<std::size_t>(i));
      s.weight *= weight_;
      storage.push_back(make_frame(std::move(s), cutoff_));
      storage.back().head = head_;
    }
    std::vector<const Frame*> out;
    for (const Frame& f : storage) out.push_back(&f);
    return out;
  }
  const PackStats& stats() const override {
    std::call_once(stats_once_, [this] {
      if (stats_) return;
      // One pass over the frames: their statistics, and their atom counts on the way.
      std::vector<uint32_t> atoms(reader_->size());
      PackStats st;
      st.add_each(0, reader_->size(), [&](std::size_t i) {
        Structure s = reader_->frame(i);
        atoms[i] = static_cast<uint32_t>(s.size());
        return s;
      });
      stats_ = std::move(st);
      atoms_ = std::move(atoms);
      have_atoms_.store(true, std::memory_order_release);
    });
    return *stats_;
  }
  bool streamed() const override { return true; }

 private:
  std::unique_ptr<FrameReader> reader_;
  double weight_, cutoff_;
  int head_;
  mutable std::once_flag stats_once_;
  mutable std::optional<PackStats> stats_;
  mutable std::mutex atoms_mutex_;
  mutable std::vector<uint32_t> atoms_;
  mutable std::atomic<bool> have_atoms_ = false;
};

class ConcatSource final : public FrameSource {
 public:
  explicit ConcatSource(std::vector<std::shared_ptr<FrameSource>> parts) : parts_(std::move(parts)) {
    for (const auto& p : parts_) {
      first_.push_back(size_);
      size_ += p->size();
      stats_.merge(p->stats());
      streamed_ = streamed_ || p->streamed();
    }
  }
  std::size_t size() const override { return size_; }
  int64_t atoms(std::size_t i) const override {
    const auto [part, local] = locate(i);
    return parts_[part]->atoms(local);
  }
  std::vector<const Frame*> frames(const std::vector<int64_t>& idx, std::vector<Frame>& storage) const override {
    // Frames of streamed parts are moved into `storage` (reserved first: pointers stay valid).
    storage.clear();
    storage.reserve(idx.size());
    std::vector<const Frame*> out;
    std::vector<Frame> one;
    for (const int64_t i : idx) {
      const auto [part, local] = locate(static_cast<std::size_t>(i));
      one.clear();   // a part in memory leaves it empty
      const Frame* f = parts_[part]->frames({static_cast<int64_t>(local)}, one).front();
      if (!one.empty()) {
        storage.push_back(std::move(one.front()));
        f = &storage.back();
      }
      out.push_back(f);
    }
    return out;
  }
  const PackStats& stats() const override { return stats_; }
  bool streamed() const override { return streamed_; }

 private:
  std::pair<std::size_t, std::size_t> locate(std::size_t i) const {
    if (i >= size_) throw Error("frame index " + std::to_string(i) + " beyond the " + std::to_string(size_) + " frames");
    const auto part = static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin() - 1);
    return {part, i - first_[part]};
  }
  std::vector<std::shared_ptr<FrameSource>> parts_;
  std::vector<std::size_t> first_;
  std::size_t size_ = 0;
  PackStats stats_;
  bool streamed_ = false;
};

class SubsetSource final : public FrameSource {
 public:
  SubsetSource(std::shared_ptr<FrameSource> base, Permutation order, uint64_t first, uint64_t count)
      : base_(std::move(base)), order_(order), first_(first), count_(count) {
    if (base_->streamed()) {
      stats_ = base_->stats();
    } else {
      std::vector<int64_t> all(count_);
      for (uint64_t i = 0; i < count_; ++i) all[i] = base_index(i);
      std::vector<Frame> unused;
      stats_ = stats_of(base_->frames(all, unused));
    }
  }
  std::size_t size() const override { return count_; }
  int64_t atoms(std::size_t i) const override { return base_->atoms(static_cast<std::size_t>(base_index(i))); }
  std::vector<const Frame*> frames(const std::vector<int64_t>& idx, std::vector<Frame>& storage) const override {
    std::vector<int64_t> mapped;
    mapped.reserve(idx.size());
    for (const int64_t i : idx) mapped.push_back(base_index(static_cast<uint64_t>(i)));
    return base_->frames(mapped, storage);
  }
  const PackStats& stats() const override { return stats_; }
  bool streamed() const override { return base_->streamed(); }

 private:
  int64_t base_index(uint64_t i) const {
    if (i >= count_) throw std::out_of_range("SubsetSource: frame out of range");
    return static_cast<int64_t>(order_(first_ + i));
  }
  std::shared_ptr<FrameSource> base_;
  Permutation order_;
  uint64_t first_, count_;
  PackStats stats_;
};

}  // namespace

std::shared_ptr<FrameSource> memory_source(std::vector<Frame> frames) {
  return std::make_shared<MemorySource>(std::move(frames));
}

std::shared_ptr<FrameSource> pack_source(const std::string& dir, double weight, double cutoff, int head) {
  auto reader = std::make_unique<PackReader>(dir);
  PackStats stats = reader->manifest().stats;
  return std::make_shared<ReaderSource>(std::move(reader), weight, cutoff, head, std::move(stats));
}

std::shared_ptr<FrameSource> reader_source(std::unique_ptr<FrameReader> reader, double weight, double cutoff, int head) {
  return std::make_shared<ReaderSource>(std::move(reader), weight, cutoff, head, std::nullopt);
}

std::shared_ptr<FrameSource> concat_sources(std::vector<std::shared_ptr<FrameSource>> parts) {
  if (parts.size() == 1) return parts.front();
  return std::make_shared<ConcatSource>(std::move(parts));
}

std::shared_ptr<FrameSource> subset_source(std::shared_ptr<FrameSource> base, const Permutation& order, uint64_t first,
                                           uint64_t count) {
  return std::make_shared<SubsetSource>(std::move(base), order, first, count);
}

}  // namespace mlip::trainer
