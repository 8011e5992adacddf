"""Builds dhp_client with stubs generated from proto/dhp/v1 by grpcio-tools' protoc.

The stubs are generated at build time (never committed), into dhp_client/_gen, with their
imports rewritten from `dhp.v1` to `dhp_client._gen.dhp.v1` so that the package claims no
top-level `dhp` module. The protos are found at ../../proto (this repository's layout) or at
$DHP_PROTO_DIR.
"""

import glob
import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def generate(out_root):
    from grpc_tools import protoc  # a protoc that knows proto3 `optional`
    import grpc_tools

    proto_dir = os.environ.get("DHP_PROTO_DIR", os.path.join(HERE, "..", "..", "proto"))
    protos = sorted(glob.glob(os.path.join(proto_dir, "dhp", "v1", "*.proto")))
    if not protos:
        raise SystemExit("dhp-client: no protos under %s/dhp/v1 (set DHP_PROTO_DIR)" % proto_dir)
    gen = os.path.join(out_root, "dhp_client", "_gen")
    os.makedirs(gen, exist_ok=True)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["protoc", "-I" + proto_dir, "-I" + well_known, "--python_out=" + gen,
            "--pyi_out=" + gen, "--grpc_python_out=" + gen] + protos
    if protoc.main(args) != 0:
        raise SystemExit("dhp-client: protoc failed on %s" % proto_dir)
    for d in (gen, os.path.join(gen, "dhp"), os.path.join(gen, "dhp", "v1")):
        open(os.path.join(d, "__init__.py"), "a").close()
    for path in glob.glob(os.path.join(gen, "dhp", "v1", "*.py*")):
        with open(path) as f:
            text = f.read()
        text = re.sub(r"^from dhp\.v1 import", "from dhp_client._gen.dhp.v1 import", text,
                      flags=re.M)
        with open(path, "w") as f:
            f.write(text)


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
