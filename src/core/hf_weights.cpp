// hf_weights.cpp — one MoE layer of a Hugging Face checkpoint <-> MoeWeights, under each family's names.
//
// NOTES:
// - Loading reads only the chosen layer's tensors (views into the memory-mapped files) and copies this
//   rank's shard once into contiguous [E_local, ...] HostTensors. Nothing is requantized: every value
//   that comes out dequantizes to exactly the value the checkpoint stored, but for compressed-tensors
//   NVFP4, whose global scale G is a divisor and is kept as 1 / G (within half an ulp).
// - Per-expert checkpoints keep gate and up as two linears; moerun's w13 is their row concatenation
//   (docs/formats.md). Row-wise scales concatenate as they are. 128x128 fp8 block scales concatenate only when
//   the halves fill whole blocks (intermediate/tp % 128 == 0); otherwise the load is refused.
// - Per-tensor scalars (fp8 per-tensor weight_scale, nvfp4 weight_scale_2) exist once per linear in the
//   checkpoint but once per expert matrix in moerun. When gate and up disagree, the half whose scalar
//   differs is rewritten exactly: each of its e4m3 codes c (fp8 weight codes, or nvfp4 block-scale codes)
//   becomes the code c' with value(c') * S == value(c) * s in exact arithmetic, S being the kept
//   scalar (the larger of the two, else the smaller). This works when the ratio is a power of two that
//   keeps every code in range (the common case for amax-derived scalars that were synced or rounded).
//   When no exact rewrite exists the load is refused with an Error naming both tensors and values; for
//   fp8 the message points to fp8-per-channel, which holds per-tensor scalars exactly (broadcast rows),
//   and which is what read_hf_config makes of every per-tensor fp8 (and int8) checkpoint.
// - Writing is the exact inverse for every (family, format) the loader reads. Router, bias and gate
//   tensors are written as F32 so that a write -> load round trip is bit-exact; loaders accept F32, F16
//   and BF16 for them.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moerun/error.hpp"
#include "moerun/hf.hpp"

namespace moerun {

std::string_view to_string(HfFamily f) noexcept {
  switch (f) {
    case HfFamily::kMixtral: return "mixtral";
    case HfFamily::kQwenMoe: return "qwen-moe";
    case HfFamily::kDeepseek: return "deepseek";
    case HfFamily::kGptOss: return "gpt-oss";
    case HfFamily::kLlama4: return "llama4";
    case HfFamily::kGranite: return "granite";
  }
  return "unknown";
}

namespace {

// ---- small helpers ----------------------------------------------------------------------------------

bool is_fp4(WeightFormat f) { return f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4; }

DType data_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return DType::kF32;
    case WeightFormat::kF16: return DType::kF16;
    case WeightFormat::kBF16: return DType::kBF16;
    case WeightFormat::kFp8PerTensor:
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kFp8Block: return DType::kF8E4M3;
    case WeightFormat::kMxfp4:
    case WeightFormat::kNvfp4: return DType::kU8;
    case WeightFormat::kInt8PerChannel: return DType::kI8;
  }
  return DType::kU8;
}

// Bytes of `cols` elements of a row (fp4 packs two per byte; callers keep cols even).
int64_t col_bytes(WeightFormat f, int64_t cols) {
  return is_fp4(f) ? cols / 2 : cols * static_cast<int64_t>(dtype_size(data_dtype(f)));
}

int group_of(WeightFormat f) {
  return f == WeightFormat::kMxfp4 ? 32 : f == WeightFormat::kNvfp4 ? 16 : 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

// Element i of a float tensor (F32, F16 or BF16), read without alignment assumptions. Exact.
float load_float(const void* data, DType t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data);
  switch (t) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      const uint32_t u = static_cast<uint32_t>(b) << 16;
      float v;
      std::memcpy(&v, &u, 4);
      return v;
    }
    case DType::kF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return f16_bits_to_f32(b);
    }
    default: break;
  }
  MOERUN_ASSERT(false && "load_float on a non-float dtype");
  return 0.0f;
}


// OCP FP8 E4M3 "fn" value of a code (NaN for 0x7F/0xFF). Local so that this file needs no codec library.
double e4m3_value(uint8_t c) {
  const int sign = c >> 7, exp = (c >> 3) & 15, man = c & 7;
  if (exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -v : v;
}

// For every e4m3 code c, the code c' (same sign) with value(c') * to == value(c) * from exactly, or -1.
// The products are exact in double: 4 significant bits times 24.
std::array<int, 256> e4m3_rescale_map(float from, float to) {
  std::array<int, 256> map{};
  for (int c = 0; c < 256; ++c) {
    const double v = e4m3_value(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      map[static_cast<size_t>(c)] = c;
      continue;
    }
    map[static_cast<size_t>(c)] = -1;
    const double target = v * static_cast<double>(from);
    const int base = c & 0x80;
    for (int m = 0; m < 128; ++m) {
      const double w = e4m3_value(static_cast<uint8_t>(base | m));
      if (!std::isnan(w) && w * static_cast<double>(to) == target) {
        map[static_cast<size_t>(c)] = base | m;
        break;
      }
    }
  }
  return map;
}

bool codes_mappable(const uint8_t* codes, int64_t n, const std::array<int, 256>& map) {
  for (int64_t i = 0; i < n; ++i)
    if (map[codes[i]] < 0) return false;
  return true;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A name from a file, safe for a one-line message (control bytes escaped, long names cut).
std::string printable(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > 200) out += "...";
  return out;
}

// "0-3, 5, 7" for a sorted set of layer indices.
std::string list_layers(const std::map<int, std::set<std::string>>& layers) {
  std::vector<int> v;
  for (const auto& kv : layers) v.push_back(kv.first);
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(v[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

// ---- family naming ----------------------------------------------------------------------------------

struct FamilyNames {
  std::string router;                 // relative to the layer prefix, without ".weight"
  std::string experts;                // prefix of the expert tensors
  std::array<std::string, 3> linear;  // per-expert gate, up, down linear names
  std::string shared;                 // shared-expert MLP ("" = the family has none)
  std::string shared_gate;            // Qwen2-MoE shared_expert_gate ("" = none)
};

FamilyNames family_names(HfFamily f) {
  switch (f) {
    case HfFamily::kMixtral:
      return {"block_sparse_moe.gate", "block_sparse_moe.experts", {"w1", "w3", "w2"}, "", ""};
    case HfFamily::kQwenMoe:
      return {"mlp.gate", "mlp.experts", {"gate_proj", "up_proj", "down_proj"}, "mlp.shared_expert",
              "mlp.shared_expert_gate.weight"};
    case HfFamily::kDeepseek:
      return {"mlp.gate", "mlp.experts", {"gate_proj", "up_proj", "down_proj"}, "mlp.shared_experts", ""};
    case HfFamily::kGptOss: return {"mlp.router", "mlp.experts", {"", "", ""}, "", ""};
    case HfFamily::kLlama4:
      return {"feed_forward.router", "feed_forward.experts", {"gate_proj", "up_proj", "down_proj"},
              "feed_forward.shared_expert", ""};
    case HfFamily::kGranite: return {"block_sparse_moe.router.layer", "block_sparse_moe", {"", "", ""}, "shared_mlp", ""};
  }
  throw_error(ErrorKind::kInvalidArgument, "unknown HfFamily #" + std::to_string(static_cast<int>(f)));
}

// How the routed experts of a (family, format) are stored.
enum class Storage {
  kPerExpert,         // <experts>.<e>.<linear>.weight (+ scale tensors) per expert
  kFusedGranite,      // input_linear.weight [E, 2I, H], output_linear.weight [E, H, I]
  kFusedTransposed,   // gate_up_proj [E, H, 2I], down_proj [E, I, H] (gpt-oss, Llama-4), dense; Llama-4 fbgemm
                      // fp8 adds gate_up_proj_scale [E, 1, 2I] and down_proj_scale [E, H, 1] (one per row)
  kGptOssMxfp4,       // gate_up_proj_blocks [E, 2I, H/32, 16] + _scales [E, 2I, H/32], down_proj likewise
};

Storage storage_for(HfFamily f, WeightFormat w) {
  switch (f) {
    case HfFamily::kMixtral:
    case HfFamily::kQwenMoe:
    case HfFamily::kDeepseek: return Storage::kPerExpert;
    // Meta's FP8 release (fbgemm_fp8) keeps the fused tensors with row scales; other quantizers
    // (compressed-tensors, ModelOpt) save one linear per expert, which the loader finds by name.
    case HfFamily::kLlama4:
      return is_unquantized(w) || w == WeightFormat::kFp8PerChannel ? Storage::kFusedTransposed : Storage::kPerExpert;
    case HfFamily::kGptOss:
      if (is_unquantized(w)) return Storage::kFusedTransposed;
      if (w == WeightFormat::kMxfp4) return Storage::kGptOssMxfp4;
      throw_error(ErrorKind::kUnsupported, "gpt-oss checkpoints store experts as bf16/f16/f32 or mxfp4, not " +
                                               std::string(to_string(w)));
    case HfFamily::kGranite:
      if (is_unquantized(w)) return Storage::kFusedGranite;
      throw_error(ErrorKind::kUnsupported, "granite checkpoints store experts as bf16/f16/f32, not " + std::string(to_string(w)));
  }
  throw_error(ErrorKind::kInvalidArgument, "unknown HfFamily #" + std::to_string(static_cast<int>(f)));
}

// Checks of the spec and format that both directions need; throws naming the field.
void check_spec_for_family(const HfModel& model) {
  const MoeSpec& s = model.spec;
  const std::string fam(to_string(model.family));
  if (s.num_experts < 1 || s.hidden < 1 || s.intermediate < 1)
    throw_error(ErrorKind::kInvalidSpec, "spec needs num_experts, hidden and intermediate >= 1 (got E=" +
                                             std::to_string(s.num_experts) + " H=" + std::to_string(s.hidden) +
                                             " I=" + std::to_string(s.intermediate) + ")");
  const bool gpt = model.family == HfFamily::kGptOss;
  if (s.activation.interleaved_gate_up != gpt)
    throw_error(ErrorKind::kInvalidSpec,
                std::string("activation.interleaved_gate_up = ") + (s.activation.interleaved_gate_up ? "true" : "false") +
                    ": " + fam + " checkpoints store gate/up " + (gpt ? "interleaved (needs true)" : "as separate halves (needs false)"));
  if (!s.activation.gated() && model.family != HfFamily::kQwenMoe && model.family != HfFamily::kDeepseek)
    throw_error(ErrorKind::kUnsupported, "non-gated activations are read only from qwen-moe/deepseek names (up_proj), not " + fam);
  storage_for(model.family, s.weight_format);
  const FamilyNames names = family_names(model.family);
  if (s.shared.count > 0 && names.shared.empty())
    throw_error(ErrorKind::kUnsupported, fam + " checkpoints have no shared experts (spec.shared.count = " +
                                             std::to_string(s.shared.count) + ")");
  if (s.shared.count > 0 && model.family == HfFamily::kGranite && !is_unquantized(s.shared_weight_format()))
    throw_error(ErrorKind::kUnsupported, "granite shared_mlp is read only as bf16/f16/f32");
  if (s.shared.count > 0 && s.shared.intermediate < 1)
    throw_error(ErrorKind::kInvalidSpec, "shared.intermediate = " + std::to_string(s.shared.intermediate) + ": must be >= 1");
  if (s.shared.gated_by_router && names.shared_gate.empty())
    throw_error(ErrorKind::kUnsupported, fam + " checkpoints have no shared_expert_gate (spec.shared.gated_by_router)");
  const Storage st = storage_for(model.family, s.weight_format);
  if (s.expert_bias && st != Storage::kPerExpert && model.family != HfFamily::kGptOss)
    throw_error(ErrorKind::kUnsupported, fam + " fused expert tensors have no biases (spec.expert_bias)");
  const int g = group_of(s.weight_format);
  if (g) {
    if (s.hidden % g)
      throw_error(ErrorKind::kUnsupported, std::string(to_string(s.weight_format)) + " needs hidden % " + std::to_string(g) +
                                               " == 0 (hidden = " + std::to_string(s.hidden) + ")");
    if (s.intermediate % g)
      throw_error(ErrorKind::kUnsupported, std::string(to_string(s.weight_format)) + " needs intermediate % " + std::to_string(g) +
                                               " == 0 (intermediate = " + std::to_string(s.intermediate) + ")");
  }
  const WeightFormat sf = s.shared_weight_format();
  if (const int gs = group_of(sf); gs && s.shared.count > 0) {
    if (s.hidden % gs)
      throw_error(ErrorKind::kUnsupported, "shared experts in " + std::string(to_string(sf)) + " need hidden % " +
                                               std::to_string(gs) + " == 0 (hidden = " + std::to_string(s.hidden) + ")");
    if (s.shared.intermediate % gs)
      throw_error(ErrorKind::kUnsupported, std::string(to_string(sf)) + " needs shared.intermediate % " +
                                               std::to_string(gs) + " == 0 (got " + std::to_string(s.shared.intermediate) + ")");
  }
}

// ---- the tensor index over all shards -----------------------------------------------------------------

struct Located {
  TensorView view;
  const std::string* file = nullptr;
};

class Index {
 public:
  explicit Index(const std::vector<std::shared_ptr<SafetensorsFile>>& files) {
    for (const auto& f : files) {
      if (!f) throw_error(ErrorKind::kInvalidArgument, "load_hf_layer: null SafetensorsFile in the file list");
      for (const std::string& name : f->names()) {
        auto [it, inserted] = map_.emplace(name, Located{f->get(name), &f->path()});
        if (!inserted)
          throw_error(ErrorKind::kFormat, "tensor '" + printable(name) + "' is in both " + *it->second.file + " and " + f->path());
      }
    }
    desc_ = files.size() == 1 ? files[0]->path() : std::to_string(files.size()) + " files";
  }
  const Located* find(const std::string& name) const {
    const auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Located, std::less<>>& all() const { return map_; }
  const std::string& desc() const { return desc_; }

 private:
  std::map<std::string, Located, std::less<>> map_;
  std::string desc_;
};

// Every "<prefix>layers.<N>." in a name (at the start or after a '.') whose remainder starts with one of
// the markers, as (N, "<prefix>layers.<N>").
void find_layers(const std::string& name, const std::vector<std::string>& markers,
                 std::map<int, std::set<std::string>>& out) {
  static const std::string kLayers = "layers.";
  for (size_t pos = name.find(kLayers); pos != std::string::npos; pos = name.find(kLayers, pos + 1)) {
    if (pos > 0 && name[pos - 1] != '.') continue;
    size_t i = pos + kLayers.size();
    const size_t digits = i;
    int64_t n = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - digits < 9) n = n * 10 + (name[i++] - '0');
    if (i == digits || i >= name.size() || name[i] != '.') continue;
    const std::string_view rest = std::string_view(name).substr(i + 1);
    for (const auto& m : markers)
      if (rest.substr(0, m.size()) == m) {
        out[static_cast<int>(n)].insert(name.substr(0, i));
        break;
      }
  }
}

// ---- pieces: one expert's linear as the checkpoint stores it ------------------------------------------

enum class ScaleKind { kNone, kTensor, kRow, kBlock, kGroup };

// One [n, k] linear of one expert, pointing into the checkpoint (read-only).
struct Piece {
  std::string name;       // the linear, for messages ("...experts.3.w1")
  int64_t n = 0, k = 0;   // output rows, input columns
  const uint8_t* data = nullptr;
  bool transposed = false;  // data is [k, n] (fused gpt-oss / Llama-4 dense tensors)
  ScaleKind scale_kind = ScaleKind::kNone;
  const uint8_t* scale = nullptr;  // kRow: float [n]; kBlock: float [ceil(n/128), ceil(k/128)]; kGroup: bytes [n, k/g]
  DType scale_dtype = DType::kF32;
  float tensor_scale = 1.0f;       // kTensor
  std::string scale_name;
  float global = 1.0f;             // nvfp4 weight_scale_2 (1 / compressed-tensors' weight_global_scale)
  std::string global_name;
  float global_stored = 1.0f;      // the value global_name holds, for messages
  const uint8_t* bias = nullptr;   // optional float [n]
  DType bias_dtype = DType::kF32;
};

// A run of rows of a piece placed into the destination matrix.
struct Segment {
  const Piece* piece;
  int64_t src_row0, rows, dst_row0;
};

// A destination expert stack and the mutable pointers to its buffers.
struct Dest {
  ExpertMatrix m;
  uint8_t* data = nullptr;
  uint8_t* scale = nullptr;   // bytes
  float* global = nullptr;
  float* bias = nullptr;      // [E, rows] when biases are loaded
  int64_t bias_rows = 0;
};

template <typename T>
T* alloc(std::vector<std::shared_ptr<const void>>& keep, DType dt, Shape s, TensorView* view) {
  auto t = std::make_shared<HostTensor>(dt, s);
  *view = t->view();
  keep.push_back(t);
  return static_cast<T*>(t->data());
}

Dest make_dest(WeightFormat f, int64_t experts, int64_t rows, int64_t cols) {
  Dest d;
  ExpertMatrix& m = d.m;
  m.format = f;
  m.experts = experts;
  m.rows = rows;
  m.cols = cols;
  d.data = alloc<uint8_t>(m.keepalive, data_dtype(f), Shape{experts, rows, is_fp4(f) ? cols / 2 : cols}, &m.data);
  switch (f) {
    case WeightFormat::kFp8PerTensor: d.scale = alloc<uint8_t>(m.keepalive, DType::kF32, Shape{experts}, &m.scale); break;
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel:
      d.scale = alloc<uint8_t>(m.keepalive, DType::kF32, Shape{experts, rows}, &m.scale);
      break;
    case WeightFormat::kFp8Block:
      d.scale = alloc<uint8_t>(m.keepalive, DType::kF32,
                               Shape{experts, ceil_div(rows, kFp8BlockSize), ceil_div(cols, kFp8BlockSize)}, &m.scale);
      break;
    case WeightFormat::kMxfp4:
      d.scale = alloc<uint8_t>(m.keepalive, DType::kU8, Shape{experts, rows, cols / kMxfp4Group}, &m.scale);
      break;
    case WeightFormat::kNvfp4:
      d.scale = alloc<uint8_t>(m.keepalive, DType::kF8E4M3, Shape{experts, rows, cols / kNvfp4Group}, &m.scale);
      d.global = alloc<float>(m.keepalive, DType::kF32, Shape{experts}, &m.global_scale);
      break;
    default: break;
  }
  return d;
}

// Copies an [nr, nc] element window of a [*, k]-stored-as-[k, n] (transposed) matrix, tile by tile.
template <size_t ES>
void copy_transposed(uint8_t* dst, int64_t dst_stride, const uint8_t* src, int64_t src_n, int64_t r0, int64_t nr,
                     int64_t c0, int64_t nc) {
  constexpr int64_t kTile = 32;
  for (int64_t cb = 0; cb < nc; cb += kTile)
    for (int64_t rb = 0; rb < nr; rb += kTile)
      for (int64_t r = rb; r < std::min(nr, rb + kTile); ++r)
        for (int64_t c = cb; c < std::min(nc, cb + kTile); ++c)
          std::memcpy(dst + (r * dst_stride + c) * static_cast<int64_t>(ES),
                      src + ((c0 + c) * src_n + (r0 + r)) * static_cast<int64_t>(ES), ES);
}

// Places rows [seg.src_row0, +seg.rows) and columns [col0, +ncols) of seg.piece into expert e of dest at
// row seg.dst_row0: data, row-wise/group/block scales and bias. Per-tensor scalars are unified later.
void place(Dest& d, int64_t e, const Segment& seg, int64_t col0, int64_t ncols) {
  const Piece& p = *seg.piece;
  const WeightFormat f = d.m.format;
  const int64_t R = d.m.rows, K = d.m.cols;
  MOERUN_ASSERT(ncols == K && seg.dst_row0 + seg.rows <= R && col0 + ncols <= p.k && seg.src_row0 + seg.rows <= p.n);
  // data
  const int64_t dst_rb = col_bytes(f, K), src_rb = col_bytes(f, p.k), cb0 = col_bytes(f, col0), cbn = col_bytes(f, ncols);
  uint8_t* dst = d.data + (e * R + seg.dst_row0) * dst_rb;
  if (p.transposed) {
    const size_t es = dtype_size(data_dtype(f));
    if (es == 2) copy_transposed<2>(dst, K, p.data, p.n, seg.src_row0, seg.rows, col0, ncols);
    else if (es == 4) copy_transposed<4>(dst, K, p.data, p.n, seg.src_row0, seg.rows, col0, ncols);
    else copy_transposed<1>(dst, K, p.data, p.n, seg.src_row0, seg.rows, col0, ncols);
  } else {
    for (int64_t r = 0; r < seg.rows; ++r)
      std::memcpy(dst + r * dst_rb, p.data + (seg.src_row0 + r) * src_rb + cb0, static_cast<size_t>(cbn));
  }
  // scales
  switch (f) {
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel: {
      float* s = reinterpret_cast<float*>(d.scale) + e * R + seg.dst_row0;
      for (int64_t r = 0; r < seg.rows; ++r)
        s[r] = p.scale_kind == ScaleKind::kTensor ? p.tensor_scale : load_float(p.scale, p.scale_dtype, seg.src_row0 + r);
      break;
    }
    case WeightFormat::kMxfp4:
    case WeightFormat::kNvfp4: {
      const int64_t g = group_of(f);
      uint8_t* s = d.scale + (e * R + seg.dst_row0) * (K / g);
      for (int64_t r = 0; r < seg.rows; ++r)
        std::memcpy(s + r * (K / g), p.scale + (seg.src_row0 + r) * (p.k / g) + col0 / g, static_cast<size_t>(K / g));
      break;
    }
    case WeightFormat::kFp8Block: {
      constexpr int64_t B = kFp8BlockSize;
      const bool rows_ok = seg.src_row0 % B == 0 && seg.dst_row0 % B == 0 &&
                           (seg.rows % B == 0 || (seg.src_row0 + seg.rows == p.n && seg.dst_row0 + seg.rows == R));
      const bool cols_ok = col0 % B == 0 && (ncols % B == 0 || col0 + ncols == p.k);
      if (!rows_ok || !cols_ok)
        throw_error(ErrorKind::kUnsupported,
                    "fp8-block scales of " + p.name +
                        " cannot be concatenated or sliced without requantization: rows [" + std::to_string(seg.src_row0) + ", " +
                        std::to_string(seg.src_row0 + seg.rows) + ") and columns [" + std::to_string(col0) + ", " +
                        std::to_string(col0 + ncols) + ") must fall on 128-row/column block boundaries "
                        "(" + std::string(p.name.find("shared") != std::string::npos ? "shared." : "") + "intermediate/tp % 128 == 0)");
      const int64_t dkb = ceil_div(K, B), skb = ceil_div(p.k, B);
      float* s = reinterpret_cast<float*>(d.scale) + (e * ceil_div(R, B) + seg.dst_row0 / B) * dkb;
      const int64_t brows = ceil_div(seg.rows, B), sr0 = seg.src_row0 / B, sc0 = col0 / B;
      for (int64_t br = 0; br < brows; ++br)
        for (int64_t bc = 0; bc < dkb; ++bc) s[br * dkb + bc] = load_float(p.scale, p.scale_dtype, (sr0 + br) * skb + sc0 + bc);
      break;
    }
    default: break;
  }
  if (d.bias && p.bias) {
    float* b = d.bias + e * d.bias_rows + seg.dst_row0;
    for (int64_t r = 0; r < seg.rows; ++r) b[r] = load_float(p.bias, p.bias_dtype, seg.src_row0 + r);
  }
}

// Per-tensor scalars of the segments (fp8 per-tensor scale, nvfp4 global) -> the one scalar of expert e,
// rewriting the e4m3 codes of a segment whose scalar differs, exactly, or refusing (see NOTES).
void unify_scalars(Dest& d, int64_t e, const std::vector<Segment>& segs) {
  const WeightFormat f = d.m.format;
  const bool nv = f == WeightFormat::kNvfp4;
  if (f != WeightFormat::kFp8PerTensor && !nv) return;
  auto scalar = [&](const Segment& s) { return nv ? s.piece->global : s.piece->tensor_scale; };
  const int64_t R = d.m.rows, K = d.m.cols;
  // The codes a segment's scalar multiplies: fp8 weight codes, or nvfp4 block-scale codes.
  auto codes = [&](const Segment& s, int64_t* n) {
    const int64_t per_row = nv ? K / kNvfp4Group : K;
    *n = s.rows * per_row;
    return (nv ? d.scale : d.data) + (e * R + s.dst_row0) * per_row;
  };
  float lo = scalar(segs[0]), hi = lo;
  bool all_equal = true;
  for (const auto& s : segs) {
    const float v = scalar(s);
    all_equal = all_equal && std::memcmp(&v, &lo, sizeof v) == 0;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  float chosen = lo;
  bool ok = all_equal;
  if (!ok) {
    bool finite = true;
    for (const auto& s : segs) finite = finite && std::isfinite(scalar(s)) && scalar(s) > 0.0f;
    for (const float target : {hi, lo}) {
      if (ok || !finite) break;
      bool all = true;
      for (const auto& s : segs) {
        if (scalar(s) == target) continue;
        int64_t n = 0;
        const uint8_t* c = codes(s, &n);
        all = all && codes_mappable(c, n, e4m3_rescale_map(scalar(s), target));
      }
      if (!all) continue;
      for (const auto& s : segs) {
        if (scalar(s) == target) continue;
        const auto map = e4m3_rescale_map(scalar(s), target);
        int64_t n = 0;
        uint8_t* c = codes(s, &n);
        for (int64_t i = 0; i < n; ++i) c[i] = static_cast<uint8_t>(map[c[i]]);
      }
      ok = true;
      chosen = target;
    }
  }
  if (!ok) {
    std::string which;
    for (const auto& s : segs) {
      if (!which.empty()) which += " and ";
      which += (nv ? s.piece->global_name : s.piece->scale_name) + " = " + num(nv ? s.piece->global_stored : scalar(s));
    }
    throw_error(ErrorKind::kUnsupported,
                which + " differ, and " +
                    (nv ? "the e4m3 block scales of neither half absorb the ratio exactly; moerun keeps one nvfp4 "
                          "global scale per expert matrix and does not requantize"
                        : "the fp8 codes of neither half rescale exactly; moerun keeps one scale per expert matrix "
                          "and does not requantize (load as fp8-per-channel to keep both exactly)"));
  }
  if (nv) d.global[e] = chosen;
  else reinterpret_cast<float*>(d.scale)[e] = chosen;
}

// ---- loading ------------------------------------------------------------------------------------------

class Loader {
 public:
  Loader(const HfModel& model, const Index& idx, std::string prefix, int layer)
      : model_(model), s_(model.spec), idx_(idx), p_(std::move(prefix) + "."), layer_(layer),
        names_(family_names(model.family)), storage_(storage_for(model.family, model.spec.weight_format)) {
    // Llama-4 fp8-per-channel comes fused (fbgemm) or one linear per expert (compressed-tensors).
    if (model.family == HfFamily::kLlama4 && storage_ == Storage::kFusedTransposed && !is_unquantized(s_.weight_format) &&
        !idx_.find(p_ + names_.experts + ".gate_up_proj") && idx_.find(p_ + names_.experts + ".0." + names_.linear[1] + ".weight"))
      storage_ = Storage::kPerExpert;
  }

  MoeWeights load();

 private:
  const TensorView& need(const std::string& name) const {
    const Located* l = idx_.find(name);
    if (!l)
      throw_error(ErrorKind::kNotFound, "missing tensor '" + name + "' (layer " + std::to_string(layer_) + " of " +
                                            idx_.desc() + ")");
    return l->view;
  }
  const TensorView* maybe(const std::string& name) const {
    const Located* l = idx_.find(name);
    return l ? &l->view : nullptr;
  }

  // Throws Error{kFormat} unless v has one of the dtypes and one of the shapes.
  static void expect(const TensorView& v, std::initializer_list<DType> dtypes, std::initializer_list<Shape> shapes,
                     const std::string& name) {
    const bool dt_ok = std::find(dtypes.begin(), dtypes.end(), v.dtype) != dtypes.end();
    const bool sh_ok = std::find(shapes.begin(), shapes.end(), v.shape) != shapes.end();
    if (dt_ok && sh_ok) return;
    std::string want;  // every dtype accepted ("F32|BF16|F16"): naming only the first misleads when the shape is off
    for (DType d : dtypes) {
      if (!want.empty()) want += '|';
      want += dtype_name(d);
    }
    want += " ";
    bool first = true;
    for (const Shape& s : shapes) {
      want += (first ? "" : " or ") + s.str();
      first = false;
    }
    throw_error(ErrorKind::kFormat, "expected " + want + ", got " + std::string(dtype_name(v.dtype)) + " " +
                                        v.shape.str() + " for " + name);
  }

  static float scalar_of(const TensorView& v, const std::string& name) {
    expect(v, {DType::kF32, DType::kBF16, DType::kF16}, {Shape{}, Shape{1}}, name);
    return load_float(v.data, v.dtype, 0);
  }

  // F32 copy of a float tensor of shape `want` (also accepting `alt`, same element count).
  HostTensor f32_copy(const std::string& name, Shape want, std::optional<Shape> alt = std::nullopt) const {
    const TensorView& v = need(name);
    if (alt) expect(v, {DType::kF32, DType::kBF16, DType::kF16}, {want, *alt}, name);
    else expect(v, {DType::kF32, DType::kBF16, DType::kF16}, {want}, name);
    HostTensor t(DType::kF32, want);
    float* out = t.as<float>();
    for (int64_t i = 0; i < want.numel(); ++i) out[i] = load_float(v.data, v.dtype, i);
    return t;
  }

  // A per-linear checkpoint tensor set in format f: <base>.weight and the format's scale tensors.
  Piece linear(const std::string& base, int64_t n, int64_t k, bool with_bias, WeightFormat f) const;
  // The routed experts' pieces of global expert e: [gate, up, down] or [gate_up, down].
  std::vector<Piece> expert_pieces(int64_t e) const;

  const HfModel& model_;
  const MoeSpec& s_;
  const Index& idx_;
  std::string p_;
  int layer_;
  FamilyNames names_;
  Storage storage_;
  // Fused tensors, checked once.
  const TensorView* fused_[4] = {nullptr, nullptr, nullptr, nullptr};
};

Piece Loader::linear(const std::string& base, int64_t n, int64_t k, bool with_bias, WeightFormat f) const {
  Piece p;
  p.name = base;
  p.n = n;
  p.k = k;
  // compressed-tensors names packed 4-bit codes weight_packed.
  const bool packed = is_fp4(f) && !maybe(base + ".weight") && maybe(base + ".weight_packed");
  const std::string wname = base + (packed ? ".weight_packed" : ".weight");
  const TensorView& w = need(wname);
  expect(w, {data_dtype(f)}, {is_fp4(f) ? Shape{n, k / 2} : Shape{n, k}}, wname);
  p.data = static_cast<const uint8_t*>(w.data);
  const auto float_types = {DType::kF32, DType::kBF16, DType::kF16};
  switch (f) {
    case WeightFormat::kFp8PerTensor:
      p.scale_name = base + ".weight_scale";
      p.scale_kind = ScaleKind::kTensor;
      p.tensor_scale = scalar_of(need(p.scale_name), p.scale_name);
      break;
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel: {
      p.scale_name = base + ".weight_scale";
      const TensorView& sv = need(p.scale_name);
      if (sv.shape == Shape{} || (sv.shape == Shape{1} && n != 1)) {
        p.scale_kind = ScaleKind::kTensor;  // a per-tensor checkpoint, held exactly as rows of one value
        p.tensor_scale = scalar_of(sv, p.scale_name);
      } else {
        expect(sv, float_types, {Shape{n, 1}, Shape{n}}, p.scale_name);
        p.scale_kind = ScaleKind::kRow;
        p.scale = static_cast<const uint8_t*>(sv.data);
        p.scale_dtype = sv.dtype;
      }
      break;
    }
    case WeightFormat::kFp8Block: {
      p.scale_name = base + ".weight_scale_inv";
      const TensorView* sv = maybe(p.scale_name);
      if (!sv && maybe(base + ".weight_scale")) {  // compressed-tensors block strategy
        p.scale_name = base + ".weight_scale";
        sv = maybe(p.scale_name);
      }
      if (!sv) need(base + ".weight_scale_inv");  // throws, naming the DeepSeek name
      expect(*sv, float_types, {Shape{ceil_div(n, kFp8BlockSize), ceil_div(k, kFp8BlockSize)}}, p.scale_name);
      p.scale_kind = ScaleKind::kBlock;
      p.scale = static_cast<const uint8_t*>(sv->data);
      p.scale_dtype = sv->dtype;
      break;
    }
    case WeightFormat::kMxfp4:
    case WeightFormat::kNvfp4: {
      const int g = group_of(f);
      p.scale_name = base + ".weight_scale";
      const TensorView& sv = need(p.scale_name);
      if (f == WeightFormat::kMxfp4) expect(sv, {DType::kU8, DType::kF8E8M0}, {Shape{n, k / g}}, p.scale_name);
      else expect(sv, {DType::kF8E4M3}, {Shape{n, k / g}}, p.scale_name);
      p.scale_kind = ScaleKind::kGroup;
      p.scale = static_cast<const uint8_t*>(sv.data);
      if (f == WeightFormat::kNvfp4) {
        p.global_name = base + ".weight_scale_2";
        if (!maybe(p.global_name) && maybe(base + ".weight_global_scale")) {
          // compressed-tensors stores the global scale as a divisor (value = e2m1 * s / G); moerun keeps
          // the multiplier 1 / G, as engines do, within half an ulp of dividing.
          p.global_name = base + ".weight_global_scale";
          const float G = scalar_of(need(p.global_name), p.global_name);
          if (!(G > 0.0f) || !std::isfinite(G) || !std::isfinite(1.0f / G))
            throw_error(ErrorKind::kFormat, p.global_name + " = " + num(G) + ": a global scale divisor must be positive, "
                                            "finite and have a finite reciprocal");
          p.global = 1.0f / G;
          p.global_stored = G;
        } else {
          p.global = p.global_stored = scalar_of(need(p.global_name), p.global_name);
        }
      }
      break;
    }
    default: break;
  }
  if (with_bias) {
    const std::string bname = base + ".bias";
    const TensorView& b = need(bname);
    expect(b, float_types, {Shape{n}}, bname);
    p.bias = static_cast<const uint8_t*>(b.data);
    p.bias_dtype = b.dtype;
  }
  return p;
}

std::vector<Piece> Loader::expert_pieces(int64_t e) const {
  const int64_t H = s_.hidden, I = s_.intermediate, R = s_.w13_rows();
  const WeightFormat f = s_.weight_format;
  const std::string ex = p_ + names_.experts + ".";
  std::vector<Piece> out;
  switch (storage_) {
    case Storage::kPerExpert: {
      const std::string b = ex + std::to_string(e) + ".";
      if (s_.activation.gated()) out.push_back(linear(b + names_.linear[0], I, H, s_.expert_bias, f));
      out.push_back(linear(b + names_.linear[1], I, H, s_.expert_bias, f));
      out.push_back(linear(b + names_.linear[2], H, I, s_.expert_bias, f));
      return out;
    }
    case Storage::kFusedGranite:
    case Storage::kFusedTransposed:
    case Storage::kGptOssMxfp4: break;
  }
  const size_t es = dtype_size(data_dtype(f));
  const std::string fam(to_string(model_.family));
  Piece gu, down;
  gu.name = ex + (storage_ == Storage::kFusedGranite ? "input_linear" : "gate_up_proj");
  down.name = ex + (storage_ == Storage::kFusedGranite ? "output_linear" : "down_proj");
  gu.n = R;
  gu.k = H;
  down.n = H;
  down.k = I;
  if (storage_ == Storage::kGptOssMxfp4) {
    const int64_t g = kMxfp4Group;
    gu.data = static_cast<const uint8_t*>(fused_[0]->data) + e * R * H / 2;
    gu.scale = static_cast<const uint8_t*>(fused_[1]->data) + e * R * (H / g);
    down.data = static_cast<const uint8_t*>(fused_[2]->data) + e * H * I / 2;
    down.scale = static_cast<const uint8_t*>(fused_[3]->data) + e * H * (I / g);
    gu.scale_kind = down.scale_kind = ScaleKind::kGroup;
  } else {
    gu.data = static_cast<const uint8_t*>(fused_[0]->data) + e * R * H * static_cast<int64_t>(es);
    down.data = static_cast<const uint8_t*>(fused_[2]->data) + e * H * I * static_cast<int64_t>(es);
    gu.transposed = down.transposed = storage_ == Storage::kFusedTransposed;
    if (f == WeightFormat::kFp8PerChannel) {  // Llama-4 fbgemm: one scale per output row
      gu.scale_name = gu.name + "_scale";
      down.scale_name = down.name + "_scale";
      gu.scale_kind = down.scale_kind = ScaleKind::kRow;
      gu.scale_dtype = fused_[1]->dtype;
      down.scale_dtype = fused_[3]->dtype;
      gu.scale = static_cast<const uint8_t*>(fused_[1]->data) + e * R * static_cast<int64_t>(dtype_size(gu.scale_dtype));
      down.scale = static_cast<const uint8_t*>(fused_[3]->data) + e * H * static_cast<int64_t>(dtype_size(down.scale_dtype));
    }
  }
  if (s_.expert_bias) {  // gpt-oss: gate_up_proj_bias [E, 2I], down_proj_bias [E, H]
    const std::string gbn = ex + "gate_up_proj_bias", dbn = ex + "down_proj_bias";
    const TensorView& gb = need(gbn);
    const TensorView& db = need(dbn);
    const auto ft = {DType::kF32, DType::kBF16, DType::kF16};
    expect(gb, ft, {Shape{s_.num_experts, R}}, gbn);
    expect(db, ft, {Shape{s_.num_experts, H}}, dbn);
    gu.bias = static_cast<const uint8_t*>(gb.data) + e * R * static_cast<int64_t>(dtype_size(gb.dtype));
    gu.bias_dtype = gb.dtype;
    down.bias = static_cast<const uint8_t*>(db.data) + e * H * static_cast<int64_t>(dtype_size(db.dtype));
    down.bias_dtype = db.dtype;
  }
  out.push_back(std::move(gu));
  out.push_back(std::move(down));
  return out;
}

MoeWeights Loader::load() {
  const MoeSpec& s = s_;
  const WeightFormat f = s.weight_format;
  const int64_t E = s.num_experts, H = s.hidden, I = s.intermediate;
  const int64_t El = local_experts(s), e0 = first_local_expert(s), Il = local_intermediate(s), tpr = tp_rank(s);
  const int64_t tp = s.parallel.tp;
  if (El < 1 || e0 < 0 || e0 + El > E || Il < 1 || tpr < 0 || (tpr + 1) * Il > I || Il * tp != I)
    throw_error(ErrorKind::kInvalidSpec, "spec.parallel (tp=" + std::to_string(s.parallel.tp) + ", ep=" +
                                             std::to_string(s.parallel.ep) + ", rank=" + std::to_string(s.parallel.rank) +
                                             ") does not split E=" + std::to_string(E) + ", I=" + std::to_string(I) +
                                             " evenly");
  const int g = group_of(f);
  if (g && Il % g)
    throw_error(ErrorKind::kUnsupported, std::string(to_string(f)) + " needs intermediate/tp % " + std::to_string(g) +
                                             " == 0 to slice w2 (got " + std::to_string(Il) + ")");

  // Fused tensors: check the whole stack once.
  const std::string ex = p_ + names_.experts + ".";
  const DType dt = data_dtype(f);
  const int64_t R = s.w13_rows();
  switch (storage_) {
    case Storage::kFusedGranite:
      fused_[0] = &need(ex + "input_linear.weight");
      fused_[2] = &need(ex + "output_linear.weight");
      expect(*fused_[0], {dt}, {Shape{E, R, H}}, ex + "input_linear.weight");
      expect(*fused_[2], {dt}, {Shape{E, H, I}}, ex + "output_linear.weight");
      break;
    case Storage::kFusedTransposed:
      fused_[0] = &need(ex + "gate_up_proj");
      fused_[2] = &need(ex + "down_proj");
      expect(*fused_[0], {dt}, {Shape{E, H, R}}, ex + "gate_up_proj");
      expect(*fused_[2], {dt}, {Shape{E, I, H}}, ex + "down_proj");
      if (f == WeightFormat::kFp8PerChannel) {
        const auto ft = {DType::kF32, DType::kBF16, DType::kF16};
        fused_[1] = &need(ex + "gate_up_proj_scale");
        fused_[3] = &need(ex + "down_proj_scale");
        expect(*fused_[1], ft, {Shape{E, 1, R}, Shape{E, R}}, ex + "gate_up_proj_scale");
        expect(*fused_[3], ft, {Shape{E, H, 1}, Shape{E, H}}, ex + "down_proj_scale");
      }
      break;
    case Storage::kGptOssMxfp4: {
      const int64_t gg = kMxfp4Group;
      const char* names[4] = {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"};
      for (int i = 0; i < 4; ++i) fused_[i] = &need(ex + names[i]);
      expect(*fused_[0], {DType::kU8}, {Shape{E, R, H / gg, 16}}, ex + names[0]);
      expect(*fused_[1], {DType::kU8, DType::kF8E8M0}, {Shape{E, R, H / gg}}, ex + names[1]);
      expect(*fused_[2], {DType::kU8}, {Shape{E, H, I / gg, 16}}, ex + names[2]);
      expect(*fused_[3], {DType::kU8, DType::kF8E8M0}, {Shape{E, H, I / gg}}, ex + names[3]);
      break;
    }
    case Storage::kPerExpert: break;
  }

  MoeWeights w;
  // Router tensors: the full [E, ...] on every rank.
  const std::string router = p_ + names_.router;
  w.router_weight = f32_copy(router + ".weight", Shape{E, H});
  if (s.router_bias) w.router_bias = f32_copy(router + ".bias", Shape{E});
  if (s.routing.correction_bias) w.correction_bias = f32_copy(router + ".e_score_correction_bias", Shape{E});

  // Segments of w13 for this tp rank, given the pieces; w2 takes columns [tpr*Il, +Il) of down.
  const int64_t Rl = s.w13_rows() / tp;
  auto w13_segments = [&](const std::vector<Piece>& pcs, bool fused, int64_t inter, int64_t local) {
    std::vector<Segment> segs;
    const int64_t r0 = tpr * local;
    if (s.activation.interleaved_gate_up) {
      segs.push_back({&pcs[0], 2 * r0, 2 * local, 0});
    } else if (!s.activation.gated()) {
      segs.push_back({&pcs[0], r0, local, 0});
    } else if (fused) {
      segs.push_back({&pcs[0], r0, local, 0});
      segs.push_back({&pcs[0], inter + r0, local, local});
    } else {
      segs.push_back({&pcs[0], r0, local, 0});
      segs.push_back({&pcs[1], r0, local, local});
    }
    return segs;
  };

  // Check the first expert's tensors before allocating the whole shard.
  std::vector<Piece> pcs = expert_pieces(e0);
  Dest w13 = make_dest(f, El, Rl, H), w2 = make_dest(f, El, H, Il);
  HostTensor w13_bias, w2_bias;
  if (s.expert_bias) {
    w13_bias = HostTensor(DType::kF32, Shape{El, Rl});
    w2_bias = HostTensor(DType::kF32, Shape{El, H});
    w13.bias = w13_bias.as<float>();
    w13.bias_rows = Rl;
    w2.bias = w2_bias.as<float>();
    w2.bias_rows = H;
  }
  const bool fused = storage_ != Storage::kPerExpert;
  for (int64_t le = 0; le < El; ++le) {
    if (le > 0) pcs = expert_pieces(e0 + le);
    const auto segs = w13_segments(pcs, fused, I, Il);
    for (const auto& sg : segs) place(w13, le, sg, 0, H);
    unify_scalars(w13, le, segs);
    const std::vector<Segment> down = {{&pcs.back(), 0, H, 0}};
    place(w2, le, down[0], tpr * Il, Il);
    unify_scalars(w2, le, down);
  }
  w.w13 = std::move(w13.m);
  w.w2 = std::move(w2.m);
  w.w13_bias = std::move(w13_bias);
  w.w2_bias = std::move(w2_bias);

  // Shared experts (one fused MLP of total intermediate Is), in their own format (spec.shared_weight_format).
  if (s.shared.count > 0) {
    const WeightFormat sf = s.shared_weight_format();
    const int64_t Is = s.shared.intermediate;
    if (Is % tp)
      throw_error(ErrorKind::kInvalidSpec, "shared.intermediate = " + std::to_string(Is) + " is not divisible by tp = " +
                                               std::to_string(tp));
    const int64_t Isl = Is / tp;
    const int gs = group_of(sf);
    if (gs && Isl % gs)
      throw_error(ErrorKind::kUnsupported, std::string(to_string(sf)) + " needs shared.intermediate/tp % " + std::to_string(gs) +
                                               " == 0 (got " + std::to_string(Isl) + ")");
    const DType sdt = data_dtype(sf);
    const std::string sb = p_ + names_.shared + ".";
    std::vector<Piece> spcs;
    bool sfused = false;
    if (model_.family == HfFamily::kGranite) {
      const int64_t Rs = s.activation.gated() ? 2 * Is : Is;
      const TensorView& in = need(sb + "input_linear.weight");
      const TensorView& out = need(sb + "output_linear.weight");
      expect(in, {sdt}, {Shape{Rs, H}}, sb + "input_linear.weight");
      expect(out, {sdt}, {Shape{H, Is}}, sb + "output_linear.weight");
      Piece a, b;
      a.name = sb + "input_linear";
      a.n = Rs;
      a.k = H;
      a.data = static_cast<const uint8_t*>(in.data);
      b.name = sb + "output_linear";
      b.n = H;
      b.k = Is;
      b.data = static_cast<const uint8_t*>(out.data);
      spcs.push_back(std::move(a));
      spcs.push_back(std::move(b));
      sfused = true;
    } else {
      if (s.activation.gated()) spcs.push_back(linear(sb + names_.linear[0], Is, H, false, sf));
      spcs.push_back(linear(sb + names_.linear[1], Is, H, false, sf));
      spcs.push_back(linear(sb + names_.linear[2], H, Is, false, sf));
    }
    Dest sw13 = make_dest(sf, 1, (s.activation.gated() ? 2 : 1) * Isl, H), sw2 = make_dest(sf, 1, H, Isl);
    const auto segs = w13_segments(spcs, sfused, Is, Isl);
    for (const auto& sg : segs) place(sw13, 0, sg, 0, H);
    unify_scalars(sw13, 0, segs);
    const std::vector<Segment> down = {{&spcs.back(), 0, H, 0}};
    place(sw2, 0, down[0], tpr * Isl, Isl);
    unify_scalars(sw2, 0, down);
    w.shared_w13 = std::move(sw13.m);
    w.shared_w2 = std::move(sw2.m);
    if (s.shared.gated_by_router) w.shared_gate = f32_copy(p_ + names_.shared_gate, Shape{1, H});
  }
  return w;
}

// ---- writing ------------------------------------------------------------------------------------------

// Checks one ExpertMatrix against the canonical table of formats.hpp (local: the writer must not trust
// its input, and this file does not depend on the codec library).
void check_matrix(const ExpertMatrix& m, WeightFormat f, int64_t E, int64_t N, int64_t K, const std::string& what) {
  auto bad = [&](const std::string& msg) { throw_error(ErrorKind::kInvalidArgument, "write_hf_layer: " + what + ": " + msg); };
  if (m.format != f) bad("format " + std::string(to_string(m.format)) + " but the spec says " + std::string(to_string(f)));
  if (m.layout != "canonical") bad("layout '" + m.layout + "' (only the canonical layout can be written)");
  if (m.experts != E || m.rows != N || m.cols != K)
    bad("shape [" + std::to_string(m.experts) + ", " + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
        "], expected [" + std::to_string(E) + ", " + std::to_string(N) + ", " + std::to_string(K) + "]");
  auto want = [&](const TensorView& v, DType dt, Shape sh, const char* part) {
    if (v.dtype != dt || !(v.shape == sh) || (sh.numel() > 0 && !v.data) || v.device != DeviceKind::kCpu)
      bad(std::string(part) + " is " + std::string(dtype_name(v.dtype)) + " " + v.shape.str() + (v.data ? "" : " (null)") +
          ", expected host " + std::string(dtype_name(dt)) + " " + sh.str());
  };
  want(m.data, data_dtype(f), Shape{E, N, is_fp4(f) ? K / 2 : K}, "data");
  switch (f) {
    case WeightFormat::kFp8PerTensor: want(m.scale, DType::kF32, Shape{E}, "scale"); break;
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel: want(m.scale, DType::kF32, Shape{E, N}, "scale"); break;
    case WeightFormat::kFp8Block:
      want(m.scale, DType::kF32, Shape{E, ceil_div(N, kFp8BlockSize), ceil_div(K, kFp8BlockSize)}, "scale");
      break;
    case WeightFormat::kMxfp4: want(m.scale, DType::kU8, Shape{E, N, K / kMxfp4Group}, "scale"); break;
    case WeightFormat::kNvfp4:
      want(m.scale, DType::kF8E4M3, Shape{E, N, K / kNvfp4Group}, "scale");
      want(m.global_scale, DType::kF32, Shape{E}, "global_scale");
      break;
    default: break;
  }
}

void check_f32(const HostTensor& t, Shape sh, const std::string& what) {
  if (t.dtype() != DType::kF32 || !(t.shape() == sh))
    throw_error(ErrorKind::kInvalidArgument, "write_hf_layer: " + what + " is " + std::string(dtype_name(t.dtype())) +
                                                 " " + t.shape().str() + ", expected F32 " + sh.str());
}

class Writer {
 public:
  void add(const std::string& name, DType dt, Shape s, const void* src) {
    auto t = std::make_shared<HostTensor>(dt, s);
    if (t->nbytes()) std::memcpy(t->data(), src, t->nbytes());
    owned_.push_back(t);
    list_.emplace_back(name, t->view());
  }
  // Adds a zero tensor and returns its buffer for the caller to fill.
  uint8_t* add_empty(const std::string& name, DType dt, Shape s) {
    auto t = std::make_shared<HostTensor>(dt, s);
    owned_.push_back(t);
    list_.emplace_back(name, t->view());
    return static_cast<uint8_t*>(t->data());
  }
  void add_scalar(const std::string& name, float v, Shape s) { add(name, DType::kF32, s, &v); }
  void write(const std::string& path, const std::map<std::string, std::string>& meta) {
    write_safetensors(path, list_, meta);
  }

 private:
  std::vector<std::shared_ptr<HostTensor>> owned_;
  std::vector<std::pair<std::string, TensorView>> list_;
};

// Rows [row0, +nrows) of expert e of m as one per-linear checkpoint tensor set under `base`.
void emit_linear(Writer& out, const std::string& base, const ExpertMatrix& m, int64_t e, int64_t row0, int64_t nrows,
                 const float* bias) {
  const WeightFormat f = m.format;
  const int64_t N = m.rows, K = m.cols, rb = col_bytes(f, K);
  const auto* data = static_cast<const uint8_t*>(m.data.data) + (e * N + row0) * rb;
  out.add(base + ".weight", data_dtype(f), is_fp4(f) ? Shape{nrows, K / 2} : Shape{nrows, K}, data);
  const auto* sc = static_cast<const uint8_t*>(m.scale.data);
  switch (f) {
    case WeightFormat::kFp8PerTensor: out.add_scalar(base + ".weight_scale", m.scale.as<float>()[e], Shape{1}); break;
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel:
      out.add(base + ".weight_scale", DType::kF32, Shape{nrows, 1}, m.scale.as<float>() + e * N + row0);
      break;
    case WeightFormat::kFp8Block: {
      constexpr int64_t B = kFp8BlockSize;
      if (row0 % B || (nrows % B && row0 + nrows != N))
        throw_error(ErrorKind::kUnsupported, "write_hf_layer: fp8-block rows [" + std::to_string(row0) + ", " +
                                                 std::to_string(row0 + nrows) + ") of " + base +
                                                 " do not fall on 128-row block boundaries (" +
                                                 (base.find("shared") != std::string::npos ? "shared." : "") +
                                                 "intermediate % 128 != 0)");
      const int64_t kb = ceil_div(K, B);
      out.add(base + ".weight_scale_inv", DType::kF32, Shape{ceil_div(nrows, B), kb},
              m.scale.as<float>() + (e * ceil_div(N, B) + row0 / B) * kb);
      break;
    }
    case WeightFormat::kMxfp4:
      out.add(base + ".weight_scale", DType::kU8, Shape{nrows, K / kMxfp4Group}, sc + (e * N + row0) * (K / kMxfp4Group));
      break;
    case WeightFormat::kNvfp4:
      out.add(base + ".weight_scale", DType::kF8E4M3, Shape{nrows, K / kNvfp4Group},
              sc + (e * N + row0) * (K / kNvfp4Group));
      out.add_scalar(base + ".weight_scale_2", m.global_scale.as<float>()[e], Shape{});
      // ModelOpt checkpoints carry an activation global scale; moerun does not use it. 1.0 keeps loaders
      // that require the tensor working.
      out.add_scalar(base + ".input_scale", 1.0f, Shape{});
      break;
    default: break;
  }
  if (bias) out.add(base + ".bias", DType::kF32, Shape{nrows}, bias + e * N + row0);
}

// [E, N, K] element stack -> [E, K, N] (the fused gpt-oss / Llama-4 dense layout).
void emit_transposed(Writer& out, const std::string& name, const ExpertMatrix& m) {
  const DType dt = data_dtype(m.format);
  const int64_t E = m.experts, N = m.rows, K = m.cols;
  const size_t es = dtype_size(dt);
  uint8_t* dst = out.add_empty(name, dt, Shape{E, K, N});
  const auto* src = static_cast<const uint8_t*>(m.data.data);
  for (int64_t e = 0; e < E; ++e) {
    // dst[e] is [K, N] with dst(c, r) = src(r, c): the tiled copier reading src[e] as a [N, K] store.
    const uint8_t* s = src + e * N * K * static_cast<int64_t>(es);
    uint8_t* d = dst + e * N * K * static_cast<int64_t>(es);
    if (es == 2) copy_transposed<2>(d, N, s, K, 0, K, 0, N);
    else if (es == 4) copy_transposed<4>(d, N, s, K, 0, K, 0, N);
    else copy_transposed<1>(d, N, s, K, 0, K, 0, N);
  }
}

std::string default_prefix(const HfModel& model) {
  // Llama-4 multimodal checkpoints nest the text model; everything else uses model.layers.
  if (model.family == HfFamily::kLlama4 && model.architecture == "Llama4ForConditionalGeneration")
    return "language_model.model.layers.";
  return "model.layers.";
}

}  // namespace

MoeWeights load_hf_layer(const HfModel& model, const std::vector<std::shared_ptr<SafetensorsFile>>& files,
                         std::optional<int> layer) {
  check_spec_for_family(model);
  if (files.empty()) throw_error(ErrorKind::kInvalidArgument, "load_hf_layer: no checkpoint files given");
  const Index idx(files);
  const FamilyNames names = family_names(model.family);
  const std::vector<std::string> markers = {names.router + ".", names.experts + "."};
  std::map<int, std::set<std::string>> layers;
  for (const auto& [name, loc] : idx.all()) find_layers(name, markers, layers);
  const std::string fam(to_string(model.family));
  if (layers.empty())
    throw_error(ErrorKind::kNotFound, "no " + fam + " MoE layer in " + idx.desc() + " (looked for '*layers.N." +
                                          names.router + ".weight' and '*layers.N." + names.experts + ".*')");
  int chosen;
  if (layer) {
    if (!layers.count(*layer))
      throw_error(ErrorKind::kNotFound, "layer " + std::to_string(*layer) + " has no " + fam + " MoE tensors in " +
                                            idx.desc() + "; MoE layers present: " + list_layers(layers));
    chosen = *layer;
  } else {
    if (layers.size() > 1)
      throw_error(ErrorKind::kInvalidArgument, std::to_string(layers.size()) + " MoE layers in " + idx.desc() + " (" +
                                                   list_layers(layers) + "): pass the layer to load (the CLI's --layer N)");
    chosen = layers.begin()->first;
  }
  const auto& prefixes = layers.at(chosen);
  if (prefixes.size() > 1)
    throw_error(ErrorKind::kFormat, "layer " + std::to_string(chosen) + " appears under two prefixes in " + idx.desc() +
                                        ": '" + printable(*prefixes.begin()) + "' and '" + printable(*std::next(prefixes.begin())) + "'");
  Loader loader(model, idx, *prefixes.begin(), chosen);
  return loader.load();
}

void write_hf_layer(const HfModel& model, const MoeWeights& w, int layer, const std::string& path) {
  check_spec_for_family(model);
  const MoeSpec& s = model.spec;
  if (s.parallel.tp != 1 || s.parallel.ep != 1)
    throw_error(ErrorKind::kInvalidArgument, "write_hf_layer writes a whole layer: spec.parallel needs tp = 1 and "
                                             "ep = 1 (got tp = " + std::to_string(s.parallel.tp) + ", ep = " +
                                             std::to_string(s.parallel.ep) + ")");
  if (layer < 0) throw_error(ErrorKind::kInvalidArgument, "write_hf_layer: layer = " + std::to_string(layer) + " must be >= 0");
  const WeightFormat f = s.weight_format;
  const int64_t E = s.num_experts, H = s.hidden, I = s.intermediate, R = s.w13_rows();
  check_matrix(w.w13, f, E, R, H, "w13");
  check_matrix(w.w2, f, E, H, I, "w2");
  check_f32(w.router_weight, Shape{E, H}, "router_weight");
  if (s.router_bias) check_f32(w.router_bias, Shape{E}, "router_bias");
  if (s.routing.correction_bias) check_f32(w.correction_bias, Shape{E}, "correction_bias");
  if (s.expert_bias) {
    check_f32(w.w13_bias, Shape{E, R}, "w13_bias");
    check_f32(w.w2_bias, Shape{E, H}, "w2_bias");
  }
  const FamilyNames names = family_names(model.family);
  const Storage storage = storage_for(model.family, f);
  const std::string p = default_prefix(model) + std::to_string(layer) + ".";
  const std::string ex = p + names.experts + ".";
  Writer out;

  const std::string router = p + names.router;
  out.add(router + ".weight", DType::kF32, Shape{E, H}, w.router_weight.data());
  if (s.router_bias) out.add(router + ".bias", DType::kF32, Shape{E}, w.router_bias.data());
  if (s.routing.correction_bias) out.add(router + ".e_score_correction_bias", DType::kF32, Shape{E}, w.correction_bias.data());

  const float* b13 = s.expert_bias ? w.w13_bias.as<float>() : nullptr;
  const float* b2 = s.expert_bias ? w.w2_bias.as<float>() : nullptr;
  switch (storage) {
    case Storage::kPerExpert:
      for (int64_t e = 0; e < E; ++e) {
        const std::string b = ex + std::to_string(e) + ".";
        if (s.activation.gated()) {
          emit_linear(out, b + names.linear[0], w.w13, e, 0, I, b13);
          emit_linear(out, b + names.linear[1], w.w13, e, I, I, b13);
        } else {
          emit_linear(out, b + names.linear[1], w.w13, e, 0, I, b13);
        }
        emit_linear(out, b + names.linear[2], w.w2, e, 0, H, b2);
      }
      break;
    case Storage::kFusedGranite:
      out.add(ex + "input_linear.weight", data_dtype(f), Shape{E, R, H}, w.w13.data.data);
      out.add(ex + "output_linear.weight", data_dtype(f), Shape{E, H, I}, w.w2.data.data);
      break;
    case Storage::kFusedTransposed:
      emit_transposed(out, ex + "gate_up_proj", w.w13);
      emit_transposed(out, ex + "down_proj", w.w2);
      if (f == WeightFormat::kFp8PerChannel) {  // as Meta's fbgemm FP8 release stores them
        out.add(ex + "gate_up_proj_scale", DType::kF32, Shape{E, 1, R}, w.w13.scale.data);
        out.add(ex + "down_proj_scale", DType::kF32, Shape{E, H, 1}, w.w2.scale.data);
      }
      break;
    case Storage::kGptOssMxfp4:
      out.add(ex + "gate_up_proj_blocks", DType::kU8, Shape{E, R, H / kMxfp4Group, 16}, w.w13.data.data);
      out.add(ex + "gate_up_proj_scales", DType::kU8, Shape{E, R, H / kMxfp4Group}, w.w13.scale.data);
      out.add(ex + "down_proj_blocks", DType::kU8, Shape{E, H, I / kMxfp4Group, 16}, w.w2.data.data);
      out.add(ex + "down_proj_scales", DType::kU8, Shape{E, H, I / kMxfp4Group}, w.w2.scale.data);
      break;
  }
  if (s.expert_bias && storage != Storage::kPerExpert) {
    out.add(ex + "gate_up_proj_bias", DType::kF32, Shape{E, R}, b13);
    out.add(ex + "down_proj_bias", DType::kF32, Shape{E, H}, b2);
  }

  if (s.shared.count > 0) {
    const int64_t Is = s.shared.intermediate, Rs = s.activation.gated() ? 2 * Is : Is;
    const WeightFormat sf = s.shared_weight_format();
    check_matrix(w.shared_w13, sf, 1, Rs, H, "shared_w13");
    check_matrix(w.shared_w2, sf, 1, H, Is, "shared_w2");
    const std::string sb = p + names.shared + ".";
    if (model.family == HfFamily::kGranite) {
      out.add(sb + "input_linear.weight", data_dtype(sf), Shape{Rs, H}, w.shared_w13.data.data);
      out.add(sb + "output_linear.weight", data_dtype(sf), Shape{H, Is}, w.shared_w2.data.data);
    } else {
      if (s.activation.gated()) {
        emit_linear(out, sb + names.linear[0], w.shared_w13, 0, 0, Is, nullptr);
        emit_linear(out, sb + names.linear[1], w.shared_w13, 0, Is, Is, nullptr);
      } else {
        emit_linear(out, sb + names.linear[1], w.shared_w13, 0, 0, Is, nullptr);
      }
      emit_linear(out, sb + names.linear[2], w.shared_w2, 0, 0, H, nullptr);
    }
    if (s.shared.gated_by_router) {
      check_f32(w.shared_gate, Shape{1, H}, "shared_gate");
      out.add(p + names.shared_gate, DType::kF32, Shape{1, H}, w.shared_gate.data());
    }
  }
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                                           {"moerun.family", std::string(to_string(model.family))},
                                                           {"moerun.layer", std::to_string(layer)},
                                                           {"moerun.weight_format", std::string(to_string(f))}};
  if (s.mixed_formats()) meta.emplace("moerun.shared_weight_format", std::string(to_string(s.shared_weight_format())));
  out.write(path, meta);
}

std::vector<std::string> checkpoint_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_file = fs::is_regular_file(path, ec);
  // A shard index names its shards: "model.safetensors.index.json" itself stands for its folder's.
  const std::string suffix = ".safetensors.index.json";
  const bool is_index = is_file && path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (is_file && !is_index) return {path};
  if (!is_file && !fs::is_directory(path, ec)) throw_error(ErrorKind::kIo, "'" + path + "' is neither a file nor a model folder");
  const fs::path dir = is_index ? fs::path(path).parent_path() : fs::path(path);
  const fs::path index = is_index ? fs::path(path) : dir / "model.safetensors.index.json";
  std::set<std::string> files;
  if (fs::is_regular_file(index, ec)) {
    std::ifstream f(index);
    std::stringstream text;
    text << f.rdbuf();
    if (!f) throw_error(ErrorKind::kIo, "cannot read " + index.string());
    // (shallow: an index is two levels deep; the guard keeps a hostile one from nesting without end)
    const auto depth_guard = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) { return depth <= 8; };
    const nlohmann::json j = nlohmann::json::parse(text.str(), depth_guard, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw_error(ErrorKind::kParse, index.string() + ": expected a JSON object with a \"weight_map\" object");
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string())
        throw_error(ErrorKind::kParse, index.string() + ": weight_map[\"" + name + "\"] is not a file name");
      const std::string file = shard.get<std::string>();
      if (file.empty() || fs::path(file).has_parent_path())  // a shard beside the index, never elsewhere
        throw_error(ErrorKind::kParse, index.string() + ": weight_map[\"" + name + "\"] = \"" + file +
                                           "\" is not a file name in the folder");
      files.insert((dir / file).string());
    }
    if (files.empty()) throw_error(ErrorKind::kParse, index.string() + ": its weight_map lists no shard");
    for (const std::string& f : files)
      if (!fs::is_regular_file(f, ec))
        throw_error(ErrorKind::kIo, index.string() + " lists " + f + ", which is missing");
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.insert(e.path().string());
  }
  if (files.empty()) throw_error(ErrorKind::kIo, "no .safetensors file in the folder '" + path + "'");
  return {files.begin(), files.end()};
}

}  // namespace moerun
