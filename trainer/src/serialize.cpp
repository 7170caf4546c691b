#include "volshard/trainer/serialize.h"

#include <ATen/ops/empty.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>

#include "archive_io.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/datasets/nifti_header.h"

namespace volshard {
namespace detail {

std::string first_line(const std::exception& e) {
  std::string msg = e.what();
  if (const size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

std::vector<char> pickle_archive(const c10::IValue& value) {
  // torch::jit::pickle_save's steps, with tag_aggregates off.
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* p, size_t n) { pickled.insert(pickled.end(), p, p + n); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    const char* bytes = static_cast<const char*>(p);
    archive.insert(archive.end(), bytes, bytes + n);
    return n;
  });
  writer.writeRecord("data.pkl", pickled.data(), pickled.size());
  const std::vector<at::Tensor>& tensors = pickler.tensorData();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::jit::WriteableTensorData data = torch::jit::getWriteableTensorData(tensors[i]);
    writer.writeRecord("data/" + std::to_string(i), data.data(), data.sizeInBytes());
  }
  writer.writeEndOfFile();
  return archive;
}

c10::IValue unpickle(const std::vector<char>& bytes, const std::string& what,
                     const std::string& kind) {
  try {
    return torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": not a readable " + kind + " (" + first_line(e) + ")");
  }
}

}  // namespace detail

namespace {

using detail::first_line;

// ---- A reader for what torch.save(model.state_dict()) writes ----------------
// LibTorch 1.13's unpickler turns collections.OrderedDict (the type of every
// state_dict) into None, so it cannot read the files Python users save. This
// small pickle machine understands the opcodes torch.save emits for a dict of
// tensors (protocols 2-4) and nothing else.

struct PyValue;
using PyPtr = std::shared_ptr<PyValue>;
struct PyValue {
  enum Kind {
    kNone,
    kInt,
    kFloat,
    kBool,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kMark,
    kOther
  };
  Kind kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s, name;  // string; or a global's module (s) and name
  std::vector<PyPtr> items;
  std::vector<std::pair<PyPtr, PyPtr>> entries;
  at::Tensor tensor;  // storage (1-D) or tensor
};

PyPtr make(PyValue::Kind k) {
  auto v = std::make_shared<PyValue>();
  v->kind = k;
  return v;
}

at::ScalarType storage_dtype(const std::string& name, const std::string& what) {
  static const std::map<std::string, at::ScalarType> types{
      {"FloatStorage", at::kFloat}, {"DoubleStorage", at::kDouble},
      {"HalfStorage", at::kHalf},   {"BFloat16Storage", at::kBFloat16},
      {"LongStorage", at::kLong},   {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort}, {"CharStorage", at::kChar},
      {"ByteStorage", at::kByte},   {"BoolStorage", at::kBool}};
  auto it = types.find(name);
  if (it == types.end())
    throw std::runtime_error(what + ": unsupported tensor storage type " + name);
  return it->second;
}

class StateDictReader {
 public:
  StateDictReader(const std::vector<char>& bytes, std::string what)
      : reader_(std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.data(), bytes.size())),
        what_(std::move(what)) {}

  NamedTensors read() {
    auto [data, size] = reader_.getRecord("data.pkl");
    p_ = static_cast<const uint8_t*>(data.get());
    end_ = p_ + size;
    const PyPtr top = run();
    if (top->kind != PyValue::kDict) fail("holds no dict of tensors");
    NamedTensors out;
    for (const auto& [k, v] : top->entries) {
      if (k->kind != PyValue::kString) fail("a key is not a string");
      if (v->kind != PyValue::kTensor) fail("entry '" + printable(k->s) + "' is not a tensor");
      out.emplace_back(k->s, v->tensor);
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(what_ + ": " + why);
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
  std::string take_string(size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::string take_line() {
    const uint8_t* nl =
        static_cast<const uint8_t*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (nl == nullptr) fail("truncated pickle");
    std::string s(reinterpret_cast<const char*>(p_), static_cast<size_t>(nl - p_));
    p_ = nl + 1;
    return s;
  }
  PyPtr pop() {
    if (stack_.empty()) fail("malformed pickle (stack underflow)");
    PyPtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<PyPtr> pop_to_mark() {
    std::vector<PyPtr> items;
    while (true) {
      PyPtr v = pop();
      if (v->kind == PyValue::kMark) break;
      items.push_back(v);
    }
    std::reverse(items.begin(), items.end());
    return items;
  }
  PyPtr tuple(std::vector<PyPtr> items) {
    PyPtr t = make(PyValue::kTuple);
    t->items = std::move(items);
    return t;
  }
  PyPtr global(std::string module, std::string name) {
    PyPtr g = make(PyValue::kGlobal);
    g->s = std::move(module);
    g->name = std::move(name);
    return g;
  }

  PyPtr storage(const PyPtr& pid) {
    // ('storage', <global torch.XStorage>, key, location, numel)
    if (pid->kind != PyValue::kTuple || pid->items.size() < 5 ||
        pid->items[1]->kind != PyValue::kGlobal)
      fail("unsupported persistent id");
    const at::ScalarType dtype = storage_dtype(pid->items[1]->name, what_);
    const std::string key = pid->items[2]->s;
    auto [data, size] = reader_.getRecord("data/" + key);
    const int64_t numel = pid->items[4]->i;
    const auto elem = static_cast<int64_t>(c10::elementSize(dtype));
    if (static_cast<int64_t>(size) < numel * elem) fail("storage data/" + key + " is truncated");
    PyPtr s = make(PyValue::kStorage);
    s->tensor = at::empty({numel}, dtype);
    if (numel > 0) std::memcpy(s->tensor.data_ptr(), data.get(), static_cast<size_t>(numel * elem));
    return s;
  }

  std::vector<int64_t> ints(const PyPtr& t) {
    std::vector<int64_t> out;
    for (const auto& v : t->items) out.push_back(v->i);
    return out;
  }

  PyPtr reduce(const PyPtr& callable, const PyPtr& args) {
    if (callable->kind != PyValue::kGlobal) return make(PyValue::kOther);
    const std::string full = callable->s + "." + callable->name;
    if (full == "collections.OrderedDict") return make(PyValue::kDict);
    if (full == "torch._utils._rebuild_tensor_v2" || full == "torch._utils._rebuild_tensor") {
      const auto& a = args->items;
      if (a.size() < 4 || a[0]->kind != PyValue::kStorage) fail("malformed tensor record");
      PyPtr t = make(PyValue::kTensor);
      t->tensor = a[0]->tensor.as_strided(ints(a[2]), ints(a[3]), a[1]->i).clone();
      return t;
    }
    if (full == "torch._utils._rebuild_parameter" && !args->items.empty()) return args->items[0];
    return make(PyValue::kOther);  // e.g. hooks, metadata: not needed for a state_dict
  }

  PyPtr run() {
    while (p_ < end_) {
      const uint8_t op = *p_++;
      switch (op) {
        case 0x80:
          take<uint8_t>();
          break;  // PROTO
        case 0x95:
          take<uint64_t>();
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          stack_.push_back(make(PyValue::kMark));
          break;
        case ')':
          stack_.push_back(tuple({}));
          break;
        case 't':
          stack_.push_back(tuple(pop_to_mark()));
          break;
        case 0x85: {
          auto a = pop();
          stack_.push_back(tuple({a}));
          break;
        }
        case 0x86: {
          auto b = pop(), a = pop();
          stack_.push_back(tuple({a, b}));
          break;
        }
        case 0x87: {
          auto c = pop(), b = pop(), a = pop();
          stack_.push_back(tuple({a, b, c}));
          break;
        }
        case '}':
          stack_.push_back(make(PyValue::kDict));
          break;
        case ']':
          stack_.push_back(make(PyValue::kList));
          break;
        case 'N':
          stack_.push_back(make(PyValue::kNone));
          break;
        case 0x88:
        case 0x89: {
          auto b = make(PyValue::kBool);
          b->i = op == 0x88;
          stack_.push_back(b);
          break;
        }
        case 'J': {
          auto v = make(PyValue::kInt);
          v->i = take<int32_t>();
          stack_.push_back(v);
          break;
        }
        case 'K': {
          auto v = make(PyValue::kInt);
          v->i = take<uint8_t>();
          stack_.push_back(v);
          break;
        }
        case 'M': {
          auto v = make(PyValue::kInt);
          v->i = take<uint16_t>();
          stack_.push_back(v);
          break;
        }
        case 0x8a: {  // LONG1: little-endian two's complement
          const size_t n = take<uint8_t>();
          need(n);
          int64_t v = 0;
          for (size_t b = 0; b < n && b < 8; ++b) v |= static_cast<int64_t>(p_[b]) << (8 * b);
          if (n > 0 && n < 8 && (p_[n - 1] & 0x80)) v -= int64_t{1} << (8 * n);
          p_ += n;
          auto x = make(PyValue::kInt);
          x->i = v;
          stack_.push_back(x);
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          uint64_t bits = 0;
          need(8);
          for (int b = 0; b < 8; ++b) bits = (bits << 8) | p_[b];
          p_ += 8;
          auto x = make(PyValue::kFloat);
          std::memcpy(&x->f, &bits, 8);
          stack_.push_back(x);
          break;
        }
        case 'X': {
          auto v = make(PyValue::kString);
          v->s = take_string(take<uint32_t>());
          stack_.push_back(v);
          break;
        }
        case 0x8c: {
          auto v = make(PyValue::kString);
          v->s = take_string(take<uint8_t>());
          stack_.push_back(v);
          break;
        }
        case 0x8d: {
          auto v = make(PyValue::kString);
          v->s = take_string(take<uint64_t>());
          stack_.push_back(v);
          break;
        }
        case 'C': {
          auto v = make(PyValue::kOther);
          take_string(take<uint8_t>());
          stack_.push_back(v);
          break;
        }
        case 'B': {
          auto v = make(PyValue::kOther);
          take_string(take<uint32_t>());
          stack_.push_back(v);
          break;
        }
        case 'c': {
          std::string m = take_line();
          std::string n = take_line();
          stack_.push_back(global(m, n));
          break;
        }
        case 0x93: {
          auto n = pop(), m = pop();
          stack_.push_back(global(m->s, n->s));
          break;
        }
        case 'q':
          memo_[take<uint8_t>()] = stack_.at(stack_.size() - 1);
          break;
        case 'r':
          memo_[take<uint32_t>()] = stack_.at(stack_.size() - 1);
          break;
        case 0x94:
          memo_[memo_.size()] = stack_.at(stack_.size() - 1);
          break;
        case 'h':
        case 'j': {
          const uint32_t k = op == 'h' ? take<uint8_t>() : take<uint32_t>();
          auto it = memo_.find(k);
          if (it == memo_.end()) fail("malformed pickle (memo)");
          stack_.push_back(it->second);
          break;
        }
        case 's': {
          auto v = pop(), k = pop();
          stack_.back()->entries.emplace_back(k, v);
          break;
        }
        case 'u': {
          auto items = pop_to_mark();
          for (size_t i = 0; i + 1 < items.size(); i += 2)
            stack_.back()->entries.emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'a': {
          auto v = pop();
          stack_.back()->items.push_back(v);
          break;
        }
        case 'e': {
          auto items = pop_to_mark();
          for (auto& v : items) stack_.back()->items.push_back(v);
          break;
        }
        case 'Q': {
          auto pid = pop();
          stack_.push_back(storage(pid));
          break;
        }
        case 'R': {
          auto args = pop(), callable = pop();
          stack_.push_back(reduce(callable, args));
          break;
        }
        case 0x81: {
          auto args = pop(), cls = pop();
          stack_.push_back(reduce(cls, args));
          break;
        }  // NEWOBJ
        case 'b':
          pop();
          break;  // BUILD: attributes (e.g. _metadata) are not needed
        case '0':
          pop();
          break;
        case '2':
          stack_.push_back(stack_.at(stack_.size() - 1));
          break;
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("unsupported pickle opcode ") + hex);
        }
      }
    }
    fail("truncated pickle (no STOP)");
  }

  caffe2::serialize::PyTorchStreamReader reader_;
  std::string what_;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  std::vector<PyPtr> stack_;
  std::map<size_t, PyPtr> memo_;
};

}  // namespace

std::vector<char> pickle_tensor_dict(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& kv : tensors)
    dict.insert(kv.first, kv.second.detach().to(at::kCPU).contiguous());
  return detail::pickle_archive(c10::IValue(dict));
}

NamedTensors unpickle_tensor_dict(const std::vector<char>& bytes, const std::string& what) {
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    // torch.save(model.state_dict()) writes an OrderedDict, which LibTorch
    // 1.13 cannot read: read it ourselves; if that fails too, report both.
    try {
      return StateDictReader(bytes, what).read();
    } catch (const std::exception& e2) {
      throw std::runtime_error(what + ": not a readable PyTorch archive of tensors (" +
                               first_line(e) + "; " + first_line(e2) + ")");
    }
  }
  if (!value.isGenericDict())
    throw std::runtime_error(what + ": holds a " + value.tagKind() + ", not a dict of tensors");
  NamedTensors out;
  for (const auto& kv : value.toGenericDict()) {
    if (!kv.key().isString())
      throw std::runtime_error(what + ": a key is a " + kv.key().tagKind() + ", not a string");
    if (!kv.value().isTensor())
      throw std::runtime_error(what + ": entry '" + printable(kv.key().toStringRef()) + "' is a " +
                               kv.value().tagKind() + ", not a tensor");
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  return out;
}

NamedTensors load_tensor_dict(const std::string& path) {
  return unpickle_tensor_dict(read_file(path), path);
}

at::Tensor load_tensor(const std::string& path) {
  const c10::IValue value = detail::unpickle(read_file(path), path, "PyTorch archive");
  if (!value.isTensor())
    throw std::runtime_error(path + ": holds a " + value.tagKind() + ", not a tensor");
  return value.toTensor();
}

void save_tensor_dict(const std::string& path, const NamedTensors& tensors) {
  const std::vector<char> bytes = pickle_tensor_dict(tensors);
  write_file_atomic(path, {bytes.data()}, {bytes.size()});
}

}  // namespace volshard
