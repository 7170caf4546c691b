// volshard: synthetic data, volume inspection, training and prediction.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "preview.h"
#include "volshard/datasets/commands.h"
#include "volshard/trainer/commands.h"
#include "volshard/trainer/repro.h"
#include "volshard/transforms/loader.h"  // tune_allocator_for_volumes

namespace {

// --config FILE.json gives the defaults; flags on the command line override
// them (CLI11 assigns only the options that are given).
void apply_config_file(int argc, char** argv, volshard::TrainOptions* options) {
  for (int i = 1; i + 1 < argc; ++i) {
    std::string path;
    if (std::strcmp(argv[i], "--config") == 0) path = argv[i + 1];
    if (path.empty()) continue;
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("--config: cannot read " + path);
    std::stringstream text;
    text << in.rdbuf();
    options->merge_json(text.str(), path);
  }
}

std::vector<int64_t>* as_vector(std::vector<int64_t>& v) { return &v; }

// The options of `train` (also taken by `repro`).
void add_train_options(CLI::App* cmd, volshard::TrainOptions& t, std::string& norm,
                       std::string& config) {
  cmd->add_option("--data", t.data_dir,
                  "folder of img*/seg* volumes (the last --val-fraction validate)");
  cmd->add_option("--datalist", t.datalist, "MONAI/Decathlon JSON datalist (training, validation)");
  cmd->add_option("--out", t.out_dir,
                  "run folder (model.pt, checkpoint.pt, metrics.jsonl, config.json, curves.png)");
  cmd->add_option("--config", config,
                  "JSON of these options (keys as in RUN/config.json); flags override it");
  cmd->add_option("--epochs", t.epochs)->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "volumes per rank and step")->capture_default_str();
  cmd->add_option("--crop", t.crop, "RandCropByPosNegLabel edge, voxels")->capture_default_str();
  cmd->add_option("--num-samples", t.num_samples, "crops per volume")->capture_default_str();
  cmd->add_flag("--allow-smaller", t.allow_smaller, "crops larger than a volume shrink to it");
  cmd->add_option("--rot90-prob", t.rot90_prob)->capture_default_str();
  cmd->add_option("--lr", t.lr)->capture_default_str();
  cmd->add_option("--optimizer", t.optimizer, "adam | sgd")->capture_default_str();
  cmd->add_option("--momentum", t.momentum, "sgd momentum")->capture_default_str();
  cmd->add_option("--weight-decay", t.weight_decay)->capture_default_str();
  cmd->add_option("--lr-schedule", t.lr_schedule, "constant | cosine | poly")
      ->capture_default_str();
  cmd->add_option("--seed", t.seed)->capture_default_str();
  cmd->add_option("--channels", *as_vector(t.model.channels), "e.g. 16,32,64,128,256")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--strides", *as_vector(t.model.strides), "e.g. 2,2,2,2")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--res-units", t.model.num_res_units)->capture_default_str();
  cmd->add_option("--norm", norm, "instance | batch (SyncBatchNorm over ranks)")
      ->capture_default_str();
  cmd->add_option("--dropout", t.model.dropout)->capture_default_str();
  cmd->add_option("--val-every", t.val_every, "epochs between validations (0: none)")
      ->capture_default_str();
  cmd->add_option("--val-fraction", t.val_fraction, "--data: fraction of pairs held out")
      ->capture_default_str();
  cmd->add_option("--roi", t.roi, "sliding-window size for validation (0: --crop)")
      ->capture_default_str();
  cmd->add_option("--cache-rate", t.cache_rate)->capture_default_str();
  cmd->add_option("--cache-dir", t.cache_dir,
                  "persist the cached prefix here: a second run starts warm");
  cmd->add_option("--workers", t.workers, "loader threads per rank")->capture_default_str();
  cmd->add_option("--threads", t.threads, "intra-op threads per rank (0: cores / local ranks)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", t.checkpoint_every, "steps (0: epoch ends only)")
      ->capture_default_str();
  cmd->add_option("--max-steps", t.max_steps, "stop with a checkpoint after this many steps")
      ->capture_default_str();
  cmd->add_option("--resume", t.resume, "RUN folder or checkpoint.pt to continue from");
  cmd->add_option("--init-weights", t.init_weights, "state_dict .pt saved by Python/MONAI");
  cmd->add_option("--trace-samples", t.trace_samples,
                  "JSON lines of every crop fed (epoch, step, rank, index, crop, rotation)");
  cmd->add_option("--timeout", t.timeout_s, "seconds a collective waits for a lost peer")
      ->capture_default_str();
  cmd->add_option("--backend", t.backend, "gloo | nccl")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts (train's communicator has a heartbeat thread):
  // one malloc arena, large buffers kept (see tune_allocator_for_volumes).
  volshard::tune_allocator_for_volumes();
  CLI::App app{"volshard: deterministic data pipelines for 3D segmentation"};
  app.require_subcommand(1);
  app.footer(R"(
Examples:
  volshard synth --out data --count 40 --size 128 --seed 0
  volshard info data/img0.nii.gz data/seg0.nii.gz
  volshard info --json data/*.nii.gz
  volshard preview --data data --out crops.png --count 8 --seed 0
  volshard train --data data --out run --epochs 2 --nproc-per-node 2 --crop 32
  volshard repro --data data --crop 32 --channels 4,8,16,32 --strides 2,2,2 --steps 4
  volshard predict --model run/model.pt --config run/config.json --image data/img0.nii.gz --out pred.nii.gz
Exit status: 0 ok, 1 a file could not be read or written, 2 bad arguments.)");

  volshard::SynthOptions synth;
  synth.volume.num_seg_classes = 1;
  int64_t size = 128;
  auto* synth_cmd = app.add_subcommand(
      "synth", "write MONAI-style synthetic image/label volumes (create_test_image_3d)");
  synth_cmd->add_option("--out", synth.out_dir, "output folder")->required();
  synth_cmd->add_option("--count", synth.count, "number of image/label pairs")
      ->capture_default_str();
  synth_cmd->add_option("--size", size, "edge length of the cubic volumes")->capture_default_str();
  synth_cmd
      ->add_option("--seed", synth.seed, "base seed; volume i uses a seed derived from (seed, i)")
      ->capture_default_str();
  synth_cmd->add_option("--noise", synth.volume.noise_max, "uniform noise maximum (0: noise-free)")
      ->capture_default_str();
  synth_cmd->add_option("--classes", synth.volume.num_seg_classes, "segmentation classes")
      ->capture_default_str();
  synth_cmd->add_option("--threads", synth.threads, "writer threads (output does not depend on it)")
      ->capture_default_str();

  std::vector<std::string> files;
  bool json = false;
  auto* info_cmd =
      app.add_subcommand("info", "shape, dtype, spacing, affine and value range of NIfTI files");
  info_cmd->add_option("files", files, ".nii or .nii.gz files")->required();
  info_cmd->add_flag("--json", json, "one JSON object per line");

  volshard::PreviewOptions preview;
  auto* preview_cmd = app.add_subcommand(
      "preview", "PNG of augmented crops (axial and coronal slices, label outlined)");
  preview_cmd->add_option("--data", preview.data_dir, "folder of img*/seg* volumes")->required();
  preview_cmd->add_option("--out", preview.out, "PNG to write")->capture_default_str();
  preview_cmd->add_option("--count", preview.count, "crops to show")->capture_default_str();
  preview_cmd->add_option("--seed", preview.seed, "base seed of the augmentation")
      ->capture_default_str();
  preview_cmd->add_option("--epoch", preview.epoch, "epoch whose augmentation to show")
      ->capture_default_str();
  preview_cmd->add_option("--crop", preview.crop, "crop edge in voxels")->capture_default_str();
  preview_cmd->add_option("--image-glob", preview.image_glob, "image file pattern")
      ->capture_default_str();
  preview_cmd->add_option("--label-glob", preview.label_glob, "label file pattern")
      ->capture_default_str();

  volshard::TrainOptions train;
  volshard::TrainLaunch launch;
  std::string config_file;
  std::string norm = "instance";
  auto* train_cmd =
      app.add_subcommand("train", "train MONAI's 3D UNet data-parallel (Gloo on CPU, NCCL on GPU)");
  add_train_options(train_cmd, train, norm, config_file);
  train_cmd
      ->add_option("--nproc-per-node", launch.nproc_per_node, "local worker processes to start")
      ->capture_default_str();
  train_cmd->add_option("--nnodes", launch.nnodes)->capture_default_str();
  train_cmd->add_option("--node-rank", launch.node_rank)->capture_default_str();
  train_cmd->add_option("--master-addr", launch.master_addr)->capture_default_str();
  train_cmd->add_option("--master-port", launch.master_port, "0: a free port")
      ->capture_default_str();
  train_cmd->add_option("--init-method", launch.init_method,
                        "env:// | tcp://host:port | file:///path");
  train_cmd->add_option("--rank", launch.rank, "with --init-method tcp:// or file://");
  train_cmd->add_option("--world-size", launch.world_size, "with --init-method tcp:// or file://");

  volshard::ReproOptions repro;
  std::string repro_norm = "instance", repro_config;
  auto* repro_cmd = app.add_subcommand(
      "repro", "check reproducibility on your configuration at small scale (verdict table)");
  add_train_options(repro_cmd, repro.train, repro_norm, repro_config);
  repro_cmd->add_option("--steps", repro.steps, "training steps per run")->capture_default_str();
  repro_cmd->add_option("--nproc-per-node", repro.nproc_per_node, "ranks of the distributed runs")
      ->capture_default_str();
  repro_cmd->add_flag("--keep", repro.keep, "keep the runs (in --out, or a temporary folder)");

  volshard::PredictOptions pred;
  std::string pred_config, pred_norm = "instance";
  auto* predict_cmd = app.add_subcommand(
      "predict", "segment a volume with a trained UNet; writes NIfTI with the input's affine");
  predict_cmd->add_option("--model", pred.model_path, "state_dict .pt (model.pt, or MONAI's)")
      ->required();
  predict_cmd->add_option("--config", pred_config,
                          "RUN/config.json: the network's channels/strides/res-units");
  predict_cmd->add_option("--image", pred.image_path)->required();
  predict_cmd->add_option("--out", pred.out_path)->required();
  predict_cmd->add_option("--output", pred.output, "logits | prob | label")->capture_default_str();
  predict_cmd->add_option("--roi-size", pred.roi, "sliding window edge (0: whole volume)")
      ->capture_default_str();
  predict_cmd->add_option("--overlap", pred.overlap)->capture_default_str();
  predict_cmd->add_option("--channels", *as_vector(pred.model.channels))
      ->delimiter(',')
      ->capture_default_str();
  predict_cmd->add_option("--strides", *as_vector(pred.model.strides))
      ->delimiter(',')
      ->capture_default_str();
  predict_cmd->add_option("--res-units", pred.model.num_res_units)->capture_default_str();
  predict_cmd->add_option("--norm", pred_norm)->capture_default_str();

  try {
    if (argc > 1 && std::strcmp(argv[1], "train") == 0) {
      apply_config_file(argc, argv, &train);
      norm = volshard::to_string(train.model.norm);
    }
    if (argc > 1 && std::strcmp(argv[1], "repro") == 0) {
      apply_config_file(argc, argv, &repro.train);
      repro_norm = volshard::to_string(repro.train.model.norm);
    }
    if (argc > 1 && std::strcmp(argv[1], "predict") == 0) {
      volshard::TrainOptions from_run;
      apply_config_file(argc, argv, &from_run);
      pred.model = from_run.model;
      pred_norm = volshard::to_string(from_run.model.norm);
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "volshard: " << e.what() << "\nRun with --help for usage.\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "volshard: " << e.what() << "\n";
    return 2;
  }

  try {
    if (*train_cmd) {
      train.model.norm = volshard::parse_norm_kind(norm);
      return volshard::train_command(train, launch, std::vector<std::string>(argv, argv + argc));
    }
    if (*repro_cmd) {
      repro.train.model.norm = volshard::parse_norm_kind(repro_norm);
      const auto checks = volshard::run_repro_checks(repro);
      std::cout << volshard::format_repro_table(checks);
      for (const auto& c : checks)
        if (!c.passed) return 1;
      return 0;
    }
    if (*predict_cmd) {
      pred.model.norm = volshard::parse_norm_kind(pred_norm);
      volshard::predict(pred);
      std::cout << "wrote " << pred.out_path << "\n";
      return 0;
    }
    if (*synth_cmd) {
      if (size < 1) throw std::invalid_argument("--size=" + std::to_string(size) + " must be >= 1");
      synth.volume.height = synth.volume.width = synth.volume.depth = size;
      if (isatty(STDERR_FILENO)) {
        synth.progress = [](int64_t done, int64_t count) {
          std::fprintf(stderr, "\rsynth %lld/%lld", static_cast<long long>(done),
                       static_cast<long long>(count));
          if (done == count) std::fprintf(stderr, "\n");
        };
      }
      volshard::write_synthetic_dataset(synth);
      std::cout << "wrote " << synth.count << " image/label pairs to " << synth.out_dir << "\n";
      return 0;
    }
    if (*preview_cmd) {
      const int64_t drawn = volshard::write_preview(preview);
      std::cout << "wrote " << drawn << " crops to " << preview.out << "\n";
      return 0;
    }
    int status = 0;
    for (const auto& f : files) {
      try {
        const auto info = volshard::describe_volume(f);
        std::cout << (json ? volshard::to_json(info) + "\n" : volshard::to_text(info));
      } catch (const std::exception& e) {  // report and go on with the other files
        std::cerr << "volshard info: " << e.what() << "\n";
        status = 1;
      }
    }
    return status;
  } catch (const std::invalid_argument& e) {
    std::cerr << "volshard: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volshard: error: " << e.what() << "\n";
    return 1;
  }
}
