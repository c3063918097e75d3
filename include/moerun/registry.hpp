// moerun/registry.hpp — the backends moerun knows, by name: built-ins and plugins with equal standing.
//
// Built-ins are registered explicitly by register_builtin_backends() (no static initialisers). Names
// are lower-case [a-z0-9_-]{1,32}, not "auto", "none", "all" or "order:..." (reserved policy words). Registering a second
// backend under a taken name is refused unless AddOptions::allow_override is set, and then it is logged;
// registering the very same backend object twice is a no-op.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "moerun/backend.hpp"

namespace moerun {

struct BackendEntry {
  std::shared_ptr<const Backend> backend;
  std::string origin;  // "built-in" or the plugin's path
  bool builtin = false;
};

struct AddOptions {
  bool allow_override = false;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry, with the built-ins and MOERUN_PLUGIN_PATH plugins loaded on first use.
  static Registry& global();

  // Throws Error{kRegistry} for a bad or taken name (unless overriding is allowed).
  void add(std::shared_ptr<const Backend> backend, std::string origin, AddOptions options = {});
  // nullptr when absent. The entry stays where it is for the registry's life (later additions do not
  // move it); an override replaces its contents, so read it while no other thread overrides that name.
  const BackendEntry* find(std::string_view name) const;
  // In registration order (built-ins first).
  std::vector<BackendEntry> entries() const;
  std::vector<std::string> names() const;

  // Loads a plugin shared library and adds its backends, all or none (also against an add() on another
  // thread). Throws Error{kPlugin} with a precise reason: cannot open, missing moerun_plugin_init, ABI
  // version mismatch, failing init, bad capabilities, a taken name.
  void load_plugin(const std::string& path, AddOptions options = {});
  // Loads every path in MOERUN_PLUGIN_PATH (':'-separated files); returns the errors, one per failure.
  // Loading a library that is already loaded (by any path) is a no-op.
  std::vector<std::string> load_plugins_from_env();
  // global()'s MOERUN_PLUGIN_PATH failures. The library only warns of them on stderr (a host program
  // keeps its built-in backends); the moerun command line refuses to go on with any.
  std::vector<std::string> env_plugin_errors() const;

  // Where override notices go (default: stderr). Tests capture it.
  void set_log(std::function<void(const std::string&)> log);

 private:
  mutable std::mutex mu_;
  std::mutex load_mu_;  // one load_plugin at a time: its duplicate check and its registration are one step
  std::deque<BackendEntry> entries_;  // a deque: find()'s pointers survive later additions
  std::function<void(const std::string&)> log_;
  std::vector<void*> plugin_libs_;              // dlopen handles whose backends are registered
  std::vector<std::string> env_plugin_errors_;  // global(): MOERUN_PLUGIN_PATH failures

  // add() for several backends under one lock: every name is checked against the entries before any
  // is added, so a conflict adds none; `lib` (a plugin's handle, or null) is recorded with them.
  void add_all(std::vector<std::shared_ptr<const Backend>> backends, const std::string& origin, AddOptions options,
               void* lib);
};

// Registers reference, cpu and (when built with CUDA) cuda and cublas.
void register_builtin_backends(Registry& registry);

// Checks a backend name; returns "" when fine, else the reason.
std::string check_backend_name(std::string_view name);

}  // namespace moerun
