// read_torch_archive on archives written here byte by byte: what torch.save
// writes is read, and each of the bad files the probe of issue 26 found
// (crashes, huge allocations, a zip bomb, bit flips) is refused by name.
#include "volshard/core/torch_archive.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace volshard {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;
using namespace std::string_literals;

void put16(Bytes& b, uint32_t v) {
  for (int i = 0; i < 2; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void append(Bytes& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }

struct Entry {
  std::string name;
  std::string data;
  uint16_t method = 0;  // 8: deflate (torch.save never writes it)
};

// A zip as PyTorchStreamWriter lays it out: local headers and data, then the
// central directory and its end record; `archive/` is the folder.
// `aliases`: more directory entries, each a name pointing at the local header
// of entries[i] (a hostile zip: many names, one record).
Bytes zip_of(const std::vector<Entry>& entries,
             const std::vector<std::pair<std::string, size_t>>& aliases = {}) {
  Bytes out, directory;
  std::vector<std::pair<std::string, size_t>> names;
  for (size_t i = 0; i < entries.size(); ++i) names.emplace_back(entries[i].name, i);
  names.insert(names.end(), aliases.begin(), aliases.end());
  std::vector<uint32_t> offsets;
  for (const Entry& e : entries) {
    offsets.push_back(static_cast<uint32_t>(out.size()));
    const std::string name = "archive/" + e.name;
    const auto crc = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size())));
    const auto size = static_cast<uint32_t>(e.data.size());
    put32(out, 0x04034b50);
    put16(out, 20);
    put16(out, 0);
    put16(out, e.method);
    put32(out, 0);
    put32(out, crc);
    put32(out, size);
    put32(out, size);
    put16(out, static_cast<uint32_t>(name.size()));
    put16(out, 0);
    append(out, name);
    append(out, e.data);
  }
  for (const auto& [alias, i] : names) {
    const Entry& e = entries[i];
    const std::string name = "archive/" + alias;
    const auto crc = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size())));
    const auto offset = offsets[i];
    const auto size = static_cast<uint32_t>(e.data.size());
    put32(directory, 0x02014b50);
    put16(directory, 20);
    put16(directory, 20);
    put16(directory, 0);
    put16(directory, e.method);
    put32(directory, 0);
    put32(directory, crc);
    put32(directory, size);
    put32(directory, size);
    put16(directory, static_cast<uint32_t>(name.size()));
    put16(directory, 0);
    put16(directory, 0);
    put16(directory, 0);
    put16(directory, 0);
    put32(directory, 0);
    put32(directory, offset);
    append(directory, name);
  }
  const auto cd_offset = static_cast<uint32_t>(out.size());
  out.insert(out.end(), directory.begin(), directory.end());
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(names.size()));
  put16(out, static_cast<uint32_t>(names.size()));
  put32(out, static_cast<uint32_t>(directory.size()));
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

TorchValue read(const Bytes& b, const TorchArchiveLimits& limits = {}) {
  return read_torch_archive(b.data(), b.size(), "model.pt", limits);
}

std::string message_of(const Bytes& b, const TorchArchiveLimits& limits = {}) {
  try {
    read(b, limits);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

// Pickle pieces, protocol 2 as torch.save writes them.
std::string str(const std::string& s) {  // SHORT_BINUNICODE
  return std::string("\x8c") + static_cast<char>(s.size()) + s;
}
std::string k(int v) { return std::string("K") + static_cast<char>(v); }  // BININT1
const std::string kRebuild = "ctorch._utils\n_rebuild_tensor_v2\n";

// OrderedDict {"w": float32 tensor of `sizes` over storage "0" of `numel`
// elements, strides `strides`, offset `offset`}.
std::string state_dict_pickle(const std::string& sizes, const std::string& strides, int offset,
                              int numel) {
  return "\x80\x02"s + "ccollections\nOrderedDict\nq\x00)Rq\x01("s + str("w") + kRebuild +
         "((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"s + str("0") + str("cpu") + k(numel) +
         "tQ" + k(offset) + sizes + strides + "\x89" + "ccollections\nOrderedDict\n)Rtq\x02R" +
         "u.";
}

std::string floats(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) + 0.5f;
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return s;
}

Bytes good_state_dict() {
  return zip_of({{"data.pkl", state_dict_pickle(k(2) + k(3) + "\x86", k(3) + k(1) + "\x86", 0, 6)},
                 {"data/0", floats(6)},
                 {"version", "3\n"},
                 {"byteorder", "little"}});
}

TEST(TorchArchiveTest, ReadsAStateDictAsTorchSaveWritesIt) {
  const TorchValue v = read(good_state_dict());
  ASSERT_EQ(v.kind, TorchValue::Kind::kDict);
  const TorchValue* w = v.find("w");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->kind, TorchValue::Kind::kTensor);
  EXPECT_EQ(w->tensor->dtype, "float32");
  EXPECT_EQ(w->tensor->sizes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->tensor->strides, (std::vector<int64_t>{3, 1}));
  ASSERT_EQ(w->tensor->storage->size(), 24u);
  float last = 0;
  std::memcpy(&last, w->tensor->storage->data() + 20, 4);
  EXPECT_EQ(last, 5.5f);
}

TEST(TorchArchiveTest, EveryBitFlipIsRefused) {
  const Bytes good = good_state_dict();
  int refused = 0, flips = 0;
  for (size_t at = 0; at < good.size(); at += 7) {
    for (int bit = 0; bit < 8; bit += 3) {
      Bytes bad = good;
      bad[at] = static_cast<uint8_t>(bad[at] ^ (1u << bit));
      ++flips;
      // A flip in a field nothing reads (a version, a timestamp) is harmless;
      // one in what is read is refused. Every record's bytes are covered by CRC-32.
      try {
        const TorchValue v = read(bad);
        const TorchValue* w = v.find("w");
        ASSERT_NE(w, nullptr) << at;
        EXPECT_EQ(*w->tensor->storage, *read(good).find("w")->tensor->storage) << "flip at " << at;
      } catch (const std::runtime_error&) {
        ++refused;
      }
    }
  }
  // What is read is never silently different: refused, or the same values.
  std::printf("%d of %d single-bit flips refused, the rest in fields nothing reads\n", refused,
              flips);
  EXPECT_GT(refused, 0);
  // A flipped byte inside the tensor data is always found.
  Bytes bad = good;
  const std::string text = floats(6);
  const Bytes data(text.begin(), text.end());
  const auto it = std::search(bad.begin(), bad.end(), data.begin(), data.end());
  ASSERT_NE(it, bad.end());
  *(it + 9) ^= 0x10;
  EXPECT_THAT(message_of(bad), HasSubstr("record archive/data/0 fails its CRC-32 check"));
}

TEST(TorchArchiveTest, MalformedPicklesAreRefusedNotCrashed) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {std::string("\x80\x02R.", 4), "pops an empty stack"},
      {std::string("\x80\x02"
                   "e.",
                   4),
       "no MARK"},
      {std::string("\x80\x02s.", 4), "pops an empty stack"},
      {std::string("\x80\x02(u.", 5), "needs a value on an empty stack"},
      {std::string("\x80\x02N(s.", 6), "a MARK where a value belongs"},
      {std::string("\x80\x02]Na", 5), "no STOP"},
      {std::string("\x80\x02}Na.", 6), "APPEND on a dict"},
      {std::string("\x80\x02h\x05.", 5), "never put"},
      {std::string("\x80\x02X\xff\xff\xff\x7f", 7), "runs past its end"},
      {std::string("\x80\x02\x8d\x00\x00\x00\x00\x00\x01\x00\x00", 11), "runs past its end"},
      {"\x80\x02"s + "cos\nsystem\n.", "refuses the global os.system"},
      {"\x80\x02"s + "ctorch\nFloatStorage\n)R.", "not a callable"},
      {std::string("\x80\x02\x8a\x09", 4), "wider than 64 bits"},
      {std::string("\x80\x02\xff.", 4), "refuses pickle opcode 0xff"},
  };
  for (const auto& [pickle, expected] : cases) {
    const Bytes b = zip_of({{"data.pkl", pickle}});
    EXPECT_THAT(message_of(b), HasSubstr(expected)) << expected;
    EXPECT_THAT(message_of(b), HasSubstr("model.pt: "));
  }
}

TEST(TorchArchiveTest, DeepNestingAndSharedReferencesAreBoundedWithoutRecursionOrBlowUp) {
  // 200,000 nested TUPLE1 (5 M overflowed the stack of the old reader).
  std::string nested = "\x80\x02N";
  nested.append(200000, '\x85');
  nested += ".";
  EXPECT_THAT(message_of(zip_of({{"data.pkl", nested}})), HasSubstr("nested deeper than 64"));
  // The probe's 5 million: refused as they are made (more values than the limit).
  std::string five_million = "\x80\x02N";
  five_million.append(5000000, '\x85');
  five_million += ".";
  EXPECT_THAT(message_of(zip_of({{"data.pkl", five_million}})),
              HasSubstr("more than 4194304 values"));
  // Five million values are more than the limit allows (counted as they are made).
  TorchArchiveLimits small;
  small.max_objects = 1000;
  std::string many = "\x80\x02]";
  for (int i = 0; i < 2000; ++i) many += "Na";
  many += ".";
  EXPECT_THAT(message_of(zip_of({{"data.pkl", many}}), small), HasSubstr("more than 1000 values"));
  // A list holding itself: a cycle is nested without end, refused.
  EXPECT_THAT(message_of(zip_of({{"data.pkl", std::string("\x80\x02]q\x00h\x00"
                                                          "a.",
                                                          9)}})),
              HasSubstr("nested deeper"));
  // "Billion laughs": each list holds the previous one ten times; 30 levels
  // would expand to 10^30 values.
  std::string laughs = "\x80\x02]q\x00"s;
  for (int level = 1; level <= 30; ++level) {
    laughs += "](";
    for (int j = 0; j < 10; ++j) laughs += std::string("h") + static_cast<char>(level - 1);
    laughs += std::string("eq") + static_cast<char>(level);
  }
  laughs += ".";
  // Refused by the byte budget (issue 43 item 17) long before the count of values.
  EXPECT_THAT(message_of(zip_of({{"data.pkl", laughs}})), HasSubstr("bytes in memory"));
}

TEST(TorchArchiveTest, TensorRecordsMustFitTheirStorageAndTheFile) {
  // A storage claiming 10^9 elements over a 24-byte record (the old reader
  // allocated what the file claimed).
  const std::string claim = std::string("J") + std::string("\x00\xca\x9a\x3b", 4);  // 10^9
  {
    std::string p = state_dict_pickle(k(2) + k(3) + "\x86", k(3) + k(1) + "\x86", 0, 6);
    p.replace(p.find(k(6) + "tQ"), 2, claim);
    EXPECT_THAT(message_of(zip_of({{"data.pkl", p}, {"data/0", floats(6)}})),
                HasSubstr("claims 1000000000 elements of float32 but its record has 24 bytes"));
  }
  // A view past the end of its storage (offset 5, 2 x 3).
  EXPECT_THAT(
      message_of(
          zip_of({{"data.pkl", state_dict_pickle(k(2) + k(3) + "\x86", k(3) + k(1) + "\x86", 5, 6)},
                  {"data/0", floats(6)}})),
      HasSubstr("reaches past its storage of 6 elements"));
  // A storage whose record is missing.
  EXPECT_THAT(message_of(zip_of({{"data.pkl", state_dict_pickle(k(2) + k(3) + "\x86",
                                                                k(3) + k(1) + "\x86", 0, 6)}})),
              HasSubstr("has no record data/0"));
}

TEST(TorchArchiveTest, ZipsThatAreNotTorchSavesAreRefused) {
  // A compressed record (a zip bomb inflates from one) is never inflated.
  EXPECT_THAT(message_of(zip_of({{"data.pkl", "x", 8}})),
              HasSubstr("record archive/data.pkl is compressed (method 8)"));
  EXPECT_THAT(message_of(zip_of({{"weights.bin", "x"}})), HasSubstr("no data.pkl record"));
  const Bytes good = good_state_dict();
  EXPECT_THAT(message_of(Bytes(good.begin(), good.begin() + static_cast<long>(good.size() / 2))),
              HasSubstr("no zip directory: truncated?"));
  EXPECT_THAT(
      message_of(Bytes{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8,
                       0x50, 0x19, 0x2e, 0x2e, 0x2e, 0x2e, 0x2e, 0x2e, 0x2e, 0x2e, 0x2e}),
      HasSubstr("legacy (pre-1.6, non-zip) torch.save file"));
  EXPECT_THAT(message_of(Bytes(40, 0)), HasSubstr("no zip header"));
  Bytes big_endian = zip_of({{"data.pkl", "N."}, {"byteorder", "big"}});
  EXPECT_THAT(message_of(big_endian), HasSubstr("byte order 'big'"));
}

// ---- Issue 43 item 17: small files that made every reader allocate or hash
// far beyond their size.

std::string j(int32_t v) {  // BININT, for sizes past 255
  std::string s("J");
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

TEST(TorchArchiveTest, AViewHoldsNoMoreElementsThanItsStorage) {
  // torch.zeros(6).as_strided((100000, 100000), (0, 0)): 10^10 elements over 6
  // (22 KB that predict cloned into 40 GB).
  const std::string zero_strides =
      state_dict_pickle(j(100000) + j(100000) + "\x86", k(0) + k(0) + "\x86", 0, 6);
  EXPECT_THAT(message_of(zip_of({{"data.pkl", zero_strides}, {"data/0", floats(6)}})),
              HasSubstr("a view of 10000000000 elements (sizes [100000, 100000], strides [0, 0]) "
                        "over a storage of 6"));
  // Overlapping strides: 3 x 3 with strides (1, 1) reads 9 elements of 6.
  const std::string overlapping =
      state_dict_pickle(k(3) + k(3) + "\x86", k(1) + k(1) + "\x86", 0, 6);
  EXPECT_THAT(message_of(zip_of({{"data.pkl", overlapping}, {"data/0", floats(6)}})),
              HasSubstr("a view of 9 elements"));
  // A repeated row no larger than its storage (what torch.save keeps of an
  // expand) is read: materialised, it costs at most the storage's bytes.
  const std::string repeated = state_dict_pickle(k(2) + k(3) + "\x86", k(0) + k(1) + "\x86", 0, 6);
  const TorchValue v = read(zip_of({{"data.pkl", repeated}, {"data/0", floats(6)}}));
  EXPECT_EQ(v.find("w")->tensor->strides, (std::vector<int64_t>{0, 1}));
}

// A 64 KiB string, then `levels` lists, each holding the one before ten times.
std::string shared_string_pickle(int levels) {
  std::string p = "\x80\x02X"s;
  const uint32_t n = 65536;
  p.append(reinterpret_cast<const char*>(&n), sizeof n);
  p.append(n, 'a');
  p += "q\x00"s;
  for (int level = 1; level <= levels; ++level) {
    p += "](";
    for (int i = 0; i < 10; ++i) p += "h"s + static_cast<char>(level - 1);
    p += "eq"s + static_cast<char>(level);
  }
  return p + ".";
}

TEST(TorchArchiveTest, ASharedValueCountsItsBytesAtEveryReference) {
  // Three levels: 1,000 copies, 64 MiB from a 64 KiB pickle (the probe's 1 MiB
  // string through six levels reached 7.8 GB). The budget counts bytes, not values.
  EXPECT_THAT(message_of(zip_of({{"data.pkl", shared_string_pickle(3)}})),
              HasSubstr("bytes in memory"));
  // Ten references are within it.
  const TorchValue v = read(zip_of({{"data.pkl", shared_string_pickle(1)}}));
  ASSERT_EQ(v.items.size(), 10u);
  EXPECT_EQ(v.items[9].s.size(), 65536u);
}

TEST(TorchArchiveTest, RecordsMayNotOverlapSoNoByteIsHashedTwice) {
  // The probe's 9 MB zip named one 8 MiB record 10,000 times: 80 GB of CRC-32
  // work. Here two more names for one record.
  const Bytes aliased = zip_of({{"data.pkl", "N."}, {"data/0", std::string(4096, 'x')}},
                               {{"data/1", 1}, {"data/2", 1}});
  EXPECT_THAT(message_of(aliased), HasSubstr("overlap"));
}

// Files Python's torch.save (torch 2.11) wrote: tests/fuzz/make_archive_corpus.py.
TEST(TorchArchiveTest, ReadsWhatPythonsTorchSaveWrites) {
  const std::string dir = VOLSHARD_ARCHIVE_CORPUS "/";
  const TorchValue sd = read_torch_archive_file(dir + "state_dict.pt");
  ASSERT_EQ(sd.kind, TorchValue::Kind::kDict);
  ASSERT_EQ(sd.entries.size(), 3u);  // an OrderedDict with _metadata, read as its entries
  EXPECT_EQ(sd.entries[0].first.s, "0.weight");
  EXPECT_EQ(sd.entries[0].second.tensor->sizes, (std::vector<int64_t>{2, 1, 3, 3, 3}));
  EXPECT_EQ(sd.entries[2].first.s, "1.weight");
  float prelu = 0;
  std::memcpy(&prelu, sd.entries[2].second.tensor->storage->data(), 4);
  EXPECT_EQ(prelu, 0.25f);  // PReLU's initial weight

  const TorchValue v = read_torch_archive_file(dir + "views.pt");
  const TorchTensorRecord& t = *v.find("t")->tensor;  // arange(12).reshape(3, 4).t()
  EXPECT_EQ(t.sizes, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 4}));
  const TorchTensorRecord& row = *v.find("row")->tensor;  // its row 1: offset 4
  EXPECT_EQ(row.storage_offset, 4);
  EXPECT_EQ(row.storage, v.find("same")->tensor->storage);  // one storage, shared
  EXPECT_EQ(v.find("int")->tensor->dtype, "int64");
  EXPECT_EQ(v.find("flag")->tensor->dtype, "bool");
  EXPECT_EQ(v.find("half")->tensor->dtype, "float16");

  const TorchValue c = read_torch_archive_file(dir + "checkpoint.pt");
  EXPECT_EQ(c.find("version")->i, 1);
  EXPECT_EQ(c.find("meta")->s, "{\"sampler\": {}}");
  EXPECT_EQ(c.find("optimizer")->tensor->dtype, "uint8");
}

// Each bad seed of the fuzz corpus is refused with a message, not a crash.
TEST(TorchArchiveTest, TheProbesCrashingFilesAreRefused) {
  const std::string dir = VOLSHARD_ARCHIVE_CORPUS "/";
  for (const char* name :
       {"empty_pops.pt", "appends_on_empty.pt", "setitem_on_empty.pt", "setitems_on_empty.pt",
        "nested_tuple1.pt", "huge_string.pt", "global_os_system.pt", "storage_claims_more.pt"}) {
    EXPECT_THROW(read_torch_archive_file(dir + name), std::runtime_error) << name;
  }
}

// Issue 43 item 17's files as torch.save writes them, small
// (tests/fuzz/make_archive_corpus.py): refused, or read at their size.
TEST(TorchArchiveTest, TorchSavesCostlyFilesAreRefusedOrReadOnce) {
  const std::string dir = VOLSHARD_ARCHIVE_CORPUS "/";
  auto message = [&](const char* name) -> std::string {
    try {
      read_torch_archive_file(dir + name);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  // torch.zeros(6).as_strided((1000, 1000), (0, 0))
  EXPECT_THAT(message("zero_strides.pt"),
              HasSubstr("a view of 1000000 elements (sizes [1000, 1000], strides [0, 0])"));
  EXPECT_THAT(message("aliased_records.pt"),
              HasSubstr("records archive/data/0 and archive/data/1 overlap"));
  // {f"k{i}": b for i in range(100)}: one storage, shared by every entry.
  const TorchValue shared = read_torch_archive_file(dir + "shared_storage.pt");
  ASSERT_EQ(shared.entries.size(), 100u);
  for (const auto& [key, value] : shared.entries)
    EXPECT_EQ(value.tensor->storage, shared.entries[0].second.tensor->storage) << key.s;
}

}  // namespace
}  // namespace volshard
