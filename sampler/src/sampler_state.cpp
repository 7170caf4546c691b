#include "volshard/sampler/distributed_sampler.h"

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace volshard {
namespace {

constexpr int kStateVersion = 1;

[[noreturn]] void bad_field(const std::string& field, const std::string& why) {
  // "field 'epoch'=-1 must be ..." or "field 'epoch' is missing"
  throw std::invalid_argument("SamplerState: field '" + field + "'" +
                              (why.rfind('=', 0) == 0 ? "" : " ") + why);
}

const nlohmann::json& field(const nlohmann::json& doc, const char* name) {
  const auto it = doc.find(name);
  if (it == doc.end()) bad_field(name, "is missing");
  return *it;
}

int64_t int_field(const nlohmann::json& doc, const char* name, int64_t least) {
  const auto& v = field(doc, name);
  if (!v.is_number_integer()) bad_field(name, "must be an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    bad_field(name, "=" + v.dump() + " does not fit int64");
  }
  const auto x = v.get<int64_t>();
  if (x < least) bad_field(name, "=" + std::to_string(x) + " must be >= " + std::to_string(least));
  return x;
}

std::string string_field(const nlohmann::json& doc, const char* name) {
  const auto& v = field(doc, name);
  if (!v.is_string()) bad_field(name, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace

SamplerState SamplerState::at(const DistributedSamplerOptions& options, int64_t epoch,
                              int64_t consumed) {
  SamplerState s;
  s.seed = options.seed;
  s.epoch = epoch;
  s.mode = options.mode;
  s.shuffle = options.shuffle;
  s.randperm = options.randperm;
  s.dataset_size = options.dataset_size;
  s.world_size = options.num_replicas;
  s.consumed = consumed;
  return s;
}

DistributedSamplerOptions SamplerState::sampler_options(int64_t rank, int64_t world) const {
  DistributedSamplerOptions o;
  o.dataset_size = dataset_size;
  o.num_replicas = world;
  o.rank = rank;
  o.shuffle = shuffle;
  o.seed = seed;
  o.mode = mode;
  o.randperm = randperm;
  return o;
}

std::string SamplerState::to_json() const {
  nlohmann::ordered_json doc = {{"version", kStateVersion},
                                {"seed", seed},
                                {"epoch", epoch},
                                {"mode", to_string(mode)},
                                {"shuffle", shuffle},
                                {"randperm", to_string(randperm)},
                                {"dataset_size", dataset_size},
                                {"world_size", world_size},
                                {"consumed", consumed}};
  return doc.dump();
}

SamplerState SamplerState::from_json(const std::string& text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(std::string("SamplerState: not valid JSON: ") + e.what());
  }
  if (!doc.is_object())
    throw std::invalid_argument("SamplerState: expected a JSON object, got " + doc.dump());
  const int64_t version = int_field(doc, "version", 1);
  if (version != kStateVersion) {
    bad_field("version", "=" + std::to_string(version) + " is not supported (expected " +
                             std::to_string(kStateVersion) + ")");
  }
  SamplerState s;
  const auto& seed = field(doc, "seed");
  if (!seed.is_number_integer() || (!seed.is_number_unsigned() && seed.get<int64_t>() < 0)) {
    bad_field("seed", "must be an unsigned 64-bit integer, got " + seed.dump());
  }
  s.seed = seed.get<uint64_t>();
  s.epoch = int_field(doc, "epoch", 0);
  try {
    s.mode = parse_partition_mode(string_field(doc, "mode"));
    s.randperm = parse_randperm_compat(string_field(doc, "randperm"));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("SamplerState: ") + e.what());
  }
  const auto& shuffle = field(doc, "shuffle");
  if (!shuffle.is_boolean()) bad_field("shuffle", "must be true or false, got " + shuffle.dump());
  s.shuffle = shuffle.get<bool>();
  s.dataset_size = int_field(doc, "dataset_size", 0);
  if (s.dataset_size > kMaxDatasetSize) {
    bad_field("dataset_size", "=" + std::to_string(s.dataset_size) +
                                  " must be <= " + std::to_string(kMaxDatasetSize));
  }
  s.world_size = int_field(doc, "world_size", 1);
  s.consumed = int_field(doc, "consumed", 0);
  if (s.consumed > s.dataset_size) {
    bad_field("consumed", "=" + std::to_string(s.consumed) +
                              " must be <= dataset_size=" + std::to_string(s.dataset_size));
  }
  return s;
}

bool SamplerState::operator==(const SamplerState& o) const {
  return seed == o.seed && epoch == o.epoch && mode == o.mode && shuffle == o.shuffle &&
         randperm == o.randperm && dataset_size == o.dataset_size && world_size == o.world_size &&
         consumed == o.consumed;
}

}  // namespace volshard
