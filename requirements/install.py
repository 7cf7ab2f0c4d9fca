"""The install step of `make install`: the lock file, then the torch build asked for, then this
checkout (editable). Standard library only: it runs before anything is installed.

    python requirements/install.py [--torch cpu|cuda] [--extras book,test,...]

The lock (requirements/lock.txt, `make lock`) pins every package with its hashes for CPython
3.11 on Linux x86-64, where CI, Binder and the book are built; elsewhere the ranges of
pyproject.toml are installed instead, with a line saying so. torch is pinned by version only
(requirements/torch.txt): its wheel, and so its hash, depends on the build. `--torch cpu`
(the default) takes PyTorch's CPU build from its CPU index on Linux when that index answers,
else torch from the configured index (PyPI's Linux build is the CUDA one); `--torch cuda`
takes PyPI's build (CUDA on Linux).
"""

from __future__ import annotations

import argparse
import compileall
import platform
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOCK = HERE / "lock.txt"
TORCH = HERE / "torch.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
EXTRAS = "book,test,pretrained,lab,pdf"


def pip(*args: str) -> None:
    """Run pip in this interpreter; stop the install on its first failure. pip byte-compiles
    nothing: `compile_all` does it at the end, on every core (pip's own pass is serial: half
    the install's time on two cores)."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", *args]
    if subprocess.run(command).returncode:
        sys.exit(f"install: pip install {' '.join(args)} failed")


def compile_all() -> None:
    """Byte-compile the environment's packages, as pip would have, in parallel: a graded
    kernel reads them from a read-only view and could not write its own .pyc files. A file
    that does not compile (a template, another Python's syntax) is left as pip leaves it."""
    compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)


def lock_applies() -> bool:
    """The lock was resolved for CPython 3.11 on Linux x86-64."""
    return (
        sys.version_info[:2] == (3, 11)
        and sys.platform == "linux"
        and platform.machine() == "x86_64"
        and platform.python_implementation() == "CPython"
    )


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether `url` answers within `timeout` seconds (a registry cut off fails fast)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except OSError:
        return False


def install_torch(build: str) -> None:
    pin = TORCH.read_text().split()[0]
    if build == "cpu" and sys.platform == "linux":
        if answers(f"{CPU_INDEX}/torch/"):
            print(f"install: {pin}, CPU build, from {CPU_INDEX}")
            pip("--no-deps", "--index-url", CPU_INDEX, pin)
            return
        print(
            f"install: {CPU_INDEX} does not answer: {pin} from the configured index "
            "(PyPI's Linux wheel is the CUDA build, about 3 GB more)"
        )
    else:
        print(f"install: {pin} from the configured index ({build} build asked for)")
    pip(pin)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python requirements/install.py", description=__doc__)
    parser.add_argument("--torch", choices=("cpu", "cuda"), default="cpu",
                        help="torch build: cpu (default) or cuda")
    parser.add_argument("--extras", default=EXTRAS, help=f"extras of the package ({EXTRAS})")
    args = parser.parse_args(argv)
    if lock_applies():
        pip("--no-deps", "--require-hashes", "-r", str(LOCK))
        install_torch(args.torch)
        pip("--no-deps", "-e", str(ROOT))
    else:
        print(
            "install: the lock is for CPython 3.11 on Linux x86-64; this is "
            f"{platform.python_implementation()} {platform.python_version()} on "
            f"{sys.platform} {platform.machine()}: installing pyproject.toml's ranges"
        )
        install_torch(args.torch)
        pip("-e", f"{ROOT}[{args.extras}]")
    compile_all()
    if subprocess.run([sys.executable, "-m", "pip", "check"]).returncode:
        sys.exit("install: pip check found broken requirements (above)")
    import torch  # noqa: PLC0415 (installed just now)

    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"
    print(f"install: torch {torch.__version__} ({cuda})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
