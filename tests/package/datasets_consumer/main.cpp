// Writes one synthetic pair and reads the image back as a tensor.
#include <iostream>
#include <string>

#include "volshard/datasets/volume.h"
#include "volshard/volume_io/synthetic_dataset.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  volshard::SynthOptions o;
  o.out_dir = argv[1];
  o.count = 1;
  o.volume.height = o.volume.width = o.volume.depth = 64;
  volshard::write_synthetic_dataset(o);
  const volshard::Volume v = volshard::read_volume(o.out_dir + "/img0.nii.gz");
  std::cout << "datasets_consumer: " << v.data.sizes() << "\n";
  return v.data.numel() == 64 * 64 * 64 ? 0 : 1;
}
