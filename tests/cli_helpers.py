"""Running the ``privinfer`` command in-process from the tests."""

from privinfer import cli


def run(argv, capsys):
    """Run ``privinfer argv`` in-process; return (exit status, stdout, stderr)."""
    try:
        rc = cli.main([str(a) for a in argv])
    except SystemExit as exc:  # argparse errors and --help
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err
