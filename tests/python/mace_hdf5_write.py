"""Writes DIR/frames.xyz (made by ase_db_write.py) as MACE's HDF5 data files with mace-torch's own
code, for mlip's reader (tests/test_io_mace_hdf5.cpp):

- DIR/frames.h5: all frames in one file, as mace-torch's preprocess_data.py writes a shard
  (load_from_xyz, then save_configurations_as_HDF5 into an h5py file with its drop_last attribute);
- DIR/sharded/train_0.h5 ... train_10.h5: the frames over 11 shards, as preprocess_data.py
  writes them with --num_process 11, but spread so that the order of the names matters (frame 1
  in train_2.h5, frame 6 in train_10.h5; some shards empty);
- DIR/virials.h5: the same frames with their stress given as MACE's virials (3x3, eV,
  virial = -stress * volume) instead, and no stress.

    mace_hdf5_write.py DIR

The frame weights (the key `weight`) become MACE's config_weight. Exit code 77 (ctest: skipped)
when mace-torch or h5py cannot be imported.
"""
import os
import sys

try:
    import ase.io
    import h5py
    import numpy as np
    from mace.data.utils import KeySpecification, load_from_xyz, save_configurations_as_HDF5
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

out = sys.argv[1]
frames = ase.io.read(os.path.join(out, "frames.xyz"), index=":")
for atoms in frames:
    atoms.info["config_weight"] = atoms.info.pop("weight", 1.0)
mace_xyz = os.path.join(out, "frames-mace.xyz")
ase.io.write(mace_xyz, frames, format="extxyz")


def configs(path, **keys):
    spec = KeySpecification.from_defaults()
    spec.update(info_keys={"energy": "energy", "stress": keys.get("stress", "stress"), "virials": keys.get("virials", "virials")},
                arrays_keys={"forces": "forces"})
    _, read = load_from_xyz(path, key_specification=spec)
    return read


def write(path, part, index):
    with h5py.File(path, "w") as f:
        f.attrs["drop_last"] = False
        save_configurations_as_HDF5(part, index, f)


everything = configs(mace_xyz)
assert len(everything) == len(frames)
write(os.path.join(out, "frames.h5"), everything, 0)
os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
shard_of = [round(j * 10 / (len(everything) - 1)) for j in range(len(everything))]
for k in range(11):
    part = [c for c, s in zip(everything, shard_of) if s == k]
    write(os.path.join(out, "sharded", f"train_{k}.h5"), part, k)

# Virials instead of stress: an info key MACE reads as virials, the stress under a key it ignores.
for atoms in frames:
    if "stress" in atoms.calc.results:
        atoms.info["REF_virials"] = -atoms.get_stress(voigt=False) * atoms.get_volume()
virials_xyz = os.path.join(out, "frames-virials.xyz")
ase.io.write(virials_xyz, frames, format="extxyz")
write(os.path.join(out, "virials.h5"), configs(virials_xyz, stress="no_stress", virials="REF_virials"), 0)
print(f"wrote {len(everything)} frames")
