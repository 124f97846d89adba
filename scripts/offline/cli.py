"""`python -m offline build|verify|install|bytecode|seed-assets|numba-kernels`: thin command line over build.py,
host.py, bytecode.py, assets.py and numba_kernels.py, one-line errors."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import OfflineError, assets, build, bytecode, host, manifest, numba_kernels


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="offline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="on a networked machine: download/build the wheelhouse")
    b.add_argument("wheelhouse", type=Path)
    b.add_argument("--python-version", default="3.12", help="the GPU host's Python (default 3.12)")
    b.add_argument("--assets", type=assets.sources, default=[],
                   help="the G1 and Go2 assets: .tar.xz archives or folders laid out like src/unilab/assets/, "
                        "several joined by ':' (default: UniLab's own Hugging Face download)")
    b.add_argument("--wheel-list", type=Path, help="another list than scripts/offline/gpu-host-wheels.txt "
                                                   "(not checked against VERSIONS.env)")
    b.add_argument("--unilab-tree", type=Path, help="the applied UniLab tree the Warp kernels are built from "
                                                    "(default: the applier's embedded tree)")
    b.add_argument("--warp-worlds", type=int, nargs="+", default=list(build.warp_kernels.WORLDS),
                   help="world counts whose Warp kernels are built, each task's own default added "
                        "(default: %(default)s)")
    b.add_argument("--warp-archs", type=int, nargs="+", default=list(build.warp_kernels.ARCHS),
                   help="CUDA architectures they are built for, e.g. 80 86 89 90 (default: %(default)s)")
    b.add_argument("--compile-artifacts", type=Path, help="the learner's compile artifacts built on a GPU host "
                                                          "(`make compile-artifacts`) to carry")
    v = sub.add_parser("verify", help="check every sha256 of a wheelhouse")
    v.add_argument("wheelhouse", type=Path)
    i = sub.add_parser("install", help="on the GPU host: verify, then install into a private site folder")
    i.add_argument("wheelhouse", type=Path)
    i.add_argument("--site", type=Path, required=True)
    i.add_argument("--wheel-list", type=Path, help="the list the wheelhouse was built from, if not the project's")
    c = sub.add_parser("bytecode", help="compile the Python bytecode of the host's packages (install does it too)")
    c.add_argument("--site", type=Path, help="a private site folder to compile as well (e.g. OFFLINE_SITE)")
    a = sub.add_parser("seed-assets", help="on the GPU host: the wheelhouse's assets (G1, Go2) into an applied tree "
                                           "(`make apply OFFLINE=` runs it)")
    a.add_argument("wheelhouse", type=Path)
    a.add_argument("--tree", type=Path, help="the UniLab tree (default: the applier's embedded tree)")
    n = sub.add_parser("numba-kernels", help="on the GPU host: G1 motion tracking's Numba kernels compiled into an "
                                             "applied tree's cache (`make apply OFFLINE=` runs it)")
    n.add_argument("--tree", type=Path, help="the UniLab tree (default: the applier's embedded tree)")
    n.add_argument("--overlay", type=Path, default=Path("overlay"), help="the overlay (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            kernels = build.WarpKernels(args.unilab_tree, tuple(args.warp_worlds), tuple(args.warp_archs))
            lines = build.build(args.wheelhouse, args.python_version, args.assets, args.wheel_list, kernels,
                                args.compile_artifacts)
        elif args.command == "verify":
            record = manifest.verify(args.wheelhouse)
            lines = [f"wheelhouse {args.wheelhouse}: {len(record['files'])} files verified"]
        elif args.command == "seed-assets":
            from patchset.api import embedded_tree

            lines = [assets.seed(args.wheelhouse.resolve(), (args.tree or embedded_tree()).expanduser().resolve())]
        elif args.command == "numba-kernels":
            from patchset.api import embedded_tree

            tree = (args.tree or embedded_tree()).expanduser().resolve()
            lines = [numba_kernels.compile_into(tree, args.overlay.resolve())]
        elif args.command == "bytecode":
            lines = [bytecode.compile_roots(bytecode.host_roots(args.site)).line()]
        else:
            lines = host.install(args.wheelhouse.resolve(), args.site.resolve(), args.wheel_list)
    except OfflineError as exc:
        print(f"offline {args.command}: error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
