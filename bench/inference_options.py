#!/usr/bin/env python3
"""A trained run's validation Dice with and without each inference option (issue 44 item 3): the
run's validation volumes as `volshard train` validates them (volshard.ValidationLoader with the
run's config), its weights in MONAI's UNet, volshard's sliding window, then MONAI's DiceMetric
without the background, per class and mean over (volume, class), as the trainer scores. Rows:
plain (the run's blend, no mirroring, no component filter), Gaussian blending (MONAI's
mode="gaussian", sigma_scale 0.125), nnU-Net's test-time mirroring over the 3 axes (8 passes),
the largest connected component per class (MONAI's KeepLargestConnectedComponent), all three.

    PYTHONPATH=build/python bench/inference_options.py --run RUN [--weights best_model.pt] [--limit N]
                                                       [--datalist TEST.json] [--json SCORES.json]

With --datalist, the volumes scored are that datalist's "validation" list instead of the run's (a
test set held out from all tuning: bench/hippocampus.py --test-fifth); --json writes the table's
figures.

Needs the pinned environment (torch, MONAI) and the built module on PYTHONPATH (build/python); the
run's data where its config.json says (`datalist` or `data`), split as the run split it.
"""
import argparse
import json
import os
import sys
import time

from scoring import DiceSums


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a `volshard train` run folder (config.json, weights)")
    ap.add_argument("--weights", default="best_model.pt", help="in RUN: best_model.pt (default) or model.pt")
    ap.add_argument("--limit", type=int, default=0, help="the first N validation volumes only (a smoke run)")
    ap.add_argument("--datalist", help="score this datalist's \"validation\" list instead of the run's")
    ap.add_argument("--json", help="write each row's per-class and mean Dice and seconds here")
    a = ap.parse_args()
    import torch
    from monai.metrics import DiceMetric
    from monai.networks.nets import UNet
    from monai.networks.utils import one_hot
    import volshard

    config_path = os.path.join(a.run, "config.json")
    config = json.load(open(config_path))
    if config.get("model", "unet") != "unet" or config.get("activation") != "softmax":
        sys.exit(f"inference_options: {config_path}: needs a softmax UNet run "
                 f"(model {config.get('model')}, activation {config.get('activation')})")
    weights = os.path.join(a.run, a.weights)
    net = UNet(spatial_dims=3, in_channels=config["in_channels"], out_channels=config["out_channels"],
               channels=config["channels"], strides=config["strides"], num_res_units=config["res_units"],
               norm="instance" if config["norm"] == "auto" else config["norm"])  # auto: MONAI's default
    # Deep supervision's heads (`deep_supervision.<k>`) train only: MONAI's UNet is the rest.
    net.load_state_dict({k: v for k, v in torch.load(weights).items() if not k.startswith("deep_supervision.")})
    net.eval()
    data = a.datalist or config["datalist"] or config["data"]
    loader = volshard.ValidationLoader(data, val_fraction=config["val_fraction"], pipeline=config_path,
                                       num_replicas=1, rank=0)
    roi = config["roi"] if config["roi"][0] > 0 else config["crop"]
    roi = roi * 3 if len(roi) == 1 else roi
    classes = config["out_channels"]
    variants = [("plain", config["blend"], (), False),
                ("Gaussian blending", "gaussian", (), False),
                ("mirroring over x, y, z (8 passes)", config["blend"], (0, 1, 2), False),
                ("largest component per class", config["blend"], (), True),
                ("all three", "gaussian", (0, 1, 2), True)]
    scores = {name: DiceSums(classes - 1) for name, *_ in variants}
    seconds = {name: 0.0 for name, *_ in variants}
    dice = DiceMetric(include_background=False, reduction="none")
    volumes = 0
    with torch.no_grad():
        for item in loader:
            if a.limit and volumes >= a.limit:
                break
            volumes += 1
            truth = one_hot(item["label"].round().long(), classes)
            for name, blend, flips, largest in variants:
                t0 = time.perf_counter()
                logits = volshard.sliding_window_inference(item["image"], roi, config["sw_batch_size"], net,
                                                           overlap=config["overlap"], mode=blend,
                                                           tta_flips=flips)
                labels = logits.argmax(1)[0]
                if largest:
                    labels = volshard.keep_largest_components(labels)
                seconds[name] += time.perf_counter() - t0
                scores[name].add(dice(y_pred=one_hot(labels[None, None], classes), y=truth)[0])
    names = config.get("label_names") or [f"class {c}" for c in range(1, classes)]
    print(f"{a.run} ({a.weights}), {volumes} {'test' if a.datalist else 'validation'} volumes, window {'x'.join(map(str, roi))}, "
          f"overlap {config['overlap']}:")
    print("| inference | " + " | ".join(names) + " | mean | difference | seconds |")
    print("| --- |" + " --- |" * (len(names) + 3))
    plain = None
    for name, *_ in variants:
        mean = scores[name].mean()
        plain = mean if plain is None else plain
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in scores[name].per_class()) +
              f" | {mean:.4f} | {mean - plain:+.4f} | {seconds[name]:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({name: {"per_class": scores[name].per_class(), "mean": scores[name].mean(),
                              "seconds": seconds[name]} for name, *_ in variants}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
