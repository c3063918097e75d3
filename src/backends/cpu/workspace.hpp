// cpu/workspace.hpp — the buffers one forward works in, and the process-wide pool that lends them.
//
// NOTES:
//   A forward's buffers are temporaries: routing outputs, the dispatch, the gathered expert rows (f32
//   and bf16, padded), the intermediate rows, q8 rows, LoRA products and each thread's accumulators and
//   panels. They grow to the largest call seen and are kept, so that a warmed-up forward allocates
//   nothing. They used to belong to each runner, and a model holds one runner per layer, so its
//   workspace memory was (layers) x (one layer's). On this session's Sapphire Rapids, qwen3-30b-a3b bf16
//   at 1024 tokens: the first calls of one layer grew the process by 103 MB, of four layers by 532 MB
//   (48 layers: about 6 GB). Each runner's first call also paid for page-faulting its own copy: four
//   mxfp4 layers at 256 tokens took 135-194 ms on their first calls against 31 ms warm. With the pool,
//   four layers grow the process by 103 MB and their first calls take 28-45 ms
//   (bench/results/2026-12-02_s15_dev-xeon/NOTES.md).
//   So the buffers live in Workspace objects lent by one pool per process. A forward takes one for its
//   duration and gives it back. Calls that run one after another (the layers of a model) share one
//   workspace. Calls that run at the same time (from several threads) each hold their own. The pool
//   makes a workspace only when more forwards run at once than ever before. A workspace keeps what it
//   grew to, which is the largest need of any layer that used it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "backends/cpu/q8_rows.hpp"
#include "backends/cpu/work_items.hpp"
#include "dispatch/dispatch.hpp"
#include "routing/topk.hpp"

namespace moerun::cpu {

// 64-byte aligned allocations (kernels store panels with aligned stores).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U> Aligned64(const Aligned64<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
  template <typename U> bool operator==(const Aligned64<U>&) const noexcept { return true; }
};

// A vector that only grows (the steady-state forward allocates nothing).
template <typename T>
struct Grow {
  std::vector<T, Aligned64<T>> v;
  T* get(size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

// What one thread of a forward writes.
struct ThreadScratch {
  Grow<float> panel, acc, out;
  Grow<uint16_t> panel_bf16;
  Grow<float> xrow;  // the gather's f32 row where X is not kept
  routing::TopkScratch topk;
};

// A runner's job: rows [row0, row0 + m) of the X / H buffers, all of one expert (runner.cpp NOTES:
// job rows).
struct RunnerJob {
  bool shared = false;
  int expert = 0;     // local expert (routed jobs)
  int64_t row0 = 0;   // first row in the X / H buffers
  int64_t m = 0;      // rows
};

// One forward's buffers (runner.cpp says what each holds).
struct Workspace {
  Workspace();  // a ThreadScratch for every processor
  dispatch::Dispatch disp;
  Grow<float> hid, logits, topw, x, hbuf, lora1, lora2, lora_t, gate;
  Grow<int32_t> topi, row_expert;
  std::vector<RunnerJob> jobs;     // grow only, like the rest: reserved by M (runner.cpp)
  std::vector<RunnerItem> items1;
  std::vector<RunnerItem> items2;  // the down GEMM's: blocks b .. b + nb - 1 of every job (job unused)
  Grow<int32_t> q8_next, q8_tail;  // the gather's lists of a token's q8 rows (runner.cpp)
  Grow<uint8_t> q8_row;  // per activation row: 1 where its job's calls take the q8 kernel
  Grow<uint16_t> xb, hb;
  Q8Buffer xq, hq;  // q8 rows of X and H (the q8 kernel's jobs only)
  std::vector<ThreadScratch> scratch;
};

class WorkspacePool {
 public:
  // A workspace held for one forward; given back when the lease ends.
  class Lease {
   public:
    Lease(WorkspacePool& pool, std::unique_ptr<Workspace> ws) noexcept : pool_(&pool), ws_(std::move(ws)) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), ws_(std::move(o.ws_)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (ws_) pool_->give_back(std::move(ws_));
    }
    Workspace& operator*() const noexcept { return *ws_; }
    Workspace* operator->() const noexcept { return ws_.get(); }

   private:
    WorkspacePool* pool_;
    std::unique_ptr<Workspace> ws_;
  };

  WorkspacePool();
  // The pool every cpu runner of this process borrows from.
  static WorkspacePool& process();
  // An idle workspace, or a new one when every workspace is lent out.
  Lease acquire();
  // Workspaces this pool has made (tests: one per forward that ran while all others were lent).
  size_t created() const;
  size_t idle() const;

 private:
  void give_back(std::unique_ptr<Workspace> ws) noexcept;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Workspace>> idle_;
  size_t created_ = 0;
};

}  // namespace moerun::cpu
