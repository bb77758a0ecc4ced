"""Python parity with the C API: every field of every struct in include/wsync/wsync.h has a ctypes
mirror of the same offset and size (checked against a C program compiled with `cc` against the
header, and against the loaded library's wsync_struct_layout), the names match the header in
order, every wsync_config_t field is settable from wsync.ContextConfig and every
wsync_version_stats_t field readable from wsync.VersionStats, and the Python defaults are the
library's WSYNC_CONFIG_INITIALIZER (wsync_config_init). No engine, no coordinator."""
from __future__ import annotations

import ctypes
import dataclasses
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

import wsync
from wsync import _lib
from conftest import HERE

REPO = HERE.parent.parent
HEADER = REPO / "include" / "wsync" / "wsync.h"


def header_fields() -> Dict[str, List[str]]:
    """Field names of every `typedef struct { ... } name;` in wsync.h, in order."""
    text = re.sub(r"/\*.*?\*/", " ", HEADER.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out = {}
    for body, name in re.findall(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if decl:
                fields.append(re.findall(r"\w+", decl)[-1])
        out[name] = fields
    return out


def test_every_header_struct_has_a_complete_mirror():
    structs = header_fields()
    assert set(structs) == set(_lib.MIRRORS), "a struct of wsync.h without a ctypes mirror"
    for name, fields in structs.items():
        assert [f[0] for f in _lib.MIRRORS[name]._fields_] == fields, name


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> Dict[str, Dict[str, tuple]]:
    """{struct: {field: (offset, size)}, "": sizeof} from a C program compiled against wsync.h,
    plus WSYNC_CONFIG_INITIALIZER's values (struct "initializer")."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    tmp = tmp_path_factory.mktemp("layout")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "wsync/wsync.h"',
             'int main(void) {']
    for name, fields in header_fields().items():
        lines.append(f'  printf("{name} - 0 %zu\\n", sizeof({name}));')
        for f in fields:
            lines.append(f'  printf("{name} {f} %zu %zu\\n", offsetof({name}, {f}), '
                         f'sizeof((({name}*)0)->{f}));')
    lines.append("  wsync_config_t c = WSYNC_CONFIG_INITIALIZER;")
    for f in header_fields()["wsync_config_t"]:
        if f not in ("coordinator_address", "secret"):
            lines.append(f'  printf("initializer {f} %lld 0\\n", (long long)c.{f});')
    lines += ["  return 0;", "}"]
    src = tmp / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp / "layout"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(REPO / "include"), str(src),
                    "-o", str(exe)], check=True)
    out: Dict[str, Dict[str, tuple]] = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        struct, field, a, b = line.split()
        out.setdefault(struct, {})[field] = (int(a), int(b))
    return out


def test_ctypes_mirrors_match_the_compiled_header(c_layout):
    for name, mirror in _lib.MIRRORS.items():
        assert ctypes.sizeof(mirror) == c_layout[name]["-"][1], f"sizeof({name})"
        for field, ctype in mirror._fields_:
            assert (getattr(mirror, field).offset, ctypes.sizeof(ctype)) == \
                c_layout[name][field], f"{name}.{field}"


def test_ctypes_mirrors_match_the_loaded_library():
    if not _lib.has_symbol("wsync_struct_layout"):
        pytest.fail("the library has no wsync_struct_layout")
    assert _lib.check_mirrors() == []
    assert _lib.struct_layout("wsync_config_t", "no_such_field") is None
    assert _lib.struct_layout("no_such_struct") is None


def test_defaults_come_from_the_library(c_layout):
    assert _lib.has_symbol("wsync_config_init")
    c = _lib.default_config()
    assert c.size == ctypes.sizeof(_lib.Config)
    for field, (value, _) in c_layout["initializer"].items():
        if field != "size":
            assert getattr(c, field) == value, field
    assert c.coordinator_address is None and c.secret is None
    d = wsync.ContextConfig.defaults()
    assert all(getattr(d, f.name) is not None for f in dataclasses.fields(d)
               if f.name not in ("coordinator_address", "secret"))
    # Unset fields of a ContextConfig keep the library's defaults in the struct.
    assert bytes(wsync.ContextConfig().to_c()) == bytes(c)


def test_every_config_field_is_settable_from_python():
    c_fields = [f for f in _lib.MIRRORS["wsync_config_t"]._fields_]
    settable = {f.name for f in dataclasses.fields(wsync.ContextConfig)}
    assert settable == {name for name, _ in c_fields} - {"size", "magic", "version"}
    values = dict(role=wsync.Role.ROLLOUT, bootstrap=wsync.types.Bootstrap.EXPLICIT, replica=7,
                  num_slots=3, timeout_ms=1234, max_staleness=2, snapshot=True, rank=5,
                  num_trainers=4, num_rollouts=6, coordinator_address="h:1", secret="s",
                  cuda_device=1, device_transport=wsync.DeviceTransport.STAGED,
                  cuda_ipc_export=wsync.CudaIpcExport.LEGACY, replica_size=2, replica_rank=1,
                  checksums=True, checksum_retries=-1, delta=True, delta_max_share=0.5)
    assert set(values) == settable
    cfg = wsync.ContextConfig(**values)
    c = cfg.to_c()
    for name, value in values.items():
        got = getattr(c, name)
        want = (value.encode() if isinstance(value, str) else
                value if isinstance(value, float) else int(value))
        assert got == want, name
    assert wsync.ContextConfig.from_c(c) == cfg


def test_every_version_stats_field_is_readable_from_python():
    c_fields = [name for name, _ in _lib.MIRRORS["wsync_version_stats_t"]._fields_]
    assert [f.name for f in dataclasses.fields(wsync.VersionStats)] == c_fields[1:]


def test_join_bootstrap_sets_only_the_joining_fields():
    cfg = wsync.Bootstrap.join("127.0.0.1:5", "key", replica_size=2, replica_rank=1).apply(
        wsync.ContextConfig(role=wsync.Role.ROLLOUT, replica=9))
    c = cfg.to_c()
    d = _lib.default_config()
    assert (c.bootstrap, c.replica_size, c.replica_rank, c.replica) == (1, 2, 1, 9)
    assert (c.coordinator_address, c.secret) == (b"127.0.0.1:5", b"key")
    assert (c.rank, c.num_trainers, c.num_rollouts) == (d.rank, d.num_trainers, d.num_rollouts)
    assert wsync.replica_id("engine-a") == wsync.replica_id("engine-a")
    assert 4096 <= wsync.replica_id("engine-b") < 65536


def test_a_bad_join_keeps_wsyncs_message():
    """A joining rank outside its replica: the library's INVALID_ARGUMENT, its message kept."""
    cfg = wsync.Bootstrap.join("127.0.0.1:1", "key", replica_size=2, replica_rank=2).apply(
        wsync.ContextConfig(role=wsync.Role.ROLLOUT, replica=1, timeout_ms=1000))
    with pytest.raises(wsync.InvalidArgumentError, match="replica_rank"):
        wsync.Context(cfg)
