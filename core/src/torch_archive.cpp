#include "volshard/core/torch_archive.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>

#include "volshard/core/error.h"
#include "volshard/core/file_io.h"

namespace volshard {

const TorchValue* TorchValue::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k.kind == Kind::kString && k.s == key) return &v;
  return nullptr;
}

const char* TorchValue::kind_name() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kTensor:
      return "tensor";
  }
  return "?";
}

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw std::runtime_error(what + ": " + why);
}

// Overflow-checked arithmetic on non-negative sizes.
bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool add_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// A name or value from the file, in a message: escaped and at most 80 bytes.
std::string shown(const std::string& s) {
  return printable(s.size() > 80 ? s.substr(0, 80) + "..." : s);
}

// ---- The zip container ------------------------------------------------------

struct Record {
  size_t offset = 0;  // of the data
  size_t size = 0;
  uint32_t crc = 0;
};

class Zip {
 public:
  Zip(const uint8_t* data, size_t size, std::string what, const TorchArchiveLimits& limits)
      : data_(data), size_(size), what_(std::move(what)) {
    parse(limits);
  }

  // The record `name` under the archive's folder, its CRC checked; nullptr if absent.
  const Record* find(const std::string& name) const {
    const auto it = records_.find(prefix_ + name);
    return it == records_.end() ? nullptr : &it->second;
  }
  const uint8_t* bytes(const Record& r) const { return data_ + r.offset; }
  const std::string& what() const { return what_; }
  int64_t size() const { return static_cast<int64_t>(size_); }

 private:
  // kRecordManifest's lines against the records (their CRCs were checked).
  void check_manifest(const Record& manifest) const {
    const std::string text(reinterpret_cast<const char*>(bytes(manifest)), manifest.size);
    size_t begin = 0, lines = 0;
    for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
      const std::string line = text.substr(begin, end - begin);
      const size_t a = line.find(' '), b = line.rfind(' ');
      if (a == std::string::npos || b == a)
        fail(what_, "corrupt record " + std::string(kRecordManifest));
      const std::string name = line.substr(0, a);
      const Record* r = find(name);
      char crc[16];
      std::snprintf(crc, sizeof crc, "%08x", r ? r->crc : 0u);
      if (r == nullptr || line.substr(a + 1, b - a - 1) != crc ||
          line.substr(b + 1) != std::to_string(r->size))
        fail(what_, "record " + shown(name) + " is not the one written under that name (" +
                        std::string(kRecordManifest) + " lists " + shown(line.substr(a + 1)) +
                        "; the file holds " +
                        (r ? std::string(crc) + " " + std::to_string(r->size)
                           : std::string("no such record")) +
                        "): the file was altered");
      ++lines;
    }
    if (begin != text.size()) fail(what_, "corrupt record " + std::string(kRecordManifest));
    // Every data record is listed: one added or renamed beside them is found too.
    size_t data_records = 0;
    for (const auto& record : records_)
      if (record.first.rfind(prefix_ + "data/", 0) == 0) ++data_records;
    if (data_records != lines)
      fail(what_, std::to_string(data_records) + " data records, " + std::to_string(lines) +
                      " listed in " + kRecordManifest + ": the file was altered");
  }

  uint16_t u16(size_t at) const {
    need(at, 2);
    return static_cast<uint16_t>(data_[at] | (data_[at + 1] << 8));
  }
  uint32_t u32(size_t at) const {
    need(at, 4);
    uint32_t v = 0;
    for (size_t b = 0; b < 4; ++b) v |= static_cast<uint32_t>(data_[at + b]) << (8 * b);
    return v;
  }
  uint64_t u64(size_t at) const {
    need(at, 8);
    uint64_t v = 0;
    for (size_t b = 0; b < 8; ++b) v |= static_cast<uint64_t>(data_[at + b]) << (8 * b);
    return v;
  }
  void need(size_t at, size_t n) const {
    if (at > size_ || n > size_ - at)
      fail(what_, "not a PyTorch archive (truncated zip structure)");
  }
  size_t to_size(uint64_t v, const char* field) const {
    if (v > size_)
      fail(what_, std::string("corrupt zip: ") + field + " " + std::to_string(v) +
                      " is beyond the file's " + std::to_string(size_) + " bytes");
    return static_cast<size_t>(v);
  }

  void parse(const TorchArchiveLimits& limits) {
    if (size_ < 22) fail(what_, "not a PyTorch archive (too short for a zip file)");
    if (data_[0] == 0x80)
      fail(what_,
           "a legacy (pre-1.6, non-zip) torch.save file: save it again with a current PyTorch");
    if (u32(0) != 0x04034b50) fail(what_, "not a PyTorch archive (no zip header)");
    // End of central directory: the last signature within 64 KiB + 22 bytes of the end.
    size_t eocd = size_;
    const size_t lowest = size_ > 65557 ? size_ - 65557 : 0;
    for (size_t at = size_ - 22 + 1; at-- > lowest;) {
      if (u32(at) == 0x06054b50) {
        eocd = at;
        break;
      }
    }
    if (eocd == size_) fail(what_, "not a PyTorch archive (no zip directory: truncated?)");
    uint64_t entries = u16(eocd + 10);
    uint64_t cd_size = u32(eocd + 12);
    uint64_t cd_offset = u32(eocd + 16);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
      // Zip64: the locator sits just before the end record.
      if (eocd < 20 || u32(eocd - 20) != 0x07064b50) fail(what_, "corrupt zip64 locator");
      const size_t end64 = to_size(u64(eocd - 20 + 8), "zip64 directory offset");
      if (u32(end64) != 0x06064b50) fail(what_, "corrupt zip64 directory record");
      entries = u64(end64 + 32);
      cd_size = u64(end64 + 40);
      cd_offset = u64(end64 + 48);
    }
    if (entries > static_cast<uint64_t>(limits.max_records))
      fail(what_, std::to_string(entries) + " zip records, more than the limit of " +
                      std::to_string(limits.max_records));
    size_t at = to_size(cd_offset, "directory offset");
    const size_t cd_end = at + to_size(cd_size, "directory size");
    if (cd_end > size_) fail(what_, "corrupt zip: the directory runs past the end of the file");
    struct Span {
      size_t begin, end;  // the local header to the end of the data
      const std::string* name;
    };
    std::vector<Span> spans;
    for (uint64_t e = 0; e < entries; ++e) {
      if (u32(at) != 0x02014b50) fail(what_, "corrupt zip directory entry " + std::to_string(e));
      const uint16_t method = u16(at + 10);
      const uint32_t crc = u32(at + 16);
      uint64_t compressed = u32(at + 20);
      uint64_t uncompressed = u32(at + 24);
      const size_t name_len = u16(at + 28), extra_len = u16(at + 30), comment_len = u16(at + 32);
      uint64_t local = u32(at + 42);
      need(at + 46, name_len + extra_len + comment_len);
      const std::string name(reinterpret_cast<const char*>(data_ + at + 46), name_len);
      // Zip64 sizes and offset live in the extra field, in this order, for the
      // fields that hold 0xFFFFFFFF.
      size_t x = at + 46 + name_len;
      const size_t x_end = x + extra_len;
      while (x + 4 <= x_end) {
        const uint16_t id = u16(x), len = u16(x + 2);
        if (x + 4 + len > x_end) fail(what_, "corrupt zip extra field of " + shown(name));
        if (id == 0x0001) {
          size_t f = x + 4;
          const size_t f_end = f + len;
          auto next = [&](uint64_t& field) {
            if (field != 0xFFFFFFFF) return;
            if (f + 8 > f_end) fail(what_, "corrupt zip64 field of " + shown(name));
            field = u64(f);
            f += 8;
          };
          next(uncompressed);
          next(compressed);
          next(local);
        }
        x += 4 + len;
      }
      at = x_end + comment_len;
      if (at > cd_end) fail(what_, "corrupt zip: a directory entry runs past the directory");
      if (method != 0)
        fail(what_,
             "record " + shown(name) + " is compressed (method " + std::to_string(method) +
                 "); torch.save stores records uncompressed, and a compressed one is refused");
      if (compressed != uncompressed)
        fail(what_, "record " + shown(name) + ": its stored and plain sizes differ");
      const size_t header = to_size(local, "record offset");
      if (u32(header) != 0x04034b50) fail(what_, "corrupt zip: no local header for " + shown(name));
      const size_t data_at = header + 30 + u16(header + 26) + u16(header + 28);
      const size_t length = to_size(uncompressed, "record size");
      need(data_at, length);
      const auto [it, added] = records_.emplace(name, Record{data_at, length, crc});
      if (!added) fail(what_, "corrupt zip: record " + shown(name) + " appears twice");
      spans.push_back({header, data_at + length, &it->first});
    }
    // Records may not share bytes (torch.save's never do): each byte of the
    // file is then hashed once at most, however many entries the directory
    // has (10,000 names of one 8 MiB record cost 80 GB of CRC-32 work).
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].begin < spans[i - 1].end)
        fail(what_, "corrupt zip: records " + shown(*spans[i - 1].name) + " and " +
                        shown(*spans[i].name) + " overlap (bytes " +
                        std::to_string(spans[i].begin) + " to " +
                        std::to_string(std::min(spans[i].end, spans[i - 1].end)) +
                        "): a zip's records never share bytes");
    // Every record's CRC, used or not: a flipped bit anywhere is found.
    for (const auto& [name, r] : records_) {
      if (archive_crc32(data_ + r.offset, r.size) != r.crc)
        fail(what_, "record " + shown(name) + " fails its CRC-32 check: the file is corrupt");
    }
    // The pickle is <folder>/data.pkl; the folder is whatever the writer named it.
    for (const auto& [name, record] : records_) {
      const size_t slash = name.find('/');
      if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
        if (!prefix_.empty()) fail(what_, "two data.pkl records: not one PyTorch archive");
        prefix_ = name.substr(0, slash + 1);
      }
    }
    if (prefix_.empty()) fail(what_, "not a PyTorch archive (no data.pkl record)");
    if (const Record* manifest = find(kRecordManifest)) check_manifest(*manifest);
    if (const Record* order = find("byteorder")) {
      const std::string value(reinterpret_cast<const char*>(bytes(*order)), order->size);
      if (value != "little") fail(what_, "byte order '" + shown(value) + "' is not supported");
    }
  }

  const uint8_t* data_;
  size_t size_;
  std::string what_;
  std::map<std::string, Record> records_;
  std::string prefix_;
};

// ---- The pickle machine -----------------------------------------------------

struct Node {
  enum Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    kMark,
    kGlobal,
    kStorage,
    kTensor
  };
  Kind kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s, name;  // string/bytes; a global's module (s) and name
  std::vector<Node*> items;
  std::vector<std::pair<Node*, Node*>> entries;
  std::shared_ptr<TorchTensorRecord> tensor;  // kStorage: the storage alone; kTensor: the view
};

struct StorageType {
  const char* storage;
  const char* dtype;
  int64_t element_size;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "float32", 4}, {"DoubleStorage", "float64", 8},
    {"HalfStorage", "float16", 2},  {"BFloat16Storage", "bfloat16", 2},
    {"LongStorage", "int64", 8},    {"IntStorage", "int32", 4},
    {"ShortStorage", "int16", 2},   {"CharStorage", "int8", 1},
    {"ByteStorage", "uint8", 1},    {"BoolStorage", "bool", 1}};

const StorageType* storage_type(const Node* g) {
  if (g->kind != Node::kGlobal || g->s != "torch") return nullptr;
  for (const auto& t : kStorageTypes)
    if (g->name == t.storage) return &t;
  return nullptr;
}

// The callables a state_dict or checkpoint may name; any other global is refused.
bool allowed_global(const std::string& module, const std::string& name) {
  static const std::pair<const char*, const char*> kAllowed[] = {
      {"collections", "OrderedDict"},
      {"torch._utils", "_rebuild_tensor"},
      {"torch._utils", "_rebuild_tensor_v2"},
      {"torch._utils", "_rebuild_parameter"},
      {"torch._utils", "_rebuild_parameter_with_state"},
      {"torch.jit._pickle", "restore_type_tag"}};  // LibTorch's typed dicts (older volshard files)
  for (const auto& [m, n] : kAllowed)
    if (module == m && name == n) return true;
  if (module == "torch")
    for (const auto& t : kStorageTypes)
      if (name == t.storage) return true;
  return false;
}

class Unpickler {
 public:
  Unpickler(const Zip& zip, const TorchArchiveLimits& limits) : zip_(zip), limits_(limits) {}

  TorchValue run() {
    const Record* pkl = zip_.find("data.pkl");
    if (pkl->size > static_cast<size_t>(limits_.max_pickle_bytes))
      fail("data.pkl has " + std::to_string(pkl->size) + " bytes, more than the limit of " +
           std::to_string(limits_.max_pickle_bytes));
    p_ = zip_.bytes(*pkl);
    end_ = p_ + pkl->size;
    Node* top = execute();
    Budget budget{limits_.max_objects, 0};
    if (!mul_ok(static_cast<int64_t>(pkl->size), limits_.value_bytes_per_pickle_byte,
                &budget.bytes) ||
        !add_ok(budget.bytes, limits_.value_bytes_allowance, &budget.bytes))
      budget.bytes = std::numeric_limits<int64_t>::max();
    budget_limit_ = budget.bytes;
    pickle_bytes_ = static_cast<int64_t>(pkl->size);
    return convert(top, 0, budget);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { volshard::fail(zip_.what(), why); }

  Node* make(Node::Kind kind) {
    if (static_cast<int64_t>(nodes_.size()) >= limits_.max_objects)
      fail("more than " + std::to_string(limits_.max_objects) + " values in data.pkl");
    nodes_.push_back(std::make_unique<Node>());
    nodes_.back()->kind = kind;
    return nodes_.back().get();
  }
  void push(Node* n) {
    if (static_cast<int64_t>(stack_.size()) >= limits_.max_objects) fail("pickle stack too deep");
    stack_.push_back(n);
  }
  Node* pop() {
    if (stack_.empty()) fail("malformed pickle (an opcode pops an empty stack)");
    Node* v = stack_.back();
    stack_.pop_back();
    if (v->kind == Node::kMark) fail("malformed pickle (a MARK where a value belongs)");
    return v;
  }
  Node* top() const {
    if (stack_.empty()) fail("malformed pickle (an opcode needs a value on an empty stack)");
    if (stack_.back()->kind == Node::kMark) fail("malformed pickle (a MARK where a value belongs)");
    return stack_.back();
  }
  std::vector<Node*> pop_to_mark() {
    const auto mark = std::find_if(stack_.rbegin(), stack_.rend(),
                                   [](const Node* n) { return n->kind == Node::kMark; });
    if (mark == stack_.rend()) fail("malformed pickle (no MARK)");
    const auto first = mark.base();  // just after the mark
    std::vector<Node*> items(first, stack_.end());
    stack_.erase(first - 1, stack_.end());
    return items;
  }
  Node* container(Node::Kind kind, const char* op) {
    Node* c = top();
    if (c->kind != kind) fail(std::string("malformed pickle (") + op + " on a " + name_of(c) + ")");
    return c;
  }
  static const char* name_of(const Node* n) {
    static const char* const kNames[] = {"None",   "bool",    "int",   "float", "string",
                                         "bytes",  "tuple",   "list",  "dict",  "mark",
                                         "global", "storage", "tensor"};
    return kNames[n->kind];
  }
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) fail("truncated pickle");
  }
  template <typename T>
  T take() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string take_string(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) fail("truncated pickle (a string runs past its end)");
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return s;
  }
  std::string take_line() {
    const auto* nl =
        static_cast<const uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (nl == nullptr) fail("truncated pickle");
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    return s;
  }
  Node* tuple(std::vector<Node*> items) {
    Node* t = make(Node::kTuple);
    t->items = std::move(items);
    return t;
  }
  Node* global(const std::string& module, const std::string& name) {
    if (!allowed_global(module, name))
      fail("refuses the global " + shown(module) + "." + shown(name) +
           " (a state_dict or checkpoint needs none but tensors, dicts and plain values)");
    Node* g = make(Node::kGlobal);
    g->s = module;
    g->name = name;
    return g;
  }
  Node* integer(int64_t v) {
    Node* n = make(Node::kInt);
    n->i = v;
    return n;
  }
  void memo_put(uint64_t key) {
    if (static_cast<int64_t>(memo_.size()) >= limits_.max_objects) fail("pickle memo too large");
    memo_[key] = top();
  }

  int64_t int_of(const Node* n, const char* what) const {
    if (n->kind != Node::kInt) fail(std::string("malformed tensor record (") + what + ")");
    return n->i;
  }

  // ('storage', torch.<X>Storage, key, location, numel): the record data/<key>.
  Node* storage(Node* pid) {
    if (pid->kind != Node::kTuple || pid->items.size() != 5 ||
        pid->items[0]->kind != Node::kString || pid->items[0]->s != "storage" ||
        pid->items[2]->kind != Node::kString)
      fail("unsupported persistent id (not a tensor storage)");
    const StorageType* type = storage_type(pid->items[1]);
    if (type == nullptr) fail("unsupported tensor storage type");
    const std::string& key = pid->items[2]->s;
    const int64_t numel = int_of(pid->items[4], "storage size");
    auto cached = storages_.find(key);
    if (cached != storages_.end()) {
      if (cached->second->tensor->dtype != type->dtype ||
          cached->second->tensor->storage_numel != numel)
        fail("storage " + shown(key) + " is named with two types or sizes");
      return cached->second;
    }
    const Record* record = zip_.find("data/" + key);
    if (record == nullptr) fail("storage " + shown(key) + " has no record data/" + shown(key));
    int64_t bytes = 0;
    if (numel < 0 || !mul_ok(numel, type->element_size, &bytes) ||
        bytes > static_cast<int64_t>(record->size))
      fail("storage " + shown(key) + " claims " + std::to_string(numel) + " elements of " +
           type->dtype + " but its record has " + std::to_string(record->size) + " bytes");
    // Records may overlap: all storages together may not copy more than the file holds.
    if (!add_ok(storage_bytes_, bytes, &storage_bytes_) || storage_bytes_ > zip_.size())
      fail("storages overlap (together larger than the file)");
    Node* s = make(Node::kStorage);
    auto t = std::make_shared<TorchTensorRecord>();
    t->dtype = type->dtype;
    t->element_size = type->element_size;
    t->storage_numel = numel;
    const uint8_t* from = zip_.bytes(*record);
    t->storage = std::make_shared<const std::vector<uint8_t>>(from, from + bytes);
    s->tensor = std::move(t);
    storages_.emplace(key, s);
    return s;
  }

  std::vector<int64_t> dims(const Node* t, const char* what) const {
    if (t->kind != Node::kTuple) fail(std::string("malformed tensor record (") + what + ")");
    if (static_cast<int64_t>(t->items.size()) > limits_.max_dims)
      fail("a tensor with " + std::to_string(t->items.size()) + " dimensions, more than " +
           std::to_string(limits_.max_dims));
    std::vector<int64_t> out;
    for (const Node* v : t->items) out.push_back(int_of(v, what));
    return out;
  }

  // _rebuild_tensor(_v2)(storage, offset, sizes, strides, ...): the view must
  // lie inside the storage.
  Node* tensor(const Node* args) {
    if (args->kind != Node::kTuple || args->items.size() < 4 ||
        args->items[0]->kind != Node::kStorage)
      fail("malformed tensor record");
    const TorchTensorRecord& storage = *args->items[0]->tensor;
    auto t = std::make_shared<TorchTensorRecord>(storage);
    t->storage_offset = int_of(args->items[1], "offset");
    t->sizes = dims(args->items[2], "sizes");
    t->strides = dims(args->items[3], "strides");
    if (t->sizes.size() != t->strides.size())
      fail("malformed tensor record (sizes and strides differ in rank)");
    int64_t numel = 1, last = t->storage_offset;
    bool ok = t->storage_offset >= 0;
    for (size_t d = 0; d < t->sizes.size() && ok; ++d) {
      ok = t->sizes[d] >= 0 && t->strides[d] >= 0 && mul_ok(numel, t->sizes[d], &numel);
      int64_t reach = 0;
      ok = ok && (t->sizes[d] == 0 ||
                  (mul_ok(t->sizes[d] - 1, t->strides[d], &reach) && add_ok(last, reach, &last)));
    }
    if (!ok || (numel > 0 && last >= storage.storage_numel))
      fail("a tensor's view (offset " + std::to_string(t->storage_offset) +
           ") reaches past its storage of " + std::to_string(storage.storage_numel) + " elements");
    // Inside its storage, a view still repeats elements through a zero or
    // overlapping stride: at most as many as the storage holds, so that
    // materialising it (a clone, a checksum) costs no more than the storage's bytes.
    if (numel > storage.storage_numel)
      fail("a tensor is a view of " + std::to_string(numel) + " elements (sizes " +
           list_text(t->sizes) + ", strides " + list_text(t->strides) + ") over a storage of " +
           std::to_string(storage.storage_numel) +
           ": a zero or overlapping stride repeats elements, and a view may hold no more than "
           "its storage");
    Node* n = make(Node::kTensor);
    n->tensor = std::move(t);
    return n;
  }

  static std::string list_text(const std::vector<int64_t>& v) {
    std::string text = "[";
    for (size_t i = 0; i < v.size(); ++i) text += (i ? ", " : "") + std::to_string(v[i]);
    return text + "]";
  }

  Node* reduce(Node* callable, Node* args) {
    if (callable->kind != Node::kGlobal) fail("malformed pickle (REDUCE of a non-callable)");
    if (args->kind != Node::kTuple) fail("malformed pickle (REDUCE without an argument tuple)");
    const std::string& name = callable->name;
    if (name == "OrderedDict") {
      if (!args->items.empty()) fail("OrderedDict with arguments is not supported");
      return make(Node::kDict);
    }
    if (name == "_rebuild_tensor" || name == "_rebuild_tensor_v2") return tensor(args);
    if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state" ||
        name == "restore_type_tag") {
      if (args->items.empty()) fail("malformed pickle (" + name + " without arguments)");
      return args->items[0];
    }
    fail("the global torch." + shown(name) + " is a storage type, not a callable");
  }

  Node* execute() {
    while (p_ < end_) {
      const uint8_t op = *p_++;
      switch (op) {
        case 0x80:  // PROTO
          take<uint8_t>();
          break;
        case 0x95:  // FRAME
          take<uint64_t>();
          break;
        case '.': {  // STOP
          Node* result = pop();
          return result;
        }
        case '(':
          push(make(Node::kMark));
          break;
        case ')':
          push(tuple({}));
          break;
        case 't': {
          auto items = pop_to_mark();
          push(tuple(std::move(items)));
          break;
        }
        case 0x85: {
          Node* a = pop();
          push(tuple({a}));
          break;
        }
        case 0x86: {
          Node* b = pop();
          Node* a = pop();
          push(tuple({a, b}));
          break;
        }
        case 0x87: {
          Node* c = pop();
          Node* b = pop();
          Node* a = pop();
          push(tuple({a, b, c}));
          break;
        }
        case '}':
          push(make(Node::kDict));
          break;
        case ']':
          push(make(Node::kList));
          break;
        case 'N':
          push(make(Node::kNone));
          break;
        case 0x88:
        case 0x89: {
          Node* b = make(Node::kBool);
          b->i = op == 0x88 ? 1 : 0;
          push(b);
          break;
        }
        case 'J':
          push(integer(take<int32_t>()));
          break;
        case 'K':
          push(integer(take<uint8_t>()));
          break;
        case 'M':
          push(integer(take<uint16_t>()));
          break;
        case 0x8a: {  // LONG1: little-endian two's complement, up to 8 bytes here
          const size_t n = take<uint8_t>();
          if (n > 8) fail("an integer wider than 64 bits");
          need(n);
          uint64_t v = 0;
          for (size_t b = 0; b < n; ++b) v |= static_cast<uint64_t>(p_[b]) << (8 * b);
          if (n > 0 && n < 8 && (p_[n - 1] & 0x80) != 0) v |= ~uint64_t{0} << (8 * n);
          p_ += n;
          int64_t s = 0;
          std::memcpy(&s, &v, sizeof s);
          push(integer(s));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          need(8);
          uint64_t bits = 0;
          for (size_t b = 0; b < 8; ++b) bits = (bits << 8) | p_[b];
          p_ += 8;
          Node* x = make(Node::kFloat);
          std::memcpy(&x->f, &bits, sizeof bits);
          push(x);
          break;
        }
        case 'X':
        case 0x8c:
        case 0x8d:
        case 'B':
        case 'C': {
          const uint64_t n = op == 'X' || op == 'B' ? take<uint32_t>()
                             : op == 0x8d           ? take<uint64_t>()
                                                    : take<uint8_t>();
          Node* v = make(op == 'B' || op == 'C' ? Node::kBytes : Node::kString);
          v->s = take_string(n);
          push(v);
          break;
        }
        case 'c': {  // GLOBAL
          const std::string module = take_line();
          const std::string name = take_line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Node* name = pop();
          Node* module = pop();
          if (module->kind != Node::kString || name->kind != Node::kString)
            fail("malformed pickle (STACK_GLOBAL of non-strings)");
          push(global(module->s, name->s));
          break;
        }
        case 'q':
          memo_put(take<uint8_t>());
          break;
        case 'r':
          memo_put(take<uint32_t>());
          break;
        case 0x94:
          memo_put(memo_.size());
          break;
        case 'h':
        case 'j': {
          const uint64_t key = op == 'h' ? take<uint8_t>() : take<uint32_t>();
          const auto it = memo_.find(key);
          if (it == memo_.end()) fail("malformed pickle (a memo entry that was never put)");
          push(it->second);
          break;
        }
        case 's': {
          Node* v = pop();
          Node* k = pop();
          container(Node::kDict, "SETITEM")->entries.emplace_back(k, v);
          break;
        }
        case 'u': {
          auto items = pop_to_mark();
          if (items.size() % 2 != 0) fail("malformed pickle (SETITEMS with an odd count)");
          Node* d = container(Node::kDict, "SETITEMS");
          for (size_t i = 0; i < items.size(); i += 2)
            d->entries.emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'a': {
          Node* v = pop();
          container(Node::kList, "APPEND")->items.push_back(v);
          break;
        }
        case 'e': {
          auto items = pop_to_mark();
          Node* l = container(Node::kList, "APPENDS");
          l->items.insert(l->items.end(), items.begin(), items.end());
          break;
        }
        case 'Q': {  // BINPERSID
          Node* pid = pop();
          push(storage(pid));
          break;
        }
        case 'R':
        case 0x81: {  // REDUCE, NEWOBJ
          Node* args = pop();
          Node* callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 'b':  // BUILD: the state (an OrderedDict's _metadata) is not needed
          pop();
          top();
          break;
        case '0':
          pop();
          break;
        case '1':
          pop_to_mark();
          break;
        case '2':
          push(top());
          break;
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("refuses pickle opcode ") + hex +
               " (not one a state_dict or checkpoint needs)");
        }
      }
    }
    fail("truncated pickle (no STOP)");
  }

  // What convert may still make: values, and their bytes in memory.
  struct Budget {
    int64_t values, bytes;
  };

  // The parsed graph as a tree: depth and size bounded, so shared or cyclic
  // references cannot make it loop or grow without end. A value shared by many
  // references is copied at each, so its bytes count at each.
  TorchValue convert(const Node* n, int64_t depth, Budget& budget) const {
    if (depth > limits_.max_depth)
      fail("values nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    if (--budget.values < 0) fail("more than " + std::to_string(limits_.max_objects) + " values");
    // The children's structs are counted as they are made; they must fit before they are reserved.
    const size_t children = n->items.size() + 2 * n->entries.size();
    budget.bytes -= static_cast<int64_t>(sizeof(TorchValue) + n->s.size());
    if (budget.bytes < 0 || children > static_cast<size_t>(budget.bytes) / sizeof(TorchValue))
      fail("its values would take more than " + std::to_string(budget_limit_) +
           " bytes in memory (" + std::to_string(limits_.value_bytes_per_pickle_byte) +
           " per byte of data.pkl's " + std::to_string(pickle_bytes_) + ", plus " +
           std::to_string(limits_.value_bytes_allowance) +
           "): a value shared by many references counts at each");
    TorchValue v;
    switch (n->kind) {
      case Node::kNone:
        v.kind = TorchValue::Kind::kNone;
        break;
      case Node::kBool:
        v.kind = TorchValue::Kind::kBool;
        v.i = n->i;
        break;
      case Node::kInt:
        v.kind = TorchValue::Kind::kInt;
        v.i = n->i;
        break;
      case Node::kFloat:
        v.kind = TorchValue::Kind::kFloat;
        v.f = n->f;
        break;
      case Node::kString:
      case Node::kBytes:
        v.kind = n->kind == Node::kString ? TorchValue::Kind::kString : TorchValue::Kind::kBytes;
        v.s = n->s;
        break;
      case Node::kTuple:
      case Node::kList:
        v.kind = n->kind == Node::kTuple ? TorchValue::Kind::kTuple : TorchValue::Kind::kList;
        v.items.reserve(n->items.size());
        for (const Node* item : n->items) v.items.push_back(convert(item, depth + 1, budget));
        break;
      case Node::kDict:
        v.kind = TorchValue::Kind::kDict;
        v.entries.reserve(n->entries.size());
        for (const auto& [key, value] : n->entries)
          v.entries.emplace_back(convert(key, depth + 1, budget),
                                 convert(value, depth + 1, budget));
        break;
      case Node::kTensor:
        v.kind = TorchValue::Kind::kTensor;
        v.tensor = n->tensor;
        break;
      case Node::kMark:
      case Node::kGlobal:
      case Node::kStorage:
        fail(std::string("a ") + name_of(n) + " where a value belongs");
    }
    return v;
  }

  const Zip& zip_;
  TorchArchiveLimits limits_;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  std::vector<std::unique_ptr<Node>> nodes_;  // owns every node: flat destruction, cycles harmless
  std::vector<Node*> stack_;
  std::map<uint64_t, Node*> memo_;
  std::map<std::string, Node*> storages_;
  int64_t storage_bytes_ = 0;
  int64_t budget_limit_ = 0, pickle_bytes_ = 0;  // for convert's message
};

}  // namespace

uint32_t archive_crc32(const void* data, size_t size, uint32_t crc) {
  uLong c = crc;
  const auto* p = static_cast<const Bytef*>(data);
  for (size_t done = 0; done < size;) {
    const size_t chunk = std::min<size_t>(size - done, size_t{1} << 30);
    c = crc32(c, p + done, static_cast<uInt>(chunk));
    done += chunk;
  }
  return static_cast<uint32_t>(c);
}

TorchValue read_torch_archive(const uint8_t* data, size_t size, const std::string& what,
                              const TorchArchiveLimits& limits) {
  const Zip zip(data, size, what, limits);
  return Unpickler(zip, limits).run();
}

TorchValue read_torch_archive_file(const std::string& path, const TorchArchiveLimits& limits) {
  const std::vector<char> bytes = read_file(path);
  return read_torch_archive(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path,
                            limits);
}

}  // namespace volshard
