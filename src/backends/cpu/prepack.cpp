// cpu/prepack.cpp — canonical expert stacks -> the "cpu-nb16-v3" layout (prepack.hpp).
#include "backends/cpu/prepack.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "backends/cpu/huge_pages.hpp"
#include "moerun/error.hpp"

namespace moerun::cpu {

using kernels::PackFmt;

namespace {

// Zeroed, 64-byte aligned; a stack of 2 MiB or more on huge pages where the OS gives them
// (huge_pages.hpp), advised before the memset touches it.
std::shared_ptr<uint8_t> aligned_zeroed(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64 + 64;
  void* p = alloc_large(rounded);
  if (!p) throw_error(ErrorKind::kInvalidArgument, "cpu backend: out of memory packing " + std::to_string(rounded) + " bytes");
  std::memset(p, 0, rounded);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// One block's fp8 block scales (kernels.hpp, group_scales_bytes): each lane's source row block r / 128
// gets a slot, in order of first use, then every K group's slot scales, times 256 (the kernels' e4m3
// decode gives value / 256). Padding lanes take the last slot, which no row block does and which stays
// 0, so they read exactly 0 even beside an inf or NaN scale. scale: [E][ceil(N / 128)][ceil(K / 128)];
// lane_row: the block's 16 canonical rows (-1: padding).
void pack_fp8_block_scales(const float* scale, int64_t e, int64_t N, int64_t K, int64_t groups, const int32_t* lane_row,
                           uint8_t* dst) {
  const int64_t nbr = (N + 127) / 128, nbk = (K + 127) / 128;
  int64_t slot_rb[kernels::kFp8ScaleSlots];
  int slots = 0;
  for (int l = 0; l < kernels::kLanes; ++l) {
    if (lane_row[l] < 0) {
      dst[l] = static_cast<uint8_t>(kernels::kFp8ScaleSlots - 1);
      continue;
    }
    const int64_t rb = lane_row[l] / 128;
    int s = 0;
    while (s < slots && slot_rb[s] != rb) ++s;
    if (s == slots) {
      // Plain and interleaved blocks are 16 aligned rows (one row block); a gated block's gate half is 8
      // rows aligned to 8 (one) and its up half 8 consecutive rows (at most two): three slots at most.
      if (slots == kernels::kFp8ScaleSlots - 1)
        throw_error(ErrorKind::kInternal, "cpu backend: an fp8 block of 16 lanes spans more than 3 scale rows");
      slot_rb[slots++] = rb;
    }
    dst[l] = static_cast<uint8_t>(s);
  }
  for (int64_t g = 0; g < groups && g < nbk; ++g)
    for (int s = 0; s < slots; ++s) {
      const float v = 256.0f * scale[(e * nbr + slot_rb[s]) * nbk + g];
      std::memcpy(dst + kernels::kLanes + (g * kernels::kFp8ScaleSlots + s) * 4, &v, 4);
    }
}

const char* map_name(LaneMap m) {
  switch (m) {
    case LaneMap::kPlain: return "plain";
    case LaneMap::kGatedSplit: return "gated";
    case LaneMap::kGatedInterleaved: return "gated-interleaved";
  }
  return "?";
}

// The shapes and dtypes the packer reads (formats.hpp's table); a mismatch would read out of bounds.
void check_stack(const ExpertMatrix& m) {
  const int64_t E = m.experts, N = m.rows, K = m.cols;
  auto fail = [&](const std::string& what, DType want, const Shape& shape, const TensorView& got) {
    throw_error(ErrorKind::kFormat, "cpu backend: expected " + std::string(dtype_name(want)) + " " + shape.str() + ", got " +
                                        std::string(dtype_name(got.dtype)) + " " + got.shape.str() + " for " + what +
                                        " of a " + std::string(to_string(m.format)) + " stack");
  };
  auto expect = [&](const TensorView& t, DType want, Shape shape, const char* what) {
    if (t.dtype != want || !(t.shape == shape)) fail(what, want, shape, t);
    if (t.data == nullptr && shape.numel() > 0)
      throw_error(ErrorKind::kFormat, "cpu backend: the " + std::string(what) + " of a " + std::string(to_string(m.format)) +
                                          " stack " + shape.str() + " has no data (a null pointer)");
  };
  if (E < 0 || N < 0 || K < 0) throw_error(ErrorKind::kFormat, "cpu backend: negative stack dimensions");
  switch (m.format) {
    case WeightFormat::kF32: expect(m.data, DType::kF32, {E, N, K}, "data"); break;
    case WeightFormat::kF16: expect(m.data, DType::kF16, {E, N, K}, "data"); break;
    case WeightFormat::kBF16: expect(m.data, DType::kBF16, {E, N, K}, "data"); break;
    case WeightFormat::kFp8PerTensor:
      expect(m.data, DType::kF8E4M3, {E, N, K}, "data");
      expect(m.scale, DType::kF32, {E}, "scale");
      break;
    case WeightFormat::kFp8PerChannel:
      expect(m.data, DType::kF8E4M3, {E, N, K}, "data");
      expect(m.scale, DType::kF32, {E, N}, "scale");
      break;
    case WeightFormat::kFp8Block:
      expect(m.data, DType::kF8E4M3, {E, N, K}, "data");
      expect(m.scale, DType::kF32, {E, (N + 127) / 128, (K + 127) / 128}, "scale");
      break;
    case WeightFormat::kMxfp4:
      if (K % 32) throw_error(ErrorKind::kFormat, "cpu backend: mxfp4 K = " + std::to_string(K) + " is not a multiple of 32");
      expect(m.data, DType::kU8, {E, N, K / 2}, "data");
      if (m.scale.dtype == DType::kF8E8M0) expect(m.scale, DType::kF8E8M0, {E, N, K / 32}, "scale");
      else expect(m.scale, DType::kU8, {E, N, K / 32}, "scale");
      break;
    case WeightFormat::kNvfp4:
      if (K % 16) throw_error(ErrorKind::kFormat, "cpu backend: nvfp4 K = " + std::to_string(K) + " is not a multiple of 16");
      expect(m.data, DType::kU8, {E, N, K / 2}, "data");
      expect(m.scale, DType::kF8E4M3, {E, N, K / 16}, "scale");
      expect(m.global_scale, DType::kF32, {E}, "global_scale");
      break;
    case WeightFormat::kInt8PerChannel:
      expect(m.data, DType::kI8, {E, N, K}, "data");
      expect(m.scale, DType::kF32, {E, N}, "scale");
      break;
  }
}

// The PackedStacks alive in this process. A prepared ExpertMatrix carries its stack as an untyped
// keepalive and a layout string, both of which a caller can set: a stack is taken as packed only when
// its keepalive object is one of these, never on the string alone.
struct LiveStacks {
  std::mutex mu;
  std::unordered_set<const void*> set;
};
LiveStacks& live_stacks() {
  static LiveStacks* l = new LiveStacks;  // (never destroyed: stacks may outlive static destruction)
  return *l;
}
std::shared_ptr<PackedStack> new_packed_stack() {
  std::shared_ptr<PackedStack> p(new PackedStack, [](PackedStack* s) {
    {
      std::lock_guard<std::mutex> lock(live_stacks().mu);
      live_stacks().set.erase(s);
    }
    delete s;
  });
  std::lock_guard<std::mutex> lock(live_stacks().mu);
  live_stacks().set.insert(p.get());
  return p;
}
bool is_packed_stack(const void* p) {
  std::lock_guard<std::mutex> lock(live_stacks().mu);
  return live_stacks().set.count(p) != 0;
}

// e4m3 codes 0x7F and 0xFF are NaN. The kernels decode codes by arithmetic, those two as +-480
// (avx512_decode.hpp, dequant_avx2.hpp), so a stack holding one is refused here instead of run as a
// finite weight (the reference reads it as NaN). `n` bytes per expert, `row_len` codes per row, each
// code a `unit` of its row (a column, or a scale group).
void refuse_e4m3_nan(const ExpertMatrix& m, const uint8_t* codes, int64_t n, int64_t row_len, const char* what,
                     const char* unit) {
  std::vector<int64_t> first(static_cast<size_t>(m.experts), -1);
#pragma omp parallel for schedule(dynamic)
  for (int64_t e = 0; e < m.experts; ++e) {
    const uint8_t* p = codes + e * n;
    constexpr int64_t kChunk = 4096;  // a vectorised any() a chunk, then the exact index
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t i1 = std::min(n, i0 + kChunk);
      unsigned any = 0;
      for (int64_t i = i0; i < i1; ++i) any |= (p[i] & 0x7Fu) == 0x7Fu;
      if (!any) continue;
      for (int64_t i = i0; i < i1 && first[static_cast<size_t>(e)] < 0; ++i)
        if ((p[i] & 0x7F) == 0x7F) first[static_cast<size_t>(e)] = i;
      break;
    }
  }
  for (int64_t e = 0; e < m.experts; ++e) {
    const int64_t i = first[static_cast<size_t>(e)];
    if (i < 0) continue;
    throw_error(ErrorKind::kFormat, "cpu backend: the " + std::string(to_string(m.format)) + " stack's " + what +
                                        " holds the e4m3 NaN code at expert " + std::to_string(e) + ", row " +
                                        std::to_string(i / row_len) + ", " + unit + " " + std::to_string(i % row_len) +
                                        ": this backend refuses NaN weights");
  }
}

}  // namespace

std::string layout_tag(LaneMap map, WeightFormat format, kernels::CodeLayout code_layout) {
  std::string t = std::string(kLayoutTag) + ":" + map_name(map);
  if (kernels::has_code_layout(pack_fmt_for(format)))
    t += code_layout == kernels::CodeLayout::kVnniWords ? ":vnni-words" : ":per-k";
  return t;
}

PackFmt pack_fmt_for(WeightFormat f) noexcept {
  switch (f) {
    case WeightFormat::kF32: return PackFmt::kF32;
    case WeightFormat::kF16: return PackFmt::kF16;
    case WeightFormat::kBF16: return PackFmt::kBF16;
    case WeightFormat::kFp8PerTensor: case WeightFormat::kFp8PerChannel: return PackFmt::kFp8;
    case WeightFormat::kFp8Block: return PackFmt::kFp8Block;
    case WeightFormat::kMxfp4: return PackFmt::kMxfp4;
    case WeightFormat::kNvfp4: return PackFmt::kNvfp4;
    case WeightFormat::kInt8PerChannel: return PackFmt::kInt8;
  }
  return PackFmt::kF32;
}

std::shared_ptr<const PackedStack> pack_stack(const ExpertMatrix& m, LaneMap map, kernels::CodeLayout code_layout) {
  if (m.layout != "canonical")
    throw_error(ErrorKind::kInvalidArgument, "cpu backend: cannot pack a weight stack with layout '" + m.layout +
                                                 "' (knows 'canonical' and '" + layout_tag(map, m.format, code_layout) + "')");
  check_stack(m);
  const bool fp8 = m.format == WeightFormat::kFp8PerTensor || m.format == WeightFormat::kFp8PerChannel ||
                   m.format == WeightFormat::kFp8Block;
  if (fp8) refuse_e4m3_nan(m, static_cast<const uint8_t*>(m.data.data), m.rows * m.cols, m.cols, "weights", "column");
  if (m.format == WeightFormat::kNvfp4)
    refuse_e4m3_nan(m, static_cast<const uint8_t*>(m.scale.data), m.rows * (m.cols / 16), m.cols / 16, "scales", "group");
  auto ps = new_packed_stack();
  PackedStack& p = *ps;
  p.fmt = pack_fmt_for(m.format);
  p.map = map;
  p.code_layout = code_layout;
  p.experts = m.experts;
  p.rows = m.rows;
  p.cols = m.cols;
  p.kp = (m.cols + kernels::kKAlign - 1) / kernels::kKAlign * kernels::kKAlign;
  if (map == LaneMap::kPlain) {
    p.outputs = m.rows;
    p.nblocks = (m.rows + 15) / 16;
  } else {
    if (m.rows % 2 != 0)
      throw_error(ErrorKind::kInvalidArgument, "cpu backend: gated w13 has an odd row count " + std::to_string(m.rows));
    p.outputs = m.rows / 2;
    p.nblocks = (p.outputs + 7) / 8;
  }
  const int64_t E = m.experts, N = m.rows, K = m.cols, kp = p.kp, nb = p.nblocks;
  p.lane_row.assign(static_cast<size_t>(nb * 16), -1);
  for (int64_t b = 0; b < nb; ++b)
    for (int l = 0; l < 16; ++l) {
      int64_t r = -1;
      if (map == LaneMap::kPlain) {
        r = b * 16 + l;
        if (r >= N) r = -1;
      } else {
        const int64_t j = b * 8 + (l & 7);
        if (j < p.outputs) {
          const bool up = l >= 8;
          r = map == LaneMap::kGatedSplit ? (up ? p.outputs + j : j) : 2 * j + (up ? 1 : 0);
        }
      }
      p.lane_row[static_cast<size_t>(b * 16 + l)] = static_cast<int32_t>(r);
    }

  p.block_bytes = static_cast<size_t>(kp) * static_cast<size_t>(kernels::bytes_per_k(p.fmt));
  const int G = kernels::group_size(p.fmt);
  const int64_t groups = G ? (kp + G - 1) / G : 0;
  p.gs_block_bytes = static_cast<size_t>(kernels::group_scales_bytes(p.fmt, groups));
  p.data = aligned_zeroed(p.block_bytes * static_cast<size_t>(E * nb));
  if (G) p.gscale = aligned_zeroed(p.gs_block_bytes * static_cast<size_t>(E * nb));
  const bool lane_scaled = p.fmt == PackFmt::kFp8 || p.fmt == PackFmt::kInt8;
  if (lane_scaled) p.lane_scale.assign(static_cast<size_t>(E * nb * 16), 0.0f);
  if (p.fmt == PackFmt::kNvfp4) p.gmul.assign(static_cast<size_t>(E), 0.0f);
  p.weight_bytes_per_expert = static_cast<int64_t>(m.data.nbytes() + m.scale.nbytes() + m.global_scale.nbytes()) /
                              std::max<int64_t>(1, E);

  const uint8_t* src = static_cast<const uint8_t*>(m.data.data);
  const int esz = m.format == WeightFormat::kF32 ? 4 : (m.format == WeightFormat::kF16 || m.format == WeightFormat::kBF16) ? 2 : 1;
  const bool fp4 = p.fmt == PackFmt::kMxfp4 || p.fmt == PackFmt::kNvfp4;
  const int64_t src_row_bytes = fp4 ? K / 2 : K * esz;

#pragma omp parallel for schedule(dynamic)
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* dst = p.data.get() + static_cast<size_t>(e * nb + b) * p.block_bytes;
      uint8_t* gdst = G ? p.gscale.get() + static_cast<size_t>(e * nb + b) * p.gs_block_bytes : nullptr;
      for (int l = 0; l < 16; ++l) {
        const int64_t r = p.lane_row[static_cast<size_t>(b * 16 + l)];
        if (r < 0) continue;
        const uint8_t* row = src + static_cast<size_t>((e * N + r) * src_row_bytes);
        switch (p.fmt) {
          case PackFmt::kF32:
            for (int64_t k = 0; k < K; ++k) std::memcpy(dst + (k * 16 + l) * 4, row + k * 4, 4);
            break;
          case PackFmt::kF16:
            for (int64_t k = 0; k < K; ++k) std::memcpy(dst + (k * 16 + l) * 2, row + k * 2, 2);
            break;
          case PackFmt::kBF16:
            for (int64_t k = 0; k < K; ++k)
              std::memcpy(dst + (((k / 2) * 16 + l) * 2 + (k & 1)) * 2, row + k * 2, 2);
            break;
          case PackFmt::kInt8:
            for (int64_t k = 0; k < K; ++k) dst[k * 16 + l] = row[k];
            break;
          case PackFmt::kFp8: case PackFmt::kFp8Block:
            for (int64_t k = 0; k < K; ++k)
              dst[kernels::fp8_byte(code_layout, k / 2, l, static_cast<int>(k & 1))] = row[k];
            break;
          case PackFmt::kMxfp4: case PackFmt::kNvfp4:
            for (int64_t k = 0; k < K; ++k) {
              const int nib = (k & 1) ? (row[k / 2] >> 4) : (row[k / 2] & 0x0F);
              const int64_t bit = kernels::e2m1_bit(code_layout, k / 2, l, static_cast<int>(k & 1));
              dst[bit / 8] |= static_cast<uint8_t>(nib << (bit % 8));
            }
            break;
        }
        // scales
        switch (m.format) {
          case WeightFormat::kFp8PerTensor:
            p.lane_scale[static_cast<size_t>((e * nb + b) * 16 + l)] = 256.0f * m.scale.as<const float>()[e];
            break;
          case WeightFormat::kFp8PerChannel:
            p.lane_scale[static_cast<size_t>((e * nb + b) * 16 + l)] = 256.0f * m.scale.as<const float>()[e * N + r];
            break;
          case WeightFormat::kInt8PerChannel:
            p.lane_scale[static_cast<size_t>((e * nb + b) * 16 + l)] = m.scale.as<const float>()[e * N + r];
            break;
          case WeightFormat::kFp8Block:  // per block, after the lanes (pack_fp8_block_scales)
            break;
          case WeightFormat::kMxfp4: {
            const int64_t ng = K / 32;
            for (int64_t g = 0; g < ng; ++g) gdst[g * 16 + l] = static_cast<const uint8_t*>(m.scale.data)[(e * N + r) * ng + g];
            break;
          }
          case WeightFormat::kNvfp4: {
            const int64_t ng = K / 16;
            for (int64_t g = 0; g < ng; ++g) gdst[g * 16 + l] = static_cast<const uint8_t*>(m.scale.data)[(e * N + r) * ng + g];
            break;
          }
          default: break;
        }
      }
      if (m.format == WeightFormat::kFp8Block)
        pack_fp8_block_scales(m.scale.as<const float>(), e, N, K, groups, &p.lane_row[static_cast<size_t>(b * 16)], gdst);
    }
    if (p.fmt == PackFmt::kNvfp4) p.gmul[static_cast<size_t>(e)] = 256.0f * m.global_scale.as<const float>()[e];
  }
  if (p.fmt == PackFmt::kMxfp4) {  // the canonical scales are exactly the real lanes' ones
    const auto* sc = static_cast<const uint8_t*>(m.scale.data);
    p.e8m0_fold = std::all_of(sc, sc + E * N * (K / 32),
                              [](uint8_t v) { return v >= kernels::kE8m0FoldMin && v <= kernels::kE8m0FoldMax; });
  }
  return ps;
}

ExpertMatrix prepared_matrix(std::shared_ptr<const PackedStack> p, const ExpertMatrix& source) {
  ExpertMatrix out;
  out.format = source.format;
  out.experts = source.experts;
  out.rows = source.rows;
  out.cols = source.cols;
  out.layout = layout_tag(p->map, source.format, p->code_layout);
  out.data.data = p->data.get();
  out.data.dtype = DType::kU8;
  out.data.shape = Shape{static_cast<int64_t>(p->block_bytes) * p->nblocks * p->experts};
  out.keepalive.push_back(std::static_pointer_cast<const void>(p));
  return out;
}

std::shared_ptr<const PackedStack> packed_of(const ExpertMatrix& m, LaneMap map, kernels::CodeLayout code_layout) {
  if (m.layout == "canonical") return pack_stack(m, map, code_layout);
  const std::string want = layout_tag(map, m.format, code_layout);
  if (m.layout == want && !m.keepalive.empty() && is_packed_stack(m.keepalive.front().get())) {
    auto p = std::static_pointer_cast<const PackedStack>(m.keepalive.front());
    if (m.data.data == p->data.get() && p->experts == m.experts && p->rows == m.rows && p->cols == m.cols &&
        p->map == map && p->fmt == pack_fmt_for(m.format) &&
        (!kernels::has_code_layout(p->fmt) || p->code_layout == code_layout))  // (bf16: one layout only)
      return p;
  }
  if (m.layout == want)
    throw_error(ErrorKind::kInvalidArgument, "cpu backend: weights tagged '" + m.layout + "' are not a stack this backend "
                                                 "prepared (give it canonical weights; it packs them itself)");
  throw_error(ErrorKind::kInvalidArgument, "cpu backend: weight layout '" + m.layout + "' does not fit these kernels (they take 'canonical' or '" +
                                               want + "')");
}

}  // namespace moerun::cpu
