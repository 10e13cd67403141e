// Learning-rate and loss-prefactor schedules (DeePMD-style prefactors, exponential, cosine,
// constant, reduce-on-plateau), with the state a checkpoint keeps.
#include <algorithm>
#include <cmath>
#include <limits>

#include "training.h"

namespace mlip::trainer {

Schedule::Schedule(const Config& c, int64_t total_steps)
    : cfg_(c.schedule), lr0_(c.lr), total_(std::max<int64_t>(1, total_steps)), e_(c.energy), f_(c.forces),
      v_(c.virial) {}

double Schedule::lr(int64_t step) const {
  const double t = std::min(1.0, std::max(double(step) / double(total_), time_fraction_));
  double lr = lr0_;
  if (cfg_.type == "exponential") {
    lr = lr0_ * std::pow(cfg_.final_lr / lr0_, t);
  } else if (cfg_.type == "cosine") {
    lr = cfg_.final_lr + (lr0_ - cfg_.final_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  } else if (cfg_.type == "plateau") {
    lr = std::max(cfg_.final_lr, lr0_ * plateau_scale_);
  }
  if (cfg_.warmup_steps > 0 && step < cfg_.warmup_steps) lr *= double(step + 1) / double(cfg_.warmup_steps);
  return lr;
}

Prefactors Schedule::prefactors(int64_t step) const {
  const double r = lr(step) / lr0_;
  return {e_.limit + (e_.start - e_.limit) * r, f_.limit + (f_.start - f_.limit) * r,
          v_.limit + (v_.start - v_.limit) * r};
}

Prefactors Schedule::limits() const { return {e_.limit, f_.limit, v_.limit}; }

bool Schedule::end_epoch(double metric) {
  if (cfg_.type != "plateau") return false;
  if (metric < plateau_best_ * (1.0 - cfg_.threshold)) {
    plateau_best_ = metric;
    plateau_bad_epochs_ = 0;
    return false;
  }
  if (++plateau_bad_epochs_ <= cfg_.patience) return false;
  plateau_bad_epochs_ = 0;
  if (lr0_ * plateau_scale_ <= cfg_.final_lr) return false;  // already at the floor
  plateau_scale_ *= cfg_.factor;
  return true;
}

nlohmann::json Schedule::state() const {
  // JSON has no infinity: an unset best is written as null.
  return {{"plateau_scale", plateau_scale_},
          {"plateau_best", std::isfinite(plateau_best_) ? nlohmann::json(plateau_best_) : nlohmann::json()},
          {"plateau_bad_epochs", plateau_bad_epochs_}};
}

void Schedule::restore(const nlohmann::json& state) {
  if (state.is_null()) return;  // checkpoint from before reduce-on-plateau existed
  plateau_scale_ = state.at("plateau_scale").get<double>();
  plateau_best_ = state.at("plateau_best").is_null() ? std::numeric_limits<double>::infinity()
                                                       : state.at("plateau_best").get<double>();
  plateau_bad_epochs_ = state.at("plateau_bad_epochs").get<int64_t>();
}

}  // namespace mlip::trainer
