// safetensors.cpp — strict reader (mmap or in-memory copy) and atomic writer of .safetensors files.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data section.
// NOTES: the reader trusts nothing before it has checked it. The order is: the 8-byte length against
// the cap and the file size, the JSON nesting depth (a cheap pre-scan, so that no parser recursion or
// deep destructor can be provoked by hostile input), the JSON syntax with duplicate keys refused, then
// each entry, then the ranges of all entries together. Only then are views handed out.

#include "moerun/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>

#include "moerun/error.hpp"

namespace moerun {
namespace {

using json = nlohmann::json;

// A well-formed header nests three deep (object -> entry -> shape array); allow some slack.
constexpr int kMaxJsonDepth = 16;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw_error(ErrorKind::kFormat, path + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& what, const std::string& name) {
  throw_error(ErrorKind::kFormat, path + ": " + what + " for tensor '" + name + "'");
}

[[noreturn]] void fail_io(const std::string& path, const std::string& what, int err) {
  throw_error(ErrorKind::kIo, path + ": " + what + ": " + std::strerror(err));
}

// Names can be anything a file holds; keep messages on one line and short.
std::string printable(std::string_view s) {
  std::string out;
  const size_t limit = 200;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > limit) out += "...";
  return out;
}

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Deepest nesting of [ and { outside strings. Returns early once it exceeds the limit.
int json_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::string json_type(const json& j) {
  if (j.is_number_integer()) return j.is_number_unsigned() || j.get<int64_t>() >= 0 ? "integer" : "negative integer";
  return j.type_name();
}

// A non-negative integer that fits in int64, or nullopt.
std::optional<int64_t> as_index(const json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

struct Entry {
  std::string name;
  TensorView view;
  uint64_t begin = 0, end = 0;
};

}  // namespace

// ---- reading ----------------------------------------------------------------------------------------

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_io(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_io(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(ErrorKind::kIo, path + ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail_io(path, "cannot mmap " + std::to_string(size) + " bytes", err);
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->size_ = size;
    f->mapped_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  f->parse();   // on throw, the destructor unmaps
  return f;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::from_bytes(std::string_view bytes, std::string origin) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(origin);
  f->owned_.assign(bytes.data(), bytes.size());
  f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->size_ = f->owned_.size();
  f->parse();
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_ && base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void SafetensorsFile::parse() {
  const std::string& p = path_;
  if (size_ < 8)
    fail(p, "file is " + std::to_string(size_) + " bytes, too short for the 8-byte header length");
  const uint64_t n = read_le_u64(base_);
  if (n > kSafetensorsMaxHeader)
    fail(p, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kSafetensorsMaxHeader) +
                " bytes");
  if (n > size_ - 8)
    fail(p, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size_) +
                " bytes; truncated?)");
  const std::string_view text(reinterpret_cast<const char*>(base_ + 8), static_cast<size_t>(n));
  const uint8_t* data = base_ + 8 + n;
  const uint64_t data_size = size_ - 8 - n;

  if (json_depth(text) > kMaxJsonDepth)
    fail(p, "header nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");

  // Parse, refusing duplicate keys at any level (nlohmann keeps the last one silently).
  json header;
  std::vector<std::set<std::string>> keys_seen;
  std::string duplicate;
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start: keys_seen.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!keys_seen.empty()) keys_seen.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_seen.empty() && parsed.is_string() && !keys_seen.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default: break;
    }
    return true;
  };
  try {
    header = json::parse(text, cb);
  } catch (const json::exception& e) {
    fail(p, std::string("header is not valid JSON (") + printable(e.what()) + ")");
  }
  if (!duplicate.empty()) fail(p, "header has the key '" + printable(duplicate) + "' twice");
  if (!header.is_object()) fail(p, "header is a JSON " + std::string(header.type_name()) + ", expected an object");

  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(p, "__metadata__ is a JSON " + std::string(v.type_name()) + ", expected an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(p, "__metadata__ value of '" + printable(m.key()) + "' is a " + json_type(m.value()) +
                      ", expected a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string pname = printable(name);
    if (name.empty()) fail(p, "empty tensor name");
    if (!v.is_object()) fail_tensor(p, "entry is a JSON " + std::string(v.type_name()) + ", expected an object", pname);
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        fail_tensor(p, "unexpected field '" + printable(f.key()) + "'", pname);
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) fail_tensor(p, std::string("missing field '") + field + "'", pname);

    Entry e;
    e.name = name;
    // dtype
    const json& jd = v["dtype"];
    if (!jd.is_string()) fail_tensor(p, "dtype is a " + json_type(jd) + ", expected a string", pname);
    const auto dt = dtype_from_name(jd.get<std::string>());
    if (!dt) fail_tensor(p, "unknown dtype '" + printable(jd.get<std::string>()) + "'", pname);
    e.view.dtype = *dt;
    // shape
    const json& js = v["shape"];
    if (!js.is_array()) fail_tensor(p, "shape is a " + json_type(js) + ", expected an array", pname);
    if (js.size() > static_cast<size_t>(kMaxRank))
      fail_tensor(p, "shape has rank " + std::to_string(js.size()) + " > " + std::to_string(kMaxRank) +
                         " (moerun reads tensors of rank <= 4)", pname);
    bool has_zero = false;
    for (const json& d : js) {
      if (!d.is_number_integer())
        fail_tensor(p, "shape has a " + json_type(d) + " dimension, expected non-negative integers", pname);
      const auto dim = as_index(d);
      if (!dim) {
        if (d.is_number_unsigned()) fail_tensor(p, "shape dimension " + d.dump() + " is too large", pname);
        fail_tensor(p, "shape has a negative dimension " + d.dump(), pname);
      }
      e.view.shape.dims[static_cast<size_t>(e.view.shape.rank++)] = *dim;
      has_zero = has_zero || *dim == 0;
    }
    // numel * element size, with overflow checks. The product of the non-zero dimensions must fit in
    // int64 even when another dimension is 0, so that Shape::numel() never overflows in any order.
    uint64_t numel = 1, nbytes = 0;
    for (int i = 0; i < e.view.shape.rank; ++i) {
      const uint64_t d = static_cast<uint64_t>(e.view.shape[i]);
      if (d == 0) continue;
      if (__builtin_mul_overflow(numel, d, &numel) || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail_tensor(p, "shape " + js.dump() + " overflows its element count", pname);
    }
    if (has_zero) numel = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dt)), &nbytes))
      fail_tensor(p, "shape " + js.dump() + " overflows its byte size", pname);
    // data_offsets
    const json& jo = v["data_offsets"];
    if (!jo.is_array() || jo.size() != 2)
      fail_tensor(p, "data_offsets must be an array of two integers, got " + printable(jo.dump()), pname);
    const auto b = as_index(jo[0]), en = as_index(jo[1]);
    if (!b || !en) fail_tensor(p, "data_offsets " + printable(jo.dump()) + " are not non-negative integers", pname);
    e.begin = static_cast<uint64_t>(*b);
    e.end = static_cast<uint64_t>(*en);
    if (e.begin > e.end) fail_tensor(p, "data_offsets " + jo.dump() + " begin after they end", pname);
    if (e.end > data_size)
      fail_tensor(p, "data_offsets " + jo.dump() + " run past the data section (" + std::to_string(data_size) +
                         " bytes)", pname);
    if (e.end - e.begin != nbytes)
      fail_tensor(p, "data_offsets " + jo.dump() + " hold " + std::to_string(e.end - e.begin) + " bytes but " +
                         std::string(dtype_name(*dt)) + " " + js.dump() + " needs " + std::to_string(nbytes),
                  pname);
    // Read-only memory: callers must not write through this pointer (the mapping is PROT_READ).
    e.view.data = const_cast<uint8_t*>(data + e.begin);
    entries.push_back(std::move(e));
  }

  // The ranges, sorted by start, must tile [0, data_size) exactly.
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < cursor)
      fail(p, "data of tensor '" + printable(e->name) + "' [" + std::to_string(e->begin) + ", " +
                  std::to_string(e->end) + ") overlaps tensor '" + printable(prev->name) + "' [" +
                  std::to_string(prev->begin) + ", " + std::to_string(prev->end) + ")");
    if (e->begin > cursor)
      fail(p, "gap of " + std::to_string(e->begin - cursor) + " bytes in the data section " +
                  (prev ? "between tensor '" + printable(prev->name) + "' and tensor '" + printable(e->name) + "'"
                        : "before tensor '" + printable(e->name) + "'"));
    cursor = e->end;
    prev = e;
  }
  if (cursor != data_size)
    fail(p, std::to_string(data_size - cursor) + " unused bytes at the end of the data section" +
                (prev ? " after tensor '" + printable(prev->name) + "'" : std::string(" (no tensors)")));

  for (Entry& e : entries) tensors_.emplace(std::move(e.name), e.view);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) out.push_back(name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

TensorView SafetensorsFile::get(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw_error(ErrorKind::kNotFound, "no tensor '" + printable(name) + "' in " + path_);
  return it->second;
}

// ---- writing ----------------------------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate and order by name.
  std::map<std::string, const TensorView*> by_name;
  for (const auto& [name, view] : tensors) {
    if (name.empty()) throw_error(ErrorKind::kInvalidArgument, path + ": empty tensor name");
    if (name == "__metadata__")
      throw_error(ErrorKind::kInvalidArgument, path + ": '__metadata__' is reserved and cannot name a tensor");
    if (!by_name.emplace(name, &view).second)
      throw_error(ErrorKind::kInvalidArgument, path + ": tensor '" + printable(name) + "' given twice");
    if (view.device != DeviceKind::kCpu)
      throw_error(ErrorKind::kInvalidArgument, path + ": tensor '" + printable(name) + "' is not in host memory");
    if (view.shape.rank < 0 || view.shape.rank > kMaxRank)
      throw_error(ErrorKind::kInvalidArgument, path + ": bad rank for tensor '" + printable(name) + "'");
    for (int i = 0; i < view.shape.rank; ++i)
      if (view.shape[i] < 0)
        throw_error(ErrorKind::kInvalidArgument,
                    path + ": negative dimension in " + view.shape.str() + " for tensor '" + printable(name) + "'");
    if (view.numel() > 0 && view.data == nullptr)
      throw_error(ErrorKind::kInvalidArgument, path + ": null data for tensor '" + printable(name) + "' of shape " +
                                                   view.shape.str());
  }

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, view] : by_name) {
    json shape = json::array();
    for (int i = 0; i < view->shape.rank; ++i) shape.push_back(view->shape[i]);
    const uint64_t nbytes = view->nbytes();
    header[name] = {{"dtype", std::string(dtype_name(view->dtype))},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw_error(ErrorKind::kInvalidArgument, path + ": cannot encode the header (" + printable(e.what()) + ")");
  }
  // Pad with spaces so that the data section starts 8-byte aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io(tmp, "cannot create", errno);
  auto write_all = [&](const void* buf, size_t n) {
    const char* c = static_cast<const char*>(buf);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail_io(tmp, "write failed", err);
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  write_all(len, 8);
  write_all(text.data(), text.size());
  for (const auto& [name, view] : by_name)
    if (view->nbytes() > 0) write_all(view->data, view->nbytes());
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_io(tmp, "close failed", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_io(path, "cannot rename " + tmp + " into place", err);
  }
}

}  // namespace moerun
