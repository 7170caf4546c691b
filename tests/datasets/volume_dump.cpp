// Test-only tool for tests/datasets/oracle/nibabel_differential.py.
//
//   volume_dump read IN.nii[.gz] OUT.bin [--as-float] [--unscaled] [--file-order]
//     reads with read_volume, writes the tensor's bytes (C x X x Y x Z, C order,
//     host byte order) to OUT.bin and prints JSON: shape, dtype, affine,
//     spacing_mm, nonfinite_voxels; or {"error": message} and exit 1.
//   volume_dump write OUT.nii[.gz] IN.bin DTYPE C,X,Y,Z A00,A01,...,A33 [--nifti2] [--level N]
//     writes IN.bin (C order) with write_volume.
//   volume_dump serve
//     one command per stdin line (arguments separated by tabs, without the
//     program name), one JSON line per command on stdout: LibTorch starts once.

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "volshard/datasets/volume.h"

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "uint8") return at::kByte;
  if (name == "int8") return at::kChar;
  if (name == "int16") return at::kShort;
  if (name == "int32") return at::kInt;
  if (name == "int64") return at::kLong;
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  throw std::invalid_argument("unknown dtype " + name);
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    default:
      return "other";
  }
}

int read_cmd(int argc, char** argv) {
  volshard::ReadOptions options;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--as-float") options.as_float = true;
    if (a == "--unscaled") options.apply_scaling = false;
    if (a == "--file-order") options.layout = volshard::VolumeLayout::kFileOrderView;
  }
  const volshard::Volume v = volshard::read_volume(argv[2], options);
  const at::Tensor c = v.data.contiguous();
  {
    std::ofstream out(argv[3], std::ios::binary);
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    if (!out) throw std::runtime_error(std::string("cannot write ") + argv[3]);
  }
  nlohmann::json j;
  j["shape"] = c.sizes().vec();
  j["dtype"] = dtype_name(c.scalar_type());
  j["affine"] = v.affine;
  j["spacing_mm"] = v.spacing_mm;
  j["nonfinite_voxels"] = v.nonfinite_voxels;
  j["disk_dtype"] = volshard::to_string(v.disk_dtype);
  j["contiguous"] = v.data.is_contiguous();
  std::cout << j.dump() << "\n";
  return 0;
}

int write_cmd(int argc, char** argv) {
  if (argc < 7) throw std::invalid_argument("write needs OUT IN DTYPE SHAPE AFFINE");
  const at::ScalarType dtype = parse_dtype(argv[4]);
  std::vector<int64_t> shape;
  for (const auto& s : split(argv[5], ',')) shape.push_back(std::stoll(s));
  const auto a = split(argv[6], ',');
  if (a.size() != 16) throw std::invalid_argument("affine needs 16 values");
  volshard::Affine affine{};
  for (size_t i = 0; i < 16; ++i) affine[i / 4][i % 4] = std::stod(a[i]);
  volshard::WriteOptions options;
  for (int i = 7; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--nifti2") options.nifti_version = 2;
    if (arg == "--level" && i + 1 < argc) options.gzip_level = std::atoi(argv[++i]);
  }
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
  std::ifstream in(argv[3], std::ios::binary);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!in) throw std::runtime_error(std::string("cannot read ") + argv[3]);
  volshard::write_volume(argv[2], t, affine, options);
  std::cout << "{}\n";
  return 0;
}

int run(int argc, char** argv) {
  try {
    const std::string cmd = argv[1];
    if (cmd == "read") return read_cmd(argc, argv);
    if (cmd == "write") return write_cmd(argc, argv);
    throw std::invalid_argument("unknown command " + cmd);
  } catch (const std::exception& e) {
    nlohmann::json j;
    j["error"] = e.what();
    std::cout << j.dump() << "\n";
    return 1;
  }
}

int serve() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> args = split(line, '\t');
    args.insert(args.begin(), "volume_dump");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    if (argv.size() < 4) {
      std::cout << "{\"error\":\"too few arguments\"}\n";
    } else {
      run(static_cast<int>(argv.size()), argv.data());
    }
    std::cout.flush();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "serve") return serve();
  if (argc < 4) {
    std::cerr
        << "usage: volume_dump read IN OUT.bin [--as-float] [--unscaled] [--file-order]\n"
           "       volume_dump write OUT IN.bin DTYPE C,X,Y,Z A00,...,A33 [--nifti2] [--level N]\n";
    return 2;
  }
  return run(argc, argv);
}
