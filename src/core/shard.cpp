// Cutting a rank's shard out of full-layer weights, byte-exact, for every format.
#include <cstring>
#include <utility>
#include <vector>

#include "moerun/error.hpp"
#include "moerun/weights.hpp"

namespace moerun {
namespace {

using Range = std::pair<int64_t, int64_t>;  // [begin, end)

// Copies rows `rows` (concatenated) and elements [c0, c1) of each row, for experts [e0, e0+ne), from an
// [E, N, C] tensor whose rows have `c_total` logical elements stored `per_byte` to a byte (2 for fp4).
std::shared_ptr<HostTensor> cut(const TensorView& t, int64_t e0, int64_t ne, const std::vector<Range>& rows,
                                int64_t n_total, Range cols, int64_t c_total) {
  const int64_t row_bytes = static_cast<int64_t>(t.nbytes()) / (t.shape[0] * n_total);
  const int64_t bytes_per_col_unit = row_bytes;  // bytes per row for c_total logical columns
  const int64_t b0 = cols.first * bytes_per_col_unit / c_total, b1 = cols.second * bytes_per_col_unit / c_total;
  int64_t out_rows = 0;
  for (const Range& r : rows) out_rows += r.second - r.first;
  Shape s = t.shape;
  s.dims[0] = ne;
  s.dims[1] = out_rows;
  // Last dimension(s) scale with the column cut: rebuild from bytes.
  const int64_t out_row_bytes = b1 - b0;
  if (s.rank == 2) {
    s = Shape{ne, out_rows};
  } else {
    int64_t inner = 1;
    for (int i = 3; i < s.rank; ++i) inner *= s.dims[static_cast<size_t>(i)];
    s.dims[2] = out_row_bytes / (static_cast<int64_t>(dtype_size(t.dtype)) * inner);
  }
  auto out = std::make_shared<HostTensor>(t.dtype, s);
  char* dst = static_cast<char*>(out->data());
  const char* src = static_cast<const char*>(t.data);
  for (int64_t e = 0; e < ne; ++e)
    for (const Range& r : rows)
      for (int64_t n = r.first; n < r.second; ++n) {
        std::memcpy(dst, src + ((e0 + e) * n_total + n) * row_bytes + b0, static_cast<size_t>(out_row_bytes));
        dst += out_row_bytes;
      }
  return out;
}

ExpertMatrix cut_matrix(const ExpertMatrix& m, int64_t e0, int64_t ne, const std::vector<Range>& rows, Range cols,
                        const std::string& what) {
  const bool block = m.format == WeightFormat::kFp8Block;
  if (block) {
    for (const Range& r : rows)
      if (r.first % 128 || (r.second % 128 && r.second != m.rows))
        throw_error(ErrorKind::kUnsupported, what + ": fp8-block shard rows [" + std::to_string(r.first) + ", " +
                                                 std::to_string(r.second) + ") split a 128-row scale block");
    if (cols.first % 128 || (cols.second % 128 && cols.second != m.cols))
      throw_error(ErrorKind::kUnsupported, what + ": fp8-block shard columns split a 128-column scale block");
  }
  ExpertMatrix out;
  out.format = m.format;
  out.experts = ne;
  out.cols = cols.second - cols.first;
  out.rows = 0;
  for (const Range& r : rows) out.rows += r.second - r.first;
  auto keep = [&](std::shared_ptr<HostTensor> t, TensorView& v) {
    v = t->view();
    out.keepalive.push_back(std::move(t));
  };
  keep(cut(m.data, e0, ne, rows, m.rows, cols, m.cols), out.data);
  switch (m.format) {
    case WeightFormat::kFp8PerTensor:
      keep(cut(m.scale, e0, ne, {{0, 1}}, 1, {0, 1}, 1), out.scale);
      out.scale.shape = Shape{ne};
      break;
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel:
      keep(cut(m.scale, e0, ne, rows, m.rows, {0, 1}, 1), out.scale);
      out.scale.shape = Shape{ne, out.rows};
      break;
    case WeightFormat::kFp8Block: {
      std::vector<Range> brows;
      for (const Range& r : rows) brows.push_back({r.first / 128, (r.second + 127) / 128});
      keep(cut(m.scale, e0, ne, brows, (m.rows + 127) / 128, {cols.first / 128, (cols.second + 127) / 128},
               (m.cols + 127) / 128), out.scale);
      break;
    }
    case WeightFormat::kMxfp4:
      keep(cut(m.scale, e0, ne, rows, m.rows, {cols.first / 32, cols.second / 32}, m.cols / 32), out.scale);
      break;
    case WeightFormat::kNvfp4:
      keep(cut(m.scale, e0, ne, rows, m.rows, {cols.first / 16, cols.second / 16}, m.cols / 16), out.scale);
      keep(cut(m.global_scale, e0, ne, {{0, 1}}, 1, {0, 1}, 1), out.global_scale);
      out.global_scale.shape = Shape{ne};
      break;
    default:
      break;
  }
  return out;
}

std::shared_ptr<HostTensor> cut_f32(const HostTensor& t, int64_t e0, int64_t ne, const std::vector<Range>& rows, int64_t n_total) {
  return cut(t.view(), e0, ne, rows, n_total, {0, 1}, 1);
}

HostTensor copy_of(const HostTensor& t) {
  if (t.empty()) return {};
  HostTensor c(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

HostTensor from_shared(const std::shared_ptr<HostTensor>& t, Shape shape) {
  HostTensor c(t->dtype(), shape);
  std::memcpy(c.data(), t->data(), c.nbytes());
  return c;
}

}  // namespace

MoeWeights shard_weights(const MoeSpec& full, const MoeWeights& w, const MoeSpec& rank_spec) {
  if (full.parallel.tp != 1 || full.parallel.ep != 1)
    throw_error(ErrorKind::kInvalidArgument, "shard_weights needs full-layer weights (tp = ep = 1)");
  full.validate();
  rank_spec.validate();  // rank in [0, tp * ep), E % ep, I % tp: what the cuts below index by
  MoeSpec same = rank_spec;
  same.parallel = full.parallel;
  // (summary() does not name the activation's constants, which change what the weights compute)
  if (same.summary() != full.summary() || same.router_bias != full.router_bias ||
      same.shared.gated_by_router != full.shared.gated_by_router ||
      same.activation.swiglu_alpha != full.activation.swiglu_alpha ||
      same.activation.swiglu_limit != full.activation.swiglu_limit)
    throw_error(ErrorKind::kInvalidSpec, "shard_weights: rank_spec is another layer than full (only parallel may differ): " +
                                             same.summary() + " against " + full.summary());
  check_weights(full, w);
  check_weights_on_host(w, "shard_weights");  // (it copies bytes on the host)
  const int64_t e0 = first_local_expert(rank_spec), ne = local_experts(rank_spec);
  const int64_t il = local_intermediate(rank_spec), i0 = tp_rank(rank_spec) * il, I = full.intermediate;
  std::vector<Range> rows13;
  if (rank_spec.parallel.tp == 1) rows13 = {{0, w.w13.rows}};  // no intermediate split: rows stay whole
  else if (!full.activation.gated()) rows13 = {{i0, i0 + il}};
  else if (full.activation.interleaved_gate_up) rows13 = {{2 * i0, 2 * (i0 + il)}};
  else rows13 = {{i0, i0 + il}, {I + i0, I + i0 + il}};

  MoeWeights s;
  s.w13 = cut_matrix(w.w13, e0, ne, rows13, {0, full.hidden}, "w13");
  s.w2 = cut_matrix(w.w2, e0, ne, {{0, full.hidden}}, {i0, i0 + il}, "w2");
  if (!w.w13_bias.empty()) {
    s.w13_bias = from_shared(cut_f32(w.w13_bias, e0, ne, rows13, w.w13_bias.shape()[1]), {ne, rank_spec.w13_rows() / rank_spec.parallel.tp});
    s.w2_bias = from_shared(cut_f32(w.w2_bias, e0, ne, {{0, full.hidden}}, full.hidden), {ne, full.hidden});
  }
  s.router_weight = copy_of(w.router_weight);
  s.router_bias = copy_of(w.router_bias);
  s.correction_bias = copy_of(w.correction_bias);
  s.shared_gate = copy_of(w.shared_gate);
  if (full.shared.count > 0) {
    const int64_t is = full.shared.intermediate / rank_spec.parallel.tp, s0 = tp_rank(rank_spec) * is;
    const int64_t IS = full.shared.intermediate;
    const std::vector<Range> shared_rows =
        rank_spec.parallel.tp == 1 ? std::vector<Range>{{0, 2 * IS}} : std::vector<Range>{{s0, s0 + is}, {IS + s0, IS + s0 + is}};
    s.shared_w13 = cut_matrix(w.shared_w13, 0, 1, shared_rows, {0, full.hidden}, "shared_w13");
    s.shared_w2 = cut_matrix(w.shared_w2, 0, 1, {{0, full.hidden}}, {s0, s0 + is}, "shared_w2");
  }
  return s;
}

}  // namespace moerun
