"""Build hooks: generate the gRPC stubs from Sandpool's proto/ while building.

The stubs land in the build tree as `sandpool/v1/executor_pb2*.py(i)`, so the
generated `from sandpool.v1 import executor_pb2` resolves inside this package.
They are never committed: proto/ is the only copy of the contract. The sdist
carries a copy of the .proto (under proto/, beside this file), so a wheel builds
from it anywhere, away from the checkout.
"""

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

PROTO_FILE = "sandpool/v1/executor.proto"


def proto_root() -> Path:
    """$SANDPOOL_PROTO_DIR, else the first proto/ holding the file from here up: the sdist's own
    copy beside this file, else the checkout's at its root."""
    env = os.environ.get("SANDPOOL_PROTO_DIR")
    if env:
        return Path(env)
    for d in Path(__file__).resolve().parents:
        if (d / "proto" / PROTO_FILE).is_file():
            return d / "proto"
    raise RuntimeError(f"cannot find proto/{PROTO_FILE}; set SANDPOOL_PROTO_DIR")


class BuildWithStubs(build_py):
    """build_py that also runs grpc_tools.protoc into the build directory."""

    def run(self) -> None:
        super().run()
        import grpc_tools
        from grpc_tools import protoc

        root = proto_root()
        out = Path(self.build_lib)
        (out / "sandpool" / "v1").mkdir(parents=True, exist_ok=True)
        include = Path(grpc_tools.__file__).parent / "_proto"
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{root}",
                f"-I{include}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                str(root / PROTO_FILE),
            ]
        )
        if rc != 0:
            raise RuntimeError(f"grpc_tools.protoc failed on {root / PROTO_FILE} (exit {rc})")
        (out / "sandpool" / "v1" / "__init__.py").write_text('"""Generated gRPC stubs for sandpool.v1."""\n')


class SdistWithProto(sdist):
    """sdist that also carries the .proto, so the sdist builds without the checkout."""

    def make_release_tree(self, base_dir: str, files: list) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / "proto" / PROTO_FILE
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(proto_root() / PROTO_FILE, dest)


setup(cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProto})
