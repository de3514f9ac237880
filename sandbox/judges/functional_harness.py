"""Runs inside the sandbox: `python3 harness.py FN_NAME < args`, for LiveCodeBench functional tests.

Calls `Solution().FN_NAME(*args)` (or a top-level FN_NAME when there is no Solution class) on
one JSON argument per stdin line, and prints the JSON of the return value, tuples as lists.
The solution's own prints go to stderr so they cannot be mistaken for the result.
"""

import json
import os
import sys

# LiveCodeBench prepends these imports to every call-based solution.
PRELUDE = """\
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from builtins import *
from typing import *
import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools, functools, operator, io, sys, json
sys.setrecursionlimit(50000)
"""


def main(fn_name: str, source: str) -> None:
    args = [json.loads(line) for line in sys.stdin.read().split("\n") if line.strip()]
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    namespace = {"__name__": "solution"}
    exec(compile(PRELUDE + source, "sol.py", "exec"), namespace)
    if "Solution" in namespace:
        method = getattr(namespace["Solution"](), fn_name)
    else:
        method = namespace[fn_name]
    result = method(*args)
    if isinstance(result, tuple):
        result = list(result)
    try:
        text = json.dumps(result)
    except (TypeError, ValueError):
        text = "not JSON: " + repr(result)[:200]
    result_out.write(text)
    result_out.flush()


if __name__ == "__main__" and len(sys.argv) == 2:
    with open("sol.py") as f:
        main(sys.argv[1], f.read())
