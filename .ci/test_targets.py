#!/usr/bin/env python3
"""The build targets a ctest selection needs, read from an already-built reference tree.

CI's sanitizer steps run a selection of the tests (ctest -L / -R / -E) in their own build trees;
building only the programs those tests run saves most of their build. Test names come from the
reference tree (build/, built whole by the README step): gtest_discover_tests knows a test only
after its executable is built, so the sanitizer tree cannot be asked before its build.

  test_targets.py targets REF BUILD [ctest selection...]
      Prints the ninja targets of BUILD (output paths relative to it), one a line, that the tests
      REF selects run or name: their programs, arguments and environment values under REF's
      directory. Prints "all" when a test names the build directory itself (it may use anything).
      Paths that BUILD does not build (a configuration without benchmarks) are left out: BUILD
      defines no such tests.
  test_targets.py check REF BUILD [ctest selection...]
      After BUILD's build: fails, naming them, when tests that REF selects and whose programs
      BUILD builds are not selected in BUILD (gtest lists an unbuilt executable as an unlabelled
      <target>_NOT_BUILT, which a label selection silently skips), or when BUILD selects none.
"""
import json
import os
import subprocess
import sys


def selected_tests(build_dir, selection):
    """{test name: test} for `ctest <selection>` in build_dir."""
    out = subprocess.run(["ctest", "--show-only=json-v1", *selection], cwd=build_dir, check=True,
                         capture_output=True, text=True).stdout
    return {t["name"]: t for t in json.loads(out).get("tests", [])}


def named_paths(test):
    """Every command argument and environment value of a test that looks like a path."""
    values = list(test.get("command", []))
    for prop in test.get("properties", []):
        if prop["name"] == "ENVIRONMENT":
            values += [v.split("=", 1)[-1] for v in prop["value"]]
    for value in values:
        if value.startswith("-D") and "=" in value:  # cmake -DLIBRARY=<path> -P script
            value = value.split("=", 1)[1]
        if value.startswith("/"):
            yield os.path.normpath(value)


def build_outputs(build_dir):
    """Every output path ninja builds in build_dir."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "targets", "all"], check=True,
                         capture_output=True, text=True).stdout
    return {line.rsplit(": ", 1)[0] for line in out.splitlines() if ": " in line}


def targets_of(ref_dir, test, outputs):
    """(targets of BUILD the test needs, whether it needs the whole tree)."""
    ref = os.path.realpath(ref_dir)
    found = set()
    for path in named_paths(test):
        path = os.path.realpath(path)
        if path == ref:
            return found, True
        if path.startswith(ref + os.sep):
            relative = os.path.relpath(path, ref)
            if relative in outputs:
                found.add(relative)
    return found, False


def main(argv):
    if len(argv) < 3 or argv[0] not in ("targets", "check"):
        sys.exit(__doc__)
    mode, ref_dir, build_dir, selection = argv[0], argv[1], argv[2], argv[3:]
    ref_tests = selected_tests(ref_dir, selection)
    if not ref_tests:
        sys.exit(f"test_targets: `ctest {' '.join(selection)}` selects no test in {ref_dir} "
                 "(is it built?)")
    outputs = build_outputs(build_dir)
    if mode == "targets":
        needed = set()
        for test in ref_tests.values():
            found, whole_tree = targets_of(ref_dir, test, outputs)
            if whole_tree:
                print("all")
                return
            needed |= found
        print("\n".join(sorted(needed)))
        return
    built_tests = selected_tests(build_dir, selection)
    if not built_tests:
        sys.exit(f"test_targets: `ctest {' '.join(selection)}` selects no test in {build_dir}")
    missing = sorted(name for name, test in ref_tests.items()
                     if name not in built_tests and targets_of(ref_dir, test, outputs)[0])
    if missing:
        sys.exit(f"test_targets: {build_dir} lacks {len(missing)} test(s) that {ref_dir} selects "
                 f"with `ctest {' '.join(selection)}` (their programs were not built): "
                 + ", ".join(missing[:20]))
    print(f"test_targets: {build_dir} selects {len(built_tests)} test(s), "
          f"{ref_dir} {len(ref_tests)}")


if __name__ == "__main__":
    main(sys.argv[1:])
