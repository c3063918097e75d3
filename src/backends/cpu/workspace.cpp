// cpu/workspace.cpp — see workspace.hpp.
#include "backends/cpu/workspace.hpp"

#include <omp.h>

#include <algorithm>

namespace moerun::cpu {

Workspace::Workspace() : scratch(static_cast<size_t>(std::max(1, omp_get_num_procs()))) {}

WorkspacePool::WorkspacePool() { idle_.reserve(8); }

WorkspacePool& WorkspacePool::process() {
  static WorkspacePool pool;
  return pool;
}

WorkspacePool::Lease WorkspacePool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Workspace> ws = std::move(idle_.back());
      idle_.pop_back();
      return Lease(*this, std::move(ws));
    }
    ++created_;
    // Room for every workspace there is, so that giving one back never reallocates (nor throws).
    if (idle_.capacity() < created_) idle_.reserve(std::max(created_, 2 * idle_.capacity()));
  }
  return Lease(*this, std::make_unique<Workspace>());
}

void WorkspacePool::give_back(std::unique_ptr<Workspace> ws) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(ws));  // within the capacity reserved when it was made
}

size_t WorkspacePool::created() const {
  std::lock_guard<std::mutex> lock(mu_);
  return created_;
}

size_t WorkspacePool::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_.size();
}

}  // namespace moerun::cpu
