#!/usr/bin/env python3
"""The same frames as a pack in format version 1, for measuring what version 2 changed.

    benchmarks/pack_to_v1.py PACK_DIR OUT_DIR

OUT_DIR gets hard links to PACK_DIR's shard files, indexes cut to their offsets (version 1 has
no atom counts) and a manifest saying version 1. The indexes' checksums in the manifest are left
as they were (this needs no XXH3 here): `pack --verify` would report them, training does not
check them. A benchmark fixture, not a tool for users.
"""
import json
import os
import sys


def main(src, dst):
    manifest = json.load(open(os.path.join(src, "manifest.json")))
    if manifest["version"] != 2:
        raise SystemExit(f"{src}: format version {manifest['version']}, not 2")
    os.makedirs(dst)
    for shard in manifest["shards"]:
        os.link(os.path.join(src, shard["data"]), os.path.join(dst, shard["data"]))
        with open(os.path.join(src, shard["index"]), "rb") as f:
            offsets = f.read(8 * (shard["frames"] + 1))
        with open(os.path.join(dst, shard["index"]), "wb") as f:
            f.write(offsets)
    manifest["version"] = 1
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
