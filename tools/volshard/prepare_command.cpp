// volshard prepare: what a configuration's deterministic prefix makes of an
// image (and its label), as NIfTI with its affine, to open in a viewer or to
// compare with MONAI's output for the same files.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "verbs.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/volume.h"
#include "volshard/volume_io/nifti_header.h"

namespace volshard::cli {

Run add_prepare_command(CLI::App& app) {
  struct State {
    PrefixOptions prefix;
    std::string image, label, out;
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("prepare", verb_summary("prepare"));
  cmd->footer(
      "\nWrites OUT/image.nii.gz (and OUT/label.nii.gz) after orientation, spacing, intensity\n"
      "and foreground crop, as validation prepares a volume.\n\nExample:\n"
      "  volshard prepare --config configs/spleen.json --image imagesTr/spleen_2.nii.gz \\\n"
      "    --label labelsTr/spleen_2.nii.gz --out prepared");
  cmd->add_option("--image", s->image, "NIfTI image")->required();
  cmd->add_option("--label", s->label, "its label map (optional)");
  cmd->add_option("--out", s->out, "folder to write image.nii.gz (and label.nii.gz) into")
      ->required();
  add_prefix_flags(cmd, s->prefix);
  return [s] {
    s->prefix.validate();
    const PairOptions options = whole_volume_prefix(s->prefix);
    namespace fs = std::filesystem;
    const fs::path out(s->out);
    for (const char* name : {"image.nii.gz", "label.nii.gz"})
      check_not_an_input((out / name).string(), {{"--image", s->image}, {"--label", s->label}},
                         "prepare: --out=" + printable(s->out) + " would write " +
                             printable((out / name).string()) + ", which");
    std::filesystem::create_directories(s->out);
    std::error_code ec;  // what a killed run left half written
    for (const auto& entry : fs::directory_iterator(out, ec))
      if (entry.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove(entry.path(), ec);
    if (s->label.empty()) {
      const SpatialImage v = prepare_image(read_volume_as_float(s->image), options);
      // An older pair's label would sit beside another image: it goes first.
      fs::remove(out / "label.nii.gz", ec);
      write_volume((out / "image.nii.gz").string(), v.data, v.affine);
    } else {
      // The pair is written beside its final names first, then the old label
      // goes before the new files are renamed in: a kill at any point leaves
      // the old pair, a pair missing its label, or the new pair, never an
      // image beside another run's label.
      const Sample v = load_pair({s->image, s->label}, 0, options);
      const fs::path image_tmp = out / ".tmp-image.nii.gz", label_tmp = out / ".tmp-label.nii.gz";
      write_volume(image_tmp.string(), v.image.contiguous(), v.meta.affine);
      // The label keeps its stored integer type (nearest resampling and the
      // crop keep its values); a float file stays float32.
      const at::ScalarType stored = volume_dtype(read_nifti_header(s->label));
      const at::Tensor label =
          at::isIntegralType(stored, /*includeBool=*/false) ? v.label.to(stored) : v.label;
      write_volume(label_tmp.string(), label.contiguous(), v.meta.affine);
      fs::remove(out / "label.nii.gz");
      fs::rename(image_tmp, out / "image.nii.gz");
      fs::rename(label_tmp, out / "label.nii.gz");
    }
    std::cout << "wrote " << (out / "image.nii.gz").string()
              << (s->label.empty() ? "" : " and " + (out / "label.nii.gz").string()) << "\n";
    return 0;
  };
}

}  // namespace volshard::cli
