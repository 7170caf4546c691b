#include "volshard/datasets/datalist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>

namespace volshard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempFolder {
 public:
  TempFolder() {
    path_ = fs::temp_directory_path() /
            ("volshard_datalist_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempFolder() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& text = "x") const {
    fs::create_directories((path_ / name).parent_path());
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// This binary links LibTorch, whose PyPI build exports its own copies of
// std::filesystem (pytorch/pytorch#133437): the build names libstdc++ ahead of
// it (transforms/CMakeLists.txt), so that the functions every test and tool
// calls are libstdc++'s. Where that failed, every remove_all crashed (the GPU
// machine's compiler links libstdc++ statically).
TEST(LinkOrderTest, StdFilesystemIsLibstdcxxsNotLibTorchsCopy) {
  using RemoveAll = std::uintmax_t (*)(const fs::path&);
  using TempDirectoryPath = fs::path (*)();
  const void* functions[] = {reinterpret_cast<const void*>(static_cast<RemoveAll>(&fs::remove_all)),
                             reinterpret_cast<const void*>(
                                 static_cast<TempDirectoryPath>(&fs::temp_directory_path))};
  for (const void* f : functions) {
    Dl_info info{};
    ASSERT_NE(dladdr(f, &info), 0);
    EXPECT_THAT(info.dli_fname, HasSubstr("libstdc++"))
        << "std::filesystem::" << (info.dli_sname ? info.dli_sname : "?")
        << " resolves to a copy in " << info.dli_fname
        << ": libstdc++ must come before LibTorch in this binary's DT_NEEDED";
  }
}

TEST(NaturalOrderTest, PutsImg10AfterImg9) {
  std::vector<std::string> names{"img10.nii.gz", "img9.nii.gz", "img1.nii.gz", "img100.nii.gz",
                                 "img02.nii.gz"};
  std::sort(names.begin(), names.end(), natural_less);
  EXPECT_EQ(names, (std::vector<std::string>{"img1.nii.gz", "img02.nii.gz", "img9.nii.gz",
                                             "img10.nii.gz", "img100.nii.gz"}));
  EXPECT_TRUE(natural_less("a", "b"));
  EXPECT_FALSE(natural_less("a2", "a2"));
  EXPECT_TRUE(natural_less("a", "a1"));
}

TEST(FolderDatasetTest, PairsImagesAndLabelsInNaturalOrder) {
  TempFolder dir;
  for (int i : {0, 1, 2, 10, 9}) {
    dir.file("img" + std::to_string(i) + ".nii.gz");
    dir.file("seg" + std::to_string(i) + ".nii.gz");
  }
  dir.file("notes.txt");
  const auto pairs = pairs_from_folder(dir.path());
  ASSERT_EQ(pairs.size(), 5u);
  EXPECT_THAT(pairs[3].image, HasSubstr("img9.nii.gz"));
  EXPECT_THAT(pairs[3].label, HasSubstr("seg9.nii.gz"));
  EXPECT_THAT(pairs[4].image, HasSubstr("img10.nii.gz"));
  EXPECT_EQ(pairs_from_folder(dir.path(), "img1*", "seg1*").size(), 2u);
}

TEST(FolderDatasetTest, MismatchedCountsNameTheGlobsAndFiles) {
  TempFolder dir;
  dir.file("img0.nii.gz");
  dir.file("img1.nii.gz");
  dir.file("seg0.nii.gz");
  const std::string e = error_of([&] { pairs_from_folder(dir.path()); });
  EXPECT_THAT(e, HasSubstr("2 images match 'img*' but 1 labels match 'seg*'"));
  EXPECT_THAT(e, HasSubstr("img1.nii.gz"));
  EXPECT_THAT(error_of([&] { pairs_from_folder(dir.path() + "/nope"); }),
              HasSubstr("cannot list the folder"));
}

TEST(DatalistTest, ReadsASectionWithPathsRelativeToTheDatalist) {
  TempFolder dir;
  dir.file("imagesTr/a.nii.gz");
  dir.file("labelsTr/a.nii.gz");
  const std::string list = dir.file(
      "dataset.json",
      R"({"training":[{"image":"imagesTr/a.nii.gz","label":"labelsTr/a.nii.gz"}],"validation":[]})");
  const auto pairs = pairs_from_datalist(list);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].image, (fs::path(dir.path()) / "imagesTr/a.nii.gz").string());
  EXPECT_THAT(error_of([&] { pairs_from_datalist(list, "validation"); }),
              HasSubstr("\"validation\" is empty"));
  EXPECT_THAT(error_of([&] { pairs_from_datalist(list, "test"); }), HasSubstr("no \"test\" list"));
}

TEST(DatalistTest, ListsEveryMissingFileAndNamesBadEntries) {
  TempFolder dir;
  dir.file("a.nii.gz");
  const std::string list = dir.file(
      "d.json",
      R"({"training":[{"image":"a.nii.gz","label":"b.nii.gz"},{"image":"c.nii.gz","label":"a.nii.gz"}]})");
  const std::string e = error_of([&] { pairs_from_datalist(list); });
  EXPECT_THAT(e, HasSubstr("2 files do not exist"));
  EXPECT_THAT(e, HasSubstr("b.nii.gz"));
  EXPECT_THAT(e, HasSubstr("c.nii.gz"));
  const std::string bad = dir.file("bad.json", R"({"training":[{"image":"a.nii.gz"}]})");
  EXPECT_THAT(error_of([&] { pairs_from_datalist(bad); }),
              HasSubstr("training[0] has no string \"label\""));
  EXPECT_THAT(error_of([&] { pairs_from_datalist(dir.file("x.json", "{oops")); }),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of([&] { pairs_from_datalist(dir.path() + "/none.json"); }),
              HasSubstr("cannot open"));
}

}  // namespace
}  // namespace volshard
