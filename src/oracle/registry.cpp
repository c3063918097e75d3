// The backend registry: explicit registration, validated names, logged overrides.
#include "moerun/registry.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>

#include "backends/reference/reference_backend.hpp"
#include "moerun/error.hpp"
#ifdef MOERUN_WITH_CPU_BACKEND
#include "backends/cpu/cpu_backend.hpp"
#endif
#ifdef MOERUN_WITH_CUDA_BACKEND
#include "backends/cuda/cuda_backend.hpp"
#endif
#ifdef MOERUN_WITH_CUBLAS_BACKEND
#include "backends/cublas/cublas_backend.hpp"
#endif

namespace moerun {

std::string check_backend_name(std::string_view name) {
  if (name.empty()) return "a backend name cannot be empty";
  if (name.size() > 32) return "backend name '" + std::string(name) + "' is longer than 32 characters";
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return "backend name '" + std::string(name) + "' may contain only a-z, 0-9, '-' and '_'";
  if (name == "auto" || name == "none" || name == "all" || name.rfind("order:", 0) == 0)
    return "backend name '" + std::string(name) + "' is reserved (a policy word)";
  return "";
}

void Registry::add(std::shared_ptr<const Backend> backend, std::string origin, AddOptions options) {
  std::vector<std::shared_ptr<const Backend>> one;
  one.push_back(std::move(backend));
  add_all(std::move(one), origin, options, nullptr);
}

void Registry::add_all(std::vector<std::shared_ptr<const Backend>> backends, const std::string& origin, AddOptions options,
                       void* lib) {
  for (const auto& b : backends) {
    if (!b) throw_error(ErrorKind::kRegistry, "cannot register a null backend (from " + origin + ")");
    if (const std::string bad = check_backend_name(b->name()); !bad.empty())
      throw_error(ErrorKind::kRegistry, bad + " (from " + origin + ")");
  }
  // Override notices go to the log after the lock is released: a log callback may well ask the
  // registry something (its names), and mu_ is not recursive.
  std::function<void(const std::string&)> log;
  std::vector<std::string> notices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto entry_of = [&](std::string_view name) {
      return std::find_if(entries_.begin(), entries_.end(), [&](const BackendEntry& e) { return e.backend->name() == name; });
    };
    for (const auto& b : backends) {  // every conflict first: a refused call adds nothing
      const auto it = entry_of(b->name());
      if (it != entries_.end() && it->backend != b && !options.allow_override)
        throw_error(ErrorKind::kRegistry, "backend '" + std::string(b->name()) + "' is already registered (from " + it->origin +
                                              "); " + origin +
                                              " may replace it only with an explicit override (AddOptions::allow_override; from "
                                              "the command line, give the backends different names)");
    }
    for (auto& b : backends) {
      const auto it = entry_of(b->name());
      if (it == entries_.end()) {
        entries_.push_back(BackendEntry{std::move(b), origin, origin == "built-in"});
      } else if (it->backend != b) {  // (the very same backend again: a no-op)
        notices.push_back("moerun: backend '" + std::string(b->name()) + "' from " + it->origin + " overridden by " + origin);
        it->backend = std::move(b);
        it->origin = origin;
        it->builtin = false;
      }
    }
    if (lib) plugin_libs_.push_back(lib);
    log = log_;
  }
  for (const std::string& n : notices) {
    if (log) log(n);
    else std::cerr << n << "\n";
  }
}

const BackendEntry* Registry::find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const BackendEntry& e : entries_)
    if (e.backend->name() == name) return &e;
  return nullptr;
}

std::vector<BackendEntry> Registry::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {entries_.begin(), entries_.end()};
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> v;
  for (const BackendEntry& e : entries()) v.emplace_back(e.backend->name());
  return v;
}

void Registry::set_log(std::function<void(const std::string&)> log) {
  std::lock_guard<std::mutex> lock(mu_);
  log_ = std::move(log);
}

std::vector<std::string> Registry::load_plugins_from_env() {
  std::vector<std::string> errors;
  const char* env = std::getenv("MOERUN_PLUGIN_PATH");
  if (!env) return errors;
  std::string paths(env);
  size_t start = 0;
  while (start <= paths.size()) {
    const size_t end = std::min(paths.find(':', start), paths.size());
    const std::string p = paths.substr(start, end - start);
    if (!p.empty()) {
      try {
        load_plugin(p);
      } catch (const std::exception& e) {  // (a plugin's own exception too: the built-ins are kept)
        errors.push_back(e.what());
      }
    }
    start = end + 1;
  }
  return errors;
}

std::vector<std::string> Registry::env_plugin_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return env_plugin_errors_;
}

void register_builtin_backends(Registry& r) {
  r.add(make_reference_backend(), "built-in");
#ifdef MOERUN_WITH_CPU_BACKEND
  r.add(make_cpu_backend(), "built-in");
#endif
#ifdef MOERUN_WITH_CUDA_BACKEND
  r.add(make_cuda_backend(), "built-in");
#endif
#ifdef MOERUN_WITH_CUBLAS_BACKEND
  r.add(make_cublas_backend(), "built-in");
#endif
}

Registry& Registry::global() {
  static Registry* r = [] {
    auto* reg = new Registry();  // never destroyed: plugins' code must outlive every backend object
    register_builtin_backends(*reg);
    reg->env_plugin_errors_ = reg->load_plugins_from_env();
    for (const std::string& e : reg->env_plugin_errors_) std::cerr << "moerun: MOERUN_PLUGIN_PATH: " << e << "\n";
    return reg;
  }();
  return *r;
}

}  // namespace moerun
