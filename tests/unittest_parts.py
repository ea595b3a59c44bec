"""Runs a test script's unittest cases, or all but some of its classes.

ctest gives each test script one slot of `ctest -j`; a script that runs for a minute beside short
ones leaves the other core idle at the end. The longest scripts are therefore registered in
parts (tests/CMakeLists.txt): one entry runs a class by its name, as unittest does, and another
runs every other class with `--except CLASS[,CLASS...]`, so that a class added later runs without
a change there. A name in --except that is no class of the script is an error (exit 2).
"""
import argparse
import inspect
import sys
import unittest


def main(module_name, argv, **kwargs):
    """unittest.main over module_name's cases; argv: the unittest arguments, --except included."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--except", dest="excluded", default="")
    args, rest = parser.parse_known_args(argv)
    if args.excluded:
        module = sys.modules[module_name]
        loader = unittest.defaultTestLoader
        classes = [name for name, c in inspect.getmembers(module, inspect.isclass)
                   if issubclass(c, unittest.TestCase) and c.__module__ == module_name
                   and loader.getTestCaseNames(c)]
        excluded = [name for name in args.excluded.split(",") if name]
        unknown = [name for name in excluded if name not in classes]
        if unknown:
            print(f"{sys.argv[0]}: --except names no test class of this script: "
                  f"{', '.join(unknown)} (its classes: {', '.join(classes)})", file=sys.stderr)
            sys.exit(2)
        rest += [name for name in classes if name not in excluded]
    unittest.main(module=module_name, argv=[sys.argv[0], *rest], **kwargs)
