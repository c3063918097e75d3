// Expert weight stacks (formats.hpp): the canonical layout table, its checks, quantization into every
// weight format, dequantization of one row, and fake fp8 activation quantization.
//
// NOTES: the table in formats.hpp lives in exactly one place, canonical_layout() below; quantize,
// check and bytes_per_expert all read it, so they cannot disagree about a shape or a dtype.
// Quantization computes scales the way the reference quantizers do (absmax / format max, e8m0 rounded
// up) and divides by the scale; dequantization multiplies. Both are plain loops: the encoders are a
// handful of integer operations, which keeps a [128, 1536, 2048] stack well under a few seconds.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "core/dequantize.hpp"
#include "core/formats_codecs.hpp"
#include "moerun/error.hpp"
#include "moerun/formats.hpp"

namespace moerun {
namespace {


int64_t ceil_div(int64_t a, int64_t b) noexcept { return (a + b - 1) / b; }

// One tensor of the table: whether the format has it, its dtype and shape, and the shape in symbols
// for "missing ..." messages.
struct Part {
  bool present = false;
  DType dtype = DType::kF32;
  Shape shape;
  const char* symbolic = "";
};

struct Layout {
  Part data, scale, global_scale;
  int64_t k_group = 1;  // K must be a multiple of this (packed fp4 formats)
};

// The table of formats.hpp. For fp4 formats with K not a multiple of the group the shapes are
// meaningless; callers check k_group first.
Layout canonical_layout(WeightFormat f, int64_t e, int64_t n, int64_t k) {
  Layout l;
  auto part = [](DType t, Shape s, const char* sym) { return Part{true, t, s, sym}; };
  switch (f) {
    case WeightFormat::kF32: l.data = part(DType::kF32, {e, n, k}, "[E, N, K]"); break;
    case WeightFormat::kF16: l.data = part(DType::kF16, {e, n, k}, "[E, N, K]"); break;
    case WeightFormat::kBF16: l.data = part(DType::kBF16, {e, n, k}, "[E, N, K]"); break;
    case WeightFormat::kFp8PerTensor:
      l.data = part(DType::kF8E4M3, {e, n, k}, "[E, N, K]");
      l.scale = part(DType::kF32, {e}, "[E]");
      break;
    case WeightFormat::kFp8PerChannel:
      l.data = part(DType::kF8E4M3, {e, n, k}, "[E, N, K]");
      l.scale = part(DType::kF32, {e, n}, "[E, N]");
      break;
    case WeightFormat::kFp8Block:
      l.data = part(DType::kF8E4M3, {e, n, k}, "[E, N, K]");
      l.scale = part(DType::kF32, {e, ceil_div(n, kFp8BlockSize), ceil_div(k, kFp8BlockSize)},
                     "[E, ceil(N/128), ceil(K/128)]");
      break;
    case WeightFormat::kMxfp4:
      l.data = part(DType::kU8, {e, n, k / 2}, "[E, N, K/2]");
      l.scale = part(DType::kU8, {e, n, k / kMxfp4Group}, "[E, N, K/32]");
      l.k_group = kMxfp4Group;
      break;
    case WeightFormat::kNvfp4:
      l.data = part(DType::kU8, {e, n, k / 2}, "[E, N, K/2]");
      l.scale = part(DType::kF8E4M3, {e, n, k / kNvfp4Group}, "[E, N, K/16]");
      l.global_scale = part(DType::kF32, {e}, "[E]");
      l.k_group = kNvfp4Group;
      break;
    case WeightFormat::kInt8PerChannel:
      l.data = part(DType::kI8, {e, n, k}, "[E, N, K]");
      l.scale = part(DType::kF32, {e, n}, "[E, N]");
      break;
  }
  if (!l.data.present)  // a value cast from outside the enum
    throw_error(ErrorKind::kInvalidArgument, "not a weight format: " + std::to_string(static_cast<int>(f)));
  return l;
}

std::string k_group_message(WeightFormat f, int64_t k, int64_t group) {
  return std::string(to_string(f)) + " needs K (columns) to be a multiple of its scale group of " +
         std::to_string(group) + " along K; got K = " + std::to_string(k);
}

// Scale that maps absmax onto qmax; 1 for an all-zero group (and for one so tiny the division
// underflows), so that dequantization never multiplies by zero or divides by it.
float scale_for(float absmax, float qmax) noexcept {
  float s = absmax / qmax;
  // absmax near FLT_MAX: the quotient can round up so that qmax * s overflows, and a finite weight would
  // dequantize to infinity (int8: FLT_MAX / 127). One step down keeps it finite (the largest code then
  // stands for a value within an ulp of absmax).
  if (!std::isfinite(s * qmax)) s = std::nextafter(s, 0.0f);
  return s > 0.0f ? s : 1.0f;
}

[[noreturn]] void throw_non_finite(const float* w, int64_t n, int64_t k, int64_t e, const float* p) {
  const int64_t at = p - (w + e * n * k);
  throw_error(ErrorKind::kInvalidArgument,
              "cannot quantize a non-finite weight (" + std::to_string(*p) + ") at expert " +
                  std::to_string(e) + ", row " + std::to_string(at / k) + ", column " +
                  std::to_string(at % k));
}

// Absolute maximum of p[0..count). A NaN or inf in the input would make every scale of its group
// meaningless, so quantization refuses it, naming where it is.
struct AbsMax {
  const float* w;  // the whole input, for the message
  int64_t n, k, e;
  // The maximum is taken over the bits of |p[i]| as integers: for non-negative floats integer order is
  // float order, with inf and then NaN above every finite value. So one integer max (which
  // vectorizes, unlike a float max under strict IEEE semantics) also tells whether any is non-finite.
  float operator()(const float* p, int64_t count) const {
    uint32_t m = 0;
    for (int64_t i = 0; i < count; ++i) m = std::max(m, std::bit_cast<uint32_t>(p[i]) & 0x7FFFFFFFu);
    if (m > 0x7F7FFFFFu) {  // past FLT_MAX: inf or NaN somewhere
      for (int64_t i = 0; i < count; ++i)
        if (!std::isfinite(p[i])) throw_non_finite(w, n, k, e, p + i);
    }
    return std::bit_cast<float>(m);
  }
};

// Runs body(e) for every expert, experts in parallel. Exceptions cannot leave an OpenMP region, so
// each is caught; the one from the lowest expert is rethrown, which keeps the message deterministic.
template <typename Body>
void for_each_expert(int64_t experts, const Body& body) {
  std::exception_ptr error;
  int64_t error_expert = experts;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t e = 0; e < experts; ++e) {
    try {
      body(e);
    } catch (...) {
#pragma omp critical(moerun_formats_quantize_error)
      if (e < error_expert) {
        error_expert = e;
        error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

void quantize_fp8_expert(WeightFormat f, const float* w, int64_t e, int64_t N, int64_t K, uint8_t* q,
                         float* scale) {
  const AbsMax absmax{w, N, K, e};
  const float* we = w + e * N * K;
  uint8_t* qe = q + e * N * K;
  if (f == WeightFormat::kFp8PerTensor) {
    const float s = scale_for(absmax(we, N * K), kE4m3Max);
    scale[e] = s;
    for (int64_t i = 0; i < N * K; ++i) qe[i] = codec::f32_to_e4m3(we[i] / s);
  } else if (f == WeightFormat::kFp8PerChannel) {
    for (int64_t r = 0; r < N; ++r) {
      const float s = scale_for(absmax(we + r * K, K), kE4m3Max);
      scale[e * N + r] = s;
      for (int64_t c = 0; c < K; ++c) qe[r * K + c] = codec::f32_to_e4m3(we[r * K + c] / s);
    }
  } else {  // kFp8Block: 128 x 128 tiles, the last row / column of tiles may be partial
    const int64_t nb = ceil_div(N, kFp8BlockSize), kb = ceil_div(K, kFp8BlockSize);
    for (int64_t bn = 0; bn < nb; ++bn) {
      const int64_t r0 = bn * kFp8BlockSize, r1 = std::min(N, r0 + kFp8BlockSize);
      for (int64_t bk = 0; bk < kb; ++bk) {
        const int64_t c0 = bk * kFp8BlockSize, c1 = std::min(K, c0 + kFp8BlockSize);
        float m = 0.0f;
        for (int64_t r = r0; r < r1; ++r) m = std::max(m, absmax(we + r * K + c0, c1 - c0));
        const float s = scale_for(m, kE4m3Max);
        scale[(e * nb + bn) * kb + bk] = s;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) qe[r * K + c] = codec::f32_to_e4m3(we[r * K + c] / s);
      }
    }
  }
}

void quantize_int8_expert(const float* w, int64_t e, int64_t N, int64_t K, int8_t* q, float* scale) {
  const AbsMax absmax{w, N, K, e};
  for (int64_t r = 0; r < N; ++r) {
    const float* wr = w + (e * N + r) * K;
    int8_t* qr = q + (e * N + r) * K;
    const float s = scale_for(absmax(wr, K), 127.0f);
    scale[e * N + r] = s;
    for (int64_t c = 0; c < K; ++c) {
      // Adding and removing 1.5 * 2^23 rounds to an integer, nearest even (the default FPU mode),
      // without a libm call; valid for |v| < 2^22, which the clamp guarantees.
      const float v = std::clamp(wr[c] / s, -127.0f, 127.0f);
      qr[c] = static_cast<int8_t>((v + 0x1.8p23f) - 0x1.8p23f);
    }
  }
}

// Packs the e2m1 codes of one scale group, p[0..kGroup) * mul (or / div), two per byte, element 2i
// in the low nibble. Codes go through a small array first so that both loops vectorize.
template <int kGroup, bool kDivide>
void pack_e2m1(const float* p, float factor, uint8_t* out) {
  uint8_t codes[kGroup];
  for (int i = 0; i < kGroup; ++i) codes[i] = codec::f32_to_e2m1(kDivide ? p[i] / factor : p[i] * factor);
  for (int i = 0; i < kGroup / 2; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
}

void quantize_mxfp4_expert(const float* w, int64_t e, int64_t N, int64_t K, uint8_t* q, uint8_t* scale) {
  const AbsMax absmax{w, N, K, e};
  const int64_t groups = K / kMxfp4Group;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t row = e * N + r;
    for (int64_t g = 0; g < groups; ++g) {
      const float* p = w + row * K + g * kMxfp4Group;
      const float m = absmax(p, kMxfp4Group);
      // scale = 2^ceil(log2(absmax / 6)); absmax / 6 is rounded, so bump the exponent in the rare
      // case that leaves absmax / scale above 6 (the division by a power of two is exact).
      uint8_t code = 127;  // all-zero group: scale 1
      if (m > 0.0f) {
        code = codec::f32_to_e8m0_ceil(m / kE2m1Max);
        if (m / codec::e8m0_to_f32(code) > kE2m1Max && code < 254) ++code;
      }
      scale[row * groups + g] = code;
      // Dividing by 2^(code-127) equals multiplying by 2^(127-code), which f32 holds exactly for
      // every code 0..254 (2^-127 as a subnormal): the same result without a division.
      const float inv = code == 254 ? 0x1p-127f : std::bit_cast<float>(static_cast<uint32_t>(254 - code) << 23);
      uint8_t* packed = q + row * (K / 2) + g * (kMxfp4Group / 2);
      pack_e2m1<kMxfp4Group, false>(p, inv, packed);
      // Scales of 2^126 and 2^127 (groups whose absmax is within a factor 6 of FLT_MAX): e2m1 4 and 6
      // (and at 2^127 also 2 and 3) would dequantize past FLT_MAX to infinity, so those codes saturate
      // at the largest finite one (3, or 1.5 at 2^127).
      if (code >= 253) {
        const uint8_t cap = code == 253 ? 5 : 3;  // e2m1 magnitude codes: 5 = 3.0, 3 = 1.5
        for (int i = 0; i < kMxfp4Group / 2; ++i) {
          uint8_t lo = packed[i] & 0xF, hi = packed[i] >> 4;
          if ((lo & 7) > cap) lo = static_cast<uint8_t>((lo & 8) | cap);
          if ((hi & 7) > cap) hi = static_cast<uint8_t>((hi & 8) | cap);
          packed[i] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    }
  }
}

void quantize_nvfp4_expert(const float* w, int64_t e, int64_t N, int64_t K, uint8_t* q, uint8_t* scale,
                           float* global) {
  const AbsMax absmax{w, N, K, e};
  const int64_t groups = K / kNvfp4Group;
  // The global scale puts the largest block scale at the top of e4m3's range.
  const float g = scale_for(absmax(w + e * N * K, N * K), kE4m3Max * kE2m1Max);
  global[e] = g;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t row = e * N + r;
    for (int64_t b = 0; b < groups; ++b) {
      const float* p = w + row * K + b * kNvfp4Group;
      const uint8_t bs = codec::f32_to_e4m3(absmax(p, kNvfp4Group) / (kE2m1Max * g));
      scale[row * groups + b] = bs;
      uint8_t* out = q + row * (K / 2) + b * (kNvfp4Group / 2);
      const float div = codec::e4m3_to_f32(bs) * g;
      if (div > 0.0f) {
        pack_e2m1<kNvfp4Group, true>(p, div, out);
      } else {  // the block scale underflowed e4m3: the block is negligible next to the expert
        std::memset(out, 0, kNvfp4Group / 2);
      }
    }
  }
}

// Throws kFormat when view does not hold what the table says part should be.
void check_part(const TensorView& v, const Part& part, WeightFormat f, const std::string& name) {
  if (!part.present) {
    if (!v.empty())
      throw_error(ErrorKind::kFormat, "unexpected " + name + ": " + std::string(to_string(f)) + " has no such tensor");
    return;
  }
  const std::string expected = std::string(dtype_name(part.dtype)) + " " + part.shape.str();
  if (v.empty() && part.shape.numel() > 0)
    throw_error(ErrorKind::kFormat, "missing " + name + " (" + std::string(to_string(f)) + " needs " +
                                        std::string(dtype_name(part.dtype)) + " " + part.symbolic + ")");
  // mxfp4 scales are e8m0 bytes; checkpoints store them as U8 or F8_E8M0 (the scales only: the packed
  // codes are U8).
  const bool dtype_ok = v.dtype == part.dtype || (f == WeightFormat::kMxfp4 && part.dtype == DType::kU8 &&
                                                  v.dtype == DType::kF8E8M0 && name.ends_with(".scale"));
  if (!dtype_ok || !(v.shape == part.shape))
    throw_error(ErrorKind::kFormat, "expected " + expected + ", got " + std::string(dtype_name(v.dtype)) +
                                        " " + v.shape.str() + " for " + name);
}

}  // namespace

int64_t ExpertMatrix::bytes_per_expert() const noexcept {
  if (experts <= 0) return 0;
  // Measured from the views when there are any, so a repacked (padded) layout counts what it stores;
  // otherwise from the canonical table, for accounting before the weights exist.
  // A default TensorView has rank 0, which Shape counts as one element: count only views with a shape.
  auto bytes_of = [](const TensorView& v) { return v.shape.rank > 0 ? static_cast<int64_t>(v.nbytes()) : 0; };
  if (data.shape.rank > 0) return (bytes_of(data) + bytes_of(scale) + bytes_of(global_scale)) / experts;
  const Layout l = canonical_layout(format, experts, rows, cols);
  int64_t bytes = 0;
  for (const Part* p : {&l.data, &l.scale, &l.global_scale})
    if (p->present) bytes += p->shape.numel() * static_cast<int64_t>(dtype_size(p->dtype));
  return bytes / experts;
}

ExpertMatrix quantize_experts(WeightFormat format, const float* w, int64_t experts, int64_t rows,
                              int64_t cols) {
  if (experts < 0 || rows < 0 || cols < 0)
    throw_error(ErrorKind::kInvalidArgument, "quantize_experts: negative shape [" + std::to_string(experts) +
                                                 ", " + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const Layout l = canonical_layout(format, experts, rows, cols);
  if (cols % l.k_group != 0) throw_error(ErrorKind::kInvalidArgument, k_group_message(format, cols, l.k_group));
  if (w == nullptr && experts * rows * cols > 0)
    throw_error(ErrorKind::kInvalidArgument, "quantize_experts: null weights for a non-empty stack");

  ExpertMatrix m;
  m.format = format;
  m.experts = experts;
  m.rows = rows;
  m.cols = cols;
  auto make = [&m](const Part& p, TensorView& view) -> void* {
    if (!p.present) return nullptr;
    auto t = std::make_shared<HostTensor>(p.dtype, p.shape);
    view = t->view();
    m.keepalive.push_back(t);
    return t->data();
  };
  void* data = make(l.data, m.data);
  void* scale = make(l.scale, m.scale);
  void* global = make(l.global_scale, m.global_scale);
  if (experts * rows * cols == 0) return m;

  const int64_t per_expert = rows * cols;
  for_each_expert(experts, [&](int64_t e) {
    const float* we = w + e * per_expert;
    switch (format) {
      case WeightFormat::kF32:
        std::memcpy(static_cast<float*>(data) + e * per_expert, we, static_cast<size_t>(per_expert) * sizeof(float));
        break;
      case WeightFormat::kF16: {
        uint16_t* d = static_cast<uint16_t*>(data) + e * per_expert;
        for (int64_t i = 0; i < per_expert; ++i) d[i] = codec::f32_to_fp16(we[i]);
        // A finite weight past f16's range would become inf (and every output it reaches NaN or inf):
        // refused, as the scaled formats refuse what they cannot hold. NaN and inf pass through as
        // they would in f32 and bf16.
        for (int64_t i = 0; i < per_expert; ++i)
          if ((d[i] & 0x7FFFu) == 0x7C00u && std::isfinite(we[i]))
            throw_error(ErrorKind::kInvalidArgument,
                        "cannot store weight " + std::to_string(we[i]) + " as f16 (largest 65504) at expert " +
                            std::to_string(e) + ", row " + std::to_string(i / cols) + ", column " +
                            std::to_string(i % cols));
        break;
      }
      case WeightFormat::kBF16: {
        uint16_t* d = static_cast<uint16_t*>(data) + e * per_expert;
        for (int64_t i = 0; i < per_expert; ++i) d[i] = codec::f32_to_bf16(we[i]);
        break;
      }
      case WeightFormat::kFp8PerTensor:
      case WeightFormat::kFp8PerChannel:
      case WeightFormat::kFp8Block:
        quantize_fp8_expert(format, w, e, rows, cols, static_cast<uint8_t*>(data), static_cast<float*>(scale));
        break;
      case WeightFormat::kMxfp4:
        quantize_mxfp4_expert(w, e, rows, cols, static_cast<uint8_t*>(data), static_cast<uint8_t*>(scale));
        break;
      case WeightFormat::kNvfp4:
        quantize_nvfp4_expert(w, e, rows, cols, static_cast<uint8_t*>(data), static_cast<uint8_t*>(scale),
                              static_cast<float*>(global));
        break;
      case WeightFormat::kInt8PerChannel:
        quantize_int8_expert(w, e, rows, cols, static_cast<int8_t*>(data), static_cast<float*>(scale));
        break;
    }
  });
  return m;
}

// Reads the canonical layout only; the product decode(data) * scale is rounded once (for nvfp4 the
// e2m1 x e4m3 product is exact in f32, so (v * block) * global also rounds once).
void dequantize_row(const ExpertMatrix& m, int64_t expert, int64_t row, float* out) {
  check_expert_matrix(m, "dequantize_row's stack");  // dtypes, shapes, every part present, a known format
  if (!out && m.cols > 0) throw_error(ErrorKind::kInvalidArgument, "dequantize_row: null output");
  if (expert < 0 || expert >= m.experts || row < 0 || row >= m.rows)
    throw_error(ErrorKind::kInvalidArgument, "dequantize_row: expert " + std::to_string(expert) + ", row " +
                                                 std::to_string(row) + " outside [" + std::to_string(m.experts) +
                                                 ", " + std::to_string(m.rows) + "]");
  if (m.layout != "canonical")
    throw_error(ErrorKind::kInvalidArgument,
                "dequantize_row reads the canonical layout; this stack is in layout '" + m.layout + "'");
  for (const TensorView* v : {&m.data, &m.scale, &m.global_scale})
    if (!v->empty() && v->device != DeviceKind::kCpu)
      throw_error(ErrorKind::kInvalidArgument, "dequantize_row needs host tensors; this stack is on a GPU");
  dequantize_row_unchecked(m, expert, row, out);
}

void dequantize_row_unchecked(const ExpertMatrix& m, int64_t expert, int64_t row, float* out) {
  const int64_t K = m.cols;
  const int64_t r = expert * m.rows + row;  // row index across experts
  switch (m.format) {
    case WeightFormat::kF32:
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      for (int64_t k = 0; k < K; ++k) out[k] = load_as_f32(m.data.data, m.data.dtype, r * K + k);
      break;
    case WeightFormat::kFp8PerTensor: {
      const auto* q = m.data.as<const uint8_t>() + r * K;
      const float s = m.scale.as<const float>()[expert];
      for (int64_t k = 0; k < K; ++k) out[k] = codec::e4m3_to_f32(q[k]) * s;
      break;
    }
    case WeightFormat::kFp8PerChannel: {
      const auto* q = m.data.as<const uint8_t>() + r * K;
      const float s = m.scale.as<const float>()[r];
      for (int64_t k = 0; k < K; ++k) out[k] = codec::e4m3_to_f32(q[k]) * s;
      break;
    }
    case WeightFormat::kFp8Block: {
      const auto* q = m.data.as<const uint8_t>() + r * K;
      const int64_t nb = ceil_div(m.rows, kFp8BlockSize), kb = ceil_div(K, kFp8BlockSize);
      const float* s = m.scale.as<const float>() + (expert * nb + row / kFp8BlockSize) * kb;
      for (int64_t k = 0; k < K; ++k) out[k] = codec::e4m3_to_f32(q[k]) * s[k / kFp8BlockSize];
      break;
    }
    case WeightFormat::kMxfp4: {
      const auto* q = m.data.as<const uint8_t>() + r * (K / 2);
      const auto* s = m.scale.as<const uint8_t>() + r * (K / kMxfp4Group);
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t nib = (k & 1) ? (q[k / 2] >> 4) : (q[k / 2] & 0xF);
        out[k] = codec::e2m1_to_f32(nib) * codec::e8m0_to_f32(s[k / kMxfp4Group]);
      }
      break;
    }
    case WeightFormat::kNvfp4: {
      const auto* q = m.data.as<const uint8_t>() + r * (K / 2);
      const auto* s = m.scale.as<const uint8_t>() + r * (K / kNvfp4Group);
      const float g = m.global_scale.as<const float>()[expert];
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t nib = (k & 1) ? (q[k / 2] >> 4) : (q[k / 2] & 0xF);
        out[k] = (codec::e2m1_to_f32(nib) * codec::e4m3_to_f32(s[k / kNvfp4Group])) * g;
      }
      break;
    }
    case WeightFormat::kInt8PerChannel: {
      const auto* q = m.data.as<const int8_t>() + r * K;
      const float s = m.scale.as<const float>()[r];
      for (int64_t k = 0; k < K; ++k) out[k] = static_cast<float>(q[k]) * s;
      break;
    }
  }
}

void check_expert_matrix(const ExpertMatrix& m, const std::string& what) {
  if (m.experts < 0 || m.rows < 0 || m.cols < 0)
    throw_error(ErrorKind::kFormat, what + ": negative shape [" + std::to_string(m.experts) + ", " +
                                        std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]");
  const Layout l = canonical_layout(m.format, m.experts, m.rows, m.cols);
  if (m.cols % l.k_group != 0) throw_error(ErrorKind::kFormat, what + ": " + k_group_message(m.format, m.cols, l.k_group));
  check_part(m.data, l.data, m.format, what + ".data");
  check_part(m.scale, l.scale, m.format, what + ".scale");
  check_part(m.global_scale, l.global_scale, m.format, what + ".global_scale");
  for (const TensorView* v : {&m.scale, &m.global_scale})
    if (!v->empty() && !m.data.empty() && (v->device != m.data.device || v->device_index != m.data.device_index))
      throw_error(ErrorKind::kFormat, what + ": scales and data live on different devices");
}

// A group holding inf or NaN comes out non-finite or zero: activations are expected finite, and this
// runs on the hot path of the reference, so it does not scan for them.
void fake_quantize_act_fp8_per_token_group(float* x, int64_t m, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = x + i * k;
    for (int64_t c0 = 0; c0 < k; c0 += kActQuantGroup) {
      const int64_t c1 = std::min(k, c0 + kActQuantGroup);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      const float s = scale_for(amax, kE4m3Max);
      for (int64_t c = c0; c < c1; ++c) row[c] = codec::e4m3_to_f32(codec::f32_to_e4m3(row[c] / s)) * s;
    }
  }
}

float quantize_act_int8_group(const float* x, int n, int8_t* q) noexcept {
  // The largest scale: 127 * 2^121 is finite, 64 * 2^122 = 2^128 is not. Groups whose absmax lies above
  // 127 * 2^121 (within 1% of FLT_MAX) saturate there instead of dequantizing to infinity.
  constexpr int kMaxE = 121;
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite) {
    for (int i = 0; i < n; ++i) q[i] = 0;
    return std::numeric_limits<float>::quiet_NaN();
  }
  int e = 0;
  if (amax > 0.0f) {
    // amax = f * 2^b with f in [0.5, 1): 127 * 2^(b - 7) < amax <= 127 * 2^(b - 6) up to the step
    // checks below, which make e exact (ldexp of small integers is exact).
    int b = 0;
    std::frexp(amax, &b);
    e = std::max(b - 7, -126);
    while (e < kMaxE && std::ldexp(127.0f, e) < amax) ++e;
    while (e > -126 && std::ldexp(127.0f, e - 1) >= amax) --e;
  }
  // x / 2^e as x * 2^-e (a normal power of two for e in [-126, 121]: exact, or below 2^-126 where the
  // code is 0 anyway), rounded half to even by the 1.5 * 2^23 trick (the project never builds with
  // -ffast-math, which could fold it): no libm calls, since the cpu backend quantizes every activation
  // row of a forward with this. The clamp only acts past 127 * 2^121 (see kMaxE).
  const float inv = std::ldexp(1.0f, -e);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::clamp(static_cast<int>((x[i] * inv + kRound) - kRound), -127, 127));
  return std::ldexp(1.0f, e);
}

void fake_quantize_act_int8_per_token_group(float* x, int64_t m, int64_t k) {
  int8_t q[kActQuantGroupInt8];
  for (int64_t i = 0; i < m; ++i) {
    float* row = x + i * k;
    for (int64_t c0 = 0; c0 < k; c0 += kActQuantGroupInt8) {
      const int n = static_cast<int>(std::min<int64_t>(kActQuantGroupInt8, k - c0));
      const float s = quantize_act_int8_group(row + c0, n, q);
      for (int j = 0; j < n; ++j) row[c0 + j] = static_cast<float>(q[j]) * s;  // exact; NaN * 0 = NaN
    }
  }
}

void fake_quantize_act(ActQuant q, float* x, int64_t m, int64_t k) {
  switch (q) {
    case ActQuant::kNone: break;
    case ActQuant::kFp8PerTokenGroup: fake_quantize_act_fp8_per_token_group(x, m, k); break;
    case ActQuant::kInt8PerTokenGroup: fake_quantize_act_int8_per_token_group(x, m, k); break;
  }
}

}  // namespace moerun
