// moerun/oracle.hpp — choosing a backend: select(spec, platform, policy) -> a Selection with reasons.
//
// Every registered backend is a candidate. A candidate is capable when supports() says ok. Among the
// capable ones, preference rows (data, each with a reason and the measurement behind it) rank them;
// plugins may add rows too. The contract: a Selection the oracle returns runs for every valid input —
// `moerun check` runs the launch matrix that holds us to it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moerun/backend.hpp"
#include "moerun/registry.hpp"

namespace moerun {

struct Policy {
  enum class Kind { kAuto, kExplicit, kOrder };
  Kind kind = Kind::kAuto;
  std::string name;                // kExplicit
  std::vector<std::string> order;  // kOrder: first capable in this order wins

  // "auto", a backend name, or "order:a,b,c". Throws Error{kParse} for an empty text, an "order:" that
  // lists nothing, or an empty entry in it ("order:a,,b"). Names are looked up by select (below).
  static Policy parse(std::string_view text);
  std::string str() const;
};

// "Prefer `backend` (priority) when the condition holds, because `reason`; `evidence` says what
// measurement backs it." Empty condition lists match anything.
struct Preference {
  std::string backend;
  int priority = 0;                    // higher wins among capable candidates
  std::vector<DeviceKind> devices;     // platform has this device kind (cuda = has a GPU)
  std::vector<WeightFormat> formats;
  std::string reason;
  std::string evidence;
};

// The built-in preference table (src/oracle/preferences.cpp).
const std::vector<Preference>& builtin_preferences();

struct Candidate {
  std::string name;
  std::string origin;
  bool capable = false;
  std::vector<std::string> reasons;   // why not capable (empty when capable)
  int priority = 0;
  std::string priority_reason;        // the matching preference row's reason, if any
  std::string variant;                // kernel variant it would take (for the tokens asked about)
  bool chosen = false;
};

struct Selection {
  std::string backend;                // the chosen backend's name
  std::shared_ptr<const Backend> chosen;
  std::string variant;
  Policy policy;
  std::vector<Candidate> trace;       // every registered backend, in the order considered
  std::string why;                    // one line: why the chosen one won
};

struct SelectOptions {
  int64_t tokens = 1;                              // for the variant shown in the trace
  const std::vector<Preference>* preferences = nullptr;  // nullptr = builtin_preferences()
};

// Throws Error{kUnsupported}: for an explicit request that cannot run, with that backend's reasons
// and the backends that would work; for "nothing fits", with every candidate and its reasons.
// Throws Error{kNotFound} for an unknown name, explicit or in an order, listing the registered ones.
Selection select(const MoeSpec& spec, const Platform& platform, const Policy& policy,
                 const Registry& registry, const SelectOptions& options = {});

// The decision as text (a few lines) and as JSON (one object).
std::string explain_text(const MoeSpec& spec, const Platform& platform, const Selection& s);
std::string explain_json(const MoeSpec& spec, const Platform& platform, const Selection& s);

// Text of every candidate when nothing fits (what select() throws), for callers that catch.
std::string describe_refusals(const std::vector<Candidate>& trace);

}  // namespace moerun
