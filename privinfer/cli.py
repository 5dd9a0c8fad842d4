"""The ``privinfer`` command.

``privinfer demo``
    the main job on embedded data: release the delinquent-children table keeping its margins,
    fit the contingency-table model, print a report and save a figure (:mod:`privinfer.workflow.demo`).
``privinfer release IN.csv OUT.csv``
    privatize counts (CSV or Parquet) keeping an invariant; writes the release and a JSON
    metadata sidecar, refusing to overwrite them unless ``--force``, and records the release in
    a privacy-loss ledger, refused if it would exceed ``--budget``
    (:func:`privinfer.workflow.release.release_counts_file`, :mod:`privinfer.workflow.ledger`).
``privinfer fit RELEASE.csv --model county|contingency``
    fit a reference model (:mod:`privinfer.models`) to a release (:func:`privinfer.workflow.fit`);
    writes the posterior (NetCDF), a per-cell summary and ArviZ's summary.  A release made on
    Dask (its sidecar's format ``privinfer-frame-release/1``) is fitted group by group, here or
    with ``--workers`` / ``--scheduler`` on a cluster (:mod:`privinfer.scaleout.fitfile`).
``privinfer case-study NAME [--full]``
    run one of the case studies shipped as :mod:`privinfer.case_studies`.

This module only parses arguments, calls the workflow and prints.  Errors caused by the
user's files or options are reported as one line on stderr
(``privinfer: error: ...``) with exit status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import re
import sys
from pathlib import Path

__all__ = ["main", "build_parser", "CliError", "available_case_studies"]

SUBCOMMANDS = {
    "demo": "release the embedded delinquent-children table, fit the contingency model, report",
    "release": "privatize a CSV of counts keeping an invariant (mechanism and seed as options)",
    "fit": "fit a reference model to a release; write the posterior (NetCDF), a summary and a figure",
    "case-study": "run one of the reproducible case studies (small settings unless --full)",
}


class CliError(ValueError):
    """A problem with the command line the user can fix (reported as one line, exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``privinfer: error: ...`` and exit status 2."""

    def error(self, message):  # noqa: D401 - argparse hook
        self.exit(2, f"privinfer: error: {message} (see '{self.prog} --help')\n")


# =============================================================================================
# parser
# =============================================================================================
def _int_at_least(low, what):
    """argparse type: an integer >= ``low`` (``what`` names it in the error)."""

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return v

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_nonneg_int = _int_at_least(0, "a non-negative integer")


def _number(text):
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None


def _add_sampling(p, draws, tune):
    p.add_argument("--draws", type=_positive_int, default=draws, help=f"posterior draws per chain (default {draws})")
    p.add_argument("--tune", type=_nonneg_int, default=tune, help=f"tuning iterations per chain (default {tune})")
    p.add_argument("--chains", type=_positive_int, default=2, help="chains (default 2)")
    p.add_argument("--cores", type=_positive_int, default=1,
                   help="processes running chains in parallel (default 1)")
    p.add_argument("--seed", type=_nonneg_int, default=None,
                   help="random seed (default: fresh OS entropy; the seed used is printed)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _budget(text):
    from .workflow.ledger import parse_budget

    try:
        return parse_budget(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_release_arguments(r, mechanisms) -> None:
    """The options of ``privinfer release``, in groups.  :func:`cmd_release` passes each on to
    :func:`~privinfer.workflow.release.release_counts_file` by name: a new option is one
    ``add_argument`` here and one keyword there."""
    from .workflow.codec import PARAMETERS
    from .workflow.ledger import DEFAULT_LEDGER_NAME, SCOPES

    data = r.add_argument_group("input")
    data.add_argument("input", help="CSV or Parquet file of counts")
    data.add_argument("--invariant", default="total",
                      help="total (default), groups:COLUMN, margins (wide two-way table: first column row "
                      "labels), margins:ROW,COL (long two-way table), or none")
    data.add_argument("--column", default=None, help="column of counts (column layout; default the last column)")
    data.add_argument("--id", default=None, metavar="COLUMN",
                      help="the column that identifies each row (unique, copied to the release even if it holds "
                      "numbers); default: the id columns are copied -- every column without numbers, zero-padded "
                      "codes (01001) and columns named geoid, fips, gisjoin, id or *_id, kept as text")
    data.add_argument("--keep", action="append", default=[], metavar="COLUMN",
                      help="copy exactly these columns to the release (repeatable)")
    data.add_argument("--encoding", default="utf-8",
                      help="text encoding of a CSV input (default utf-8; e.g. latin-1)")

    mech = r.add_argument_group("mechanism")
    mech.add_argument("--mechanism", default="generalized-laplace", choices=list(mechanisms), metavar="NAME",
                      help="one of: " + ", ".join(mechanisms) + " (default generalized-laplace)")
    helps = {"sensitivity": "query sensitivity (default 1)", "norm": "norm of the generalized Laplace (default l1)"}
    for name in PARAMETERS:
        if name == "norm":
            mech.add_argument("--norm", choices=["l1", "l2"], default=None, help=helps["norm"])
        else:
            mech.add_argument(f"--{name}", type=_number, default=None, help=helps.get(name))
    mech.add_argument("--seed", type=_nonneg_int, default=None,
                      help="random seed (default fresh OS entropy; never written to the outputs)")

    out = r.add_argument_group("output")
    out.add_argument("output", help="CSV file to write the release to")
    out.add_argument("--metadata", default=None, help="metadata sidecar path (default OUTPUT with .json)")
    out.add_argument("--force", action="store_true", help="overwrite an existing release and sidecar")

    acct = r.add_argument_group("privacy accounting")
    acct.add_argument("--ledger", default=None, metavar="PATH",
                      help=f"privacy-loss ledger (default {DEFAULT_LEDGER_NAME} beside OUTPUT; its key beside it, "
                      "mode 0600; keep both private)")
    acct.add_argument("--budget", type=_budget, default=None, metavar="LOSS",
                      help="total privacy loss allowed: epsilon=E, epsilon=E,delta=D, rho=R or mu=M (recorded in "
                      "the ledger; later releases without --budget are held to it)")
    acct.add_argument("--budget-scope", choices=list(SCOPES), default=None,
                      help="input (default): the releases of the same counts; ledger: every release in the ledger")


def build_parser() -> argparse.ArgumentParser:
    from .workflow.codec import MECHANISMS

    p = _Parser(
        prog="privinfer",
        description="Differentially private releases that keep invariants exactly, and exact "
        "Bayesian inference on them.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add = sub.add_parser

    def add_parser(name, **kw):
        sp = _add(name, **kw)
        # accepted after the command too; SUPPRESS keeps a top-level --debug from being reset
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks instead of one-line errors")
        return sp

    sub.add_parser = add_parser

    d = sub.add_parser("demo", help=SUBCOMMANDS["demo"], description=(
        "Release the delinquent-children table (4 counties x 4 education levels, FCSM 2005) with "
        "the generalized Laplace mechanism on the lattice of its row and column margins, fit the "
        "contingency-table model with PyMC (LatticeMetropolis for the integer cells, NUTS for the "
        "log-linear parameters), and report truth vs posterior, convergence and coverage."))
    from .workflow.demo import DEFAULT_DRAWS, DEFAULT_TUNE

    _add_sampling(d, DEFAULT_DRAWS, DEFAULT_TUNE)
    d.add_argument("--epsilon", type=_number, default=None,
                   help="privacy loss of the generalized Laplace release (default 0.5)")
    d.add_argument("--output", default=os.path.join("privinfer-output", "demo"),
                   help="folder for the figure and report (default ./privinfer-output/demo)")

    r = sub.add_parser("release", help=SUBCOMMANDS["release"], description=(
        "Privatize the counts in a CSV or Parquet file keeping an invariant exactly. Writes the release "
        "(CSV, same layout: the label columns -- by default every column without numbers, of zero-padded "
        "codes or named like an id (geoid, fips, gisjoin, id, *_id), or --id / --keep -- and the released counts) and a JSON metadata sidecar (mechanism, guarantee, "
        "invariant values t, ledger entry; never the input values nor the seed), and records the "
        "release in a privacy-loss ledger. Existing outputs are kept unless --force."),
        epilog="mechanisms: " + "; ".join(f"{k}: {v.params}" for k, v in MECHANISMS.items()))
    _add_release_arguments(r, MECHANISMS)
    r.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                   help="large inputs: release group by group on a local Dask cluster of N processes "
                   "(CSV or Parquet; needs --invariant groups:COLUMN and the scale extra)")
    r.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="large inputs: release group by group on the Dask cluster at ADDRESS (tcp://host:8786)")

    f = sub.add_parser("fit", help=SUBCOMMANDS["fit"], description=(
        "Fit a reference model to a release made by 'privinfer release' (its metadata sidecar gives "
        "the mechanism and the invariant). Writes posterior.nc (ArviZ NetCDF), cells.csv (per-cell "
        "posterior summary), summary.csv and summary.txt (ArviZ summary) and fit.png (posterior "
        "intervals against the release, one panel per group)."))
    f.add_argument("release", help="release written by 'privinfer release' (CSV; or a Parquet folder made on Dask)")
    f.add_argument("--metadata", default=None, help="metadata sidecar (default RELEASE with .json)")
    f.add_argument("--model", choices=["county", "contingency"], default="county",
                   help="county (counts within totals/groups) or contingency (two-way table; default county)")
    _add_sampling(f, 1000, 1000)
    f.add_argument("--output", default=os.path.join("privinfer-output", "fit"),
                   help="output folder (default ./privinfer-output/fit)")
    f.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                   help="a release made on Dask: fit its groups on a local Dask cluster of N processes "
                   "(the scale extra; without this option, or --scheduler, in this process)")
    f.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a release made on Dask: fit its groups on the Dask cluster at ADDRESS (tcp://host:8786)")

    c = sub.add_parser("case-study", help=SUBCOMMANDS["case-study"],
                       description="Run a case study shipped with privinfer (small settings unless --full).")
    c.add_argument("name", nargs="?", help="case study to run (omit, or --list, to list them)")
    c.add_argument("--full", action="store_true", help="full settings (slow)")
    c.add_argument("--list", action="store_true", help="list the available case studies")
    c.add_argument("--output", default="privinfer-output",
                   help="root folder for figures and tables (default ./privinfer-output)")
    c.add_argument("--notebook", action="store_true",
                   help="run it as a notebook (jupytext + nbclient; the docs extra) and write the executed "
                        "NAME.ipynb, figures inline, beside the figures")
    return p


# =============================================================================================
# commands
# =============================================================================================
def cmd_demo(args) -> int:
    from .workflow import demo

    report = demo.run_demo(draws=args.draws, tune=args.tune, chains=args.chains, cores=args.cores,
                           seed=args.seed, output=args.output, epsilon=args.epsilon,
                           progressbar=not args.no_progress, echo=print)
    print(report.text())
    return 0


def cmd_release(args) -> int:
    if args.workers is not None or args.scheduler is not None:
        from .scaleout.files import command_release

        return command_release(args)
    from .workflow.codec import PARAMETERS
    from .workflow.ledger import entry_report
    from .workflow.release import release_counts_file
    from .workflow.table_io import list_names

    rel, dst, meta_path = release_counts_file(
        args.input, args.output, invariant=args.invariant, mechanism=args.mechanism, column=args.column,
        keep=args.keep or None, id_column=args.id, metadata=args.metadata, rng=args.seed, force=args.force,
        ledger=args.ledger if args.ledger is not None else True, budget=args.budget,
        budget_scope=args.budget_scope, encoding=args.encoding, **{k: getattr(args, k) for k in PARAMETERS})
    print(f"released {rel.n} cells with {args.mechanism}; invariant: {rel.invariant_text}"
          + (f" ({rel.invariant.m} published totals kept exactly)" if rel.invariant is not None else ""))
    g = rel.guarantee
    print(f"guarantee: {g.definition} {g.parameter_text()}")
    names, _ = rel.cell_ids()
    print("cells identified by: " + list_names(names))
    if rel.layout is not None and rel.layout.not_copied:
        print("not copied (columns holding numbers; name an id column with --id): "
              + list_names(rel.layout.not_copied))
    if not rel.transparent:
        print("note: this baseline is not transparent (its noise law depends on the data): "
              "'privinfer fit' cannot use it")
    print(entry_report(args.ledger, dst, rel.ledger_entry))
    print(f"wrote {dst} and {meta_path}")
    return 0


def cmd_fit(args) -> int:
    from .scaleout.readback import is_frame_release

    if is_frame_release(args.release, args.metadata):  # made group by group on Dask: fitted per group
        from .scaleout.fitfile import command_fit

        return command_fit(args)
    if args.workers is not None or args.scheduler is not None:
        raise CliError("--workers/--scheduler fit a release made on Dask (privinfer release --workers/--scheduler); "
                       "this release is fitted in this process: leave them out")
    from .workflow import fit, read_release

    rel = read_release(args.release, args.metadata)
    result = fit(rel, args.model, draws=args.draws, tune=args.tune, chains=args.chains, cores=args.cores,
                 seed=args.seed, output=args.output, progressbar=not args.no_progress, echo=print)
    print(result.text())
    return 0


def available_case_studies() -> list[str]:
    """Names of the case studies in the installed package ``privinfer.case_studies``."""
    import privinfer.case_studies as cs

    return sorted(m.name for m in pkgutil.iter_modules(cs.__path__) if not m.name.startswith("_"))


def cmd_case_study(args) -> int:
    import runpy

    names = available_case_studies()
    if args.list or not args.name:
        print("available case studies: " + (", ".join(names) if names else "(none installed)"))
        print("run one with: privinfer case-study NAME [--full]")
        return 0
    if args.name not in names:
        raise CliError(f"unknown case study '{args.name}' (available: {', '.join(names) or 'none'})")
    if args.notebook:
        from privinfer.case_studies._notebook import NotebookDependencyError, execute_notebook

        print(f"running case study {args.name} as a notebook ({'full' if args.full else 'small'} settings)")
        try:
            _, path = execute_notebook(args.name, args.output, full=args.full)
        except NotebookDependencyError as exc:
            raise CliError(str(exc)) from None
        print(f"executed notebook: {path}")
        return 0
    saved = {k: os.environ.get(k) for k in ("PRIVINFER_FULL", "PRIVINFER_OUTPUT")}
    saved_argv = sys.argv[:]
    os.environ["PRIVINFER_FULL"] = "1" if args.full else "0"
    os.environ["PRIVINFER_OUTPUT"] = str(args.output)
    sys.argv = [args.name] + (["--full"] if args.full else [])
    print(f"running case study {args.name} ({'full' if args.full else 'small'} settings); "
          f"output in {Path(args.output) / args.name}")
    try:
        runpy.run_module(f"privinfer.case_studies.{args.name}", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return 0


COMMANDS = {"demo": cmd_demo, "release": cmd_release, "fit": cmd_fit, "case-study": cmd_case_study}


# =============================================================================================
# entry point
# =============================================================================================
def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report a problem with the user's files or options."""
    from .invariants import InfeasibleInvariantError
    from .mechanisms import NonTransparentMechanismError

    return (CliError, InfeasibleInvariantError, NonTransparentMechanismError, ValueError, TypeError, OSError)


def _is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` reports a problem with the user's files or options.

    File-system errors always do.  ``ValueError``/``TypeError`` do when privinfer raised them
    (its checks name the problem); raised inside another library (PyTensor, PyMC, NumPy, ...)
    they signal a defect, which deserves a traceback.
    """
    if isinstance(exc, (CliError, OSError)):
        return True
    tb, last = exc.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return True
    return str(last.tb_frame.f_globals.get("__name__", "")).startswith("privinfer")


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        msg = f"{exc.strerror}: {exc.filename}"
    return re.sub(r"\s+", " ", msg)


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("privinfer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a program that stopped reading (e.g. head)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except _user_errors() as exc:
        if args.debug or not _is_user_error(exc):
            raise
        print(f"privinfer: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
