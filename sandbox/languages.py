"""How each language is compiled and run inside the sandbox (paths are inside the sandbox).

Commands are templates over a file stem, so a submission (`sol`) and a checker (`checker`)
can share one work dir.
"""

from __future__ import annotations

from dataclasses import dataclass

from .verdict import Limits

PCH_DIR = "/pch"  # holds bits/stdc++.h.gch, built with exactly CPP_FLAGS
CPP_FLAGS = ("-O2", "-std=c++17", "-DONLINE_JUDGE", "-pipe")
PYTHON = "/usr/bin/python3"
# Python is "compiled" with compile() only, so a SyntaxError is CE and nothing is written.
_PY_CHECK = "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')"


@dataclass(frozen=True)
class Language:
    name: str
    """Name used in the API and CLI."""
    extension: str
    """Source file extension."""
    compile_template: tuple[str, ...] | None
    """Compiler argv with {stem}, run with /work writable; None when nothing is compiled."""
    run_template: tuple[str, ...]
    """argv with {stem} that runs the program."""
    compile_writes: bool = True
    """Whether the compiler writes into /work; one that does not shares the tests' sandbox."""

    def source(self, stem: str) -> str:
        return f"{stem}.{self.extension}"

    def compile_argv(self, stem: str) -> list[str] | None:
        if self.compile_template is None:
            return None
        return [a.format(stem=stem) for a in self.compile_template]

    def run_argv(self, stem: str) -> list[str]:
        return [a.format(stem=stem) for a in self.run_template]


LANGUAGES = {
    "python": Language(
        "python", "py", (PYTHON, "-c", _PY_CHECK, "{stem}.py"), (PYTHON, "{stem}.py"), compile_writes=False
    ),
    "cpp": Language("cpp", "cpp", ("g++", *CPP_FLAGS, f"-I{PCH_DIR}", "-o", "{stem}", "{stem}.cpp"), ("./{stem}",)),
}

COMPILE_LIMITS = Limits(
    cpu_s=10, wall_s=20, memory_mb=2048, max_processes=32, max_output_bytes=1 << 20, max_file_mb=256
)
"""Caps for compilers; reaching any of them is CE (e.g. `#include "/dev/random"`, template blow-up)."""


def get_language(name: str) -> Language:
    try:
        return LANGUAGES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown language {name!r}; supported: {sorted(LANGUAGES)}") from None


def pch_build_argv(out_path: str) -> list[str]:
    """Shell command that precompiles bits/stdc++.h with CPP_FLAGS into out_path.

    The header's path depends on the target triplet and GCC version, so g++ -M finds it.
    """
    flags = " ".join(CPP_FLAGS)
    find = "echo '#include <bits/stdc++.h>' | g++ -std=c++17 -x c++ -M - | tr ' ' '\\n' | grep 'bits/stdc++.h$'"
    return ["sh", "-c", f'mkdir -p "$(dirname {out_path})" && g++ {flags} -x c++-header -o {out_path} "$({find})"']
