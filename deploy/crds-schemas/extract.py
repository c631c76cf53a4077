"""Extract the openAPIV3Schema of Volcano CRDs into the JSON files beside this script.

    python deploy/crds-schemas/extract.py CRD.yaml [CRD.yaml ...]

Each CRD file (``config/crd/volcano/bases/<group>_<plural>.yaml`` in
volcano-sh/volcano) gives one ``<group>_<version>_<kind>.json`` per served
version. The tests under tests/deploy/ validate the Volcano objects in deploy/
against these schemas: no cluster (and no Volcano) is needed. After an
upgrade, run this again on the new CRDs and update SOURCE.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def extract(crd_path: Path) -> list[Path]:
    crd = yaml.safe_load(crd_path.read_text(encoding="utf-8"))
    if crd.get("kind") != "CustomResourceDefinition":
        raise SystemExit(f"{crd_path}: not a CustomResourceDefinition")
    group = crd["spec"]["group"]
    kind = crd["spec"]["names"]["kind"]
    written = []
    for version in crd["spec"]["versions"]:
        if not version.get("served", False):
            continue
        schema = version["schema"]["openAPIV3Schema"]
        out = HERE / f"{group}_{version['name']}_{kind.lower()}.json"
        out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        written.append(out)
    return written


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        for path in extract(Path(name)):
            print(path.relative_to(HERE.parent.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
