// One MoE layer under each Hugging Face family's names: write_hf_layer -> load_hf_layer is bit-exact for
// every supported (family, format); layer selection, shards, prefixes, tp/ep slicing and bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "moerun/error.hpp"
#include "moerun/hf.hpp"

namespace moerun {


namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("moerun_hfw_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint8_t byte() { return static_cast<uint8_t>(next() >> 32); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() >> 40) / 16777216.0f; }
};

// A positive, normal e4m3 code whose halving and doubling stay exact (exponent field 2..13).
uint8_t safe_e4m3(Rng& r, bool allow_sign) {
  const uint8_t exp = static_cast<uint8_t>(2 + r.next() % 12), man = static_cast<uint8_t>(r.next() % 8);
  const uint8_t sign = allow_sign && (r.next() & 1) ? 0x80 : 0;
  return static_cast<uint8_t>(sign | exp << 3 | man);
}

double e4m3(uint8_t c) {
  const int sign = c >> 7, exp = (c >> 3) & 15, man = c & 7;
  if (exp == 15 && man == 7) return NAN;
  const double v = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -v : v;
}

DType data_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return DType::kF32;
    case WeightFormat::kF16: return DType::kF16;
    case WeightFormat::kBF16: return DType::kBF16;
    case WeightFormat::kMxfp4:
    case WeightFormat::kNvfp4: return DType::kU8;
    case WeightFormat::kInt8PerChannel: return DType::kI8;
    default: return DType::kF8E4M3;
  }
}
bool fp4(WeightFormat f) { return f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4; }

std::shared_ptr<HostTensor> random_tensor(DType dt, Shape s, Rng& r, bool positive_floats) {
  auto t = std::make_shared<HostTensor>(dt, s);
  auto* b = static_cast<uint8_t*>(t->data());
  if (dt == DType::kF32 && positive_floats) {
    for (int64_t i = 0; i < s.numel(); ++i) t->as<float>()[i] = r.uniform(0.001f, 0.1f);
  } else {
    for (size_t i = 0; i < t->nbytes(); ++i) b[i] = r.byte();
  }
  return t;
}

HostTensor random_f32(Shape s, Rng& r) {
  HostTensor t(DType::kF32, s);
  for (int64_t i = 0; i < s.numel(); ++i) t.as<float>()[i] = r.uniform(-1.0f, 1.0f);
  return t;
}

// A random stack in the canonical layout; `safe` makes fp8 codes / nvfp4 block scales exactly
// rescalable by 2 (for the per-tensor scalar tests).
ExpertMatrix random_matrix(WeightFormat f, int64_t E, int64_t N, int64_t K, Rng& r, bool safe = false) {
  ExpertMatrix m;
  m.format = f;
  m.experts = E;
  m.rows = N;
  m.cols = K;
  auto add = [&](std::shared_ptr<HostTensor> t, TensorView* v) {
    *v = t->view();
    m.keepalive.push_back(std::move(t));
  };
  add(random_tensor(data_dtype(f), Shape{E, N, fp4(f) ? K / 2 : K}, r, false), &m.data);
  if (safe && data_dtype(f) == DType::kF8E4M3) {
    auto* c = m.data.as<uint8_t>();
    for (int64_t i = 0; i < m.data.numel(); ++i) c[i] = safe_e4m3(r, true);
  }
  switch (f) {
    case WeightFormat::kFp8PerTensor: add(random_tensor(DType::kF32, Shape{E}, r, true), &m.scale); break;
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel: add(random_tensor(DType::kF32, Shape{E, N}, r, true), &m.scale); break;
    case WeightFormat::kFp8Block:
      add(random_tensor(DType::kF32, Shape{E, (N + 127) / 128, (K + 127) / 128}, r, true), &m.scale);
      break;
    case WeightFormat::kMxfp4: add(random_tensor(DType::kU8, Shape{E, N, K / 32}, r, false), &m.scale); break;
    case WeightFormat::kNvfp4: {
      add(random_tensor(DType::kF8E4M3, Shape{E, N, K / 16}, r, false), &m.scale);
      if (safe)
        for (int64_t i = 0; i < m.scale.numel(); ++i) m.scale.as<uint8_t>()[i] = safe_e4m3(r, false);
      add(random_tensor(DType::kF32, Shape{E}, r, true), &m.global_scale);
      break;
    }
    default: break;
  }
  return m;
}

// Random weights for a hand-made spec (the same shapes check_weights expects, full layer).
MoeWeights make_weights(const MoeSpec& s, uint64_t seed, bool safe = false) {
  Rng r{seed * 0x9E3779B97F4A7C15ull + 1};
  const int64_t E = s.num_experts, H = s.hidden, I = s.intermediate, R = s.w13_rows();
  MoeWeights w;
  w.w13 = random_matrix(s.weight_format, E, R, H, r, safe);
  w.w2 = random_matrix(s.weight_format, E, H, I, r, safe);
  w.router_weight = random_f32(Shape{E, H}, r);
  if (s.router_bias) w.router_bias = random_f32(Shape{E}, r);
  if (s.routing.correction_bias) w.correction_bias = random_f32(Shape{E}, r);
  if (s.expert_bias) {
    w.w13_bias = random_f32(Shape{E, R}, r);
    w.w2_bias = random_f32(Shape{E, H}, r);
  }
  if (s.shared.count > 0) {
    const int64_t Is = s.shared.intermediate;
    w.shared_w13 = random_matrix(s.shared_weight_format(), 1, s.activation.gated() ? 2 * Is : Is, H, r, safe);
    w.shared_w2 = random_matrix(s.shared_weight_format(), 1, H, Is, r, safe);
    if (s.shared.gated_by_router) w.shared_gate = random_f32(Shape{1, H}, r);
  }
  return w;
}

void expect_same_view(const TensorView& a, const TensorView& b, const std::string& what) {
  EXPECT_EQ(a.dtype, b.dtype) << what;
  EXPECT_EQ(a.shape, b.shape) << what << ": " << a.shape.str() << " vs " << b.shape.str();
  if (a.dtype != b.dtype || !(a.shape == b.shape)) return;
  EXPECT_EQ(a.empty(), b.empty()) << what;
  if (a.nbytes() && !a.empty() && !b.empty()) EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << what << " bytes differ";
}

void expect_same_matrix(const ExpertMatrix& a, const ExpertMatrix& b, const std::string& what) {
  EXPECT_EQ(a.format, b.format) << what;
  EXPECT_EQ(a.experts, b.experts) << what;
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.layout, b.layout) << what;
  expect_same_view(a.data, b.data, what + ".data");
  expect_same_view(a.scale, b.scale, what + ".scale");
  expect_same_view(a.global_scale, b.global_scale, what + ".global_scale");
}

void expect_same_weights(const MoeWeights& a, const MoeWeights& b) {
  expect_same_matrix(a.w13, b.w13, "w13");
  expect_same_matrix(a.w2, b.w2, "w2");
  expect_same_matrix(a.shared_w13, b.shared_w13, "shared_w13");
  expect_same_matrix(a.shared_w2, b.shared_w2, "shared_w2");
  expect_same_view(a.w13_bias.view(), b.w13_bias.view(), "w13_bias");
  expect_same_view(a.w2_bias.view(), b.w2_bias.view(), "w2_bias");
  expect_same_view(a.router_weight.view(), b.router_weight.view(), "router_weight");
  expect_same_view(a.router_bias.view(), b.router_bias.view(), "router_bias");
  expect_same_view(a.correction_bias.view(), b.correction_bias.view(), "correction_bias");
  expect_same_view(a.shared_gate.view(), b.shared_gate.view(), "shared_gate");
}

HfModel make_model(HfFamily fam, WeightFormat f) {
  HfModel m;
  m.family = fam;
  m.num_layers = 1;
  MoeSpec& s = m.spec;
  s.name = "test";
  s.num_experts = 4;
  s.top_k = 2;
  s.hidden = 64;
  s.intermediate = 128;
  s.weight_format = f;
  if (fam == HfFamily::kGptOss) {
    s.activation.kind = ActivationKind::kSwigluOai;
    s.activation.interleaved_gate_up = true;
    s.expert_bias = true;
    s.router_bias = true;
    s.routing.softmax_after_topk = true;
  }
  return m;
}

std::vector<std::shared_ptr<SafetensorsFile>> open_all(std::initializer_list<std::string> paths) {
  std::vector<std::shared_ptr<SafetensorsFile>> v;
  for (const auto& p : paths) v.push_back(SafetensorsFile::open(p));
  return v;
}

// The tensors of a file as owned copies, to edit and write back.
struct Owned {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};
std::map<std::string, Owned> read_owned(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  std::map<std::string, Owned> out;
  for (const auto& n : f->names()) {
    const TensorView v = f->get(n);
    const auto* p = static_cast<const uint8_t*>(v.data);
    out[n] = Owned{v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes())};
  }
  return out;
}
void write_owned(const std::string& path, std::map<std::string, Owned>& t) {
  std::vector<std::pair<std::string, TensorView>> list;
  for (auto& [n, o] : t) list.emplace_back(n, TensorView{o.bytes.empty() ? nullptr : o.bytes.data(), o.dtype, o.shape});
  write_safetensors(path, list);
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << *fragments.begin() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

// ---- round trips ------------------------------------------------------------------------------------

struct Case {
  std::string label;
  HfFamily family;
  WeightFormat format;
  std::function<void(HfModel&)> tweak;
  std::vector<std::string> expected_names;  // a few names the file must hold (layer 0)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

std::vector<Case> cases() {
  using F = WeightFormat;
  auto shared = [](int count, int inter, bool gated) {
    return [=](HfModel& m) {
      m.spec.shared.count = count;
      m.spec.shared.intermediate = inter;
      m.spec.shared.gated_by_router = gated;
    };
  };
  auto deepseek = [](HfModel& m) {
    m.spec.routing.scoring = Scoring::kSigmoid;
    m.spec.routing.correction_bias = true;
    m.spec.shared.count = 2;
    m.spec.shared.intermediate = 256;
  };
  const std::string mx = "model.layers.0.block_sparse_moe.";
  const std::string qw = "model.layers.0.mlp.";
  std::vector<Case> v;
  const std::map<F, std::string> label = {
      {F::kBF16, "bf16"}, {F::kF16, "f16"}, {F::kF32, "f32"}, {F::kFp8PerTensor, "fp8tensor"},
      {F::kFp8PerChannel, "fp8channel"}, {F::kFp8Block, "fp8block"}, {F::kMxfp4, "mxfp4"}, {F::kNvfp4, "nvfp4"},
      {F::kInt8PerChannel, "int8"}};
  for (const auto& [f, l] : label) {
    Case c{"mixtral_" + l, HfFamily::kMixtral, f, nullptr,
           {mx + "gate.weight", mx + "experts.3.w1.weight", mx + "experts.3.w3.weight", mx + "experts.0.w2.weight"}};
    if (f == F::kNvfp4) c.expected_names.push_back(mx + "experts.1.w2.weight_scale_2");
    if (f == F::kFp8Block) c.expected_names.push_back(mx + "experts.1.w2.weight_scale_inv");
    if (f == F::kFp8PerTensor || f == F::kInt8PerChannel) c.expected_names.push_back(mx + "experts.1.w2.weight_scale");
    v.push_back(std::move(c));
  }
  v.push_back({"mixtral_fp8block_odd", HfFamily::kMixtral, F::kFp8Block, [](HfModel& m) { m.spec.hidden = 200; },
               {mx + "experts.2.w2.weight_scale_inv"}});
  v.push_back({"qwen_bf16_shared", HfFamily::kQwenMoe, F::kBF16, shared(1, 96, true),
               {qw + "gate.weight", qw + "experts.1.up_proj.weight", qw + "shared_expert.gate_proj.weight",
                qw + "shared_expert_gate.weight"}});
  v.push_back({"qwen_fp8block_shared", HfFamily::kQwenMoe, F::kFp8Block, shared(1, 128, true),
               {qw + "experts.1.up_proj.weight_scale_inv", qw + "shared_expert.down_proj.weight_scale_inv"}});
  v.push_back({"qwen_nvfp4_shared", HfFamily::kQwenMoe, F::kNvfp4, shared(1, 64, false),
               {qw + "experts.1.up_proj.weight_scale_2", qw + "shared_expert.up_proj.weight_scale"}});
  v.push_back({"qwen_relu2", HfFamily::kQwenMoe, F::kBF16, [](HfModel& m) { m.spec.activation.kind = ActivationKind::kRelu2; },
               {qw + "experts.1.up_proj.weight", qw + "experts.1.down_proj.weight"}});
  v.push_back({"deepseek_bf16", HfFamily::kDeepseek, F::kBF16, deepseek,
               {qw + "gate.e_score_correction_bias", qw + "shared_experts.gate_proj.weight"}});
  v.push_back({"deepseek_fp8block", HfFamily::kDeepseek, F::kFp8Block,
               [=](HfModel& m) {
                 deepseek(m);
                 m.spec.hidden = 256;
               },
               {qw + "experts.3.gate_proj.weight_scale_inv", qw + "shared_experts.down_proj.weight_scale_inv"}});
  // Shared experts left in bf16 beside quantized routed ones (spec.shared.weight_format): their linears
  // carry no scales, the routed ones theirs.
  v.push_back({"deepseek_fp8block_bf16_shared", HfFamily::kDeepseek, F::kFp8Block,
               [=](HfModel& m) {
                 deepseek(m);
                 m.spec.hidden = 256;
                 m.spec.shared.weight_format = F::kBF16;
               },
               {qw + "experts.3.gate_proj.weight_scale_inv", qw + "shared_experts.down_proj.weight"}});
  v.push_back({"qwen_nvfp4_f16_shared", HfFamily::kQwenMoe, F::kNvfp4,
               [=](HfModel& m) {
                 shared(1, 48, true)(m);
                 m.spec.shared.weight_format = F::kF16;
               },
               {qw + "experts.1.up_proj.weight_scale_2", qw + "shared_expert.up_proj.weight", qw + "shared_expert_gate.weight"}});
  v.push_back({"gptoss_bf16", HfFamily::kGptOss, F::kBF16, nullptr,
               {qw + "router.weight", qw + "router.bias", qw + "experts.gate_up_proj", qw + "experts.gate_up_proj_bias",
                qw + "experts.down_proj", qw + "experts.down_proj_bias"}});
  v.push_back({"gptoss_mxfp4", HfFamily::kGptOss, F::kMxfp4, nullptr,
               {qw + "experts.gate_up_proj_blocks", qw + "experts.gate_up_proj_scales", qw + "experts.down_proj_blocks",
                qw + "experts.down_proj_scales", qw + "experts.down_proj_bias"}});
  const std::string ff = "model.layers.0.feed_forward.";
  v.push_back({"llama4_bf16_shared", HfFamily::kLlama4, F::kBF16, shared(1, 128, false),
               {ff + "router.weight", ff + "experts.gate_up_proj", ff + "experts.down_proj",
                ff + "shared_expert.gate_proj.weight"}});
  // Meta's fbgemm FP8 release: fused, transposed e4m3 experts with one scale per row.
  v.push_back({"llama4_fp8channel", HfFamily::kLlama4, F::kFp8PerChannel, shared(1, 128, false),
               {ff + "experts.gate_up_proj", ff + "experts.gate_up_proj_scale", ff + "experts.down_proj_scale",
                ff + "shared_expert.down_proj.weight_scale"}});
  // ... with its shared expert left in bf16 (in modules_to_not_convert): fused e4m3 routed experts, a
  // per-linear bf16 shared expert.
  v.push_back({"llama4_fp8channel_bf16_shared", HfFamily::kLlama4, F::kFp8PerChannel,
               [=](HfModel& m) {
                 shared(1, 128, false)(m);
                 m.spec.shared.weight_format = F::kBF16;
               },
               {ff + "experts.gate_up_proj_scale", ff + "shared_expert.down_proj.weight"}});
  v.push_back({"llama4_nvfp4", HfFamily::kLlama4, F::kNvfp4, nullptr,
               {ff + "experts.2.gate_proj.weight_scale", ff + "experts.2.gate_proj.weight_scale_2"}});
  v.push_back({"granite_bf16", HfFamily::kGranite, F::kBF16, nullptr,
               {mx + "router.layer.weight", mx + "input_linear.weight", mx + "output_linear.weight"}});
  v.push_back({"granite_shared", HfFamily::kGranite, F::kBF16, shared(1, 64, false),
               {"model.layers.0.shared_mlp.input_linear.weight", "model.layers.0.shared_mlp.output_linear.weight"}});
  return v;
}

class HfRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(HfRoundTrip, WriteThenLoadIsBitExact) {
  const Case& c = GetParam();
  HfModel model = make_model(c.family, c.format);
  if (c.tweak) c.tweak(model);
  const MoeWeights w = make_weights(model.spec, 7);
  TempDir dir;
  const std::string path = dir.file("layer.safetensors");
  write_hf_layer(model, w, 0, path);
  auto files = open_all({path});
  for (const auto& n : c.expected_names) EXPECT_TRUE(files[0]->contains(n)) << "missing " << n;
  const MoeWeights back = load_hf_layer(model, files);
  expect_same_weights(w, back);
  // Written twice -> same bytes (deterministic names, order and padding).
  const std::string path2 = dir.file("layer2.safetensors");
  write_hf_layer(model, back, 0, path2);
  EXPECT_EQ(fs::file_size(path), fs::file_size(path2));
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, HfRoundTrip, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.label; });

// A model folder's shards: those its model.safetensors.index.json lists (not the other .safetensors
// beside them; the index file given itself lists the same), or every .safetensors without an index;
// clear errors for a folder without shards, a listed shard that is missing, and an index that names a
// file outside the folder.
TEST(HfWeights, CheckpointFilesOfAModelFolder) {
  TempDir dir;
  const auto touch = [&](const std::string& n, const std::string& text = "x") { std::ofstream(dir.file(n)) << text; };
  const std::string folder = dir.file("");
  expect_error([&] { checkpoint_files(folder); }, ErrorKind::kIo, {"no .safetensors file in the folder"});
  expect_error([&] { checkpoint_files(dir.file("nope")); }, ErrorKind::kIo, {"neither a file nor a model folder"});
  touch("b.safetensors");
  touch("a.safetensors");
  touch("config.json");
  EXPECT_EQ(checkpoint_files(folder), (std::vector<std::string>{dir.file("a.safetensors"), dir.file("b.safetensors")}));
  EXPECT_EQ(checkpoint_files(dir.file("b.safetensors")), std::vector<std::string>{dir.file("b.safetensors")});
  touch("model.safetensors.index.json", R"({"metadata": {}, "weight_map": {"x.weight": "b.safetensors", "y.weight": "b.safetensors"}})");
  EXPECT_EQ(checkpoint_files(folder), std::vector<std::string>{dir.file("b.safetensors")});
  // The index file itself stands for the shards it lists (any *.safetensors.index.json name).
  EXPECT_EQ(checkpoint_files(dir.file("model.safetensors.index.json")), std::vector<std::string>{dir.file("b.safetensors")});
  touch("other.safetensors.index.json", R"({"weight_map": {"x.weight": "a.safetensors"}})");
  EXPECT_EQ(checkpoint_files(dir.file("other.safetensors.index.json")), std::vector<std::string>{dir.file("a.safetensors")});
  touch("model.safetensors.index.json", R"({"weight_map": {"x.weight": "c.safetensors"}})");
  expect_error([&] { checkpoint_files(folder); }, ErrorKind::kIo, {"lists", "c.safetensors, which is missing"});
  touch("model.safetensors.index.json", R"({"weight_map": {"x.weight": "../a.safetensors"}})");
  expect_error([&] { checkpoint_files(folder); }, ErrorKind::kParse, {"is not a file name in the folder"});
  touch("model.safetensors.index.json", R"({"weight_map": {}})");
  expect_error([&] { checkpoint_files(folder); }, ErrorKind::kParse, {"its weight_map lists no shard"});
  touch("model.safetensors.index.json", R"([1, 2])");
  expect_error([&] { checkpoint_files(folder); }, ErrorKind::kParse, {"a \"weight_map\" object"});
}

// The names the file holds are the published ones, with gpt-oss fused tensors transposed.
TEST(HfWeights, GptOssDenseIsTransposedAndInterleaved) {
  HfModel model = make_model(HfFamily::kGptOss, WeightFormat::kBF16);
  const MoeWeights w = make_weights(model.spec, 3);
  TempDir dir;
  const std::string path = dir.file("g.safetensors");
  write_hf_layer(model, w, 0, path);
  auto f = SafetensorsFile::open(path);
  const TensorView gu = f->get("model.layers.0.mlp.experts.gate_up_proj");
  ASSERT_EQ(gu.shape, (Shape{4, 64, 256}));
  const auto* a = w.w13.data.as<uint16_t>();
  const auto* b = static_cast<const uint16_t*>(gu.data);
  for (int64_t e : {0, 3})
    for (int64_t r : {0, 1, 77, 255})
      for (int64_t h : {0, 5, 63}) EXPECT_EQ(a[(e * 256 + r) * 64 + h], b[(e * 64 + h) * 256 + r]);
  EXPECT_EQ(f->get("model.layers.0.mlp.experts.down_proj").shape, (Shape{4, 128, 64}));
}

// ---- parallel slicing -------------------------------------------------------------------------------

// Checks a tp/ep shard against the full layer, element by element (bytes), including fp8 block scales.
void check_shard(const HfModel& full, const MoeWeights& w, const MoeWeights& shard) {
  const MoeSpec& s = full.spec;
  const int64_t H = s.hidden, I = s.intermediate;
  const int64_t El = shard.w13.experts, Il = shard.w2.cols;
  const int64_t e0 = first_local_expert(s), tpr = tp_rank(s);
  ASSERT_EQ(El, s.num_experts / s.parallel.ep);
  ASSERT_EQ(shard.w13.rows, 2 * Il);
  const size_t es = dtype_size(w.w13.data.dtype);
  auto map_row = [&](int64_t r) {
    if (s.activation.interleaved_gate_up) return 2 * tpr * Il + r;
    return r < Il ? tpr * Il + r : I + tpr * Il + (r - Il);
  };
  const auto* f13 = static_cast<const uint8_t*>(w.w13.data.data);
  const auto* s13 = static_cast<const uint8_t*>(shard.w13.data.data);
  const auto* f2 = static_cast<const uint8_t*>(w.w2.data.data);
  const auto* s2 = static_cast<const uint8_t*>(shard.w2.data.data);
  for (int64_t le = 0; le < El; ++le) {
    const int64_t e = e0 + le;
    for (int64_t r = 0; r < 2 * Il; ++r)
      ASSERT_EQ(std::memcmp(s13 + ((le * 2 * Il + r) * H) * es, f13 + ((e * 2 * I + map_row(r)) * H) * es, H * es), 0)
          << "w13 expert " << le << " row " << r;
    for (int64_t h = 0; h < H; ++h)
      ASSERT_EQ(std::memcmp(s2 + ((le * H + h) * Il) * es, f2 + ((e * H + h) * I + tpr * Il) * es, Il * es), 0)
          << "w2 expert " << le << " row " << h;
    if (s.weight_format == WeightFormat::kFp8Block) {
      const int64_t kb13 = (H + 127) / 128, kb2 = (Il + 127) / 128, fkb2 = (I + 127) / 128, hb = (H + 127) / 128;
      for (int64_t br = 0; br < 2 * Il / 128; ++br)
        for (int64_t bc = 0; bc < kb13; ++bc)
          EXPECT_EQ(shard.w13.scale.as<float>()[(le * (2 * Il / 128) + br) * kb13 + bc],
                    w.w13.scale.as<float>()[(e * (2 * I / 128) + map_row(br * 128) / 128) * kb13 + bc]);
      for (int64_t br = 0; br < hb; ++br)
        for (int64_t bc = 0; bc < kb2; ++bc)
          EXPECT_EQ(shard.w2.scale.as<float>()[(le * hb + br) * kb2 + bc],
                    w.w2.scale.as<float>()[(e * hb + br) * fkb2 + tpr * Il / 128 + bc]);
    }
    if (s.expert_bias) {
      for (int64_t r = 0; r < 2 * Il; ++r)
        EXPECT_EQ(shard.w13_bias.as<float>()[le * 2 * Il + r], w.w13_bias.as<float>()[e * 2 * I + map_row(r)]);
      for (int64_t h = 0; h < H; ++h) EXPECT_EQ(shard.w2_bias.as<float>()[le * H + h], w.w2_bias.as<float>()[e * H + h]);
    }
  }
  expect_same_view(shard.router_weight.view(), w.router_weight.view(), "router_weight (full on every rank)");
}

TEST(HfWeights, TensorAndExpertParallelShards) {
  struct P {
    HfFamily fam;
    WeightFormat f;
    int I, H;
  };
  for (const P& p : {P{HfFamily::kQwenMoe, WeightFormat::kBF16, 128, 64}, P{HfFamily::kDeepseek, WeightFormat::kFp8Block, 256, 320},
                     P{HfFamily::kGptOss, WeightFormat::kBF16, 128, 64}, P{HfFamily::kLlama4, WeightFormat::kBF16, 128, 64},
                     P{HfFamily::kGranite, WeightFormat::kF32, 128, 64}}) {
    HfModel model = make_model(p.fam, p.f);
    model.spec.intermediate = p.I;
    model.spec.hidden = p.H;
    const MoeWeights w = make_weights(model.spec, 11);
    TempDir dir;
    const std::string path = dir.file("l.safetensors");
    write_hf_layer(model, w, 0, path);
    auto files = open_all({path});
    for (int rank = 0; rank < 4; ++rank) {
      SCOPED_TRACE(std::string(to_string(p.fam)) + " rank " + std::to_string(rank));
      HfModel m = model;
      m.spec.parallel = Parallel{2, 2, 1, rank};
      const MoeWeights shard = load_hf_layer(m, files);
      check_shard(m, w, shard);
    }
  }
}

TEST(HfWeights, Fp8BlockTensorParallelNeedsWholeBlocks) {
  HfModel model = make_model(HfFamily::kDeepseek, WeightFormat::kFp8Block);
  model.spec.intermediate = 128;
  TempDir dir;
  const std::string path = dir.file("l.safetensors");
  write_hf_layer(model, make_weights(model.spec, 1), 0, path);
  model.spec.parallel = Parallel{2, 1, 1, 1};
  expect_error([&] { load_hf_layer(model, open_all({path})); }, ErrorKind::kUnsupported,
               {"fp8-block scales of model.layers.0.mlp.experts.0.gate_proj", "requantization", "128"});
  // The writer refuses what it cannot split either.
  HfModel odd = make_model(HfFamily::kMixtral, WeightFormat::kFp8Block);
  odd.spec.intermediate = 64;
  expect_error([&] { write_hf_layer(odd, make_weights(odd.spec, 1), 0, path); }, ErrorKind::kUnsupported,
               {"128-row block", "w1"});
}

// ---- layers, shards, prefixes -----------------------------------------------------------------------

TEST(HfWeights, LayerSelectionAcrossShards) {
  HfModel model = make_model(HfFamily::kMixtral, WeightFormat::kBF16);
  const MoeWeights w1 = make_weights(model.spec, 1), w3 = make_weights(model.spec, 3);
  TempDir dir;
  write_hf_layer(model, w1, 1, dir.file("a.safetensors"));
  write_hf_layer(model, w3, 3, dir.file("b.safetensors"));
  const auto files = open_all({dir.file("a.safetensors"), dir.file("b.safetensors")});
  expect_error([&] { load_hf_layer(model, files); }, ErrorKind::kInvalidArgument, {"2 MoE layers", "(1, 3)", "pass the layer"});
  expect_error([&] { load_hf_layer(model, files, 2); }, ErrorKind::kNotFound, {"layer 2", "present: 1, 3"});
  expect_same_weights(w3, load_hf_layer(model, files, 3));
  expect_same_weights(w1, load_hf_layer(model, files, 1));
  // A single-layer file needs no index; the wrong family finds nothing.
  expect_same_weights(w1, load_hf_layer(model, open_all({dir.file("a.safetensors")})));
  HfModel qwen = make_model(HfFamily::kQwenMoe, WeightFormat::kBF16);
  expect_error([&] { load_hf_layer(qwen, files); }, ErrorKind::kNotFound, {"no qwen-moe MoE layer", "mlp.gate"});
}

TEST(HfWeights, OneLayerSplitOverShards) {
  HfModel model = make_model(HfFamily::kDeepseek, WeightFormat::kFp8Block);
  model.spec.routing.correction_bias = true;
  const MoeWeights w = make_weights(model.spec, 5);
  TempDir dir;
  write_hf_layer(model, w, 0, dir.file("full.safetensors"));
  auto all = read_owned(dir.file("full.safetensors"));
  std::map<std::string, Owned> a, b;
  int i = 0;
  for (auto& kv : all) (i++ % 2 ? a : b).insert(kv);
  write_owned(dir.file("s1.safetensors"), a);
  write_owned(dir.file("s2.safetensors"), b);
  expect_same_weights(w, load_hf_layer(model, open_all({dir.file("s1.safetensors"), dir.file("s2.safetensors")})));
  // A tensor in two shards is ambiguous.
  expect_error([&] { load_hf_layer(model, open_all({dir.file("s1.safetensors"), dir.file("full.safetensors")})); },
               ErrorKind::kFormat, {"is in both", "s1.safetensors", "full.safetensors"});
}

TEST(HfWeights, AnyLayerPrefix) {
  HfModel model = make_model(HfFamily::kLlama4, WeightFormat::kBF16);
  model.spec.shared = SharedExperts{1, 128, false};
  const MoeWeights w = make_weights(model.spec, 9);
  TempDir dir;
  write_hf_layer(model, w, 0, dir.file("l.safetensors"));
  auto t = read_owned(dir.file("l.safetensors"));
  std::map<std::string, Owned> renamed;
  const std::string from = "model.layers.0.", to = "language_model.model.layers.5.";
  for (auto& [n, o] : t) renamed[to + n.substr(from.size())] = o;
  // Unrelated tensors of other layers/modules do not confuse the search.
  renamed["language_model.model.layers.5.self_attn.q_proj.weight"] = Owned{DType::kF32, Shape{1}, std::vector<uint8_t>(4)};
  renamed["vision_model.layers.2.mlp.fc1.weight"] = Owned{DType::kF32, Shape{1}, std::vector<uint8_t>(4)};
  renamed["language_model.model.layers.6.feed_forward.gate_proj.weight"] = Owned{DType::kF32, Shape{1}, std::vector<uint8_t>(4)};
  write_owned(dir.file("p.safetensors"), renamed);
  const auto files = open_all({dir.file("p.safetensors")});
  expect_same_weights(w, load_hf_layer(model, files));
  expect_same_weights(w, load_hf_layer(model, files, 5));
  // The multimodal architecture writes that prefix itself.
  model.architecture = "Llama4ForConditionalGeneration";
  write_hf_layer(model, w, 5, dir.file("m.safetensors"));
  EXPECT_TRUE(SafetensorsFile::open(dir.file("m.safetensors"))->contains("language_model.model.layers.5.feed_forward.router.weight"));
}

// ---- bad checkpoints --------------------------------------------------------------------------------

TEST(HfWeights, DtypeMismatchNamesTensorAndShapes) {
  HfModel f16 = make_model(HfFamily::kQwenMoe, WeightFormat::kF16);
  TempDir dir;
  write_hf_layer(f16, make_weights(f16.spec, 2), 3, dir.file("l.safetensors"));
  HfModel bf16 = make_model(HfFamily::kQwenMoe, WeightFormat::kBF16);
  expect_error([&] { load_hf_layer(bf16, open_all({dir.file("l.safetensors")})); }, ErrorKind::kFormat,
               {"expected BF16 [128, 64], got F16 [128, 64] for model.layers.3.mlp.experts.0.gate_proj.weight"});
  // A shape mismatch (checkpoint with larger intermediate).
  HfModel small = make_model(HfFamily::kQwenMoe, WeightFormat::kF16);
  small.spec.intermediate = 96;
  expect_error([&] { load_hf_layer(small, open_all({dir.file("l.safetensors")})); }, ErrorKind::kFormat,
               {"expected F16 [96, 64], got F16 [128, 64] for model.layers.3.mlp.experts.0.gate_proj.weight"});
  // Fused tensors are checked whole.
  HfModel g = make_model(HfFamily::kGptOss, WeightFormat::kBF16);
  write_hf_layer(g, make_weights(g.spec, 2), 0, dir.file("g.safetensors"));
  g.spec.num_experts = 8;
  g.spec.top_k = 2;
  expect_error([&] { load_hf_layer(g, open_all({dir.file("g.safetensors")})); }, ErrorKind::kFormat,
               {"expected BF16 [8, 64, 256], got BF16 [4, 64, 256] for model.layers.0.mlp.experts.gate_up_proj"});
  // A tensor that may come in several dtypes names them all: with its dtype right and its shape off, a
  // message naming only the first dtype sent the reader after the wrong one.
  HfModel fewer = make_model(HfFamily::kQwenMoe, WeightFormat::kF16);
  fewer.spec.num_experts = 2;  // (the file has 4)
  expect_error([&] { load_hf_layer(fewer, open_all({dir.file("l.safetensors")})); }, ErrorKind::kFormat,
               {"expected F32|BF16|F16 [2, 64], got F32 [4, 64] for model.layers.3.mlp.gate.weight"});
}

TEST(HfWeights, MissingTensorIsNamed) {
  HfModel model = make_model(HfFamily::kQwenMoe, WeightFormat::kNvfp4);
  TempDir dir;
  write_hf_layer(model, make_weights(model.spec, 2), 0, dir.file("l.safetensors"));
  for (const std::string victim : {"model.layers.0.mlp.experts.2.up_proj.weight", "model.layers.0.mlp.experts.1.down_proj.weight_scale_2",
                                   "model.layers.0.mlp.gate.weight"}) {
    auto t = read_owned(dir.file("l.safetensors"));
    ASSERT_EQ(t.erase(victim), 1u);
    write_owned(dir.file("m.safetensors"), t);
    expect_error([&] { load_hf_layer(model, open_all({dir.file("m.safetensors")})); }, ErrorKind::kNotFound,
                 {"missing tensor '" + victim + "'", "layer 0"});
  }
}

TEST(HfWeights, SpecAndArgumentErrors) {
  TempDir dir;
  HfModel g = make_model(HfFamily::kGptOss, WeightFormat::kBF16);
  const MoeWeights w = make_weights(g.spec, 1);
  write_hf_layer(g, w, 0, dir.file("g.safetensors"));
  HfModel bad = g;
  bad.spec.activation.interleaved_gate_up = false;
  expect_error([&] { load_hf_layer(bad, open_all({dir.file("g.safetensors")})); }, ErrorKind::kInvalidSpec,
               {"interleaved_gate_up", "gpt-oss"});
  bad = g;
  bad.spec.weight_format = WeightFormat::kFp8Block;
  expect_error([&] { load_hf_layer(bad, open_all({dir.file("g.safetensors")})); }, ErrorKind::kUnsupported,
               {"gpt-oss", "fp8-block"});
  HfModel mix = make_model(HfFamily::kMixtral, WeightFormat::kBF16);
  mix.spec.shared.count = 1;
  mix.spec.shared.intermediate = 64;
  expect_error([&] { load_hf_layer(mix, open_all({dir.file("g.safetensors")})); }, ErrorKind::kUnsupported,
               {"no shared experts"});
  expect_error([&] { load_hf_layer(g, {}); }, ErrorKind::kInvalidArgument, {"no checkpoint files"});
  HfModel tp = g;
  tp.spec.parallel = Parallel{2, 1, 1, 0};
  expect_error([&] { write_hf_layer(tp, w, 0, dir.file("x.safetensors")); }, ErrorKind::kInvalidArgument, {"tp = 1"});
  HfModel other = g;
  other.spec.hidden = 32;
  expect_error([&] { write_hf_layer(other, w, 0, dir.file("x.safetensors")); }, ErrorKind::kInvalidArgument,
               {"w13", "expected [4, 256, 32]"});
  MoeWeights no_router = make_weights(g.spec, 1);
  no_router.router_weight = HostTensor();
  expect_error([&] { write_hf_layer(g, no_router, 0, dir.file("x.safetensors")); }, ErrorKind::kInvalidArgument,
               {"router_weight"});
}

// ---- per-tensor scalars of gate and up --------------------------------------------------------------

// Rewrites expert 0's gate linear of a written file so that it stores the same values with its
// per-tensor scalar multiplied by `factor` and its codes divided by it (exact when factor is 2).
void scale_gate(const std::string& path, const std::string& base, const std::string& scalar_suffix,
                const std::string& codes_suffix, float factor, bool recode) {
  auto t = read_owned(path);
  Owned& s = t.at(base + scalar_suffix);
  float v;
  std::memcpy(&v, s.bytes.data(), 4);
  v *= factor;
  std::memcpy(s.bytes.data(), &v, 4);
  if (recode)
    for (uint8_t& c : t.at(base + codes_suffix).bytes) c = static_cast<uint8_t>(c - (1 << 3));  // exponent - 1 == /2
  write_owned(path, t);
}

TEST(HfWeights, Fp8PerTensorScalarsOfGateAndUp) {
  HfModel model = make_model(HfFamily::kMixtral, WeightFormat::kFp8PerTensor);
  const MoeWeights w = make_weights(model.spec, 4, /*safe=*/true);
  TempDir dir;
  const std::string path = dir.file("l.safetensors");
  write_hf_layer(model, w, 0, path);
  const std::string gate = "model.layers.0.block_sparse_moe.experts.0.w1";
  scale_gate(path, gate, ".weight_scale", ".weight", 2.0f, true);
  const MoeWeights back = load_hf_layer(model, open_all({path}));
  // Same dequantized values everywhere; expert 0 now carries the larger scalar.
  const int64_t n = w.w13.rows * w.w13.cols;
  EXPECT_EQ(back.w13.scale.as<float>()[0], 2.0f * w.w13.scale.as<float>()[0]);
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(e4m3(back.w13.data.as<uint8_t>()[e * n + i]) * back.w13.scale.as<float>()[e],
                e4m3(w.w13.data.as<uint8_t>()[e * n + i]) * w.w13.scale.as<float>()[e])
          << "expert " << e << " element " << i;
  expect_same_matrix(w.w2, back.w2, "w2");

  // A ratio no code set absorbs exactly is refused, naming both tensors.
  write_hf_layer(model, w, 0, path);
  scale_gate(path, gate, ".weight_scale", ".weight", 1.3f, false);
  expect_error([&] { load_hf_layer(model, open_all({path})); }, ErrorKind::kUnsupported,
               {gate + ".weight_scale = ", "model.layers.0.block_sparse_moe.experts.0.w3.weight_scale = ",
                "does not requantize", "fp8-per-channel"});
  // ... and loads exactly as fp8-per-channel (rows carry each half's scalar).
  HfModel pc = model;
  pc.spec.weight_format = WeightFormat::kFp8PerChannel;
  const MoeWeights ch = load_hf_layer(pc, open_all({path}));
  EXPECT_EQ(std::memcmp(ch.w13.data.data, w.w13.data.data, w.w13.data.nbytes()), 0);
  const int64_t R = w.w13.rows;
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t r = 0; r < R; ++r) {
      const float expect = w.w13.scale.as<float>()[e] * (e == 0 && r < R / 2 ? 1.3f : 1.0f);
      ASSERT_EQ(ch.w13.scale.as<float>()[e * R + r], expect) << e << " " << r;
    }
}

TEST(HfWeights, Nvfp4GlobalScalesOfGateAndUp) {
  HfModel model = make_model(HfFamily::kQwenMoe, WeightFormat::kNvfp4);
  const MoeWeights w = make_weights(model.spec, 6, /*safe=*/true);
  TempDir dir;
  const std::string path = dir.file("l.safetensors");
  write_hf_layer(model, w, 0, path);
  const std::string gate = "model.layers.0.mlp.experts.0.gate_proj";
  scale_gate(path, gate, ".weight_scale_2", ".weight_scale", 2.0f, true);
  const MoeWeights back = load_hf_layer(model, open_all({path}));
  EXPECT_EQ(std::memcmp(back.w13.data.data, w.w13.data.data, w.w13.data.nbytes()), 0);  // fp4 codes untouched
  const int64_t n = w.w13.rows * w.w13.cols / 16;
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(e4m3(back.w13.scale.as<uint8_t>()[e * n + i]) * back.w13.global_scale.as<float>()[e],
                e4m3(w.w13.scale.as<uint8_t>()[e * n + i]) * w.w13.global_scale.as<float>()[e])
          << "expert " << e << " block " << i;
  EXPECT_EQ(back.w13.global_scale.as<float>()[0], 2.0f * w.w13.global_scale.as<float>()[0]);

  write_hf_layer(model, w, 0, path);
  scale_gate(path, gate, ".weight_scale_2", ".weight_scale", 1.3f, false);
  expect_error([&] { load_hf_layer(model, open_all({path})); }, ErrorKind::kUnsupported,
               {gate + ".weight_scale_2 = ", "up_proj.weight_scale_2 = ", "global scale"});
}

// Spellings other exporters use: compressed-tensors BF16 per-channel scales of shape [N] and block
// scales named weight_scale; gpt-oss mxfp4 scales typed F8_E8M0.
TEST(HfWeights, AlternativeScaleSpellings) {
  TempDir dir;
  HfModel ch = make_model(HfFamily::kMixtral, WeightFormat::kFp8PerChannel);
  MoeWeights w = make_weights(ch.spec, 8);
  for (ExpertMatrix* m : {&w.w13, &w.w2})  // make every scale exactly representable in BF16
    for (int64_t i = 0; i < m->scale.numel(); ++i) {
      uint32_t u;
      std::memcpy(&u, m->scale.as<float>() + i, 4);
      u &= 0xffff0000u;
      std::memcpy(m->scale.as<float>() + i, &u, 4);
    }
  write_hf_layer(ch, w, 0, dir.file("c.safetensors"));
  auto t = read_owned(dir.file("c.safetensors"));
  for (auto& [n, o] : t)
    if (n.size() > 13 && n.substr(n.size() - 13) == ".weight_scale") {
      std::vector<uint8_t> b(o.bytes.size() / 2);
      for (size_t i = 0; i < b.size() / 2; ++i) std::memcpy(&b[2 * i], &o.bytes[4 * i + 2], 2);
      o = Owned{DType::kBF16, Shape{o.shape[0]}, b};
    }
  write_owned(dir.file("c2.safetensors"), t);
  expect_same_weights(w, load_hf_layer(ch, open_all({dir.file("c2.safetensors")})));

  HfModel bl = make_model(HfFamily::kQwenMoe, WeightFormat::kFp8Block);
  const MoeWeights wb = make_weights(bl.spec, 9);
  write_hf_layer(bl, wb, 0, dir.file("b.safetensors"));
  auto tb = read_owned(dir.file("b.safetensors"));
  std::map<std::string, Owned> renamed;
  for (auto& [n, o] : tb) {
    const std::string suffix = "_scale_inv";
    renamed[n.size() > suffix.size() && n.substr(n.size() - suffix.size()) == suffix ? n.substr(0, n.size() - 4) : n] = o;
  }
  write_owned(dir.file("b2.safetensors"), renamed);
  EXPECT_TRUE(SafetensorsFile::open(dir.file("b2.safetensors"))->contains("model.layers.0.mlp.experts.0.up_proj.weight_scale"));
  expect_same_weights(wb, load_hf_layer(bl, open_all({dir.file("b2.safetensors")})));

  HfModel g = make_model(HfFamily::kGptOss, WeightFormat::kMxfp4);
  const MoeWeights wg = make_weights(g.spec, 10);
  write_hf_layer(g, wg, 0, dir.file("g.safetensors"));
  auto tg = read_owned(dir.file("g.safetensors"));
  tg.at("model.layers.0.mlp.experts.gate_up_proj_scales").dtype = DType::kF8E8M0;
  tg.at("model.layers.0.mlp.experts.down_proj_scales").dtype = DType::kF8E8M0;
  write_owned(dir.file("g2.safetensors"), tg);
  expect_same_weights(wg, load_hf_layer(g, open_all({dir.file("g2.safetensors")})));  // comes back as U8
}

// A per-tensor int8 checkpoint (compressed-tensors W8A8 with strategy "tensor": one scalar scale per
// linear) loads as int8-per-channel, each linear's rows carrying its scalar exactly.
TEST(HfWeights, Int8PerTensorScalesLoadAsRowsOfOneValue) {
  TempDir dir;
  HfModel model = make_model(HfFamily::kQwenMoe, WeightFormat::kInt8PerChannel);
  const MoeWeights w = make_weights(model.spec, 11);
  write_hf_layer(model, w, 0, dir.file("l.safetensors"));
  auto t = read_owned(dir.file("l.safetensors"));
  std::map<std::string, float> scalar;  // linear -> its one scale (a different value per linear)
  float next = 0.0078125f;
  for (auto& [n, o] : t)
    if (n.size() > 13 && n.substr(n.size() - 13) == ".weight_scale") {
      next *= 1.25f;
      scalar[n.substr(0, n.size() - 13)] = next;
      std::vector<uint8_t> b(4);
      std::memcpy(b.data(), &next, 4);
      o = Owned{DType::kF32, Shape{1}, b};
    }
  write_owned(dir.file("t.safetensors"), t);
  const MoeWeights back = load_hf_layer(model, open_all({dir.file("t.safetensors")}));
  EXPECT_EQ(std::memcmp(back.w13.data.data, w.w13.data.data, w.w13.data.nbytes()), 0);
  const int64_t R = w.w13.rows, I = R / 2;
  for (int64_t e = 0; e < model.spec.num_experts; ++e) {
    const std::string base = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    for (int64_t r = 0; r < R; ++r)
      ASSERT_EQ(back.w13.scale.as<float>()[e * R + r], scalar.at(base + (r < I ? "gate_proj" : "up_proj"))) << e << " " << r;
    for (int64_t r = 0; r < w.w2.rows; ++r)
      ASSERT_EQ(back.w2.scale.as<float>()[e * w.w2.rows + r], scalar.at(base + "down_proj")) << e << " " << r;
  }
}

// Llama-4 fp8 saved one linear per expert (compressed-tensors exports) loads as fp8-per-channel too:
// the loader finds the per-expert names where the fused fbgemm tensors are absent.
TEST(HfWeights, Llama4Fp8PerExpertLoadsBesideTheFusedLayout) {
  TempDir dir;
  HfModel pt = make_model(HfFamily::kLlama4, WeightFormat::kFp8PerTensor);  // written one linear per expert
  const MoeWeights w = make_weights(pt.spec, 12);
  write_hf_layer(pt, w, 0, dir.file("l.safetensors"));
  auto files = open_all({dir.file("l.safetensors")});
  EXPECT_TRUE(files[0]->contains("model.layers.0.feed_forward.experts.1.up_proj.weight_scale"));
  HfModel ch = pt;
  ch.spec.weight_format = WeightFormat::kFp8PerChannel;
  const MoeWeights back = load_hf_layer(ch, files);
  EXPECT_EQ(std::memcmp(back.w13.data.data, w.w13.data.data, w.w13.data.nbytes()), 0);
  EXPECT_EQ(std::memcmp(back.w2.data.data, w.w2.data.data, w.w2.data.nbytes()), 0);
  for (int64_t e = 0; e < pt.spec.num_experts; ++e) {
    for (int64_t r = 0; r < w.w13.rows; ++r)
      ASSERT_EQ(back.w13.scale.as<float>()[e * w.w13.rows + r], w.w13.scale.as<float>()[e]) << e << " " << r;
    for (int64_t r = 0; r < w.w2.rows; ++r)
      ASSERT_EQ(back.w2.scale.as<float>()[e * w.w2.rows + r], w.w2.scale.as<float>()[e]) << e << " " << r;
  }
  // Neither layout present: the message names the fused tensor moerun looked for.
  auto t = read_owned(dir.file("l.safetensors"));
  for (auto it = t.begin(); it != t.end();)
    it = it->first.find("feed_forward.experts.") != std::string::npos ? t.erase(it) : std::next(it);
  write_owned(dir.file("none.safetensors"), t);
  expect_error([&] { load_hf_layer(ch, open_all({dir.file("none.safetensors")})); }, ErrorKind::kNotFound,
               {"missing tensor 'model.layers.0.feed_forward.experts.gate_up_proj'"});
}

// compressed-tensors NVFP4 names the codes weight_packed and stores the global scale as a divisor
// (weight_global_scale G: value = e2m1 * s / G); moerun keeps 1 / G.
TEST(HfWeights, CompressedTensorsNvfp4Names) {
  TempDir dir;
  HfModel model = make_model(HfFamily::kQwenMoe, WeightFormat::kNvfp4);
  const MoeWeights w = make_weights(model.spec, 13);
  write_hf_layer(model, w, 0, dir.file("l.safetensors"));
  auto t = read_owned(dir.file("l.safetensors"));
  std::map<std::string, Owned> ct;
  auto ends = [](const std::string& n, const std::string& x) { return n.size() > x.size() && n.substr(n.size() - x.size()) == x; };
  for (auto& [n, o] : t) {
    if (ends(n, "_proj.weight") && o.dtype == DType::kU8) {
      ct[n + "_packed"] = o;
    } else if (ends(n, ".weight_scale_2")) {
      const int e = std::stoi(n.substr(n.find("experts.") + 8));
      const float G = std::ldexp(1.0f, e % 4);  // the same per expert: gate and up agree
      std::vector<uint8_t> b(4);
      std::memcpy(b.data(), &G, 4);
      ct[n.substr(0, n.size() - 15) + ".weight_global_scale"] = Owned{DType::kF32, Shape{1}, b};
    } else {
      ct[n] = o;
    }
  }
  write_owned(dir.file("ct.safetensors"), ct);
  auto files = open_all({dir.file("ct.safetensors")});
  EXPECT_TRUE(files[0]->contains("model.layers.0.mlp.experts.1.up_proj.weight_packed"));
  const MoeWeights back = load_hf_layer(model, files);
  EXPECT_EQ(std::memcmp(back.w13.data.data, w.w13.data.data, w.w13.data.nbytes()), 0);
  EXPECT_EQ(std::memcmp(back.w13.scale.data, w.w13.scale.data, w.w13.scale.nbytes()), 0);
  for (int64_t e = 0; e < model.spec.num_experts; ++e) {
    EXPECT_EQ(back.w13.global_scale.as<float>()[e], std::ldexp(1.0f, -static_cast<int>(e % 4))) << e;
    EXPECT_EQ(back.w2.global_scale.as<float>()[e], std::ldexp(1.0f, -static_cast<int>(e % 4))) << e;
  }
  // A divisor of zero is refused by name.
  const float zero = 0.0f;
  std::memcpy(ct.at("model.layers.0.mlp.experts.0.down_proj.weight_global_scale").bytes.data(), &zero, 4);
  write_owned(dir.file("z.safetensors"), ct);
  expect_error([&] { load_hf_layer(model, open_all({dir.file("z.safetensors")})); }, ErrorKind::kFormat,
               {"experts.0.down_proj.weight_global_scale = 0", "positive"});
}

TEST(HfWeights, FamilyNames) {
  EXPECT_EQ(to_string(HfFamily::kMixtral), "mixtral");
  EXPECT_EQ(to_string(HfFamily::kQwenMoe), "qwen-moe");
  EXPECT_EQ(to_string(HfFamily::kDeepseek), "deepseek");
  EXPECT_EQ(to_string(HfFamily::kGptOss), "gpt-oss");
  EXPECT_EQ(to_string(HfFamily::kLlama4), "llama4");
  EXPECT_EQ(to_string(HfFamily::kGranite), "granite");
}

}  // namespace
}  // namespace moerun
