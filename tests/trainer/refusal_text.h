// What validating options says, both ways: the library's message (what(): fields by key, as a
// config and Python spell them) and the command line's (flag_text: fields by flag); "accepted"
// for both when it throws nothing.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "volshard/core/field.h"

namespace volshard::testing {

template <class Options>
std::pair<std::string, std::string> refusal_text(const Options& o) {
  try {
    o.validate();
  } catch (const std::invalid_argument& e) {
    return {e.what(), flag_text(e)};
  }
  return {"accepted", "accepted"};
}

}  // namespace volshard::testing
