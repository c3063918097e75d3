// Loading out-of-tree backends through the C ABI of moerun/plugin.h.
#include <dlfcn.h>

#include <algorithm>

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/convert.hpp"
#include "moerun/error.hpp"
#include "moerun/plugin.h"
#include "moerun/registry.hpp"
#include "moerun/weights.hpp"
#include "oracle/json_io.hpp"
#include "routing/topk.hpp"

namespace moerun {
namespace {

static_assert(MOERUN_U8 == static_cast<int>(DType::kU8) && MOERUN_BOOL == static_cast<int>(DType::kBool),
              "plugin.h dtype codes must follow moerun::DType");
static_assert(MOERUN_FMT_INT8_PER_CHANNEL == static_cast<int>(WeightFormat::kInt8PerChannel),
              "plugin.h format codes must follow moerun::WeightFormat");

moerun_tensor to_c(const TensorView& t) {
  moerun_tensor c{};
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.rank = t.shape.rank;
  for (int i = 0; i < t.shape.rank; ++i) c.dims[i] = t.shape[i];
  c.device = t.device == DeviceKind::kCpu ? 0 : 1;
  c.device_index = t.device_index;
  return c;
}
moerun_tensor to_c(const HostTensor& t) { return t.empty() ? moerun_tensor{} : to_c(t.view()); }

moerun_expert_matrix to_c(const ExpertMatrix& m) {
  moerun_expert_matrix c{};
  c.format = static_cast<int32_t>(m.format);
  c.experts = m.experts;
  c.rows = m.rows;
  c.cols = m.cols;
  c.data = to_c(m.data);
  c.scale = to_c(m.scale);
  c.global_scale = to_c(m.global_scale);
  return c;
}

// A plugin's message buffer, read only within its size: plugin.h does not oblige a plugin to end it
// with a NUL, so the last byte is made one.
template <size_t N>
std::string message(char (&err)[N]) {
  err[N - 1] = '\0';
  return err[0] ? std::string(err) : std::string("(no message)");
}

// Calls a plugin's C callback. plugin.h says none may throw, but a C++ plugin may let an exception out
// anyway: that is the plugin's failure (its message, or a note, in err and a non-zero return), not an
// unknown exception in the host.
template <class Call>
int guarded(Call&& call, char* err, size_t err_len) {
  try {
    return call();
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "threw: %s", e.what());
  } catch (...) {
    std::snprintf(err, err_len, "threw a non-standard exception");
  }
  return -1;
}

class PluginRunner final : public Runner {
 public:
  PluginRunner(const moerun_backend_v1& b, void* handle, const MoeSpec& spec, const MoeWeights& w)
      : b_(b), handle_(handle), spec_(spec), w_(w) {}
  ~PluginRunner() override {
    char err[64];
    guarded([&] { b_.destroy(handle_); return 0; }, err, sizeof err);  // (a destructor: nowhere to report it)
  }

  void forward(const ForwardArgs& args) override {
    // The host routes for plugins (plugin.h), on the CPU: the plugin sees hidden, top-k and output
    // only, and ABI v1 gives it host tensors alone (MoeLayer keeps a call's tensors on one device, so a
    // device-tensor call is refused here with the tensor it would route from).
    const int64_t m = args.hidden.shape[0];
    if (m == 0) return;
    const auto host_only = [&](const TensorView& v, const char* what) {
      if (v.device != DeviceKind::kCpu)
        throw_error(ErrorKind::kUnsupported, "plugin backend '" + std::string(b_.name) + "': the host routes for plugins (ABI v1), so " +
                                                 what + " must be a host tensor, not a device one");
    };
    if (!args.topk_ids.empty()) {
      host_only(args.topk_ids, "topk_ids");
      host_only(args.topk_weights, "topk_weights");
    } else if (!args.router_logits.empty()) {
      host_only(args.router_logits, "router_logits");
    } else {
      host_only(args.hidden, "hidden (routed through the router weight)");
    }
    if (args.topk_ids.empty() && args.router_logits.empty()) {  // routing from the router weight
      hidden_f32_.resize(static_cast<size_t>(m * spec_.hidden));
      convert_to_f32(args.hidden, hidden_f32_.data());
    }
    routing::route_host(spec_, w_, args, hidden_f32_.data(), ids_, weights_, logits_);
    TensorView ids{ids_.data(), DType::kI32, {m, spec_.top_k}};
    TensorView wts{weights_.data(), DType::kF32, {m, spec_.top_k}};
    moerun_forward_args a{};
    a.hidden = to_c(args.hidden);
    a.topk_ids = to_c(ids);
    a.topk_weights = to_c(wts);
    a.output = to_c(args.output);
    a.stream = args.stream;
    char err[512] = {};
    if (guarded([&] { return b_.forward(handle_, &a, err, sizeof err); }, err, sizeof err) != 0)
      throw_error(ErrorKind::kPlugin, "plugin backend '" + std::string(b_.name) + "' forward failed: " + message(err));
  }

 private:
  moerun_backend_v1 b_;
  void* handle_;
  MoeSpec spec_;
  const MoeWeights& w_;
  std::vector<float> hidden_f32_, weights_, logits_;
  std::vector<int32_t> ids_;
};

class PluginBackend final : public Backend {
 public:
  PluginBackend(const moerun_backend_v1& b, Capabilities caps, std::string origin)
      : b_(b), caps_(std::move(caps)), name_(b.name), description_(b.description ? b.description : ""), origin_(std::move(origin)) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  const Capabilities& capabilities() const override { return caps_; }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& w, const Platform&, const RunnerOptions& o) const override {
    // A CPU plugin reads the weights on the host, like the built-in cpu backends (the example kept the
    // pointers and segfaulted on device ones); a GPU plugin is given whatever it was handed.
    if (caps_.device == DeviceKind::kCpu) check_weights_on_host(w, "plugin backend '" + name_ + "'");
    moerun_weights cw{};
    cw.w13 = to_c(w.w13);
    cw.w2 = to_c(w.w2);
    cw.shared_w13 = to_c(w.shared_w13);
    cw.shared_w2 = to_c(w.shared_w2);
    cw.w13_bias = to_c(w.w13_bias);
    cw.w2_bias = to_c(w.w2_bias);
    cw.router_weight = to_c(w.router_weight);
    cw.router_bias = to_c(w.router_bias);
    cw.correction_bias = to_c(w.correction_bias);
    cw.shared_gate = to_c(w.shared_gate);
    const std::string spec_json = json_io::to_json(spec).dump();
    void* handle = nullptr;
    char err[512] = {};
    if (guarded([&] { return b_.create(spec_json.c_str(), &cw, o.threads, &handle, err, sizeof err); }, err, sizeof err) != 0 ||
        !handle)
      throw_error(ErrorKind::kPlugin, "plugin backend '" + name_ + "' (" + origin_ + ") could not prepare: " + message(err));
    return std::make_unique<PluginRunner>(b_, handle, spec, w);
  }

 private:
  moerun_backend_v1 b_;
  Capabilities caps_;
  std::string name_, description_, origin_;
};

}  // namespace

void Registry::load_plugin(const std::string& path, AddOptions options) {
  auto fail = [&](const std::string& why) { throw_error(ErrorKind::kPlugin, "plugin " + path + ": " + why); };
  // dlopen("") would hand back the main program, and the error would be a missing symbol.
  if (path.empty()) throw_error(ErrorKind::kPlugin, "plugin path is empty");
  // Two threads loading one library would both pass the check below and both run its init.
  std::lock_guard<std::mutex> serial(load_mu_);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    fail(std::string("cannot load (") + (e ? e : "unknown dlopen error") + ")");
  }
  // The same library again (another path to it, or both --plugin and MOERUN_PLUGIN_PATH naming it):
  // dlopen returned the handle it already holds, whose backends are registered. Nothing to do.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(plugin_libs_.begin(), plugin_libs_.end(), lib) != plugin_libs_.end()) {
      dlclose(lib);  // only the reference count this call took
      return;
    }
  }
  // A library this call fails on is unloaded again (nothing of it is registered, so nothing points into
  // it; a later load runs its init afresh). One that registers stays loaded for the life of the
  // process: backends and runners point into it.
  struct UnloadOnFailure {
    void* lib;
    bool keep = false;
    ~UnloadOnFailure() {
      if (!keep) dlclose(lib);
    }
  } unload{lib};
  dlerror();
  void* sym = dlsym(lib, MOERUN_PLUGIN_ENTRY);
  if (!sym) fail(std::string("missing symbol ") + MOERUN_PLUGIN_ENTRY + " (is it built with extern \"C\"?)");
  auto init = reinterpret_cast<moerun_plugin_init_fn>(sym);
  moerun_plugin_v1 info{};
  char err[512] = {};
  int rc = 0;
  try {  // (a C++ plugin that lets an exception out of its C entry point: its failure, not moerun's)
    rc = init(MOERUN_PLUGIN_ABI_VERSION, &info, err, sizeof err);
  } catch (const std::exception& e) {
    fail(std::string("init threw: ") + e.what());
  } catch (...) {
    fail("init threw a non-standard exception");
  }
  // A plugin that names another ABI is a mismatch whatever init returned (plugin.h: it should refuse).
  // One that fails without naming any did not get that far: its own message says why.
  if (info.abi_version != 0 && info.abi_version != MOERUN_PLUGIN_ABI_VERSION)
    fail("ABI version mismatch: plugin built for " + std::to_string(info.abi_version) + ", this moerun speaks " +
         std::to_string(MOERUN_PLUGIN_ABI_VERSION) + " (rebuild it against this moerun)");
  if (rc != 0) fail("init failed (code " + std::to_string(rc) + "): " + message(err));
  if (info.abi_version != MOERUN_PLUGIN_ABI_VERSION)
    fail("init succeeded but set no ABI version (moerun_plugin_v1::abi_version must be " +
         std::to_string(MOERUN_PLUGIN_ABI_VERSION) + ")");
  if (info.num_backends == 0 || !info.backends) fail("init declared no backends");
  if (info.num_backends > 64) fail("init declared " + std::to_string(info.num_backends) + " backends (at most 64)");
  // Validate every backend before adding any, so a bad plugin adds nothing: names (unique within the
  // plugin, and free in the registry unless overriding is allowed) as well as the records.
  std::vector<std::shared_ptr<const Backend>> backends;
  for (uint32_t i = 0; i < info.num_backends; ++i) {
    const moerun_backend_v1& b = info.backends[i];
    if (!b.name) fail("backend #" + std::to_string(i) + " has no name");
    if (const std::string bad = check_backend_name(b.name); !bad.empty()) fail(bad);
    for (uint32_t j = 0; j < i; ++j)
      if (std::string_view(info.backends[j].name) == b.name) fail(std::string("declares backend '") + b.name + "' twice");
    if (const BackendEntry* e = find(b.name); e && !options.allow_override)
      fail(std::string("backend '") + b.name + "' is already registered (from " + e->origin +
           "); give the plugin's backend another name");
    if (!b.create || !b.forward || !b.destroy) fail(std::string("backend '") + b.name + "' lacks create/forward/destroy");
    if (!b.capabilities_json) fail(std::string("backend '") + b.name + "' has no capabilities");
    Capabilities caps;
    try {
      caps = json_io::capabilities_from_json(nlohmann::json::parse(b.capabilities_json), std::string(b.name) + " capabilities");
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("backend '") + b.name + "' capabilities are not valid JSON: " + e.what());
    } catch (const Error& e) {
      fail(e.what());
    }
    if (caps.lora) fail(std::string("backend '") + b.name + "' declares lora, which plugin ABI v1 cannot carry");
    if (caps.owns_dispatch) fail(std::string("backend '") + b.name + "' declares owns_dispatch, which plugin ABI v1 cannot carry");
    if (caps.cuda_graph_safe)
      fail(std::string("backend '") + b.name + "' declares cuda_graph_safe, which a plugin of ABI v1 cannot be: the host "
                                               "routes each of its calls on the CPU, with host tensors");
    backends.push_back(std::make_shared<PluginBackend>(b, std::move(caps), path));
  }
  try {  // all or none, and the library recorded with them (an add() on another thread may take a name)
    add_all(std::move(backends), path, options, lib);
  } catch (const Error& e) {
    fail(e.what());  // (nothing of it registered: unloaded again)
  }
  unload.keep = true;
}

}  // namespace moerun
