// cuda/device_runner.cpp — see device_runner.hpp.
#include "backends/cuda/device_runner.hpp"

#include <algorithm>

#include "moerun/weights.hpp"

namespace moerun::cuda_detail {

using cuda_kernels::Act;
using cuda_kernels::Elem;

bool DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return false;
  release();
  MOERUN_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
  return true;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  reserve(bytes);
  if (bytes) MOERUN_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::release() noexcept {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

Elem elem_of(DType t) {
  switch (t) {
    case DType::kBF16: return Elem::kBF16;
    case DType::kF16: return Elem::kF16;
    case DType::kF32: return Elem::kF32;
    default: break;
  }
  throw_error(ErrorKind::kUnsupported,
              std::string("cuda: unsupported dtype ") + std::string(dtype_name(t)) + " (allowed: BF16, F16)");
}

Act act_of(ActivationKind k) { return static_cast<Act>(static_cast<int>(k)); }

size_t elem_size(Elem e) { return e == Elem::kF32 ? 4 : 2; }

Capabilities common_gpu_capabilities() {
  Capabilities c;
  c.device = DeviceKind::kCuda;
  c.min_sm = 90;
  c.max_sm = 90;  // built for sm_90a only
  c.formats = {FormatSupport{WeightFormat::kBF16, ActQuant::kNone}, FormatSupport{WeightFormat::kF16, ActQuant::kNone}};
  c.act_dtypes = {DType::kBF16, DType::kF16};
  c.activations = {ActivationKind::kSiluAndMul, ActivationKind::kGeluAndMul, ActivationKind::kGeluTanhAndMul,
                   ActivationKind::kSwigluOai,  ActivationKind::kRelu2,      ActivationKind::kSilu};
  c.interleaved_gate_up = true;
  c.scorings = {Scoring::kSoftmax, Scoring::kSigmoid};
  c.softmax_after_topk = true;
  c.correction_bias = true;
  c.grouped_topk = true;
  c.max_top_k = cuda_kernels::kMaxRoutingTopK;
  c.max_experts = cuda_kernels::kMaxRoutingExperts;
  c.hidden_multiple = 8;        // 16-byte rows for the asynchronous copies
  c.intermediate_multiple = 8;
  c.expert_bias = true;
  c.router_bias = true;
  return c;
}

void common_gpu_checks(const MoeSpec& spec, Support& out) {
  // Only for the weight formats these backends take (capabilities: bf16, f16); any other is refused by
  // its format, and naming a dtype for it here would be wrong (f32 weights are not "BF16").
  const bool half = spec.weight_format == WeightFormat::kBF16 || spec.weight_format == WeightFormat::kF16;
  const DType wd = spec.weight_format == WeightFormat::kF16 ? DType::kF16 : DType::kBF16;
  if (half && spec.act_dtype != wd)
    out.reasons.push_back("act_dtype " + std::string(dtype_name(spec.act_dtype)) +
                          " differs from the weight dtype " + std::string(dtype_name(wd)) +
                          ": the GPU backends compute in the weights' dtype (use the same dtype)");
  if (spec.routing.n_group > 32)
    out.reasons.push_back("n_group = " + std::to_string(spec.routing.n_group) + ": at most 32 groups");
  if (spec.routing.n_group > 0 && spec.num_experts % spec.routing.n_group != 0)
    out.reasons.push_back("num_experts must be a multiple of n_group");
  if (spec.shared.count > 0 && !spec.activation.gated())
    out.reasons.push_back("shared experts with a non-gated activation are not defined");
  if (spec.shared.count > 0 && spec.shared.intermediate % 8 != 0)
    out.reasons.push_back("shared.intermediate = " + std::to_string(spec.shared.intermediate) +
                          ": must be a multiple of 8");
}

void upload_view(DeviceBuffer& dst, const TensorView& v, const std::string& what) {
  if (v.empty() || v.numel() == 0) return;
  if (v.device == DeviceKind::kCuda) {
    dst.reserve(v.nbytes());
    MOERUN_CUDA_CHECK(cudaMemcpy(dst.get(), v.data, v.nbytes(), cudaMemcpyDeviceToDevice));
    return;
  }
  (void)what;
  dst.upload(v.data, v.nbytes());
}

cuda_kernels::GateUpLayout spec_gate_up_layout(const MoeSpec& spec) {
  return spec.activation.interleaved_gate_up ? cuda_kernels::GateUpLayout::kPairs
                                             : cuda_kernels::GateUpLayout::kHalves;
}

void upload_gate_up(DeviceBuffer& dst, const TensorView& v, int experts, int inter, size_t row_bytes,
                    cuda_kernels::GateUpLayout from, cuda_kernels::GateUpLayout to, const std::string& what) {
  using cuda_kernels::GateUpLayout;
  if (from == to || v.empty() || v.numel() == 0) {
    upload_view(dst, v, what);
    return;
  }
  const size_t rows = static_cast<size_t>(experts) * 2 * inter;
  if (to != GateUpLayout::kBlocks8 || inter % 8 != 0 || v.nbytes() != rows * row_bytes)
    throw_error(ErrorKind::kInvalidArgument, "cuda: cannot reorder " + what + " for the device (" +
                                                 std::to_string(v.nbytes()) + " bytes, I = " + std::to_string(inter) + ")");
  dst.reserve(rows * row_bytes);
  const cudaMemcpyKind kind = v.device == DeviceKind::kCuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  char* d = static_cast<char*>(dst.get());
  const char* s = static_cast<const char*>(v.data);
  const auto bytes = [row_bytes](int64_t r) { return static_cast<size_t>(r) * row_bytes; };
  for (const cuda_kernels::GateUpRowCopy& c : cuda_kernels::blocks8_upload_plan(from, experts, inter))
    MOERUN_CUDA_CHECK(cudaMemcpy2D(d + bytes(c.dst_row), bytes(c.dst_pitch), s + bytes(c.src_row), bytes(c.src_pitch),
                                   bytes(c.width), static_cast<size_t>(c.height), kind));
}

namespace {
void check_matrix(const ExpertMatrix& m, WeightFormat f, const char* what) {
  if (m.layout != "canonical")
    throw_error(ErrorKind::kUnsupported, std::string("cuda: ") + what + " has layout '" + m.layout +
                                             "'; only 'canonical' is prepared here");
  if (m.format != f)
    throw_error(ErrorKind::kUnsupported, std::string("cuda: ") + what + " format " +
                                             std::string(to_string(m.format)) + " differs from the spec's");
}
}  // namespace

DeviceMoe::DeviceMoe(const MoeSpec& spec, const MoeWeights& w, int device_index, bool need_tiles,
                     cuda_kernels::GateUpLayout gate_up)
    : spec_(spec), device_(device_index), need_tiles_(need_tiles) {
  // What the kernels compute in, refused before anything touches a device (a runner made without asking
  // supports() first must not run the f16 kernels on f32 data): supports() says the same.
  if (spec.weight_format != WeightFormat::kBF16 && spec.weight_format != WeightFormat::kF16)
    throw_error(ErrorKind::kUnsupported, "cuda: weight format " + std::string(to_string(spec.weight_format)) +
                                             " is not supported (bf16, f16)");
  const DType wd = spec.weight_format == WeightFormat::kF16 ? DType::kF16 : DType::kBF16;
  if (spec.act_dtype != wd)
    throw_error(ErrorKind::kUnsupported, "cuda: act_dtype " + std::string(dtype_name(spec.act_dtype)) +
                                             " differs from the weight dtype " + std::string(dtype_name(wd)) +
                                             ": the GPU backends compute in the weights' dtype");
  if (spec.mixed_formats())  // (capabilities: no shared_formats)
    throw_error(ErrorKind::kUnsupported, "cuda: shared experts in " + std::string(to_string(spec.shared_weight_format())) +
                                             " beside " + std::string(to_string(spec.weight_format)) +
                                             " routed experts: the GPU backends compute both in one dtype");
  // A plan made for a described platform can reach a machine without that GPU: say so, rather than
  // the driver's "insufficient driver" or "invalid device ordinal".
  // Without a GPU the runtime reports no device, or (no driver at all) an insufficient driver; the
  // latter is also what an old driver beside a GPU says, so the message names both.
  int count = 0;
  const cudaError_t have = cudaGetDeviceCount(&count);
  if (have == cudaErrorNoDevice || have == cudaErrorInsufficientDriver || (have == cudaSuccess && count == 0)) {
    cudaGetLastError();  // (not sticky: clear it)
    throw_error(ErrorKind::kUnsupported,
                "cuda: no CUDA device 0 on this machine (" + std::string(cudaGetErrorString(have)) +
                    ": no GPU, or a driver older than this build's CUDA runtime); a plan for a described GPU "
                    "platform runs only where that GPU is");
  }
  MOERUN_CUDA_CHECK(have);
  if (device_ < 0 || device_ >= count)
    throw_error(ErrorKind::kInvalidArgument, "cuda: RunnerOptions::device_index " + std::to_string(device_) +
                                                 ", but this machine has " + std::to_string(count) + " CUDA devices");
  // The kernels are built for sm_90a alone. supports() judged the platform's first GPU; the runner's
  // may be another (RunnerOptions::device_index), so its own compute capability is checked here, before
  // a launch would fail with "no kernel image".
  int major = 0, minor = 0;
  MOERUN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  MOERUN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
  if (major != 9 || minor != 0)
    throw_error(ErrorKind::kUnsupported, "cuda: device " + std::to_string(device_) + " is sm" + std::to_string(major) +
                                             std::to_string(minor) + "; this build's kernels run on sm90 (Hopper) only");
  if (spec.parallel.tp != 1 || spec.parallel.ep != 1)
    throw_error(ErrorKind::kUnsupported, "cuda: tensor or expert parallel shards (tp = " + std::to_string(spec.parallel.tp) +
                                             ", ep = " + std::to_string(spec.parallel.ep) + ") are not supported");
  on_device_.enter(device_);  // (the caller's device back at the end, or after the buffers if this throws)
  elem_ = elem_of(spec.act_dtype);
  E_ = spec.num_experts;
  K_ = spec.top_k;
  H_ = spec.hidden;
  I_ = spec.intermediate;
  R_ = spec.w13_rows();
  // Every stack's and small tensor's shape, format and byte count (the uploads copy what the spec says
  // the kernels read): create_runner can be called without MoeLayer's check.
  check_matrix(w.w13, spec.weight_format, "w13");
  check_matrix(w.w2, spec.weight_format, "w2");
  check_weights(spec, w);
  // Gated: w13 (and its bias) in the row order the runner's kernels read; not gated: as given.
  const cuda_kernels::GateUpLayout given = spec_gate_up_layout(spec);
  gate_up_ = spec.activation.gated() ? gate_up : cuda_kernels::GateUpLayout::kHalves;
  const cuda_kernels::GateUpLayout from = spec.activation.gated() ? given : gate_up_;
  upload_gate_up(w13, w.w13.data, E_, I_, static_cast<size_t>(H_) * dtype_size(w.w13.data.dtype), from, gate_up_,
                 "w13");
  upload_view(w2, w.w2.data, "w2");
  if (spec.expert_bias) {
    upload_gate_up(b13, w.w13_bias.view(), E_, I_, sizeof(float), from, gate_up_, "w13_bias");
    upload_view(b2, w.w2_bias.view(), "w2_bias");
  }
  if (spec.routing.correction_bias) upload_view(corr, w.correction_bias.view(), "correction_bias");
  if (!w.router_weight.empty()) upload_view(router_w, w.router_weight.view(), "router_weight");
  if (spec.router_bias && !w.router_bias.empty()) upload_view(router_b, w.router_bias.view(), "router_bias");
  if (spec.shared.count > 0) {  // (check_weights: [1, 2 Is, H] and [1, H, Is])
    check_matrix(w.shared_w13, spec.weight_format, "shared_w13");
    check_matrix(w.shared_w2, spec.weight_format, "shared_w2");
    Rs_ = static_cast<int>(w.shared_w13.rows);
    Is_ = static_cast<int>(w.shared_w2.cols);
    upload_view(sw13, w.shared_w13.data, "shared_w13");
    upload_view(sw2, w.shared_w2.data, "shared_w2");
    if (spec.shared.gated_by_router) upload_view(sgate, w.shared_gate.view(), "shared_gate");
  }
  MOERUN_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
  on_device_.leave();
}

DeviceMoe::~DeviceMoe() {
  on_device_.enter_noexcept(device_);
  if (own_stream_) cudaStreamDestroy(own_stream_);
  for (void* p : retired_) cudaFree(p);
}

bool DeviceMoe::grow(DeviceBuffer& b, size_t bytes) {
  if (bytes <= b.capacity()) return false;
  if (captured_ && b.get()) {
    retired_.reserve(retired_.size() + 1);  // (so that push_back cannot throw with the allocation detached)
    retired_.push_back(b.detach());
  }
  return b.reserve(bytes);
}

cuda_kernels::AlignOutput DeviceMoe::align_out() const {
  cuda_kernels::AlignOutput a;
  a.seg_offsets = seg.as<int32_t>();
  a.token_of_row = token_of_row.as<int32_t>();
  a.slot_of_row = slot_of_row.as<int32_t>();
  a.row_of_slot = row_of_slot.as<int32_t>();
  a.weight_of_row = weight_of_row.as<float>();
  a.tile_expert = tile_e.as<int32_t>();
  a.tile_row0 = tile_r.as<int32_t>();
  a.num_tiles = ntiles.as<int32_t>();
  a.workspace = align_ws.as<int32_t>();
  return a;
}

void DeviceMoe::refuse_if_capturing(cudaStream_t s, const std::string& what) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  MOERUN_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  if (st != cudaStreamCaptureStatusNone)
    throw_error(ErrorKind::kInvalidArgument,
                "cuda: " + what +
                    " would be allocated while the stream is being captured; run one eager forward of at "
                    "least this many tokens before capturing");
}

void DeviceMoe::reserve(int64_t m, cudaStream_t s, size_t scratch_bytes, bool rows_f32) {
  if (m <= cap_m_ && scratch_bytes <= cap_scratch_ && (!rows_f32 || m <= cap_rows_m_)) return;
  refuse_if_capturing(s, "the workspace of a forward of " + std::to_string(m) + " tokens");
  MOERUN_CUDA_CHECK(cudaDeviceSynchronize());  // old workspaces may still be in use
  // After a capture every growth keeps the old buffers (a graph may point into them): growing by at
  // least half each time bounds what is kept to about twice the final size, where growing to exactly m
  // kept a full set per new maximum (eager calls of 1, 2, 3, ... tokens: quadratic).
  const int64_t cm = std::max<int64_t>(m, captured_ ? cap_m_ + cap_m_ / 2 : cap_m_);
  const size_t cs = std::max(scratch_bytes, captured_ ? cap_scratch_ + cap_scratch_ / 2 : cap_scratch_);
  // The f32 rows for the calls of up to cm tokens whose path reads them (below rows_f32_max_m_ by the
  // rule), and for this one where it does (a forced variant).
  const int64_t rm = std::max({cap_rows_m_, std::min(cm, rows_f32_max_m_), rows_f32 ? m : int64_t{0}});
  // Until every buffer below has grown: a grow that fails has released its old buffer, and the next
  // call must not find the old capacities and use it.
  cap_m_ = -1;
  cap_scratch_ = 0;
  cap_rows_m_ = 0;
  const size_t es = elem_size(elem_);
  const size_t rows = static_cast<size_t>(cm) * K_;
  grow(hidden_in, cm * H_ * es);
  grow(logits, cm * E_ * 4);
  grow(ids, rows * 4);
  grow(tw, rows * 4);
  grow(out, cm * H_ * es);
  grow(token_of_row, rows * 4);
  grow(slot_of_row, rows * 4);
  grow(row_of_slot, rows * 4);
  grow(weight_of_row, rows * 4);
  grow(seg, (E_ + 1) * 4);
  grow(tile_e, cuda_kernels::max_tiles(rows, E_, 16) * 4);
  grow(tile_r, cuda_kernels::max_tiles(rows, E_, 16) * 4);
  grow(ntiles, 4);
  const size_t aws = cuda_kernels::align_workspace_bytes(static_cast<int64_t>(rows), E_);
  // Zero on first use, ordered before this call's alignment on its stream (a plain cudaMemset goes to
  // the legacy stream, which a non-blocking stream does not wait for).
  if (aws && grow(align_ws, aws)) {
    const cudaError_t e = cudaMemsetAsync(align_ws.get(), 0, aws, s);
    if (e != cudaSuccess) align_ws.release();  // (the next call allocates and zeroes it again)
    MOERUN_CUDA_CHECK(e);
  }
  grow(inter_buf, rows * I_ * es);
  grow(rows_buf, static_cast<size_t>(rm) * K_ * H_ * 4);
  if (Is_ > 0) {
    grow(sinter, cm * Is_ * es);
    grow(sout, rm * H_ * 4);
  }
  if (cs) grow(scratch, cs);
  cap_m_ = cm;
  cap_scratch_ = cs;
  cap_rows_m_ = rm;
}

DeviceMoe::Call DeviceMoe::begin(const ForwardArgs& args, int block_m, size_t scratch_bytes, bool align, bool rows_f32) {
  Call c;
  c.m = args.hidden.shape.rank > 0 ? args.hidden.shape[0] : 0;
  c.host = args.hidden.device != DeviceKind::kCuda;
  for (const TensorView* v : {&args.router_logits, &args.topk_ids, &args.topk_weights, &args.output})
    if (!v->empty() && (v->device == DeviceKind::kCuda) == c.host)
      throw_error(ErrorKind::kInvalidArgument,
                  "cuda: hidden, router_logits, topk and output must all be host tensors or all be "
                  "device tensors");
  if (!c.host)
    for (const TensorView* v : {&args.hidden, &args.router_logits, &args.topk_ids, &args.topk_weights, &args.output})
      if (!v->empty() && v->device_index != device_)
        throw_error(ErrorKind::kInvalidArgument, "cuda: a tensor on CUDA device " + std::to_string(v->device_index) +
                                                     ", but this runner's weights are on device " + std::to_string(device_));
  MOERUN_CUDA_CHECK(cudaSetDevice(device_));
  // The launchers read the thread's last error after each launch, so an error pending from before the
  // forward (a failed call of the caller's, or a kernel launch of the caller's not yet checked) would
  // fail this forward: it is cleared here, as layer.hpp and backend.hpp say.
  (void)cudaGetLastError();
  c.stream = c.host ? own_stream_ : static_cast<cudaStream_t>(args.stream);
  if (c.m == 0) return c;
  // What MoeLayer checks, again for a runner called directly: a kernel given the wrong element type, or
  // top-k ids without their weights (a null pointer on the device), would not fail cleanly. (Router
  // logits given beside top-k are not read: routing is skipped.)
  const auto expect_dtype = [](const TensorView& v, DType t, const char* name) {
    if (!v.empty() && v.dtype != t)
      throw_error(ErrorKind::kInvalidArgument, std::string("cuda: ") + name + " is " + std::string(dtype_name(v.dtype)) +
                                                   ", expected " + std::string(dtype_name(t)));
  };
  expect_dtype(args.hidden, spec_.act_dtype, "hidden");
  expect_dtype(args.output, spec_.act_dtype, "output");
  if (args.topk_ids.empty() != args.topk_weights.empty())
    throw_error(ErrorKind::kInvalidArgument, std::string("cuda: ") + (args.topk_ids.empty() ? "topk_weights" : "topk_ids") +
                                                 " given without " + (args.topk_ids.empty() ? "topk_ids" : "topk_weights"));
  expect_dtype(args.topk_ids, DType::kI32, "topk_ids");
  expect_dtype(args.topk_weights, DType::kF32, "topk_weights");
  if (args.topk_ids.empty()) expect_dtype(args.router_logits, DType::kF32, "router_logits");
  // Device tensors: output must not overlap hidden (layer.hpp). The combine of a router-gated shared
  // expert re-reads a token's hidden row in every block while other blocks write its output row.
  if (!c.host) {
    const size_t bytes = static_cast<size_t>(c.m) * H_ * elem_size(elem_);
    const auto h0 = reinterpret_cast<uintptr_t>(args.hidden.data), o0 = reinterpret_cast<uintptr_t>(args.output.data);
    if (h0 < o0 + bytes && o0 < h0 + bytes)
      throw_error(ErrorKind::kInvalidArgument, "cuda: output overlaps hidden; give the output its own memory");
  }
  reserve(c.m, c.stream, scratch_bytes, rows_f32);
  if (!captured_) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    MOERUN_CUDA_CHECK(cudaStreamIsCapturing(c.stream, &st));
    captured_ = st != cudaStreamCaptureStatusNone;
  }
  const int64_t m = c.m;
  const size_t es = elem_size(elem_);
  const cudaStream_t s = c.stream;
  c.hidden = args.hidden.data;
  c.out = args.output.data;
  if (c.host) {
    MOERUN_CUDA_CHECK(cudaMemcpyAsync(hidden_in.get(), args.hidden.data, m * H_ * es, cudaMemcpyHostToDevice, s));
    c.hidden = hidden_in.get();
    c.out = out.get();
  } else if (reinterpret_cast<uintptr_t>(c.hidden) % 16 != 0) {
    // Every kernel after this one reads the token rows as 16-byte vectors (cp.async, TMA, the
    // one-token stage), so rows off that boundary are staged once here (H is a multiple of 8).
    MOERUN_CUDA_CHECK(cudaMemcpyAsync(hidden_in.get(), c.hidden, m * H_ * es, cudaMemcpyDeviceToDevice, s));
    c.hidden = hidden_in.get();
  }
  const int32_t* id_ptr;
  const float* w_ptr;
  if (!args.topk_ids.empty()) {
    id_ptr = args.topk_ids.as<int32_t>();
    w_ptr = args.topk_weights.as<float>();
    if (c.host) {
      MOERUN_CUDA_CHECK(cudaMemcpyAsync(ids.get(), id_ptr, m * K_ * 4, cudaMemcpyHostToDevice, s));
      MOERUN_CUDA_CHECK(cudaMemcpyAsync(tw.get(), w_ptr, m * K_ * 4, cudaMemcpyHostToDevice, s));
      id_ptr = ids.as<int32_t>();
      w_ptr = tw.as<float>();
    }
  } else {
    const float* lg;
    if (!args.router_logits.empty()) {
      lg = args.router_logits.as<float>();
      if (c.host) {
        MOERUN_CUDA_CHECK(cudaMemcpyAsync(logits.get(), lg, m * E_ * 4, cudaMemcpyHostToDevice, s));
        lg = logits.as<float>();
      }
    } else {
      if (!router_w.get())
        throw_error(ErrorKind::kInvalidArgument,
                    "cuda: no router_logits, no topk and the weights have no router_weight");
      MOERUN_CUDA_CHECK(cuda_kernels::launch_router_linear(elem_, c.hidden, m, H_, router_w.as<float>(),
                                                           router_b.as<float>(), E_, logits.as<float>(), s));
      lg = logits.as<float>();
    }
    cuda_kernels::RoutingParams rp;
    rp.num_experts = E_;
    rp.top_k = K_;
    rp.scoring = spec_.routing.scoring == Scoring::kSigmoid ? 1 : 0;
    rp.softmax_after_topk = spec_.routing.softmax_after_topk;
    rp.correction_bias = spec_.routing.correction_bias ? corr.as<float>() : nullptr;
    rp.n_group = spec_.routing.n_group;
    rp.topk_group = spec_.routing.topk_group;
    rp.renormalize = spec_.routing.renormalize;
    rp.scale = spec_.routing.routed_scaling_factor;
    MOERUN_CUDA_CHECK(cuda_kernels::launch_routing(rp, lg, m, ids.as<int32_t>(), tw.as<float>(), s));
    id_ptr = ids.as<int32_t>();
    w_ptr = tw.as<float>();
  }
  (void)need_tiles_;
  c.ids = id_ptr;
  c.weights = w_ptr;
  if (align) this->align(c, block_m);
  return c;
}

void DeviceMoe::align(const Call& c, int block_m, const cuda_kernels::AlignGather* gather) {
  if (c.m == 0) return;
  MOERUN_CUDA_CHECK(cuda_kernels::launch_align(c.ids, c.weights, c.m, K_, E_, block_m, align_out(), c.stream, gather));
}

void DeviceMoe::finish(const ForwardArgs& args, const Call& c) {
  if (!c.host || c.m == 0) return;
  const size_t bytes = static_cast<size_t>(c.m) * H_ * elem_size(elem_);
  MOERUN_CUDA_CHECK(cudaMemcpyAsync(args.output.data, c.out, bytes, cudaMemcpyDeviceToHost, c.stream));
  MOERUN_CUDA_CHECK(cudaStreamSynchronize(c.stream));
}

}  // namespace moerun::cuda_detail
