"""The names the ``sklode`` command offers before anything heavy is imported: the named
problems of :mod:`sklode.datasets` and the methods of :mod:`sklode.registry` (each of those
modules takes its names from here, and ``tests/test_cli.py`` checks they agree)."""

PROBLEM_NAMES = (
    "lotka_volterra",
    "fitzhugh_nagumo",
    "rossler",
    "lorenz96",
    "seird",
    "seird_e3",
    "seird_e4a",
    "seird_e4b",
    "seird_e4c",
    "wendy_logistic",
    "wendy_lotka_volterra",
    "wendy_fitzhugh_nagumo",
    "wendy_hindmarsh_rose",
    "wendy_protein_transduction",
)

METHOD_NAMES = ("bcdprox", "wendy", "adjoint")
