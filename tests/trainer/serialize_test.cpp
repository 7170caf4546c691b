// Model and checkpoint files cost what they hold (issue 43 item 17): a storage
// shared by many tensors is copied once, and a view that repeats elements
// beyond its storage is refused by name before anything is copied or summed.
// The files are written by LibTorch's pickler (detail::pickle_archive), which
// keeps views and shared storages as torch.save does.
#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/archive_io.h"
#include "io/checkpoint.h"
#include "volshard/core/file_io.h"
#include "volshard/trainer/serialize.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

std::string write_archive(const std::string& name, const c10::IValue& value) {
  const std::string path = std::string(::testing::TempDir()) + "/volshard_" + name;
  const std::vector<char> bytes = detail::pickle_archive(value);
  write_file_atomic(path, {bytes.data()}, {bytes.size()});
  return path;
}

std::string message_of(const std::function<void()>& load) {
  try {
    load();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(SerializeTest, TensorsSharingAStorageAreLoadedAsViewsOfOneCopy) {
  // The probe's 4.2 MB file, one 4 MiB storage under 1,000 keys, reached
  // 5.5 GB (a copy and a clone per key); here 100 keys of 256 KiB.
  const at::Tensor shared = at::arange(65536, at::kFloat);
  c10::Dict<std::string, at::Tensor> dict;
  for (int i = 0; i < 100; ++i) dict.insert("k" + std::to_string(i), shared);
  dict.insert("row", shared.view({256, 256})[3]);  // a view of the same storage
  const std::string path = write_archive("shared.pt", c10::IValue(dict));
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  for (const NamedTensors& got : {load_tensor_dict(path), load_model_weights(path)}) {
    ASSERT_EQ(got.size(), 101u);
    std::set<const void*> storages;
    int64_t bytes = 0;
    for (const auto& [key, t] : got) {
      if (storages.insert(t.storage().data()).second)
        bytes += static_cast<int64_t>(t.storage().nbytes());
    }
    EXPECT_EQ(storages.size(), 1u);
    EXPECT_LE(bytes, file_bytes);
    EXPECT_TRUE(at::equal(got[0].second, shared));
    EXPECT_TRUE(at::equal(got[99].second, shared));
    EXPECT_TRUE(at::equal(got[100].second, shared.view({256, 256})[3]));
  }
}

TEST(CheckpointTest, AZeroStrideViewIsRefusedBeforeItIsCopiedOrSummed) {
  // Six floats seen as 2000 x 2000 (16 MB once cloned; the probe's 10^5 x 10^5
  // asked for 40 GB before the checkpoint's checksum was compared).
  const at::Tensor zero_strides = at::zeros({6}).as_strided({2000, 2000}, {0, 0});
  c10::Dict<std::string, at::Tensor> model;
  model.insert("w", zero_strides);
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("format", std::string("volshard-checkpoint"));
  checkpoint.insert("version", int64_t{1});
  checkpoint.insert("meta", std::string("{}"));
  checkpoint.insert("model", model);
  checkpoint.insert("optimizer", at::zeros({0}, at::kByte));
  checkpoint.insert("checksum", std::string("00000000"));
  const std::string path = write_archive("zero_strides_checkpoint.pt", c10::IValue(checkpoint));
  const std::string state_dict = write_archive("zero_strides.pt", c10::IValue(model));
  for (const auto& [file, load] : std::vector<std::pair<std::string, std::function<void()>>>{
           {path, [&] { load_checkpoint(path); }},
           {path, [&] { load_model_weights(path); }},
           {state_dict, [&] { load_model_weights(state_dict); }},
           {state_dict, [&] { load_tensor_dict(state_dict); }}}) {
    const std::string message = message_of(load);
    EXPECT_THAT(message, HasSubstr(file + ": "));
    EXPECT_THAT(message, HasSubstr("a view of 4000000 elements (sizes [2000, 2000], strides [0, "
                                   "0]) over a storage of 6"));
  }
}

}  // namespace
}  // namespace volshard
