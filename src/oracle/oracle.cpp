// select(): every registered backend is a candidate; capable ones are ranked by preference rows.
#include "moerun/oracle.hpp"

#include <algorithm>
#include <sstream>

#include "moerun/error.hpp"
#include "oracle/json_io.hpp"

namespace moerun {
namespace {

bool row_matches(const Preference& p, const std::string& backend, const MoeSpec& spec, const Platform& platform) {
  if (p.backend != backend) return false;
  if (!p.devices.empty()) {
    bool ok = false;
    for (DeviceKind d : p.devices) ok |= d == DeviceKind::kCpu || platform.has_gpu();
    if (!ok) return false;
  }
  if (!p.formats.empty() && std::find(p.formats.begin(), p.formats.end(), spec.weight_format) == p.formats.end()) return false;
  return true;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::vector<std::string> capable_names(const std::vector<Candidate>& trace) {
  std::vector<std::string> v;
  for (const Candidate& c : trace)
    if (c.capable) v.push_back(c.name);
  return v;
}

}  // namespace

Policy Policy::parse(std::string_view text) {
  Policy p;
  if (text.empty()) throw_error(ErrorKind::kParse, "empty backend policy; use auto, a backend name, or order:a,b");
  if (text == "auto") return p;
  if (text.rfind("order:", 0) == 0) {
    p.kind = Kind::kOrder;
    std::string rest(text.substr(6));
    if (rest.empty()) throw_error(ErrorKind::kParse, "policy 'order:' lists no backend");
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t end = std::min(rest.find(',', start), rest.size());
      // An empty entry ("order:cpu,,reference", a trailing comma) is a typo more often than not: a
      // dropped name would change the order without a word.
      if (end == start)
        throw_error(ErrorKind::kParse, "policy '" + std::string(text) + "': entry " + std::to_string(p.order.size() + 1) +
                                           " is empty; list backend names separated by single commas");
      p.order.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
    return p;
  }
  p.kind = Kind::kExplicit;
  p.name = std::string(text);
  return p;
}

std::string Policy::str() const {
  switch (kind) {
    case Kind::kAuto: return "auto";
    case Kind::kExplicit: return name;
    case Kind::kOrder: return "order:" + join(order, ",");
  }
  return "?";
}

std::string describe_refusals(const std::vector<Candidate>& trace) {
  if (trace.empty()) return " no backend is registered";
  std::ostringstream os;
  for (const Candidate& c : trace) {
    os << "\n  " << c.name << ": ";
    if (c.capable) os << "capable";
    else os << join(c.reasons, "; ");
  }
  return os.str();
}

Selection select(const MoeSpec& spec, const Platform& platform, const Policy& policy, const Registry& registry,
                 const SelectOptions& options) {
  spec.validate();
  const std::vector<Preference>& prefs = options.preferences ? *options.preferences : builtin_preferences();
  Selection sel;
  sel.policy = policy;
  std::vector<std::shared_ptr<const Backend>> backends;
  for (const BackendEntry& e : registry.entries()) {
    Candidate c;
    c.name = std::string(e.backend->name());
    c.origin = e.origin;
    const Support s = supports(*e.backend, spec, platform);
    c.capable = s.ok();
    c.reasons = s.reasons;
    for (const Preference& p : prefs)
      if (row_matches(p, c.name, spec, platform) && (c.priority_reason.empty() || p.priority > c.priority)) {
        c.priority = p.priority;
        c.priority_reason = p.reason;
      }
    c.variant = e.backend->variant(spec, platform, options.tokens);
    sel.trace.push_back(std::move(c));
    backends.push_back(e.backend);
  }

  auto index_of = [&](const std::string& name) -> int {
    for (size_t i = 0; i < sel.trace.size(); ++i)
      if (sel.trace[i].name == name) return static_cast<int>(i);
    return -1;
  };
  int chosen = -1;
  switch (policy.kind) {
    case Policy::Kind::kExplicit: {
      chosen = index_of(policy.name);
      if (chosen < 0)
        throw_error(ErrorKind::kNotFound, "unknown backend '" + policy.name + "'; registered: " + join(registry.names(), ", "));
      const Candidate& c = sel.trace[static_cast<size_t>(chosen)];
      if (!c.capable) {
        const std::vector<std::string> ok = capable_names(sel.trace);
        throw_error(ErrorKind::kUnsupported, "backend '" + c.name + "' cannot run " + (spec.name.empty() ? "this spec" : spec.name) +
                                                 " on " + platform.description + ": " + join(c.reasons, "; ") +
                                                 (ok.empty() ? "; no backend can" : "; would work: " + join(ok, ", ")));
      }
      sel.why = "requested explicitly";
      break;
    }
    case Policy::Kind::kOrder: {
      if (policy.order.empty()) throw_error(ErrorKind::kParse, "policy 'order:' lists no backend");
      for (const std::string& name : policy.order) {
        const int i = index_of(name);
        if (i < 0) throw_error(ErrorKind::kNotFound, "unknown backend '" + name + "' in policy " + policy.str() + "; registered: " + join(registry.names(), ", "));
        if (chosen < 0 && sel.trace[static_cast<size_t>(i)].capable) chosen = i;
      }
      if (chosen >= 0) {
        sel.why = "first capable backend in " + policy.str();
      } else {  // name the order's refusals, and what could run outside it (not "capable" under "no backend")
        std::vector<Candidate> listed;
        std::vector<std::string> outside;
        for (const std::string& name : policy.order) listed.push_back(sel.trace[static_cast<size_t>(index_of(name))]);
        for (const Candidate& c : sel.trace)
          if (c.capable && std::find(policy.order.begin(), policy.order.end(), c.name) == policy.order.end())
            outside.push_back(c.name);
        throw_error(ErrorKind::kUnsupported, "none of " + join(policy.order, ", ") + " can run " +
                                                 (spec.name.empty() ? std::string("this spec") : spec.name) + " on " +
                                                 platform.description + " (policy " + policy.str() + "):" +
                                                 describe_refusals(listed) +
                                                 (outside.empty() ? "\n  (no backend outside the order can either)"
                                                                  : "\n  capable outside the order: " + join(outside, ", ")));
      }
      break;
    }
    case Policy::Kind::kAuto: {
      // Highest priority among capable candidates; ties keep registration order (built-ins first).
      for (size_t i = 0; i < sel.trace.size(); ++i)
        if (sel.trace[i].capable && (chosen < 0 || sel.trace[i].priority > sel.trace[static_cast<size_t>(chosen)].priority))
          chosen = static_cast<int>(i);
      if (chosen >= 0) {
        const Candidate& c = sel.trace[static_cast<size_t>(chosen)];
        sel.why = "highest priority among capable backends (" + std::to_string(c.priority) + ": " +
                  (c.priority_reason.empty() ? "no preference row; registration order" : c.priority_reason) + ")";
      }
      break;
    }
  }
  if (chosen < 0)
    throw_error(ErrorKind::kUnsupported, "no backend can run " + (spec.name.empty() ? std::string("this spec") : spec.name) + " on " +
                                             platform.description + " (policy " + policy.str() + "):" + describe_refusals(sel.trace));
  sel.trace[static_cast<size_t>(chosen)].chosen = true;
  sel.backend = sel.trace[static_cast<size_t>(chosen)].name;
  sel.chosen = backends[static_cast<size_t>(chosen)];
  sel.variant = sel.trace[static_cast<size_t>(chosen)].variant;
  return sel;
}

std::string explain_text(const MoeSpec& spec, const Platform& platform, const Selection& s) {
  std::ostringstream os;
  os << "spec:      " << (spec.name.empty() ? "" : spec.name + ": ") << spec.summary() << "\n";
  os << "platform:  " << platform.summary() << "\n";
  os << "policy:    " << s.policy.str() << "\n";
  os << "plan:      " << s.backend << (s.variant.empty() ? "" : " (kernel " + s.variant + ")") << " — " << s.why << "\n";
  os << "candidates:\n";
  for (const Candidate& c : s.trace) {
    os << "  " << (c.chosen ? "* " : c.capable ? "+ " : "- ") << c.name;
    if (c.origin != "built-in") os << " [" << c.origin << "]";
    if (c.capable) {
      os << ": capable, priority " << c.priority;
      if (!c.variant.empty()) os << ", kernel " << c.variant;
    } else {
      os << ": refused: " << join(c.reasons, "; ");
    }
    os << "\n";
  }
  return os.str();
}

std::string explain_json(const MoeSpec& spec, const Platform& platform, const Selection& s) {
  nlohmann::json j;
  j["spec"] = json_io::to_json(spec);
  j["platform"] = json_io::to_json(platform);
  j["policy"] = s.policy.str();
  j["backend"] = s.backend;
  j["variant"] = s.variant;
  j["why"] = s.why;
  nlohmann::json t = nlohmann::json::array();
  for (const Candidate& c : s.trace)
    t.push_back({{"name", c.name}, {"origin", c.origin}, {"capable", c.capable}, {"reasons", c.reasons}, {"priority", c.priority},
                 {"priority_reason", c.priority_reason}, {"variant", c.variant}, {"chosen", c.chosen}});
  j["candidates"] = t;
  // (A description is a platform file's path, which need not be UTF-8: replaced, not a type_error.)
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moerun
