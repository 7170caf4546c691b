#include "volshard/inspect/state_file.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "volshard/core/torch_archive.h"

namespace volshard::inspect {

SamplerState read_sampler_state(const std::string& bytes, const std::string& path) {
  std::string json_text = bytes;
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0) {
    // A run's checkpoint.pt: its 'meta' entry is JSON with the sampler's state.
    auto fail = [&](const std::string& why) {
      throw std::invalid_argument(path + ": not a readable checkpoint archive (" + why + ")");
    };
    TorchValue archive;
    try {
      archive =
          read_torch_archive(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
    const TorchValue* meta_text = archive.find("meta");
    if (meta_text == nullptr) fail("no 'meta' entry: not a volshard checkpoint");
    if (meta_text->kind != TorchValue::Kind::kString) fail("the 'meta' entry is not a string");
    const auto meta = nlohmann::json::parse(meta_text->s, nullptr, false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("sampler"))
      fail("its 'meta' entry holds no JSON with a \"sampler\"");
    json_text = meta.at("sampler").dump();
  }
  try {
    return SamplerState::from_json(json_text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

}  // namespace volshard::inspect
