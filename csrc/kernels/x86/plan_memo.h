// The last few plans a thread made, by every input of their builder: one
// call plans its problem several times (the route's checks, the run, a
// 16-bit route's f32 plan), and training repeats the same problems every
// step, so small layers would otherwise spend a good part of each call
// planning (SPR VM: 16 -> 17 k3 on 8x8, N = 32, f16 backward-data 95 -> 62
// us a call, f32 64 -> 49 us). Plans hold no tensor data, only geometry.
// Internal linkage (an unnamed namespace), as the vector traits.
#pragma once

#include <memory>

namespace tct {
namespace x86 {
namespace {

// Key: the builder's inputs with operator==; Plan: what it returns.
template <class Key, class Plan, int kSlots = 4>
class PlanMemo {
 public:
  template <class Build>
  std::shared_ptr<const Plan> get(const Key& key, Build&& build) {
    for (int i = 0; i < kSlots; ++i)
      if (plan_[i] && key_[i] == key) return plan_[i];
    auto plan = std::make_shared<const Plan>(build());
    key_[next_] = key;
    plan_[next_] = plan;
    next_ = (next_ + 1) % kSlots;
    return plan;
  }

 private:
  Key key_[kSlots];
  std::shared_ptr<const Plan> plan_[kSlots];
  int next_ = 0;
};

}  // namespace
}  // namespace x86
}  // namespace tct
