"""The ``privinfer`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main", "build_parser"]

SUBCOMMANDS = {
    "demo": "release the embedded delinquent-children table, fit the contingency model, report",
    "release": "privatize a CSV of counts keeping an invariant (mechanism and seed as options)",
    "fit": "fit a reference model to a release; write the posterior (NetCDF) and a summary",
    "case-study": "run one of the reproducible case studies (small settings unless --full)",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="privinfer",
        description="Differentially private releases that keep invariants exactly, and exact "
        "Bayesian inference on them.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_ in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    print(f"privinfer: '{args.command}' is not available in this version", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
