"""numpydoc's own validator over the public API: every public class, method and function has
a docstring with its parameters and returns documented."""

import dataclasses
import importlib
import inspect

import pytest

numpydoc_validate = pytest.importorskip("numpydoc.validate")

PUBLIC_MODULES = ["sklode", "sklode.models", "sklode.datasets", "sklode.metrics",
                  "sklode.integrate", "sklode.compare", "sklode.registry", "sklode.exceptions",
                  "sklode.bcdprox", "sklode.bcdprox.multistep", "sklode.wendy",
                  "sklode.adjoint", "sklode.plotting", "sklode.experiment"]

# The checks that make a docstring complete: it exists and has a summary (GL08, SS01, SS03),
# every parameter is documented, exists, has a type and a description (PR01, PR02, PR04,
# PR07), and what is returned is documented (RT01, RT03).
CHECKS = {"GL08", "SS01", "SS03", "PR01", "PR02", "PR04", "PR07", "RT01", "RT03"}


def _public_objects():
    seen = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            path = f"{obj.__module__}.{obj.__qualname__}"
            if not path.startswith("sklode"):
                continue  # re-exported from scikit-learn (ConvergenceWarning)
            seen.setdefault(path, obj)
            if not inspect.isclass(obj):
                continue
            # Public methods of the class and of the sklode classes it inherits from (the
            # shared estimator base, a shared objective base), each under its owner's name.
            for owner in obj.__mro__:
                if not owner.__module__.startswith("sklode"):
                    continue
                for attr, member in vars(owner).items():
                    if attr.startswith("_") or not (inspect.isfunction(member)
                                                    or isinstance(member, (classmethod,
                                                                           property))):
                        continue
                    if getattr(member, "__doc__", None) is None and inspect.getdoc(
                            getattr(owner, attr)):
                        continue  # an override documented by its base (a zoo model's rhs)
                    seen.setdefault(f"{owner.__module__}.{owner.__qualname__}.{attr}", member)
    return sorted(seen)


def _resolve(path):
    module_name, _, rest = path.partition(".")
    obj = importlib.import_module(module_name)
    for part in rest.split("."):
        obj = getattr(obj, part) if hasattr(obj, part) else importlib.import_module(
            f"{obj.__name__}.{part}")
    return obj


@pytest.mark.parametrize("path", _public_objects())
def test_public_docstring_is_numpydoc_complete(path):
    result = numpydoc_validate.validate(path)
    obj = _resolve(path)
    checks = CHECKS
    if dataclasses.is_dataclass(obj):
        # A result dataclass documents its fields as Attributes (they are read, not passed).
        checks = CHECKS - {"PR01", "PR02"}
        documented = {name.split(":")[0].strip()
                      for name, *_ in numpydoc_validate.Validator(
                          numpydoc_validate.get_doc_object(obj)).doc["Attributes"]}
        missing = {f.name for f in dataclasses.fields(obj)} - documented
        assert not missing, f"{path}: fields {sorted(missing)} not in Attributes"
    errors = [f"{code}: {message}" for code, message in result["errors"] if code in checks]
    assert not errors, f"{path}:\n" + "\n".join(errors)
