"""Builds the Python module with the project's own CMake (the target myriad_python) and installs the shared object
as the top-level module `myriad`; setuptools only packages it. The version is the one `myriad version` prints
(cmake/build_info.cmake), in PEP 440 spelling.

Environment:
  MYRIAD_CMAKE_BUILD_DIR  an already configured CMake build directory to build the target in (e.g. build/release:
                          nothing is rebuilt when it is up to date); default build/pip, configured Release here.
  MYRIAD_JOBS             parallel build jobs (default: all cores).
"""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def version():
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "build_info.cc"
        subprocess.run(["cmake", f"-DSOURCE_DIR={ROOT}", f"-DOUT={out}", "-P", str(ROOT / "cmake" / "build_info.cmake")],
                       check=True, capture_output=True)
        v = re.search(r'kVersion = "([^"]+)"', out.read_text()).group(1)
    # "0.1.0-dev+g1a2b3c4.dirty" is PEP 440's "0.1.0.dev0+g1a2b3c4.dirty"
    return v.replace("-dev", ".dev0")


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(os.environ.get("MYRIAD_CMAKE_BUILD_DIR") or ROOT / "build" / "pip").resolve()
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"], check=True)
        jobs = os.environ.get("MYRIAD_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "myriad_python", "-j", jobs], check=True)
        built = sorted((build_dir / "python").glob("myriad*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one myriad*.so in {build_dir / 'python'}, found {[str(b) for b in built]}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


# setuptools' own scratch under build/ (git-ignored), not beside the sources.
scratch = ROOT / "build" / "setuptools"
scratch.mkdir(parents=True, exist_ok=True)
setup(
    version=version(),
    ext_modules=[Extension("myriad", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(scratch)}, "egg_info": {"egg_base": str(scratch)}},
    zip_safe=False,
)
