"""volshard.read_volume / write_volume against nibabel, over the NIfTI zoo of
the C++ differential test (tests/datasets/oracle/nibabel_differential.py):
its case generator and checks, with this module in place of volume_dump."""

import importlib.util
import os
import tempfile

import pytest
import torch

import volshard

np = pytest.importorskip("numpy")
nib = pytest.importorskip("nibabel")

ORACLE = os.path.join(os.path.dirname(__file__), "..", "datasets", "oracle", "nibabel_differential.py")


def load_oracle():
    spec = importlib.util.spec_from_file_location("nibabel_differential", ORACLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oracle = load_oracle()


class ModuleRunner(oracle.Runner):
    """Answers the oracle's volume_dump requests with volshard's Python module."""

    def __init__(self, tmp):  # no volume_dump process
        self.tmp = tmp
        self.failures = []
        self.passed = 0
        self.cases = []

    def call(self, *args):
        command, rest = args[0], args[1:]
        try:
            if command == "read":
                path, out, flags = rest[0], rest[1], rest[2:]
                v = volshard.read_volume(path, as_float="--as-float" in flags)
                data = v.data.contiguous()
                data.numpy().tofile(out)
                return {"dtype": str(data.numpy().dtype), "shape": list(data.shape),
                        "affine": v.affine.tolist(), "spacing_mm": list(v.spacing_mm),
                        "nonfinite_voxels": v.nonfinite_voxels}
            if command == "write":
                out, raw, dtype, shape, affine, flags = rest[0], rest[1], rest[2], rest[3], rest[4], rest[5:]
                data = np.fromfile(raw, dtype=dtype).reshape([int(s) for s in shape.split(",")])
                a = [float(x) for x in affine.split(",")]
                volshard.write_volume(out, torch.from_numpy(data), [a[4 * i:4 * i + 4] for i in range(4)],
                                      nifti_version=2 if "--nifti2" in flags else 1)
                return {}
        except Exception as e:  # the oracle expects refusals where nibabel refuses
            return {"error": f"{type(e).__name__}: {e}"}
        raise AssertionError(f"unknown request {command}")

    def close(self):
        pass


def test_read_and_write_equal_nibabel_over_the_zoo():
    nib.imageglobals.logger.setLevel(40)
    rng = np.random.default_rng(20261122)
    with tempfile.TemporaryDirectory(prefix="volshard_py_nibabel_") as tmp:
        r = ModuleRunner(tmp)
        oracle.read_cases(r, tmp, rng)
        oracle.write_cases(r, tmp, rng)
    assert r.failures == []
    assert r.passed == len(r.cases) > 100


def test_header_facts_and_channel_first(tmp_path):
    data = np.arange(2 * 3 * 4 * 2, dtype=np.int16).reshape(2, 3, 4, 2)
    affine = np.diag([1.5, 2.0, 3.0, 1.0])
    nib.save(nib.Nifti1Image(data, affine), tmp_path / "a.nii.gz")
    v = volshard.read_volume(str(tmp_path / "a.nii.gz"))
    assert tuple(v.data.shape) == (2, 2, 3, 4)
    assert torch.equal(v.data, torch.from_numpy(np.moveaxis(data, 3, 0).copy()))
    assert v.spacing_mm == [1.5, 2.0, 3.0]
    assert v.disk_dtype == "int16" and v.header["datatype"] == "int16"
    assert v.header["shape"] == [2, 3, 4, 2]
    assert volshard.read_volume(str(tmp_path / "a.nii.gz"), as_float=True).data.dtype == torch.float32


def test_missing_file_is_file_not_found_naming_it(tmp_path):
    path = str(tmp_path / "nope.nii.gz")
    with pytest.raises(FileNotFoundError, match="nope.nii.gz") as e:
        volshard.read_volume(path)
    assert "No such file or directory" in str(e.value)


def test_a_bad_file_is_a_runtime_error_naming_it(tmp_path):
    path = tmp_path / "bad.nii"
    path.write_bytes(b"not a nifti file at all" * 20)
    with pytest.raises(RuntimeError, match="bad.nii"):
        volshard.read_volume(str(path))


def test_too_many_voxels_is_refused(tmp_path):
    nib.save(nib.Nifti1Image(np.zeros((8, 8, 8), np.float32), np.eye(4)), tmp_path / "big.nii")
    with pytest.raises(RuntimeError, match="big.nii"):
        volshard.read_volume(str(tmp_path / "big.nii"), max_voxels=100)


def test_write_refuses_an_unsupported_dtype_naming_it(tmp_path):
    with pytest.raises(ValueError, match="Bool|bool"):
        volshard.write_volume(str(tmp_path / "b.nii"), torch.zeros(2, 2, 2, dtype=torch.bool), np.eye(4).tolist())


def test_write_into_a_missing_folder_names_it(tmp_path):
    with pytest.raises(OSError, match="no_such_dir"):
        volshard.write_volume(str(tmp_path / "no_such_dir" / "x.nii"), torch.zeros(2, 2, 2), np.eye(4).tolist())


def test_a_path_with_a_nul_byte_is_refused_as_open_refuses_it(tmp_path):
    # C++ would end the path at the NUL and open another file.
    good = tmp_path / "a.nii"
    nib.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.float32), np.eye(4)), good)
    for call in (lambda p: volshard.read_volume(p), lambda p: volshard.write_volume(p, torch.zeros(2, 2, 2), np.eye(4)),
                 lambda p: volshard.Loader([(p, p)], None)):
        with pytest.raises(ValueError, match="embedded null byte"):
            call(str(good) + "\0.gz")


def test_arguments_of_the_wrong_type_are_named(tmp_path):
    with pytest.raises(TypeError, match=r"DistributedSampler: num_replicas=1.5 must be of type int, not float"):
        volshard.DistributedSampler(6, num_replicas=1.5, rank=0)
    with pytest.raises(TypeError, match=r"read_volume: path must be a str or os.PathLike, not int"):
        volshard.read_volume(5)


def test_the_nifti_version_follows_the_shape_unless_one_is_asked_for(tmp_path):
    # NIfTI-1 stores int16 dims: a longer axis is written as NIfTI-2 unless nifti_version=1 is asked for.
    data = torch.arange(40000, dtype=torch.float32).reshape(40000, 1, 1)
    volshard.write_volume(tmp_path / "long.nii", data, np.eye(4))
    img = nib.load(tmp_path / "long.nii")
    assert isinstance(img, nib.Nifti2Image) and img.shape == (40000, 1, 1)
    volshard.write_volume(tmp_path / "short.nii", data[:100], np.eye(4))
    assert type(nib.load(tmp_path / "short.nii")) is nib.Nifti1Image
    with pytest.raises(ValueError, match=r"NIfTI-1 stores dims up to 32767; nifti_version=2"):
        volshard.write_volume(tmp_path / "v1.nii", data, np.eye(4), nifti_version=1)
