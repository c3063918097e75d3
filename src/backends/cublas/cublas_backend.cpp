// cublas/cublas_backend.cpp — see cublas_backend.hpp.
//
// Per forward: route + align on the device (shared with the cuda backend), copy the segment offsets
// to the host (the one synchronisation), gather the tokens expert-major, one grouped GEMM for
// gate_up, the activation pass, one grouped GEMM for down, the weighted scatter and the combine.
#include "backends/cublas/cublas_backend.hpp"

#include <cublas_v2.h>

#include <string>
#include <vector>

#include "backends/cuda/device_runner.hpp"

namespace moerun {
namespace {

using cuda_detail::DeviceBuffer;
using cuda_detail::DeviceMoe;
using namespace cuda_kernels;

#define MOERUN_CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)

void cublas_check(cublasStatus_t st, const char* call, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  throw_error(ErrorKind::kDevice, std::string("cuBLAS call ") + call + " failed with " +
                                      cublasGetStatusName(st) + " (" + cublasGetStatusString(st) +
                                      ") at " + file + ":" + std::to_string(line));
}

class CublasRunner final : public Runner {
 public:
  CublasRunner(const MoeSpec& spec, const MoeWeights& w, const RunnerOptions& o)
      : d_(spec, w, o.device_index, false, cuda_detail::spec_gate_up_layout(spec)) {  // w13 as given
    on_device_.enter(d_.device());  // (the handle binds to the current device)
    MOERUN_CUBLAS_CHECK(cublasCreate(&handle_));
    const cudaError_t e = cudaMallocHost(&host_seg_, sizeof(int32_t) * (spec.num_experts + 1));
    if (e != cudaSuccess) {  // (the destructor of a constructor that throws does not run)
      cublasDestroy(handle_);
      MOERUN_CUDA_CHECK(e);
    }
    on_device_.leave();
  }
  ~CublasRunner() override {
    on_device_.enter_noexcept(d_.device());  // (cublasDestroy synchronizes the current device)
    if (handle_) cublasDestroy(handle_);
    if (host_seg_) cudaFreeHost(host_seg_);
  }
  std::string variant_for(int64_t) const override { return "cublas-grouped-batched"; }

  void forward(const ForwardArgs& args) override {
    const int64_t m = args.hidden.shape.rank > 0 ? args.hidden.shape[0] : 0;
    if (m == 0) return;
    const cuda_detail::DeviceScope scope(d_.device());
    // Its group sizes go through the host (a stream synchronize), which a capture cannot hold: refused
    // before anything is queued, with the reason, instead of the synchronize's raw capture error (which
    // also left the device workspaces marked as captured, kept back at every later growth).
    if (args.hidden.device == DeviceKind::kCuda) {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      MOERUN_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(args.stream), &st));
      if (st != cudaStreamCaptureStatusNone)
        throw_error(ErrorKind::kUnsupported, "cublas: a forward cannot be captured in a CUDA graph (cuBLAS's grouped GEMM "
                                             "takes its group sizes on the host; its capabilities say cuda_graph_safe: false)");
    }
    const int E = d_.experts(), K = d_.top_k(), H = d_.hidden(), I = d_.inter(), R = d_.w13_rows();
    const int64_t rows = m * K;
    const Elem el = d_.elem();
    const size_t es = cuda_detail::elem_size(el);
    // scratch: gathered x [rows, H], gate_up [rows, R], y [rows, H] (all elem), expert_of_row [rows]
    const size_t scratch = rows * (static_cast<size_t>(H) * 2 + R) * es + rows * 4 + 64;
    const auto call = d_.begin(args, 16, scratch);
    const cudaStream_t s = call.stream;
    const MoeSpec& sp = d_.spec();
    const auto al = d_.align_out();
    char* base = static_cast<char*>(d_.scratch.get());
    void* xs = base;
    void* gu = base + rows * H * es;
    void* ys = base + rows * (H + R) * es;
    int32_t* eor = reinterpret_cast<int32_t*>(base + rows * (2 * H + R) * es);

    MOERUN_CUDA_CHECK(cudaMemcpyAsync(host_seg_, al.seg_offsets, sizeof(int32_t) * (E + 1),
                                      cudaMemcpyDeviceToHost, s));
    MOERUN_CUDA_CHECK(launch_gather_rows(el, call.hidden, H, al.token_of_row, al.seg_offsets + E, rows, xs, s));
    MOERUN_CUDA_CHECK(launch_expert_of_row(al.seg_offsets, E, rows, eor, s));
    MOERUN_CUDA_CHECK(cudaStreamSynchronize(s));  // group sizes on the host (cuBLAS's contract)

    std::vector<int> gm, gn, gk, lda, ldb, ldc, gsize;
    std::vector<cublasOperation_t> ta, tb;
    std::vector<float> alpha, beta;
    std::vector<const void*> pa1, pb1, pa2, pb2;
    std::vector<void*> pc1, pc2;
    const char* w13 = static_cast<const char*>(d_.w13.get());
    const char* w2 = static_cast<const char*>(d_.w2.get());
    const char* inter = static_cast<const char*>(d_.inter_buf.get());
    for (int e = 0; e < E; ++e) {
      const int off = host_seg_[e], cnt = host_seg_[e + 1] - off;
      if (cnt == 0) continue;
      gn.push_back(cnt);
      pa1.push_back(w13 + static_cast<size_t>(e) * R * H * es);
      pb1.push_back(static_cast<const char*>(xs) + static_cast<size_t>(off) * H * es);
      pc1.push_back(static_cast<char*>(gu) + static_cast<size_t>(off) * R * es);
      pa2.push_back(w2 + static_cast<size_t>(e) * H * I * es);
      pb2.push_back(inter + static_cast<size_t>(off) * I * es);
      pc2.push_back(static_cast<char*>(ys) + static_cast<size_t>(off) * H * es);
    }
    const int groups = static_cast<int>(gn.size());
    ta.assign(groups, CUBLAS_OP_T);
    tb.assign(groups, CUBLAS_OP_N);
    alpha.assign(groups, 1.0f);
    beta.assign(groups, 0.0f);
    gsize.assign(groups, 1);
    ptrs_.reserve(sizeof(void*) * 6 * groups);
    std::vector<const void*> all;
    all.insert(all.end(), pa1.begin(), pa1.end());
    all.insert(all.end(), pb1.begin(), pb1.end());
    all.insert(all.end(), pc1.begin(), pc1.end());
    all.insert(all.end(), pa2.begin(), pa2.end());
    all.insert(all.end(), pb2.begin(), pb2.end());
    all.insert(all.end(), pc2.begin(), pc2.end());
    MOERUN_CUDA_CHECK(cudaMemcpyAsync(ptrs_.get(), all.data(), sizeof(void*) * all.size(), cudaMemcpyHostToDevice, s));
    void** dp = ptrs_.as<void*>();
    const cudaDataType_t dt = el == Elem::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
    MOERUN_CUBLAS_CHECK(cublasSetStream(handle_, s));

    gm.assign(groups, R);
    gk.assign(groups, H);
    lda.assign(groups, H);
    ldb.assign(groups, H);
    ldc.assign(groups, R);
    MOERUN_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        handle_, ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alpha.data(),
        const_cast<const void* const*>(dp), dt, lda.data(), const_cast<const void* const*>(dp + groups), dt,
        ldb.data(), beta.data(), dp + 2 * groups, dt, ldc.data(), groups, gsize.data(), CUBLAS_COMPUTE_32F));
    MOERUN_CUDA_CHECK(launch_activation(el, gu, R, eor, sp.expert_bias ? d_.b13.as<float>() : nullptr,
                                        cuda_detail::act_of(sp.activation.kind), sp.activation.swiglu_alpha,
                                        sp.activation.swiglu_limit, sp.activation.interleaved_gate_up,
                                        al.seg_offsets + E, rows, d_.inter_buf.get(), s));
    gm.assign(groups, H);
    gk.assign(groups, I);
    lda.assign(groups, I);
    ldb.assign(groups, I);
    ldc.assign(groups, H);
    MOERUN_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        handle_, ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alpha.data(),
        const_cast<const void* const*>(dp + 3 * groups), dt, lda.data(),
        const_cast<const void* const*>(dp + 4 * groups), dt, ldb.data(), beta.data(), dp + 5 * groups, dt,
        ldc.data(), groups, gsize.data(), CUBLAS_COMPUTE_32F));
    MOERUN_CUDA_CHECK(launch_weighted_scatter(el, ys, H, al.slot_of_row, al.weight_of_row, eor,
                                              sp.expert_bias ? d_.b2.as<float>() : nullptr,
                                              al.seg_offsets + E, rows, d_.rows_buf.as<float>(), s));
    MOERUN_CUDA_CHECK(launch_combine(d_.rows_buf.as<float>(), m, K, H, nullptr, nullptr, call.hidden, el,
                                     call.out, el, s));
    d_.finish(args, call);
  }

 private:
  cuda_detail::RunnerDevice on_device_;  // first: destroyed last (cuda_check.hpp)
  DeviceMoe d_;
  cublasHandle_t handle_ = nullptr;
  int32_t* host_seg_ = nullptr;
  DeviceBuffer ptrs_;
};

class CublasBackend final : public cuda_detail::GpuBackendBase {
 public:
  CublasBackend() {
    caps_ = cuda_detail::common_gpu_capabilities();
    caps_.needs_arch_specific = false;
    caps_.cuda_graph_safe = false;
    caps_.host_sync = true;  // group sizes go to the host every forward
    caps_.variants = {{"cublas-grouped-batched", 0.0,
                       "cublasGemmGroupedBatchedEx over the activated experts (host-side group sizes)",
                       CpuIsa::kScalar, 0.0, {}}};
  }
  std::string_view name() const override { return "cublas"; }
  std::string_view description() const override {
    return "device routing and alignment + cublasGemmGroupedBatchedEx; synchronises with the host";
  }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& weights,
                                        const Platform& platform, const RunnerOptions& options) const override {
    (void)platform;
    return std::make_unique<CublasRunner>(spec, weights, options);
  }
};

}  // namespace

std::shared_ptr<const Backend> make_cublas_backend() { return std::make_shared<CublasBackend>(); }

}  // namespace moerun
