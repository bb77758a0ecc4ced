#!/usr/bin/env python3
"""clang-tidy over the given sources, each skipped while a clean result of the same input is cached.

Usage: clang_tidy_cached.py BUILD_DIR CACHE_DIR JOBS LOG files...

A file's key hashes what its findings depend on: the clang-tidy version, every .clang-tidy of the
repository, the file's compile command and its preprocessed translation unit (the file and every
header it includes, comments kept so NOLINT markers count; the repository's and the build's
directories replaced by placeholders so another clone hits the same keys). A file whose run had
no finding and exited 0 leaves an empty CACHE_DIR/<key>; a file with findings is never cached, so
it is checked again on the next run. Exit 1 when any file has a finding or clang-tidy fails; the
findings are printed (at most 50), all of clang-tidy's output goes to LOG.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

FINDING = re.compile(r"^/.*: (warning|error):")
# Compiler arguments that write files or name the object: not wanted when preprocessing.
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP = {"-c", "-MD", "-MMD"}


def compile_commands(build_dir):
    """{absolute source path: (directory, argument list)}, the first entry of each file."""
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    commands = {}
    for e in entries:
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        args = e.get("arguments") or shlex.split(e["command"])
        commands.setdefault(path, (e["directory"], args))
    return commands


def preprocess_arguments(args):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in DROP_WITH_VALUE:
            skip = True
        elif a not in DROP and not any(a.startswith(d) for d in ("-MF", "-MT", "-MQ")):
            out.append(a)
    return out + ["-E", "-C"]


def normalized(text, repo, build_dir):
    return text.replace(build_dir, "@BUILD@").replace(repo, "@REPO@")


def main(argv):
    build_dir, cache_dir, jobs, log_path, files = argv[0], argv[1], int(argv[2]), argv[3], argv[4:]
    repo = os.getcwd()
    build_dir = os.path.realpath(build_dir)
    os.makedirs(cache_dir, exist_ok=True)
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True,
                             check=True).stdout
    base = hashlib.sha256(version.encode())
    configs = subprocess.run(["git", "ls-files", "*.clang-tidy", ".clang-tidy"],
                             capture_output=True, text=True, check=True).stdout.split()
    for config in sorted(configs):
        with open(config, "rb") as f:
            base.update(config.encode() + b"\0" + f.read())
    commands = compile_commands(build_dir)

    def key_of(path):
        """The cache key of one source file, or None when it does not preprocess."""
        h = base.copy()
        h.update(os.path.relpath(path, repo).encode() + b"\0")
        if path not in commands:  # clang-tidy guesses its flags: key the file alone
            with open(path, "rb") as f:
                h.update(f.read())
            return h.hexdigest()
        directory, args = commands[path]
        run = subprocess.run(preprocess_arguments(args), cwd=directory, capture_output=True)
        if run.returncode != 0:
            return None  # clang-tidy reports the compile error
        for arg in args:
            h.update(normalized(arg, repo, build_dir).encode() + b"\0")
        h.update(normalized(run.stdout.decode(errors="replace"), repo, build_dir).encode())
        return h.hexdigest()

    def check(path):
        key = key_of(path)
        if key and os.path.exists(os.path.join(cache_dir, key)):
            return path, "cached", ""
        run = subprocess.run(["clang-tidy", "-p", build_dir, "--quiet", path],
                             capture_output=True, text=True)
        output = run.stdout + run.stderr
        findings = [line for line in output.splitlines() if FINDING.match(line)]
        if run.returncode == 0 and not findings:
            if key:
                open(os.path.join(cache_dir, key), "w").close()
            return path, "clean", output
        return path, "findings" if findings else f"failed (exit {run.returncode})", output

    paths = [os.path.realpath(f) for f in files]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(check, paths))
    with open(log_path, "w") as log:
        for path, state, output in results:
            log.write(f"== {os.path.relpath(path, repo)}: {state}\n{output}\n")
    cached = sum(1 for _, state, _ in results if state == "cached")
    bad = [(p, s, o) for p, s, o in results if s not in ("cached", "clean")]
    print(f"clang-tidy: {len(results)} files, {cached} unchanged since a clean run (cached), "
          f"{len(results) - cached} checked, {len(bad)} with findings or failures")
    if bad:
        findings = sorted({line for _, _, o in bad for line in o.splitlines()
                           if FINDING.match(line)})
        for line in findings[:50]:
            print(line)
        for path, state, output in bad:
            if state.startswith("failed"):
                print(f"{os.path.relpath(path, repo)}: clang-tidy {state}:\n{output[-2000:]}")
        print(f"clang-tidy found the above (full log: {log_path})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
