#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include "cache_entry.h"

#include <ATen/ops/empty.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "volshard/core/file_io.h"

namespace volshard::detail {
namespace {

// An entry file, in the writer's byte order (the tag below refuses another):
//
//   header, 64 bytes: 0 magic "VSHCACHE" | 8 u32 format version | 12 u32 byte-order tag
//                     16 u64 key hash | 24 u64 file size | 32 u64 meta size
//                     40 u64 XXH64 of the meta section | 48 u64 reserved, 0
//                     56 u64 XXH64 of header bytes [0, 56)
//   meta section:     the key material (config_key, each file's path, size and
//                     XXH64), the writer's index, every SampleMeta field, and
//                     for image, label and the index lists their dtype, shape,
//                     byte count and XXH64
//   arrays, packed:   image bytes, label bytes, foreground int32s, background int32s
//                     (none when the background is every other voxel)
//
// Every byte is either checksummed or compared with a known value, so any
// single changed byte, and any truncation, is refused before use. Bump
// kFormatVersion when this layout or SampleMeta changes: it is part of the key.
constexpr char kMagic[8] = {'V', 'S', 'H', 'C', 'A', 'C', 'H', 'E'};
// 2: the background may be the foreground's complement; 3: the config key is
// the schema's rows (an entry keyed by the hand-made list is rebuilt).
constexpr uint32_t kFormatVersion = 3;
constexpr uint32_t kByteOrderTag = 0x01020304;
constexpr size_t kHeaderBytes = 64;

struct DtypeCode {
  at::ScalarType type;
  uint8_t code;
};
// Our own codes: at::ScalarType's numbering is not a file format.
constexpr DtypeCode kDtypes[] = {
    {at::kByte, 1}, {at::kChar, 2},  {at::kShort, 3},  {at::kInt, 4},  {at::kLong, 5},
    {at::kHalf, 6}, {at::kFloat, 7}, {at::kDouble, 8}, {at::kBool, 9}, {at::kBFloat16, 10}};

uint8_t dtype_code(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.code;
  }
  throw std::invalid_argument(std::string("SampleCache: cannot store a tensor of dtype ") +
                              c10::toString(type));
}

class Writer {
 public:
  template <class T>
  void pod(T value) {
    append(&value, sizeof value);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  void append(const void* data, size_t size) {
    const auto* b = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), b, b + size);
  }
  std::vector<uint8_t> bytes;
};

// Bounds-checked reads of the meta section; every failure is a BadEntry.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <class T>
  T pod(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof value);
    pos_ += sizeof value;
    return value;
  }
  std::string str(const char* what) {
    const auto n = pod<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  bool at_end() const { return pos_ == size_; }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > size_ - pos_) throw BadEntry(std::string("the meta section ends inside ") + what);
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct Array {
  const void* data;
  size_t size;
};

void put_tensor(Writer& w, const at::Tensor& t, std::vector<Array>& arrays,
                std::vector<at::Tensor>& keep) {
  w.pod<uint8_t>(t.defined() ? 1 : 0);
  if (!t.defined()) return;
  if (!t.device().is_cpu())
    throw std::invalid_argument("SampleCache: cannot store a tensor on " + t.device().str());
  const at::Tensor c = t.contiguous();
  keep.push_back(c);
  w.pod<uint8_t>(dtype_code(c.scalar_type()));
  w.pod<uint32_t>(static_cast<uint32_t>(c.dim()));
  for (const int64_t d : c.sizes()) w.pod<int64_t>(d);
  const size_t n = c.nbytes();
  w.pod<uint64_t>(n);
  w.pod<uint64_t>(xxh64(c.data_ptr(), n));
  arrays.push_back({c.data_ptr(), n});
}

void put_ints(Writer& w, const std::vector<int32_t>& v, std::vector<Array>& arrays) {
  w.pod<uint64_t>(v.size());
  w.pod<uint64_t>(xxh64(v.data(), v.size() * sizeof(int32_t)));
  arrays.push_back({v.data(), v.size() * sizeof(int32_t)});
}

// A planned read of one array: where it goes and what its bytes must hash to.
struct Planned {
  void* out = nullptr;
  uint64_t size = 0;
  uint64_t xxh64 = 0;
  const char* what = "";
};

void read_at(int fd, void* out, uint64_t size, uint64_t offset, const char* what) {
  auto* p = static_cast<uint8_t*>(out);
  uint64_t done = 0;
  while (done < size) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size - done, uint64_t{1} << 30));
    const ssize_t n = ::pread(fd, p + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw BadEntry(std::string("reading the ") + what + " failed: " + std::strerror(errno));
    }
    if (n == 0)
      throw BadEntry(std::string("the file ended inside the ") + what + " (changed while read?)");
    done += static_cast<uint64_t>(n);
  }
}

// Shape and byte count from the meta section, checked against each other and
// the file size before anything is allocated.
at::Tensor get_tensor(Reader& r, const char* what, uint64_t file_size, uint64_t& array_bytes,
                      std::vector<Planned>& plan) {
  if (r.pod<uint8_t>(what) == 0) return at::Tensor();
  const auto code = r.pod<uint8_t>(what);
  const DtypeCode* dtype = nullptr;
  for (const auto& d : kDtypes) {
    if (d.code == code) dtype = &d;
  }
  if (!dtype)
    throw BadEntry(std::string("unknown dtype code ") + std::to_string(code) + " for the " + what);
  const auto ndim = r.pod<uint32_t>(what);
  if (ndim > 16)
    throw BadEntry(std::string("the ") + what + " has " + std::to_string(ndim) + " dimensions");
  std::vector<int64_t> sizes(ndim);
  uint64_t bytes = c10::elementSize(dtype->type);
  for (auto& d : sizes) {
    d = r.pod<int64_t>(what);
    if (d < 0)
      throw BadEntry(std::string("the ") + what + " has a negative size " + std::to_string(d));
    if (d > 0 && bytes > file_size / static_cast<uint64_t>(d)) {
      throw BadEntry(std::string("the ") + what + "'s shape needs more bytes than the file has");
    }
    bytes *= static_cast<uint64_t>(d);
  }
  const auto stored = r.pod<uint64_t>(what);
  if (stored != bytes) {
    throw BadEntry(std::string("the ") + what + " has " + std::to_string(stored) +
                   " bytes, its shape needs " + std::to_string(bytes));
  }
  const auto hash = r.pod<uint64_t>(what);
  array_bytes += bytes;
  if (array_bytes > file_size)
    throw BadEntry(std::string("the ") + what + " does not fit in the file");
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype->type));
  plan.push_back({t.data_ptr(), bytes, hash, what});
  return t;
}

void get_ints(Reader& r, const char* what, uint64_t file_size, uint64_t& array_bytes,
              std::vector<int32_t>& out, std::vector<Planned>& plan) {
  const auto count = r.pod<uint64_t>(what);
  const auto hash = r.pod<uint64_t>(what);
  if (count > file_size / sizeof(int32_t))
    throw BadEntry(std::string("the ") + what + " do not fit in the file");
  array_bytes += count * sizeof(int32_t);
  if (array_bytes > file_size)
    throw BadEntry(std::string("the ") + what + " do not fit in the file");
  out.resize(static_cast<size_t>(count));
  plan.push_back({out.data(), count * sizeof(int32_t), hash, what});
}

uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

EntryKey make_entry_key(const std::string& config_key, std::vector<std::string> files,
                        int64_t index) {
  if (files.empty()) {
    throw std::invalid_argument("SampleCache: item_files(" + std::to_string(index) +
                                ") gave no files; an entry is keyed by its files' contents");
  }
  EntryKey key;
  key.config_key = config_key;
  Writer w;
  w.pod<uint32_t>(kFormatVersion);
  w.str(config_key);
  w.pod<uint64_t>(files.size());
  for (const auto& f : files) {
    key.digests.push_back(digest_file(f));
    w.pod<uint64_t>(key.digests.back().size_bytes);
    w.pod<uint64_t>(key.digests.back().xxh64);
  }
  key.files = std::move(files);
  key.hash = xxh64(w.bytes.data(), w.bytes.size());
  return key;
}

std::string entry_file_name(uint64_t hash) {
  char name[32];
  std::snprintf(name, sizeof name, "%016" PRIx64 ".vscache", hash);
  return name;
}

void write_entry(const std::string& path, const EntryKey& key, int64_t index, const Sample& s) {
  Writer meta;
  meta.str(key.config_key);
  meta.pod<uint64_t>(key.files.size());
  for (size_t f = 0; f < key.files.size(); ++f) {
    meta.str(key.files[f]);
    meta.pod<uint64_t>(key.digests[f].size_bytes);
    meta.pod<uint64_t>(key.digests[f].xxh64);
  }
  meta.pod<int64_t>(index);
  const SampleMeta& m = s.meta;
  meta.pod<int64_t>(m.index);
  meta.str(m.source);
  meta.pod<int64_t>(m.patch_index);
  meta.pod<uint8_t>(m.cropped ? 1 : 0);
  meta.pod<uint8_t>(m.foreground_centre ? 1 : 0);
  for (const auto* a : {&m.crop_centre, &m.crop_start, &m.source_shape}) {
    for (const int64_t v : *a) meta.pod<int64_t>(v);
  }
  meta.pod<int64_t>(m.rot90_k);
  for (const int64_t v : m.rot90_axes) meta.pod<int64_t>(v);
  for (const bool f : m.flipped) meta.pod<uint8_t>(f ? 1 : 0);

  std::vector<Array> arrays;
  std::vector<at::Tensor> keep;
  put_tensor(meta, s.image, arrays, keep);
  put_tensor(meta, s.label, arrays, keep);
  meta.pod<uint8_t>(s.indices ? 1 : 0);
  if (s.indices) {
    meta.pod<int64_t>(s.indices->voxels);
    put_ints(meta, s.indices->foreground, arrays);
    put_ints(meta, s.indices->background, arrays);
  }

  uint64_t file_size = kHeaderBytes + meta.bytes.size();
  for (const auto& a : arrays) file_size += a.size;
  Writer header;
  header.append(kMagic, sizeof kMagic);
  header.pod<uint32_t>(kFormatVersion);
  header.pod<uint32_t>(kByteOrderTag);
  header.pod<uint64_t>(key.hash);
  header.pod<uint64_t>(file_size);
  header.pod<uint64_t>(meta.bytes.size());
  header.pod<uint64_t>(xxh64(meta.bytes.data(), meta.bytes.size()));
  header.pod<uint64_t>(0);
  header.pod<uint64_t>(xxh64(header.bytes.data(), header.bytes.size()));

  std::vector<const void*> parts{header.bytes.data(), meta.bytes.data()};
  std::vector<size_t> sizes{header.bytes.size(), meta.bytes.size()};
  for (const auto& a : arrays) {
    parts.push_back(a.data);
    sizes.push_back(a.size);
  }
  // No fsync: the reader checks every byte, so a crash's torn entry is
  // rebuilt, and a fill of thousands of items does not wait on the disk each time.
  write_file_atomic(path, parts, sizes, /*sync=*/false);
}

std::optional<Sample> read_entry(const std::string& path, const EntryKey& key, int64_t index) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw BadEntry(std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw BadEntry(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw BadEntry("not a regular file");
  const auto actual = static_cast<uint64_t>(st.st_size);
  if (actual < kHeaderBytes) {
    throw BadEntry("truncated: " + std::to_string(actual) + " bytes, less than the " +
                   std::to_string(kHeaderBytes) + "-byte header");
  }
  uint8_t header[kHeaderBytes];
  read_at(fd.get(), header, kHeaderBytes, 0, "header");
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0)
    throw BadEntry("not a volshard cache entry (bad magic)");
  if (get_u32(header + 8) != kFormatVersion) {
    throw BadEntry("format version " + std::to_string(get_u32(header + 8)) + ", this build reads " +
                   std::to_string(kFormatVersion));
  }
  if (get_u32(header + 12) != kByteOrderTag)
    throw BadEntry("written on a machine of another byte order");
  if (get_u64(header + 56) != xxh64(header, 56)) throw BadEntry("header checksum mismatch");
  if (get_u64(header + 48) != 0) throw BadEntry("reserved header field is not 0");
  if (get_u64(header + 16) != key.hash) throw BadEntry("made for another key than its name says");
  const uint64_t recorded = get_u64(header + 24);
  if (actual < recorded) {
    throw BadEntry("truncated: " + std::to_string(actual) + " of " + std::to_string(recorded) +
                   " bytes");
  }
  if (actual > recorded) {
    throw BadEntry(std::to_string(actual) + " bytes where the header says " +
                   std::to_string(recorded));
  }
  const uint64_t meta_size = get_u64(header + 32);
  if (meta_size > actual - kHeaderBytes) throw BadEntry("the meta section is larger than the file");
  std::vector<uint8_t> meta(static_cast<size_t>(meta_size));
  read_at(fd.get(), meta.data(), meta_size, kHeaderBytes, "meta section");
  if (xxh64(meta.data(), meta.size()) != get_u64(header + 40))
    throw BadEntry("meta section checksum mismatch");

  Reader r(meta.data(), meta.size());
  if (r.str("config_key") != key.config_key) throw BadEntry("made for another config_key");
  const auto file_count = r.pod<uint64_t>("the file list");
  if (file_count != key.files.size()) throw BadEntry("made for another number of files");
  std::vector<std::string> writer_files;
  for (size_t f = 0; f < key.files.size(); ++f) {
    writer_files.push_back(r.str("the file list"));
    FileDigest d;
    d.size_bytes = r.pod<uint64_t>("the file list");
    d.xxh64 = r.pod<uint64_t>("the file list");
    if (!(d == key.digests[f])) throw BadEntry("made for other contents of " + key.files[f]);
  }
  const auto writer_index = r.pod<int64_t>("the writer's index");
  Sample s;
  SampleMeta& m = s.meta;
  m.index = r.pod<int64_t>("meta.index");
  m.source = r.str("meta.source");
  m.patch_index = r.pod<int64_t>("meta.patch_index");
  m.cropped = r.pod<uint8_t>("meta.cropped") != 0;
  m.foreground_centre = r.pod<uint8_t>("meta.foreground_centre") != 0;
  for (auto* a : {&m.crop_centre, &m.crop_start, &m.source_shape}) {
    for (int64_t& v : *a) v = r.pod<int64_t>("meta");
  }
  m.rot90_k = r.pod<int64_t>("meta.rot90_k");
  for (int64_t& v : m.rot90_axes) v = r.pod<int64_t>("meta.rot90_axes");
  for (size_t k = 0; k < m.flipped.size(); ++k) m.flipped[k] = r.pod<uint8_t>("meta.flipped") != 0;

  uint64_t array_bytes = 0;
  std::vector<Planned> plan;
  s.image = get_tensor(r, "image", actual, array_bytes, plan);
  s.label = get_tensor(r, "label", actual, array_bytes, plan);
  LabelIndices indices;
  const bool has_indices = r.pod<uint8_t>("the index lists") != 0;
  if (has_indices) {
    indices.voxels = r.pod<int64_t>("the index lists' voxel count");
    get_ints(r, "foreground indices", actual, array_bytes, indices.foreground, plan);
    get_ints(r, "background indices", actual, array_bytes, indices.background, plan);
    const int64_t label_voxels =
        s.label.defined() && s.label.dim() == 4 ? s.label.numel() / s.label.size(0) : -1;
    if (indices.voxels != 0 && (indices.voxels != label_voxels || !indices.background.empty())) {
      throw BadEntry("the index lists cover " + std::to_string(indices.voxels) +
                     " voxels, the label has " + std::to_string(label_voxels));
    }
  }
  if (!r.at_end()) throw BadEntry("the meta section has bytes past its last field");
  if (kHeaderBytes + meta_size + array_bytes != actual) {
    throw BadEntry("header, meta and arrays add up to " +
                   std::to_string(kHeaderBytes + meta_size + array_bytes) +
                   " bytes, the file has " + std::to_string(actual));
  }
  uint64_t offset = kHeaderBytes + meta_size;
  for (const auto& p : plan) {
    read_at(fd.get(), p.out, p.size, offset, p.what);
    if (xxh64(p.out, static_cast<size_t>(p.size)) != p.xxh64) {
      throw BadEntry(std::string("checksum mismatch in the ") + p.what);
    }
    offset += p.size;
  }
  if (has_indices) s.indices = std::make_shared<const LabelIndices>(std::move(indices));

  // The entry may have been written by another item with identical files
  // (or before the dataset moved): name the reader, not the writer.
  if (m.index == writer_index) m.index = index;
  for (size_t f = 0; f < writer_files.size(); ++f) {
    if (m.source == writer_files[f]) {
      m.source = key.files[f];
      break;
    }
  }
  return s;
}

}  // namespace volshard::detail
