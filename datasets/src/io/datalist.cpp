#include "volshard/datasets/datalist.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/core/file_io.h"

namespace volshard {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> matching(const fs::path& folder, const std::string& glob) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) && fnmatch(glob.c_str(), name.c_str(), 0) == 0)
      names.push_back(name);
  }
  if (ec) fail_errno(folder.string(), "cannot list the folder", ec.value());
  std::sort(names.begin(), names.end(), natural_less);
  return names;
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (size_t k = 0; k < names.size() && k < 10; ++k) out += (k ? ", " : "") + names[k];
  if (names.size() > 10) out += ", ... (" + std::to_string(names.size() - 10) + " more)";
  return out;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Compare the numbers without converting: strip leading zeros, then length, then digits.
      size_t za = i, zb = j;
      while (za + 1 < ie && a[za] == '0') ++za;
      while (zb + 1 < je && b[zb] == '0') ++zb;
      if (ie - za != je - zb) return ie - za < je - zb;
      const int c = a.compare(za, ie - za, b, zb, je - zb);
      if (c != 0) return c < 0;
      if (ie - i != je - j) return ie - i < je - j;  // "01" after "1"
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::vector<ImageLabelPair> pairs_from_folder(const std::string& folder,
                                              const std::string& image_glob,
                                              const std::string& label_glob) {
  const auto images = matching(folder, image_glob);
  const auto labels = matching(folder, label_glob);
  if (images.empty() || images.size() != labels.size()) {
    throw std::runtime_error(
        folder + ": " + std::to_string(images.size()) + " images match '" + image_glob + "' but " +
        std::to_string(labels.size()) + " labels match '" + label_glob + "'" +
        (images.empty() ? "" : "; images: " + listed(images) + "; labels: " + listed(labels)));
  }
  std::vector<ImageLabelPair> pairs;
  for (size_t k = 0; k < images.size(); ++k) {
    pairs.push_back(
        {(fs::path(folder) / images[k]).string(), (fs::path(folder) / labels[k]).string()});
  }
  return pairs;
}

std::vector<ImageLabelPair> pairs_from_datalist(const std::string& datalist_path,
                                                const std::string& section, const PairKeys& keys) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_text_file(datalist_path));  // keeps the errno (ENOENT)
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(datalist_path + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains(section) || !doc[section].is_array()) {
    throw std::runtime_error(datalist_path + ": no \"" + section + "\" list of {\"" +
                             printable(keys.image) + "\", \"" + printable(keys.label) +
                             "\"} entries");
  }
  const fs::path base = fs::path(datalist_path).parent_path();
  const auto resolve = [&](const std::string& p) {
    return fs::path(p).is_absolute() ? p : (base / p).lexically_normal().string();
  };
  std::vector<ImageLabelPair> pairs;
  std::vector<std::string> missing;
  std::map<std::string, size_t> entry_of_image;
  const auto& entries = doc[section];
  for (size_t k = 0; k < entries.size(); ++k) {
    const auto& e = entries[k];
    const std::string where = datalist_path + ": " + section + "[" + std::to_string(k) + "]";
    if (!e.is_object()) throw std::runtime_error(where + " is not an object");
    for (const std::string* key : {&keys.image, &keys.label}) {
      if (!e.contains(*key) || !e[*key].is_string())
        throw std::runtime_error(where + " has no string \"" + printable(*key) + "\"");
      // The file system would read the path only up to a NUL: another file.
      if (e[*key].get<std::string>().find('\0') != std::string::npos)
        throw std::runtime_error(where + " \"" + printable(*key) +
                                 "\" holds a NUL byte: " + printable(e[*key].get<std::string>()));
    }
    ImageLabelPair pair{resolve(e[keys.image].get<std::string>()),
                        resolve(e[keys.label].get<std::string>())};
    for (const auto* p : {&pair.image, &pair.label}) {
      if (!fs::exists(*p)) missing.push_back(*p);
    }
    // A volume listed twice is drawn twice an epoch, and the tail held out
    // for validation may hold a copy of one the model trains on.
    if (const auto [at, fresh] = entry_of_image.emplace(pair.image, k); !fresh)
      throw std::runtime_error(datalist_path + ": " + section + "[" + std::to_string(at->second) +
                               "] and " + section + "[" + std::to_string(k) +
                               "] name the same image " + printable(pair.image) +
                               ": list each volume once");
    pairs.push_back(std::move(pair));
  }
  if (!missing.empty()) {
    fail_errno(datalist_path,
               std::to_string(missing.size()) + " files do not exist: " + listed(missing), ENOENT);
  }
  if (pairs.empty()) throw std::runtime_error(datalist_path + ": \"" + section + "\" is empty");
  return pairs;
}

PairSplit hold_out_tail(std::vector<ImageLabelPair> pairs, double val_fraction,
                        const std::string& source) {
  const auto n = static_cast<int64_t>(pairs.size());
  if (!(val_fraction >= 0 && val_fraction < 1)) {  // NaN too
    std::ostringstream fraction;
    fraction << val_fraction;
    throw FieldError(source + ": " + field_ref("val_fraction") + "=" + fraction.str() +
                     " must be in [0, 1)");
  }
  int64_t n_val = 0;
  if (val_fraction > 0)
    n_val = std::max<int64_t>(1, std::llround(static_cast<double>(n) * val_fraction));
  if (n - n_val < 1) {
    std::ostringstream fraction;
    fraction << val_fraction;
    throw FieldError(source + " has " + std::to_string(n) + " pairs: too few to hold out " +
                     field_ref("val_fraction") + "=" + fraction.str());
  }
  PairSplit split;
  split.val.assign(pairs.end() - n_val, pairs.end());
  pairs.resize(static_cast<size_t>(n - n_val));
  split.train = std::move(pairs);
  return split;
}

PairSplit split_datalist(const std::string& datalist_path, double val_fraction,
                         const PairKeys& keys) {
  std::vector<ImageLabelPair> train = pairs_from_datalist(datalist_path, "training", keys);
  const nlohmann::json doc = nlohmann::json::parse(read_text_file(datalist_path), nullptr, false);
  if (!doc.is_object() || !doc.contains("validation"))
    return hold_out_tail(std::move(train), val_fraction, datalist_path + " (\"training\")");
  PairSplit split;
  split.val = pairs_from_datalist(datalist_path, "validation", keys);
  for (const ImageLabelPair& v : split.val) {
    for (const ImageLabelPair& t : train) {
      std::error_code ec;
      if (v.image == t.image || fs::equivalent(v.image, t.image, ec))
        throw std::invalid_argument(datalist_path + ": " + printable(v.image) +
                                    " is in both \"training\" and \"validation\": the "
                                    "metric would score volumes the model trained on");
    }
  }
  split.train = std::move(train);
  return split;
}

}  // namespace volshard
