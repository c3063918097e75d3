// oracle/json_io.hpp — JSON forms of MoeSpec, Capabilities and Platform (explain --json, backends
// --json, the plugin ABI). Readers are strict: unknown keys and wrong types are errors naming the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "moerun/backend.hpp"
#include "moerun/platform.hpp"
#include "moerun/spec.hpp"

namespace moerun::json_io {

nlohmann::json to_json(const MoeSpec& spec);
MoeSpec spec_from_json(const nlohmann::json& j, std::string_view origin);

nlohmann::json to_json(const Capabilities& caps);
Capabilities capabilities_from_json(const nlohmann::json& j, std::string_view origin);

nlohmann::json to_json(const Platform& p);

}  // namespace moerun::json_io
