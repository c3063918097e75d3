// Safetensors reader/writer: round trips, and every kind of corruption refused with Error{kFormat}.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "moerun/error.hpp"
#include "moerun/safetensors.hpp"

namespace moerun {
namespace {

namespace fs = std::filesystem;

// A fresh temporary directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("moerun_st_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// An image from a header text and a data section.
std::string image(const std::string& header, const std::string& data = {}) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Expects from_bytes to throw Error{kFormat} whose message contains every fragment.
void expect_format_error(const std::string& bytes, std::initializer_list<std::string> fragments) {
  try {
    SafetensorsFile::from_bytes(bytes, "bad.safetensors");
    ADD_FAILURE() << "no error; expected one mentioning '" << *fragments.begin() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

TensorView view_of(std::vector<uint8_t>& bytes, DType t, Shape s) {
  TensorView v;
  v.data = bytes.empty() ? nullptr : bytes.data();
  v.dtype = t;
  v.shape = s;
  return v;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 7));
  return v;
}

TEST(Safetensors, RoundTripManyDtypesShapesAndMetadata) {
  TempDir dir;
  struct Item {
    std::string name;
    DType dtype;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Item> items = {
      {"a.bf16", DType::kBF16, {3, 5}, {}},
      {"b.f32", DType::kF32, {7}, {}},
      {"c.scalar", DType::kF32, {}, {}},
      {"d.empty", DType::kF16, {0, 16}, {}},
      {"e.fp8", DType::kF8E4M3, {2, 3, 4}, {}},
      {"f.u8.4d", DType::kU8, {2, 3, 2, 16}, {}},
      {"g.i64", DType::kI64, {1, 3}, {}},
      {"h.empty2", DType::kBF16, {5, 0}, {}},
      {"i.i8", DType::kI8, {9}, {}},
      {"j.e8m0", DType::kF8E8M0, {4, 1}, {}},
  };
  std::vector<std::pair<std::string, TensorView>> tensors;
  uint8_t seed = 1;
  for (auto& it : items) {
    it.bytes = pattern(static_cast<size_t>(it.shape.numel()) * dtype_size(it.dtype), seed++);
    tensors.emplace_back(it.name, view_of(it.bytes, it.dtype, it.shape));
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "héllo \"quoted\""}};
  const std::string path = dir.file("rt.safetensors");
  write_safetensors(path, tensors, meta);

  // The data section starts 8-byte aligned.
  const std::string raw = read_all(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[static_cast<size_t>(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);

  for (int pass = 0; pass < 2; ++pass) {
    auto f = pass == 0 ? SafetensorsFile::open(path) : SafetensorsFile::from_bytes(raw, "mem");
    EXPECT_EQ(f->metadata(), meta);
    std::vector<std::string> expected_names;
    for (const auto& it : items) expected_names.push_back(it.name);
    EXPECT_EQ(f->names(), expected_names);
    for (const auto& it : items) {
      ASSERT_TRUE(f->contains(it.name));
      const TensorView v = f->get(it.name);
      EXPECT_EQ(v.dtype, it.dtype) << it.name;
      EXPECT_EQ(v.shape, it.shape) << it.name;
      ASSERT_EQ(v.nbytes(), it.bytes.size()) << it.name;
      if (!it.bytes.empty()) EXPECT_EQ(std::memcmp(v.data, it.bytes.data(), it.bytes.size()), 0) << it.name;
    }
    EXPECT_FALSE(f->contains("nope"));
    try {
      f->get("nope");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
      EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
    }
  }
  // No temporary file is left behind.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, EmptyFileWithNoTensorsIsFine) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {});
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f->names().empty());
  EXPECT_TRUE(f->metadata().empty());
  // Only zero-size tensors: an empty data section.
  write_safetensors(path, {{"z", TensorView{nullptr, DType::kF32, Shape{0}}}});
  f = SafetensorsFile::open(path);
  EXPECT_EQ(f->get("z").numel(), 0);
}

TEST(Safetensors, AcceptsHeaderPaddingAndZeroSizeTensorsAtAnyOffset) {
  auto f = SafetensorsFile::from_bytes(
      image(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
            R"("c":{"dtype":"BF16","shape":[0,3],"data_offsets":[0,0]}}      )",
            std::string(4, '\x01')),
      "pad");
  EXPECT_EQ(f->names().size(), 3u);
  EXPECT_EQ(f->get("b").nbytes(), 4u);
}

TEST(Safetensors, OpenReportsIoErrors) {
  try {
    SafetensorsFile::open("/nonexistent/dir/x.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  try {
    SafetensorsFile::open("/tmp");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
  TempDir dir;
  const std::string path = dir.file("zero.safetensors");
  std::ofstream(path).close();
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
  }
}

const char* kGood = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

TEST(SafetensorsCorrupt, Truncated) {
  expect_format_error("", {"too short"});
  expect_format_error(std::string(5, '\0'), {"too short"});
  const std::string good = image(kGood, std::string(16, '\0'));
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(good, "ok"));
  // Cut inside the header, and inside the data.
  expect_format_error(good.substr(0, 20), {"header length", "past the end of the file"});
  expect_format_error(good.substr(0, good.size() - 3), {"run past the data section", "tensor 'w'"});
}

TEST(SafetensorsCorrupt, HeaderLengthTooLarge) {
  std::string b = image(kGood, std::string(16, '\0'));
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = '\xff';
  expect_format_error(b, {"header length", "exceeds the limit"});
  std::string c = image(kGood, std::string(16, '\0'));
  const uint64_t n = 100 << 20;  // within the cap but far beyond the file
  for (int i = 0; i < 8; ++i) c[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  expect_format_error(c, {"past the end of the file"});
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  expect_format_error(image("{not json", ""), {"not valid JSON"});
  expect_format_error(image("[1, 2]", ""), {"expected an object"});
  expect_format_error(image(std::string(kGood) + " x", std::string(16, '\0')), {"not valid JSON"});
  expect_format_error(image(std::string(2000, '['), ""), {"nests deeper"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, '\0')),
                      {"key 'w' twice"});
  expect_format_error(image(R"({"w": 3})", ""), {"expected an object", "tensor 'w'"});
}

TEST(SafetensorsCorrupt, EntryFields) {
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[1]}})", ""), {"missing field 'data_offsets'", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", std::string(4, '\0')),
                      {"unexpected field 'x'", "tensor 'w'"});
  expect_format_error(image(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                      {"empty tensor name"});
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  expect_format_error(image(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                      {"unknown dtype 'F12'", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                      {"dtype", "expected a string", "tensor 'w'"});
}

TEST(SafetensorsCorrupt, BadShapes) {
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,0]}})", ""),
                      {"negative dimension -1", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, '\0')),
                      {"expected non-negative integers", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                      {"rank 5 > 4", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", std::string(4, '\0')),
                      {"shape", "expected an array", "tensor 'w'"});
  // 2^62 * 4 elements overflow int64; 2^62 elements * 4 bytes overflow the byte size.
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})",
                            std::string(16, '\0')),
                      {"overflows", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})",
                            std::string(16, '\0')),
                      {"overflows its byte size", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,16]}})",
                            std::string(16, '\0')),
                      {"too large", "tensor 'w'"});
  // A zero dimension does not excuse an overflowing product of the others.
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4,0],"data_offsets":[0,0]}})", ""),
                      {"overflows its element count", "tensor 'w'"});
}

TEST(SafetensorsCorrupt, ShapeBytesMismatch) {
  expect_format_error(image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", std::string(16, '\0')),
                      {"hold 16 bytes", "needs 24", "tensor 'w'"});
  expect_format_error(image(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", std::string(16, '\0')),
                      {"hold 16 bytes", "needs 8", "tensor 'w'"});
}

TEST(SafetensorsCorrupt, OverlapGapAndBounds) {
  const std::string d8(8, '\0');
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
                      {"overlaps", "'a'", "'b'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8),
                      {"overlaps", "'a'", "'b'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            std::string(12, '\0')),
                      {"gap of 4 bytes", "'a'", "'b'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), {"gap of 4 bytes", "before tensor 'a'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8), {"4 unused bytes", "after tensor 'a'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", d8),
                      {"run past the data section", "tensor 'a'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d8), {"begin after", "tensor 'a'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", d8), {"two integers", "tensor 'a'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", d8), {"non-negative", "tensor 'a'"});
  expect_format_error(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,0]}})", d8),
                      {"non-negative", "tensor 'a'"});
  expect_format_error(image("{}", d8), {"8 unused bytes", "no tensors"});
}

TEST(SafetensorsCorrupt, Metadata) {
  expect_format_error(image(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "'k'", "expected a string"});
  expect_format_error(image(R"({"__metadata__":[]})", ""), {"__metadata__", "expected an object"});
  auto f = SafetensorsFile::from_bytes(image(R"({"__metadata__":{"k":"v"}})", ""), "ok");
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_TRUE(f->names().empty());
}

TEST(SafetensorsWrite, RefusesBadInputs) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  std::vector<uint8_t> four(4);
  const TensorView v = view_of(four, DType::kF32, Shape{1});
  auto expect_invalid = [&](const std::vector<std::pair<std::string, TensorView>>& t, const std::string& frag) {
    try {
      write_safetensors(path, t);
      ADD_FAILURE() << "no error; expected '" << frag << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
    }
  };
  expect_invalid({{"", v}}, "empty tensor name");
  expect_invalid({{"a", v}, {"a", v}}, "given twice");
  expect_invalid({{"__metadata__", v}}, "reserved");
  expect_invalid({{"a", TensorView{nullptr, DType::kF32, Shape{2}}}}, "null data");
  expect_invalid({{"a", TensorView{four.data(), DType::kF32, Shape{-1}}}}, "negative dimension");
  EXPECT_FALSE(fs::exists(path));
  try {
    write_safetensors("/nonexistent/dir/x.safetensors", {{"a", v}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
}

}  // namespace
}  // namespace moerun
