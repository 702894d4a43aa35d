"""Warm vs cold fidelity probe for Python /run_code: the same programs sent to a server with
warm templates and to one without, their answers compared (timing fields left out).

    python bench/fidelity_probe.py --warm http://127.0.0.1:8091 --cold http://127.0.0.1:8092
        [--only REGEX] [--repeat 3] [--jobs 2] [--show]

Prints each program whose answers differ (with a unified diff of the two) and a summary.
Programs whose output varies from run to run by nature print only what must not vary.
Differences docs/api.md names ("Python runs start warm") are expected among them: frames
beneath the module (inspect.stack, faulthandler), process group and parent, gc freezing,
preloaded modules and their caches (sympy's Dummy numbers), str hash order, finalizer order.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import difflib
import json
import re

import requests

PROGRAMS: dict[str, tuple[str, dict]] = {}


def P(name: str, code: str, **body) -> None:
    assert name not in PROGRAMS, name
    PROGRAMS[name] = (code, body)


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


# --- realistic: LeetCode / HumanEval style solutions with asserts --------------------------
LEET = {
    "two_sum": """
from typing import List
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, n in enumerate(nums):
            if target - n in seen:
                return [seen[target - n], i]
            seen[n] = i
        return []
s = Solution()
assert s.twoSum([2, 7, 11, 15], 9) == [0, 1]
assert s.twoSum([3, 2, 4], 6) == [1, 2]
print("ok")
""",
    "lis": """
import bisect
def lis(a):
    tails = []
    for x in a:
        i = bisect.bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)
assert lis([10, 9, 2, 5, 3, 7, 101, 18]) == 4
assert lis([0, 1, 0, 3, 2, 3]) == 4
print(lis(list(range(1000, 0, -1))))
""",
    "dijkstra": """
import heapq, sys
def dijkstra(n, edges, src):
    g = [[] for _ in range(n)]
    for u, v, w in edges:
        g[u].append((v, w)); g[v].append((u, w))
    dist = [float('inf')] * n
    dist[src] = 0
    pq = [(0, src)]
    while pq:
        d, u = heapq.heappop(pq)
        if d > dist[u]:
            continue
        for v, w in g[u]:
            if d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(pq, (dist[v], v))
    return dist
data = sys.stdin.read().split()
n, m = int(data[0]), int(data[1])
edges = [tuple(map(int, data[2 + 3 * i: 5 + 3 * i])) for i in range(m)]
print(*dijkstra(n, edges, 0))
""",
    "wrong_answer": """
def add(a, b):
    return a - b
assert add(2, 3) == 5, f"expected 5, got {add(2, 3)}"
""",
    "failing_assert_plain": """
def is_palindrome(s):
    return s == s[::-1]
assert is_palindrome('abba')
assert not is_palindrome('abca')
assert is_palindrome('abc')
""",
    "humaneval_style": """
from typing import List

def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                distance = abs(elem - elem2)
                if distance < threshold:
                    return True
    return False


METADATA = {'author': 'jt', 'dataset': 'test'}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True

check(has_close_elements)
""",
    "union_find": """
class DSU:
    def __init__(self, n):
        self.p = list(range(n)); self.r = [0] * n
    def find(self, x):
        while self.p[x] != x:
            self.p[x] = self.p[self.p[x]]; x = self.p[x]
        return x
    def union(self, a, b):
        a, b = self.find(a), self.find(b)
        if a == b: return False
        if self.r[a] < self.r[b]: a, b = b, a
        self.p[b] = a
        if self.r[a] == self.r[b]: self.r[a] += 1
        return True
d = DSU(10)
for a, b in [(1, 2), (3, 4), (2, 3), (7, 8)]:
    d.union(a, b)
print(len({d.find(i) for i in range(10)}))
""",
    "memo_fib": """
from functools import lru_cache
sys.setrecursionlimit(10000)
@lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
print(fib(2000) % 1000000007)
print(fib.cache_info())
""",
    "big_int_str": "import math\nprint(len(str(math.factorial(1000))))\nprint(str(math.factorial(2000))[:20])",
    "big_int_limit": "import math\nprint(str(math.factorial(5000)))",
    "collections_counter": """
from collections import Counter, defaultdict, deque, OrderedDict
c = Counter('abracadabra')
print(c.most_common(3))
dd = defaultdict(list)
for w in 'the quick brown fox jumps over the lazy dog'.split():
    dd[len(w)].append(w)
print(dict(dd))
q = deque(range(5)); q.rotate(2); print(q)
print(OrderedDict(a=1, b=2))
""",
    "itertools_perm": """
from itertools import permutations, combinations, product, accumulate, groupby
print(len(list(permutations(range(7)))))
print(list(combinations('abcd', 2)))
print(list(accumulate([1, 2, 3, 4])))
print([(k, len(list(g))) for k, g in groupby('aaabbcaa')])
""",
    "fractions_decimal": """
from fractions import Fraction
from decimal import Decimal, getcontext
print(sum(Fraction(1, n) for n in range(1, 20)))
getcontext().prec = 50
print(Decimal(2).sqrt())
print(Decimal(1) / Decimal(7))
""",
    "decimal_context": "import decimal\nprint(decimal.getcontext())\nprint(decimal.Decimal('1.1') + decimal.Decimal('2.2'))",
    "dataclass_sort": """
from dataclasses import dataclass, field, asdict
@dataclass(order=True)
class Item:
    priority: int
    name: str = field(compare=False)
items = sorted([Item(3, 'c'), Item(1, 'a'), Item(2, 'b')])
print(items)
print(asdict(items[0]))
""",
    "regex_parse": """
import re
text = "2023-01-15: alice paid $30.50; 2023-02-01: bob paid $12"
for m in re.finditer(r"(\\d{4})-(\\d{2})-(\\d{2}): (\\w+) paid \\$(\\d+(?:\\.\\d+)?)", text):
    print(m.groups())
print(re.sub(r"\\s+", " ", "a   b \\t c"))
""",
    "json_roundtrip": """
import json
data = {"b": [1, 2, {"c": None}], "a": 1.5, "u": "é"}
s = json.dumps(data, sort_keys=True, indent=2)
print(s)
print(json.loads(s) == data)
print(json.dumps(data, ensure_ascii=False))
""",
    "json_error": "import json\njson.loads('{bad json}')",
    "string_ops": """
import string
print(string.ascii_lowercase, string.punctuation)
s = "Hello, World"
print(s.swapcase(), s.casefold(), s.center(20, '*'), s.zfill(15))
print(f"{3.14159:.2f} {1e10:,.0f} {255:#x} {0.5:%}")
""",
    "sorting_key": """
people = [("alice", 30), ("bob", 25), ("carol", 30), ("dave", 25)]
print(sorted(people, key=lambda p: (-p[1], p[0])))
print(max(people, key=lambda p: p[1]))
""",
    "binary_search_stdin": """
def main():
    data = sys.stdin.buffer.read().split()
    n, q = int(data[0]), int(data[1])
    arr = sorted(map(int, data[2:2 + n]))
    import bisect
    out = []
    for x in data[2 + n:2 + n + q]:
        out.append(str(bisect.bisect_right(arr, int(x))))
    sys.stdout.write("\\n".join(out) + "\\n")
main()
""",
    "input_loop": """
t = int(input())
for _ in range(t):
    a, b = map(int, input().split())
    print(a * b)
""",
    "input_loop_eof": """
while True:
    try:
        line = input()
    except EOFError:
        break
    print(line.upper())
""",
    "readlines": "import sys\nlines = sys.stdin.readlines()\nprint(len(lines), [l.rstrip() for l in lines])",
    "stdin_iter": "import sys\nfor i, line in enumerate(sys.stdin):\n    print(i, line, end='')",
    "matrix_mult_pure": """
def matmul(a, b):
    return [[sum(x * y for x, y in zip(r, c)) for c in zip(*b)] for r in a]
a = [[1, 2], [3, 4]]
print(matmul(a, a))
""",
    "generator_pipeline": """
def primes():
    n, found = 2, []
    while True:
        if all(n % p for p in found if p * p <= n):
            found.append(n); yield n
        n += 1
import itertools
print(list(itertools.islice(primes(), 20)))
""",
    "class_repr_str": """
class Point:
    def __init__(self, x, y): self.x, self.y = x, y
    def __repr__(self): return f"Point({self.x}, {self.y})"
    def __eq__(self, o): return (self.x, self.y) == (o.x, o.y)
    def __hash__(self): return hash((self.x, self.y))
print({Point(1, 2), Point(1, 2)}, Point(3, 4))
""",
    "exception_chain": """
class AppError(Exception):
    pass
def parse(s):
    try:
        return int(s)
    except ValueError as e:
        raise AppError(f"bad input {s!r}") from e
parse("x1")
""",
    "exception_group": """
def f():
    raise ExceptionGroup("many", [ValueError(1), TypeError(2)])
try:
    f()
except* ValueError as eg:
    print("caught", eg.exceptions)
""",
    "exception_notes": "e = ValueError('x')\ne.add_note('note one')\nraise e",
    "typing_generics": """
from typing import TypeVar, Generic, Optional, get_type_hints
T = TypeVar('T')
class Box(Generic[T]):
    def __init__(self, v: T) -> None: self.v = v
    def get(self) -> T: return self.v
def f(x: Optional[int] = None) -> list[int]: return [x or 0]
print(get_type_hints(f), Box[int](3).get(), Box[int])
""",
    "enum_use": """
from enum import Enum, auto, IntFlag
class Color(Enum):
    RED = auto(); GREEN = auto()
class Perm(IntFlag):
    R = 4; W = 2; X = 1
print(list(Color), Color.RED, repr(Color.GREEN), Perm.R | Perm.W)
""",
    "heap_kth": "import heapq\nprint(heapq.nlargest(3, [5, 1, 8, 3, 9, 2]), heapq.nsmallest(2, 'hello'))",
    "statistics_mod": "import statistics as st\nd = [2, 4, 4, 4, 5, 5, 7, 9]\nprint(st.mean(d), st.median(d), st.pstdev(d), st.mode(d), st.quantiles(d))",
    "datetime_ops": """
from datetime import datetime, timedelta, date, timezone
d = date(2024, 2, 28) + timedelta(days=2)
print(d, d.isoformat(), d.weekday(), d.strftime('%A %B'))
print(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp())
print(datetime.strptime('2024-03-05 10:11', '%Y-%m-%d %H:%M'))
""",
    "calendar_mod": "import calendar\nprint(calendar.month(2024, 2))\nprint(calendar.isleap(2100))",
    "textwrap_mod": "import textwrap\nprint(textwrap.fill('lorem ipsum dolor sit amet ' * 5, 30))\nprint(textwrap.dedent('   a\\n   b'))",
    "math_funcs": "import math\nprint(math.comb(50, 25), math.gcd(12, 18), math.lcm(4, 6), math.isqrt(10**20), math.prod(range(1, 10)))\nprint(math.sqrt(2), math.pi, math.e, math.inf, math.nan, math.log(1e-300), math.fsum([0.1]*10))",
    "float_repr": "print(0.1 + 0.2, 1/3, 2**0.5, 1e-7, 1e16, float('nan'), -0.0, round(2.675, 2))",
    "bit_tricks": "print(bin(37), (37).bit_count(), (37).bit_length(), 37 & -37, int('101', 2), f'{37:08b}')",
    "str_hash_order": "print(sorted({'banana', 'apple', 'cherry'}))",
    "recursion_dfs": """
sys.setrecursionlimit(1 << 16)
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
print(depth(50000))
""",
    "tle_loop": "x = 0\nwhile True:\n    x += 1",
    "walrus_match": """
def classify(p):
    match p:
        case (0, 0): return "origin"
        case (x, 0): return f"x={x}"
        case [x, y, *rest]: return f"many {len(rest)}"
        case {"k": v}: return f"dict {v}"
        case _: return "other"
print([classify(p) for p in [(0, 0), (3, 0), [1, 2, 3, 4], {"k": 1}, "s"]])
if (n := len("hello")) > 3:
    print(n)
""",
    "closures_nonlocal": """
def counter():
    c = 0
    def inc():
        nonlocal c
        c += 1
        return c
    return inc
f = counter(); f(); f(); print(f())
""",
    "global_in_func": "x = 1\ndef g():\n    global x\n    x += 1\ng()\nprint(x, 'x' in globals(), sorted(k for k in globals() if not k.startswith('__')))",
}
for _name, _code in LEET.items():
    P(f"leet_{_name}", _code.strip("\n"),
      stdin={"leet_dijkstra": "4 4\n0 1 5\n1 2 3\n0 2 10\n2 3 1\n",
             "leet_binary_search_stdin": "5 3\n5 1 4 2 3\n0 3 10\n",
             "leet_input_loop": "3\n1 2\n3 4\n5 6\n",
             "leet_input_loop_eof": "ab\ncd\n",
             "leet_readlines": "x\ny\nz",
             "leet_stdin_iter": "l1\nl2\n"}.get(f"leet_{_name}", ""))

# --- realistic: data analysis, code-interpreter calls of math agents -----------------------
DATA = {
    "np_basic": "import numpy as np\na = np.arange(12).reshape(3, 4)\nprint(a)\nprint(a.T @ a)\nprint(a.mean(axis=0), a.std(), a.dtype)",
    "np_linalg": "import numpy as np\nA = np.array([[4., 1.], [2., 3.]])\nw, v = np.linalg.eig(A)\nprint(np.sort(w))\nprint(np.linalg.solve(A, [1, 2]), np.linalg.det(A), np.linalg.inv(A))",
    "np_seeded_default_rng": "import numpy as np\nrng = np.random.default_rng(42)\nprint(rng.integers(0, 100, 10), rng.normal(size=3))",
    "np_seeded_legacy": "import numpy as np\nnp.random.seed(1)\nprint(np.random.randint(0, 10, 5), np.random.randn(2), np.random.choice(5, 3))",
    "np_random_state_obj": "import numpy as np\nrs = np.random.RandomState(7)\nprint(rs.rand(3))",
    "np_print_options": "import numpy as np\nprint(np.get_printoptions())\nprint(np.linspace(0, 1, 7))\nprint(np.array([1e-10, 1, 1e10]))\nprint(repr(np.float64(0.1)), np.int64(3), np.arange(2000))",
    "np_errstate": "import numpy as np\nprint(np.geterr())\nprint(np.array([1.0, 0.0]) / 0)",
    "np_float_warning": "import numpy as np\nx = np.array([0.0])\nprint(np.log(x), np.sqrt(-1 * np.ones(1)))",
    "np_big_matmul": "import numpy as np, hashlib\nrng = np.random.default_rng(0)\na = rng.random((300, 300)); b = rng.random((300, 300))\nc = a @ b\nprint(hashlib.sha256(c.tobytes()).hexdigest(), c.sum())\nprint(hashlib.sha256(np.linalg.inv(a).tobytes()).hexdigest())",
    "np_svd_hash": "import numpy as np, hashlib\nrng = np.random.default_rng(1)\na = rng.random((200, 120))\nu, s, vt = np.linalg.svd(a)\nprint(hashlib.sha256(s.tobytes()).hexdigest())\nprint(hashlib.sha256(np.linalg.eigvalsh(a.T @ a).tobytes()).hexdigest())",
    "np_sum_precision": "import numpy as np\nprint(repr(np.sum(np.arange(1e6) * 0.1)), repr(np.dot(np.ones(10**6) * 0.1, np.ones(10**6))))",
    "np_show_config": "import numpy as np\nnp.show_config()",
    "np_version": "import numpy, scipy, sympy, pandas\nprint(numpy.__version__, scipy.__version__, sympy.__version__, pandas.__version__)",
    "pd_frame": """
import pandas as pd
import numpy as np
df = pd.DataFrame({'city': ['a', 'b', 'a', 'c', 'b'], 'sales': [10, 20, 30, 40, 50], 'q': [1.5, 2.5, np.nan, 4.5, 5.5]})
print(df)
print(df.groupby('city').agg({'sales': ['sum', 'mean'], 'q': 'max'}))
print(df.describe())
print(df.pivot_table(index='city', values='sales', aggfunc='sum'))
print(df.sort_values('sales', ascending=False).head(3).to_dict('records'))
""",
    "pd_csv": "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.dtypes)\nprint(df.head())\ndf['total'] = df.x * df.y\ndf.to_csv('out.csv', index=False)\nprint(open('out.csv').read())",
    "pd_wide_print": "import pandas as pd, numpy as np\ndf = pd.DataFrame(np.arange(600).reshape(20, 30))\nprint(df)\nprint(pd.get_option('display.width'), pd.get_option('display.max_columns'), pd.get_option('display.max_rows'))",
    "pd_dates": "import pandas as pd\ns = pd.date_range('2024-01-01', periods=5, freq='D')\nprint(s)\nprint(pd.Series(range(5), index=s).resample('2D').sum())",
    "pd_future_warning": "import pandas as pd\ns = pd.Series([1, 2, 3])\nprint(s.groupby([0, 0, 1]).sum())\ndf = pd.DataFrame({'a': [1, None]})\nprint(df.fillna(method='ffill'))",
    "pd_options_print": "import pandas as pd\nprint(pd.options.display.precision, pd.options.mode.chained_assignment)\nprint(pd.Series([1.123456789, 2.0]))",
    "pd_sample_seeded": "import pandas as pd\ndf = pd.DataFrame({'a': range(10)})\nprint(df.sample(3, random_state=0))",
    "scipy_optimize": "from scipy import optimize\nres = optimize.minimize(lambda x: (x[0] - 3) ** 2 + (x[1] + 1) ** 2, [0, 0])\nprint(res.x.round(4), res.success)\nprint(optimize.brentq(lambda x: x**3 - 2, 0, 2))",
    "scipy_optimize_disp": "from scipy import optimize\nres = optimize.minimize(lambda x: (x[0] - 3) ** 2, [0.0], method='BFGS', options={'disp': True})\nprint(res.x.round(4))",
    "scipy_lbfgsb_iprint": "from scipy import optimize\nimport numpy as np\nres = optimize.minimize(lambda x: ((x - 2) ** 2).sum(), np.zeros(3), method='L-BFGS-B', options={'iprint': 1, 'disp': True})\nprint(res.x.round(3))",
    "scipy_linprog_disp": "from scipy.optimize import linprog\nr = linprog([-1, -2], A_ub=[[1, 1], [1, -1]], b_ub=[4, 2], method='highs', options={'disp': True})\nprint(r.x, r.fun)",
    "scipy_odeint_warn": "import numpy as np\nfrom scipy.integrate import odeint\nsol = odeint(lambda y, t: -1000 * y + 3000 - 2000 * np.exp(-t), [0], np.linspace(0, 4, 5), mxstep=5)\nprint(sol.shape)",
    "scipy_integrate": "from scipy import integrate\nimport numpy as np\nprint(integrate.quad(np.sin, 0, np.pi))\nprint(integrate.solve_ivp(lambda t, y: -y, [0, 1], [1.0]).y[0][-1].round(4))",
    "scipy_quad_warning": "from scipy import integrate\nimport numpy as np\nprint(integrate.quad(lambda x: np.sin(1/x), 0.0001, 1, limit=5))",
    "scipy_stats": "from scipy import stats\nimport numpy as np\nprint(stats.norm.cdf(1.96), stats.t.ppf(0.975, 10), stats.binom.pmf(3, 10, 0.5))\nprint(stats.pearsonr([1, 2, 3, 4], [2, 4, 5, 9]))\nprint(stats.ttest_ind([1, 2, 3, 4], [2, 3, 4, 9]))",
    "scipy_sparse": "from scipy import sparse\nimport numpy as np\nm = sparse.random(5, 5, density=0.3, random_state=3, format='csr')\nprint(m.nnz, m.toarray().round(3))",
    "scipy_only_np_state": "import scipy\nimport numpy as np\nprint(np.geterr(), np.get_printoptions()['legacy'])",
    "scipy_special": "from scipy.special import comb, gamma, zeta, erf\nprint(comb(30, 15, exact=True), gamma(5.5), zeta(2), erf(0.5))",
    "sympy_solve": "import sympy as sp\nx, y = sp.symbols('x y')\nprint(sp.solve([x + y - 10, x - y - 2], [x, y]))\nprint(sp.solve(x**3 - 6*x**2 + 11*x - 6, x))\nprint(sp.nsolve(sp.cos(x) - x, x, 1))",
    "sympy_calculus": "from sympy import *\nx = symbols('x')\nprint(integrate(exp(-x**2), (x, -oo, oo)))\nprint(limit((1 + 1/x)**x, x, oo))\nprint(series(sin(x), x, 0, 8))\nprint(diff(x**x, x))\nprint(summation(1/x**2, (x, 1, oo)))",
    "sympy_matrix": "import sympy as sp\nM = sp.Matrix([[1, 2], [3, 4]])\nprint(M.det(), M.inv(), M.eigenvals(), M.rref())",
    "sympy_pretty": "import sympy as sp\nx = sp.symbols('x')\nsp.pprint(sp.Integral(sp.sqrt(1/x), x), use_unicode=True)\nprint(sp.latex(sp.Rational(3, 4) * x**2))\nsp.init_printing()\nprint(sp.sqrt(8))",
    "sympy_numbers": "import sympy as sp\nprint(sp.factorint(2**64 - 1), sp.isprime(2**61 - 1), sp.nextprime(10**12), sp.totient(100), sp.divisors(60))\nprint(sp.N(sp.pi, 50), sp.binomial(100, 50))",
    "sympy_dsolve": "import sympy as sp\nt = sp.symbols('t')\nf = sp.Function('f')\nprint(sp.dsolve(f(t).diff(t, 2) + f(t), f(t)))",
    "sympy_solveset": "import sympy as sp\nx = sp.symbols('x', real=True)\nprint(sp.solveset(sp.sin(x) - sp.Rational(1, 2), x, sp.Interval(0, 2 * sp.pi)))\nprint(sp.solve(x**4 - 1, x))\nprint(sp.roots(x**3 - 1))",
    "sympy_dummy_after_solve": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.Sum(1/x, (x, 1, 10)).doit())\nprint(sp.integrate(1/(x**2+1), x))\nprint(sp.Dummy())",
    "sympy_simplify_trig": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.simplify(sp.sin(x)**4 - sp.cos(x)**4), sp.trigsimp(sp.sin(x)*sp.cos(x)), sp.expand_trig(sp.tan(2*x)))",
    "sympy_cache_toggle": "import sympy\nfrom sympy.core.cache import clear_cache\nx = sympy.symbols('x')\nclear_cache()\nprint(sympy.solve(x**2 - 2, x))",
    "sympy_rng_seeded": "from sympy.core.random import seed, randint\nseed(3)\nprint(randint(1, 10**9))",
    "mpmath_precision": "import mpmath\nmpmath.mp.dps = 40\nprint(mpmath.pi, mpmath.zeta(3), mpmath.mp)",
    "mpmath_default": "import mpmath\nprint(mpmath.mp.dps, mpmath.mp.prec, mpmath.sqrt(2))",
    "networkx": "import networkx as nx\nG = nx.karate_club_graph()\nprint(G.number_of_nodes(), G.number_of_edges(), nx.shortest_path(G, 0, 33))\nprint(sorted(nx.pagerank(G).items())[:3])",
    "sortedcontainers": "from sortedcontainers import SortedList\ns = SortedList([5, 1, 3])\ns.add(2)\nprint(s, s.bisect_left(3))",
    "matplotlib_save": "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('t')\nplt.savefig('plot.png')\nimport os\nprint(os.path.getsize('plot.png') > 1000)",
    "matplotlib_stderr": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot(range(10))\nfig.savefig('fig.svg', metadata={'Date': None})\nprint(matplotlib_ok := True)",
    "agent_tool_call": """
import math
import numpy as np
from sympy import symbols, solve, Rational
x = symbols('x')
roots = solve(x**2 - 7*x + 12, x)
print("roots:", roots)
vals = np.array([float(r) for r in roots])
print("sum:", vals.sum(), "prod:", np.prod(vals))
print("answer:", Rational(sum(roots), len(roots)))
print(math.comb(10, 3))
""",
    "agent_expression_last_line": "import numpy as np\nresult = np.mean([1, 2, 3, 4])\nresult",
    "agent_probability_sim": "import random\nrandom.seed(12345)\ntrials = 20000\nhits = sum(1 for _ in range(trials) if random.random()**2 + random.random()**2 < 1)\nprint(4 * hits / trials)",
    "agent_itertools_count": "from itertools import product\ncount = sum(1 for t in product(range(1, 7), repeat=4) if sum(t) == 14)\nprint(count, count / 6**4)",
    "agent_fraction_answer": "from fractions import Fraction\nfrom math import comb\np = Fraction(comb(4, 2) * comb(48, 3), comb(52, 5))\nprint(p, float(p))",
}
for _name, _code in DATA.items():
    body = {}
    if _name == "pd_csv":
        body = {"files": {"data.csv": b64("x,y\n1,2\n3,4\n5,6\n")}, "fetch_files": ["out.csv"]}
    if _name == "matplotlib_save":
        body = {"fetch_files": ["plot.png"]}
    if _name == "matplotlib_stderr":
        body = {"fetch_files": ["fig.svg"]}
    P(f"data_{_name}", _code.strip("\n"), run_timeout=20, **body)

# --- edge: process, interpreter and module state -------------------------------------------
EDGE = {
    "input_no_stdin": "print(input('prompt> '))",
    "input_with_stdin": "print(input('prompt> '))",
    "stdin_read_empty": "import sys\nd = sys.stdin.read()\nprint(repr(d))",
    "stdin_fstat": "import os, stat, sys\nfor fd in (0, 1, 2):\n    m = os.fstat(fd).st_mode\n    print(fd, stat.S_ISFIFO(m), stat.S_ISCHR(m), stat.S_ISREG(m), stat.S_ISSOCK(m), os.isatty(fd))\nprint(sys.stdin.seekable(), sys.stdout.seekable())",
    "stdin_select": "import select, sys\nprint(select.select([sys.stdin], [], [], 0.5)[0] != [])\nprint(repr(sys.stdin.read()))",
    "stdin_fcntl": "import fcntl, os\nfor fd in (0, 1, 2):\n    print(fd, oct(fcntl.fcntl(fd, fcntl.F_GETFL)), fcntl.fcntl(fd, fcntl.F_GETFD))",
    "stdout_pipe_size": "import fcntl\ntry:\n    print(fcntl.fcntl(1, 1032))\nexcept OSError as e:\n    print('err', e.errno)",
    "sys_argv_file_name": "import sys\nprint(sys.argv, __file__, __name__, __spec__, __package__)",
    "sys_path_full": "import sys\nprint(sys.path)",
    "sys_path_hooks_meta": "import sys\nprint([type(h).__name__ if not isinstance(h, type) else h.__name__ for h in sys.meta_path])\nprint([getattr(h, '__name__', type(h).__name__) for h in sys.path_hooks])",
    "path_importer_cache": "import sys\nprint(sorted(k for k in sys.path_importer_cache if k.startswith('/sandbox') or k in ('', '.')))",
    "builtins_dict": "import builtins\nprint(sorted(dir(builtins)))\nprint(type(__builtins__).__name__)",
    "builtins_underscore": "import builtins\nprint(hasattr(builtins, '_'))",
    "builtins_with_numpy": "import numpy, builtins\nprint(sorted(dir(builtins)))",
    "builtins_with_scipy": "import scipy, builtins\nprint(sorted(n for n in dir(builtins) if n.startswith('_')))",
    "dir_toplevel": "print(dir())\nimport os\nprint(dir())",
    "globals_contents": "print({k: (v if isinstance(v, (str, type(None), dict)) else type(v).__name__) for k, v in globals().items()})",
    "main_module_attrs": "import __main__, sys\nprint(sys.modules['__main__'] is __main__, __main__.__dict__ is globals(), repr(__main__)[:40])",
    "main_module_repr": "import sys\nprint(sys.modules['__main__'])",
    "spec_of_main": "import importlib.util\nprint(importlib.util.find_spec('__main__'))",
    "sys_flags_full": "import sys\nprint(sys.flags)\nprint(sys.warnoptions, sys._xoptions, sys.dont_write_bytecode)",
    "sys_misc": "import sys\nprint(sys.executable, sys.orig_argv, sys.getrecursionlimit(), sys.getswitchinterval(), sys.get_int_max_str_digits(), sys.getdefaultencoding(), sys.getfilesystemencoding(), sys.prefix, sys.base_prefix, sys.platlibdir)",
    "sys_misc_numpy": "import numpy, sys\nprint(sys.getrecursionlimit(), sys.get_int_max_str_digits(), sys.getswitchinterval())",
    "sys_misc_sympy": "import sympy, sys, decimal\nprint(sys.getrecursionlimit(), sys.get_int_max_str_digits(), decimal.getcontext())",
    "sys_misc_pandas": "import pandas, sys, decimal, locale\nprint(sys.getrecursionlimit(), decimal.getcontext(), locale.setlocale(locale.LC_ALL))",
    "env_full": "import os\nfor k, v in sorted(os.environ.items()):\n    print(k, v)",
    "environ_vs_proc": "import os\nproc = dict(l.split('=', 1) for l in open('/proc/self/environ').read().split('\\0') if '=' in l)\nprint(proc == dict(os.environ), sorted(set(proc) ^ set(os.environ)))",
    "home_expand": "import os, site, getpass, pwd\nprint(os.path.expanduser('~'), site.USER_BASE, site.USER_SITE, site.ENABLE_USER_SITE, getpass.getuser(), pwd.getpwuid(os.getuid()).pw_name)",
    "site_user": "import site\nprint(site.getusersitepackages(), site.getuserbase(), site.getsitepackages())",
    "locale_all": "import locale\nprint(locale.setlocale(locale.LC_ALL), locale.getlocale(), locale.getencoding(), locale.localeconv()['decimal_point'])",
    "time_tz": "import time\nprint(time.tzname, time.timezone, time.daylight, time.localtime(0))",
    "cwd_listing": "import os\nprint(os.getcwd(), sorted(os.listdir('.')), oct(os.stat('.').st_mode), os.stat('.').st_uid, os.access('.', os.W_OK))",
    "sent_files_stat": "import os\nfor root, dirs, files in os.walk('.'):\n    for n in sorted(dirs + files):\n        p = os.path.join(root, n)\n        st = os.stat(p)\n        print(p, oct(st.st_mode), st.st_uid, st.st_gid, st.st_size, os.access(p, os.W_OK))",
    "write_into_sent_dir": "open('data/new.txt', 'w').write('x')\nopen('data/in.txt', 'a').write('more')\nprint(open('data/in.txt').read(), sorted(__import__('os').listdir('data')))",
    "write_then_import": "open('helper_mod.py', 'w').write('VALUE = 42\\n')\nimport helper_mod\nprint(helper_mod.VALUE, helper_mod.__file__)\nimport os\nprint(sorted(os.listdir('.')))",
    "import_sent_module": "import utils\nprint(utils.double(21), utils.__file__, utils.__cached__)\nimport os\nprint(sorted(os.listdir('.')))",
    "import_sent_package": "from pkg import sub\nprint(sub.X, sub.__name__, sub.__package__)\nimport pkg\nprint(pkg.__path__)",
    "relative_file_read": "print(open('data/in.txt').read())\nimport os\nprint(os.path.abspath('data/in.txt'))",
    "tmp_dir": "import tempfile, os\nprint(tempfile.gettempdir(), os.listdir('/tmp'))\nwith tempfile.TemporaryDirectory() as d:\n    print(os.path.dirname(d))\nprint(oct(os.stat('/tmp').st_mode))",
    "rlimits_all": "import resource\nfor n in sorted(x for x in dir(resource) if x.startswith('RLIMIT_')):\n    print(n, resource.getrlimit(getattr(resource, n)))",
    "proc_limits": "print(open('/proc/self/limits').read())",
    "proc_status_some": "for l in open('/proc/self/status'):\n    if l.split(':')[0] in ('Name', 'Umask', 'State', 'Threads', 'SigQ', 'SigBlk', 'SigIgn', 'SigCgt', 'Cpus_allowed_list', 'Mems_allowed_list', 'Seccomp_filters', 'NSpid', 'NSpgid', 'NSsid', 'CoreDumping', 'THP_enabled', 'Speculation_Store_Bypass'):\n        print(l, end='')",
    "proc_stat_fields": "f = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\nprint(f[0], f[16], f[17], f[18], f[20-2])",
    "proc_self_misc": "import os\nfor p in ('comm', 'loginuid', 'sessionid', 'personality', 'cgroup', 'timerslack_ns', 'attr/current', 'oom_score_adj', 'autogroup', 'setgroups', 'uid_map'):\n    try:\n        print(p, repr(open('/proc/self/' + p).read()))\n    except OSError as e:\n        print(p, 'error', e.errno)",
    "proc_cmdline": "print(repr(open('/proc/self/cmdline').read()))\nimport os\nprint(repr(open('/proc/1/cmdline').read()))",
    "ids": "import os\nprint(os.getpid(), os.getppid(), os.getpgrp(), os.getsid(0), os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), os.getresuid(), os.getresgid())",
    "cpu_info": "import os, multiprocessing\nprint(os.cpu_count(), len(os.sched_getaffinity(0)), multiprocessing.cpu_count(), os.sysconf('SC_NPROCESSORS_ONLN'), os.sysconf('SC_OPEN_MAX'), os.sysconf('SC_CHILD_MAX'))\nprint(getattr(os, 'process_cpu_count', lambda: None)())",
    "threads_at_start": "import os\nprint(len(os.listdir('/proc/self/task')))",
    "threads_after_numpy": "import numpy, os\nprint(len(os.listdir('/proc/self/task')))",
    "threads_after_numpy_matmul": "import numpy as np, os\na = np.ones((300, 300))\nb = a @ a\nprint(len(os.listdir('/proc/self/task')) > 0)",
    "uname": "import os, platform, socket\nprint(os.uname().sysname, os.uname().nodename == socket.gethostname(), platform.node() == socket.gethostname(), platform.system(), platform.machine(), platform.python_version())",
    "platform_node": "import platform, socket\nprint(platform.node(), socket.gethostname(), platform.uname().node)",
    "gc_state": "import gc\nprint(gc.isenabled(), gc.get_threshold(), gc.get_debug(), len(gc.garbage), gc.callbacks)",
    "gc_collect_count": "import gc\nprint(gc.collect())",
    "gc_referrers_main": "import gc\nclass A: pass\na = A()\nprint(len(gc.get_referrers(a)))",
    "gc_debug_saveall": "import gc\ngc.set_debug(gc.DEBUG_SAVEALL)\nclass N: pass\nn = N(); n.self = n\ndel n\ngc.collect()\nprint(len([o for o in gc.garbage if isinstance(o, N)]))",
    "tracemalloc_use": "import tracemalloc\ntracemalloc.start()\nx = [bytes(1000) for _ in range(1000)]\ncur, peak = tracemalloc.get_traced_memory()\nprint(cur > 1000000, peak >= cur)\nsnap = tracemalloc.take_snapshot()\nprint(snap.statistics('filename')[0].traceback[0].filename)",
    "tracemalloc_top": "import tracemalloc\ntracemalloc.start()\ndata = [list(range(100)) for _ in range(100)]\nfor s in tracemalloc.take_snapshot().statistics('lineno')[:3]:\n    print(str(s).split(':')[0], str(s).split(':')[1])",
    "settrace": "import sys\nevents = []\ndef tr(frame, event, arg):\n    events.append((event, frame.f_code.co_name))\n    return tr\ndef f(x):\n    return x + 1\nsys.settrace(tr)\nf(1)\nsys.settrace(None)\nprint(events)",
    "settrace_module_level": "import sys\nseen = []\ndef tr(frame, event, arg):\n    seen.append((event, frame.f_code.co_name, frame.f_lineno))\n    return tr\nsys.settrace(tr)\nx = 1\ny = 2\nsys.settrace(None)\nprint(seen)",
    "setprofile": "import sys\ncalls = []\nsys.setprofile(lambda f, e, a: calls.append((e, f.f_code.co_name)))\nlen('abc')\nsys.setprofile(None)\nprint(calls)",
    "sys_monitoring": "import sys\nprint(sys.monitoring.get_tool(0), sys.monitoring.get_tool(1), sys.monitoring.get_tool(2), sys.monitoring.get_tool(5))",
    "frame_back": "import sys\nf = sys._getframe()\nprint(f.f_code.co_name, f.f_back is None, f.f_globals is globals())",
    "inspect_currentframe_back": "import inspect\nf = inspect.currentframe()\nprint(f.f_back)",
    "inspect_getsource_func": "import inspect\ndef sq(x):\n    '''square'''\n    return x * x\nprint(inspect.getsource(sq))\nprint(inspect.getsourcefile(sq), inspect.getmodule(sq).__name__, inspect.getdoc(sq))",
    "inspect_getsource_module": "import inspect, sys\nprint(inspect.getsource(sys.modules[__name__]))",
    "inspect_stack_len": "import inspect\nprint(len(inspect.stack()))\ndef f():\n    return [fi.function for fi in inspect.stack()]\nprint(f())",
    "traceback_extract_stack": "import traceback\nprint([f.name for f in traceback.extract_stack()])",
    "traceback_print_exc": "import traceback\ntry:\n    {}['k']\nexcept KeyError:\n    traceback.print_exc()\n    print(traceback.format_exc())",
    "traceback_library": "import json\njson.loads('[1, 2')",
    "traceback_numpy": "import numpy as np\nnp.zeros((2, 3)) @ np.zeros((2, 3))",
    "traceback_pandas": "import pandas as pd\npd.DataFrame({'a': [1]})['b']",
    "traceback_sympy": "import sympy\nsympy.Matrix([[1, 2], [2, 4]]).inv()",
    "traceback_deep_lib": "import fractions\nfractions.Fraction(1, 0)",
    "traceback_caret": "def f(d):\n    return d['a']['b']['c']\nf({'a': {'b': None}})",
    "traceback_limit": "import sys\nsys.tracebacklimit = 1\ndef a(): b()\ndef b(): 1/0\na()",
    "sys_last_exc": "import sys\nprint(hasattr(sys, 'last_exc'), hasattr(sys, 'last_value'), hasattr(sys, 'last_type'))",
    "excepthook_custom": "import sys\ndef hook(t, v, tb):\n    print('hooked', t.__name__, v, file=sys.stderr)\nsys.excepthook = hook\nraise ValueError('x')",
    "excepthook_raises": "import sys\ndef hook(t, v, tb):\n    raise RuntimeError('hook broke')\nsys.excepthook = hook\n1 / 0",
    "excepthook_deleted": "import sys\ndel sys.excepthook\nraise ValueError('no hook')",
    "excepthook_prints_stdout": "import sys\nsys.excepthook = lambda t, v, tb: print('E:', v)\nprint('before')\nraise KeyError('k')",
    "stderr_none_then_raise": "import sys\nsys.stderr = None\nraise ValueError('x')",
    "stderr_closed_then_raise": "import sys\nsys.stderr.close()\nraise ValueError('x')",
    "stdout_replaced_stringio": "import sys, io\nsys.stdout = io.StringIO()\nprint('hidden')\nsys.__stdout__.write('visible\\n')",
    "stdout_reconfigure": "import sys\nsys.stdout.reconfigure(encoding='latin-1', errors='replace')\nprint('héllo ✓')",
    "stdout_textiowrapper_wrap": "import sys, io\nsys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding='utf-8')\nprint('wrapped ✓')",
    "stdout_fdopen": "import os, sys\nsys.stdout = os.fdopen(1, 'w', 1)\nprint('fdopen')",
    "stdout_detach": "import sys\nb = sys.stdout.detach()\nb.write(b'detached\\n')\nb.flush()",
    "print_surrogate": "print('\\udce9')",
    "print_surrogate_stderr": "import sys\nprint('\\udce9', file=sys.stderr)\nprint('after')",
    "sys_exit_variants_none": "import sys\nsys.exit(None)",
    "sys_exit_0": "import sys\nprint('x')\nsys.exit(0)",
    "sys_exit_256": "import sys\nsys.exit(256)",
    "sys_exit_neg": "import sys\nsys.exit(-1)",
    "sys_exit_huge": "import sys\nsys.exit(2**64)",
    "sys_exit_huge2": "import sys\nsys.exit(2**40 + 7)",
    "sys_exit_true": "import sys\nsys.exit(True)",
    "sys_exit_float": "import sys\nsys.exit(3.5)",
    "sys_exit_tuple": "raise SystemExit(1, 2)",
    "sys_exit_list": "import sys\nsys.exit([1, 2])",
    "sys_exit_str_empty": "import sys\nsys.exit('')",
    "sys_exit_bytes": "import sys\nsys.exit(b'bytes')",
    "sys_exit_obj_bad_str": "import sys\nclass E:\n    def __str__(self): raise ValueError('no str')\nsys.exit(E())",
    "systemexit_subclass": "class MyExit(SystemExit):\n    pass\nraise MyExit(4)",
    "exit_builtin": "print('a')\nexit(5)",
    "quit_builtin": "quit('bye')",
    "exit_repr": "print(repr(exit), repr(quit), str(exit))",
    "copyright_credits": "print(str(copyright)[:30], str(credits)[:30])\nlicense.MAXLINES = 2\nprint(repr(license)[:40])",
    "os_exit_unflushed": "import os, sys\nsys.stdout.write('buffered?')\nos._exit(0)",
    "os_exit_in_finally": "import os\ntry:\n    print('t')\nfinally:\n    os._exit(7)",
    "del_exception": "class A:\n    def __del__(self):\n        raise RuntimeError('in del')\na = A()\ndel a\nprint('after')",
    "del_exception_at_exit": "class A:\n    def __del__(self):\n        raise RuntimeError('in del at exit')\na = A()\nprint('main')",
    "del_at_exit_order": "class A:\n    def __init__(self, n): self.n = n\n    def __del__(self): print('del', self.n)\na = A(1)\nb = A(2)\nc = [A(3), A(4)]\nprint('main')",
    "del_cycle_at_exit": "class A:\n    def __del__(self): print('del cycle')\na = A(); a.me = a\nprint('main')",
    "del_uses_global_at_exit": "import math\nclass A:\n    def __del__(self):\n        print('del', math.pi)\na = A()\nprint('main')",
    "del_uses_module_func_at_exit": "import json\nclass A:\n    def __del__(self):\n        print(json.dumps([1]))\na = A()",
    "keyboard_interrupt_msg": "print('a', flush=True)\nraise KeyboardInterrupt('stop')",
    "keyboard_interrupt_handled": "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    print('handled')",
    "systemexit_in_thread": "import threading, sys\nt = threading.Thread(target=sys.exit, args=(3,))\nt.start(); t.join()\nprint('main alive')",
    "exception_in_thread": "import threading\ndef boom():\n    raise ValueError('in thread')\nt = threading.Thread(target=boom)\nt.start(); t.join()\nprint('main alive')",
    "thread_names": "import threading\nts = [threading.Thread(target=lambda: None) for _ in range(3)]\nprint([t.name for t in ts])\ndef work(): pass\nprint(threading.Thread(target=work).name, threading.current_thread(), threading.main_thread().name, threading.active_count())",
    "thread_repr": "import threading\nt = threading.Thread(target=print)\nprint(repr(t).split(' ')[0])",
    "threadpool_names": "from concurrent.futures import ThreadPoolExecutor\nimport threading\nwith ThreadPoolExecutor(2) as ex:\n    print(sorted(set(ex.map(lambda _: threading.current_thread().name, range(8)))))",
    "threadpool_results": "from concurrent.futures import ThreadPoolExecutor, as_completed\nwith ThreadPoolExecutor(4) as ex:\n    print(sorted(f.result() for f in as_completed([ex.submit(pow, 2, i) for i in range(10)])))",
    "thread_local": "import threading\nloc = threading.local()\nloc.x = 1\ndef f(): print(hasattr(loc, 'x'))\nt = threading.Thread(target=f); t.start(); t.join()",
    "thread_timer": "import threading\nthreading.Timer(0.1, lambda: print('timer')).start()\nprint('main')",
    "thread_daemon_print_at_exit": "import threading, time\ndef f():\n    time.sleep(0.2)\n    print('never?')\nthreading.Thread(target=f, daemon=True).start()\nprint('main')",
    "nondaemon_thread_exception_exit": "import threading, time\ndef f():\n    time.sleep(0.1)\n    print('thread end')\nthreading.Thread(target=f).start()\nraise SystemExit(3)",
    "mp_pool_fork": "import multiprocessing as mp\ndef sq(x): return x * x\nif __name__ == '__main__':\n    with mp.Pool(2) as p:\n        print(p.map(sq, range(10)))",
    "mp_process_names": "import multiprocessing as mp\ndef f(q): q.put((mp.current_process().name, mp.parent_process() is not None))\nif __name__ == '__main__':\n    q = mp.Queue()\n    ps = [mp.Process(target=f, args=(q,)) for _ in range(2)]\n    [p.start() for p in ps]; [p.join() for p in ps]\n    print(sorted(q.get() for _ in ps), mp.current_process().name, [p.exitcode for p in ps])",
    "mp_pool_worker_names": "import multiprocessing as mp\ndef name(_): return mp.current_process().name\nif __name__ == '__main__':\n    with mp.Pool(2) as p:\n        print(sorted(set(p.map(name, range(20)))))",
    "mp_spawn_process": "import multiprocessing as mp\ndef f(x): print('child', x, __name__, flush=True)\nif __name__ == '__main__':\n    mp.set_start_method('spawn')\n    p = mp.Process(target=f, args=(1,)); p.start(); p.join()\n    print('exit', p.exitcode)",
    "mp_forkserver": "import multiprocessing as mp\ndef f(x): return x * 3\nif __name__ == '__main__':\n    ctx = mp.get_context('forkserver')\n    with ctx.Pool(2) as p:\n        print(p.map(f, range(4)))",
    "mp_default_method": "import multiprocessing as mp\nprint(mp.get_start_method(allow_none=True), mp.get_start_method())",
    "ppe_default": "from concurrent.futures import ProcessPoolExecutor\ndef f(x): return x ** 2\nif __name__ == '__main__':\n    with ProcessPoolExecutor(2) as ex:\n        print(list(ex.map(f, range(6))))",
    "ppe_spawn": "from concurrent.futures import ProcessPoolExecutor\nimport multiprocessing as mp\ndef f(x): return x + 100\nif __name__ == '__main__':\n    with ProcessPoolExecutor(2, mp_context=mp.get_context('spawn')) as ex:\n        print(list(ex.map(f, range(3))))",
    "ppe_no_main_guard_spawn": "from concurrent.futures import ProcessPoolExecutor\nimport multiprocessing as mp\ndef f(x): return x\nwith ProcessPoolExecutor(1, mp_context=mp.get_context('spawn')) as ex:\n    print(list(ex.map(f, range(2))))",
    "mp_child_exception": "import multiprocessing as mp\ndef f(): raise ValueError('child fails')\nif __name__ == '__main__':\n    p = mp.Process(target=f); p.start(); p.join(); print('code', p.exitcode)",
    "mp_numpy_fork": "import multiprocessing as mp\nimport numpy as np\ndef f(i): return float(np.ones(3).sum() + i)\nif __name__ == '__main__':\n    with mp.Pool(2) as p:\n        print(p.map(f, range(4)))",
    "os_fork_numpy_warning": "import numpy as np, os\na = np.ones((400, 400)); a @ a\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('forked')",
    "os_fork_thread_warning": "import os, threading, time\nev = threading.Event()\nt = threading.Thread(target=ev.wait); t.start()\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nev.set(); t.join()\nprint('forked')",
    "os_fork_child_print_exit": "import os, sys\nprint('start')\npid = os.fork()\nif pid == 0:\n    print('child')\n    sys.exit(0)\nos.waitpid(pid, 0)\nprint('parent')",
    "os_fork_atexit_child": "import os, atexit\natexit.register(lambda: print('atexit pid-is-parent', os.getpid() == PARENT))\nPARENT = os.getpid()\nif os.fork() == 0:\n    raise SystemExit(0)\nos.wait()",
    "subprocess_python": "import subprocess, sys\nr = subprocess.run([sys.executable, '-c', 'import sys; print(sys.argv, sys.flags.dont_write_bytecode); print(\"err\", file=sys.stderr)'], capture_output=True, text=True)\nprint(r.returncode, r.stdout, r.stderr)",
    "subprocess_python3_path": "import subprocess\nprint(subprocess.check_output(['python3', '-c', 'import sys, os; print(sys.executable, os.getcwd(), len(sys.path))'], text=True))",
    "subprocess_inherit_stdout": "import subprocess, sys\nprint('parent first')\nsubprocess.run([sys.executable, '-c', 'print(\"child\")'])\nprint('parent last')",
    "subprocess_shell": "import subprocess\nprint(subprocess.run('echo $0; echo $HOME; ulimit -n; id -u; ps -o pid,ppid,comm 2>&1 | head -5', shell=True, capture_output=True, text=True).stdout)",
    "os_system": "import os\nprint('py', flush=True)\nprint(os.system('echo from shell; exit 3'))",
    "os_popen": "import os\nprint(os.popen('echo hi; pwd').read())",
    "subprocess_ps": "import subprocess\nr = subprocess.run(['ps', '-eo', 'pid,ppid,pgid,sid,user,args'], capture_output=True, text=True)\nprint(r.returncode, r.stdout, r.stderr)",
    "atexit_order": "import atexit\natexit.register(print, 'first registered')\natexit.register(print, 'second registered')\nprint('main')",
    "atexit_sys_exit": "import atexit, sys\natexit.register(sys.exit, 3)\nprint('main')",
    "atexit_raises": "import atexit\ndef f():\n    raise ValueError('in atexit')\natexit.register(f)\nprint('main')",
    "atexit_after_exception": "import atexit\natexit.register(lambda: print('cleanup'))\nraise RuntimeError('fail')",
    "atexit_unregister": "import atexit\ndef f(): print('f')\natexit.register(f)\natexit.unregister(f)\nprint(atexit._ncallbacks())",
    "atexit_ncallbacks": "import atexit\nprint(atexit._ncallbacks())",
    "atexit_ncallbacks_numpy": "import atexit, numpy\nprint(atexit._ncallbacks())",
    "atexit_ncallbacks_all": "import atexit, numpy, scipy, sympy, pandas\nprint(atexit._ncallbacks())",
    "weakref_finalize_order": "import atexit, weakref\natexit.register(print, 'atexit')\nclass A: pass\na = A()\nweakref.finalize(a, print, 'finalize')\nprint('main')",
    "weakref_finalize_order_numpy": "import atexit, weakref, numpy\natexit.register(print, 'atexit')\nclass A: pass\na = A()\nweakref.finalize(a, print, 'finalize')\nprint('main')",
    "weakref_finalize_order_all": "import atexit, weakref, numpy, scipy, sympy, pandas\natexit.register(print, 'atexit')\nclass A: pass\na = A()\nweakref.finalize(a, print, 'finalize')\nprint('main')",
    "logging_basic": "import logging\nlogging.basicConfig(level=logging.INFO, format='%(levelname)s:%(name)s:%(message)s')\nlogging.info('info msg')\nlogging.getLogger('app').warning('warn msg')\nprint(logging.root.handlers)",
    "logging_default": "import logging\nlogging.warning('default warning')\nlogging.info('not shown')\nprint(len(logging.root.handlers))",
    "logging_state": "import logging\nprint(logging.root.level, logging.root.handlers, logging.lastResort, logging.raiseExceptions)",
    "logging_state_all": "import logging, numpy, scipy, sympy, pandas\nprint(logging.root.level, logging.root.handlers, sorted(n for n in logging.Logger.manager.loggerDict if not n.startswith(('numpy', 'scipy', 'sympy', 'pandas', 'matplotlib'))))",
    "logging_exception": "import logging\ntry:\n    1/0\nexcept ZeroDivisionError:\n    logging.exception('failed')",
    "logging_record_fields": "import logging\nlogging.basicConfig(format='%(processName)s %(threadName)s %(module)s %(funcName)s %(lineno)d %(filename)s %(pathname)s %(name)s %(process)d')\nlogging.error('x')",
    "logging_taskname": "import logging, asyncio\nlogging.basicConfig(format='%(taskName)s %(message)s')\nasync def main(): logging.error('in task')\nasyncio.run(main())\nlogging.error('outside')",
    "warnings_default_main": "import warnings\nwarnings.warn('deprecated thing', DeprecationWarning)\nprint('after')",
    "warnings_deprecated_stdlib": "import datetime\nprint(datetime.datetime.utcnow().year > 2000)",
    "warnings_deprecated_in_lib": "import warnings\ndef lib():\n    warnings.warn('lib deprecation', DeprecationWarning, stacklevel=2)\nlib()\nprint('x')",
    "warnings_filters": "import warnings\nfor f in warnings.filters:\n    print(f[0], f[1].pattern if f[1] else None, f[2].__name__, f[3].pattern if f[3] else None, f[4])",
    "warnings_filters_numpy": "import warnings, numpy\nfor f in warnings.filters:\n    print(f[0], f[1].pattern if f[1] else None, f[2].__name__, f[3].pattern if f[3] else None, f[4])",
    "warnings_filters_scipy": "import warnings, scipy\nfor f in warnings.filters:\n    print(f[0], f[1].pattern if f[1] else None, f[2].__name__, f[3].pattern if f[3] else None, f[4])",
    "warnings_filters_sympy": "import warnings, sympy\nfor f in warnings.filters:\n    print(f[0], f[1].pattern if f[1] else None, f[2].__name__, f[3].pattern if f[3] else None, f[4])",
    "warnings_filters_pandas": "import warnings, pandas\nfor f in warnings.filters:\n    print(f[0], f[1].pattern if f[1] else None, f[2].__name__, f[3].pattern if f[3] else None, f[4])",
    "warnings_onceregistry": "import warnings\nprint(warnings.onceregistry, warnings.defaultaction, warnings._filters_version if hasattr(warnings, '_filters_version') else None)",
    "warnings_registries_scipy": "import sys, scipy, sympy, pandas, numpy\nprint(sorted(n for n, m in list(sys.modules.items()) if getattr(m, '__warningregistry__', None)))",
    "warnings_once_twice": "import warnings\nfor i in range(3):\n    warnings.warn('repeated')\nprint('done')",
    "warnings_user_in_loop": "import warnings\ndef f(i):\n    warnings.warn(f'msg {i % 2}', UserWarning)\nfor i in range(4):\n    f(i)",
    "warnings_runtime_numpy": "import numpy as np\nfor _ in range(3):\n    np.array([1.0]) / np.array([0.0])\nprint(np.mean([]))",
    "warnings_pandas_setting": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6]})\nsub = df[df.a > 1]\nsub['b'] = 0\nprint(sub)",
    "warnings_sympy_deprecation": "import sympy\nfrom sympy.utilities.exceptions import sympy_deprecation_warning\nx = sympy.Symbol('x')\nprint(sympy.Matrix([1]).is_zero)",
    "warnings_scipy_deprecated": "import scipy.integrate as si\nimport numpy as np\nprint(si.trapezoid([1, 2, 3]))\nprint(hasattr(si, 'simps'))",
    "warnings_catch": "import warnings\nwith warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n    warnings.warn('a'); warnings.warn('b', DeprecationWarning)\nprint([str(x.message) for x in w], [x.filename for x in w], [x.lineno for x in w])",
    "warnings_syntaxwarning": "x = '\\d'\nprint(x)\nprint(1 is 1)",
    "warnings_stacklevel_main": "import warnings\ndef f():\n    warnings.warn('level2', stacklevel=2)\nf()",
    "warnings_resource_warning_dev": "import warnings\nwarnings.simplefilter('always')\nopen('/etc/hostname')\nprint('x')",
    "signal_handler": "import signal, os\ndef h(s, f): print('got', signal.Signals(s).name, f.f_code.co_name)\nsignal.signal(signal.SIGUSR1, h)\nos.kill(os.getpid(), signal.SIGUSR1)\nprint('after')",
    "signal_alarm": "import signal, time\ndef h(s, f): raise TimeoutError('alarm')\nsignal.signal(signal.SIGALRM, h)\nsignal.alarm(1)\ntry:\n    while True: pass\nexcept TimeoutError as e:\n    print('timed out', e)",
    "signal_setitimer": "import signal\nsignal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError()))\nprint(signal.getitimer(signal.ITIMER_REAL), signal.getitimer(signal.ITIMER_VIRTUAL), signal.getitimer(signal.ITIMER_PROF))",
    "signal_sigterm_default": "import signal, os\nprint(signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGPIPE), signal.getsignal(signal.SIGCHLD), signal.getsignal(signal.SIGHUP))",
    "signal_pending": "import signal\nprint(signal.sigpending())",
    "signal_strsignal": "import signal\nprint(signal.strsignal(signal.SIGSEGV), signal.SIGRTMIN, signal.SIGRTMAX)",
    "signal_wakeup_fd": "import signal\nprint(signal.set_wakeup_fd(-1))",
    "sigpipe_broken": "import subprocess, sys\np = subprocess.Popen(['head', '-c', '1'], stdin=subprocess.PIPE)\ntry:\n    p.stdin.write(b'x' * 1000000); p.stdin.close()\nexcept BrokenPipeError:\n    print('broken pipe')\np.wait()\nprint('done')",
    "faulthandler_enable_segv": "import faulthandler, ctypes\nfaulthandler.enable()\nprint('x', flush=True)\nctypes.string_at(0)",
    "faulthandler_is_enabled": "import faulthandler\nprint(faulthandler.is_enabled())",
    "faulthandler_later": "import faulthandler, sys\nfaulthandler.dump_traceback_later(0.2, exit=True)\nimport time\ntime.sleep(2)",
    "segv_unflushed_stdout": "import ctypes, sys\nsys.stdout.write('before crash\\n')\nctypes.string_at(0)",
    "stack_overflow_c": "import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)",
    "deep_recursion_threads": "import sys, threading\nsys.setrecursionlimit(10**6)\nthreading.stack_size(512 * 1024 * 1024)\ndef f(n): return 0 if n == 0 else 1 + f(n - 1)\nres = []\nt = threading.Thread(target=lambda: res.append(f(200000)))\nt.start(); t.join()\nprint(res)",
    "recursion_limit_default": "import sys\ndef f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\nprint(sys.getrecursionlimit(), f(0))",
    "recursion_in_class_repr": "class A:\n    def __repr__(self): return repr(self)\nrepr(A())",
    "ctypes_printf": "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.printf(b'from C printf %d\\n', 42)\nprint('from python')",
    "ctypes_printf_flush": "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.printf(b'from C printf\\n')\nlibc.fflush(None)\nprint('from python')",
    "ctypes_puts_stderr": "import ctypes\nlibc = ctypes.CDLL(None)\nstderr = ctypes.c_void_p.in_dll(libc, 'stderr')\nlibc.fprintf(stderr, b'C stderr\\n')\nprint('py')",
    "ctypes_fopen_unclosed": "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.fopen.restype = ctypes.c_void_p\nf = libc.fopen(b'cfile.txt', b'w')\nlibc.fputs(b'written by C\\n', ctypes.c_void_p(f))\nprint('done')",
    "ctypes_setvbuf_state": "import ctypes\nlibc = ctypes.CDLL(None)\nstdout = ctypes.c_void_p.in_dll(libc, 'stdout')\nprint(libc.ftell(stdout))",
    "ctypes_misc": "import ctypes, ctypes.util\nprint(ctypes.util.find_library('c'), ctypes.sizeof(ctypes.c_long))\nprint(ctypes.CDLL(None).getpid() == __import__('os').getpid())",
    "asyncio_run": "import asyncio\nasync def work(i):\n    await asyncio.sleep(0.01 * i)\n    return i * 2\nasync def main():\n    return await asyncio.gather(*(work(i) for i in range(5)))\nprint(asyncio.run(main()))",
    "asyncio_task_names": "import asyncio\nasync def main():\n    t = asyncio.create_task(asyncio.sleep(0))\n    print(t.get_name())\n    await t\nasyncio.run(main())",
    "asyncio_get_event_loop": "import asyncio\nloop = asyncio.new_event_loop()\nprint(type(loop).__name__, loop.run_until_complete(asyncio.sleep(0, 'r')))\nloop.close()\nprint(type(asyncio.get_event_loop_policy()).__name__)",
    "asyncio_subprocess": "import asyncio\nasync def main():\n    p = await asyncio.create_subprocess_exec('echo', 'hi', stdout=asyncio.subprocess.PIPE)\n    out, _ = await p.communicate()\n    print(out, p.returncode)\nasyncio.run(main())",
    "asyncio_unawaited": "import asyncio\nasync def f(): pass\nf()\nprint('x')",
    "asyncio_debug_slow": "import asyncio, time\nasync def main():\n    time.sleep(0.2)\nasyncio.run(main(), debug=True)",
    "future_annotations": "from __future__ import annotations\ndef f(x: int) -> list[int]: return [x]\nprint(f.__annotations__)\nclass C:\n    y: 'Undefined'\nprint(C.__annotations__)",
    "future_annotations_dataclass": "from __future__ import annotations\nfrom dataclasses import dataclass, fields\nfrom typing import ClassVar\n@dataclass\nclass D:\n    a: int\n    b: ClassVar[int] = 3\nprint([f.name for f in fields(D)], D(1))",
    "future_flags_exec": "from __future__ import annotations\nexec('def g(x: int): pass\\nprint(g.__annotations__)')\nprint(compile('def h(y: int): pass', 's', 'exec').co_flags & 0x1000000)",
    "no_future_compile_flags": "code = compile('def h(y: int): pass', 's', 'exec')\nns = {}\nexec(code, ns)\nprint(ns['h'].__annotations__)",
    "annotations_global": "x: int = 1\ny: str\nprint(__annotations__)",
    "annotations_none": "print(__annotations__)",
    "exec_eval": "ns = {}\nexec('a = 1 + 2', ns)\nprint(ns['a'], eval('a * 2', ns), sorted(ns)[:2])\nexec('b = 5')\nprint(b)",
    "eval_builtins_in_ns": "ns = {}\nexec('pass', ns)\nprint(type(ns['__builtins__']).__name__)",
    "globals_builtins_type": "print(type(globals()['__builtins__']).__name__)\nimport json\nprint(type(json.__builtins__).__name__)",
    "help_func": "def f(x):\n    '''Doc of f.'''\nhelp(f)",
    "help_builtin": "help(len)",
    "help_module": "import colorsys\nhelp(colorsys)",
    "pydoc_render": "import pydoc\nprint(pydoc.render_doc(str.join, renderer=pydoc.plaintext)[:200])",
    "pydoc_getpager": "import pydoc\nprint(pydoc.getpager() if hasattr(pydoc, 'getpager') else pydoc.pager)",
    "doctest_testmod": "def add(a, b):\n    '''\n    >>> add(1, 2)\n    3\n    >>> add(2, 2)\n    5\n    '''\n    return a + b\nimport doctest\nprint(doctest.testmod())",
    "doctest_verbose": "def add(a, b):\n    '''\n    >>> add(1, 2)\n    3\n    '''\n    return a + b\nimport doctest\ndoctest.testmod(verbose=True)",
    "unittest_main": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self): self.assertEqual(1 + 1, 2)\n    def test_b(self): self.assertEqual(1 + 1, 3)\nunittest.main()",
    "unittest_main_noexit": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self): self.assertTrue(True)\nunittest.main(exit=False, verbosity=2)\nprint('after')",
    "unittest_argv": "import unittest, sys\nclass T(unittest.TestCase):\n    def test_x(self): pass\nprint(sys.argv)\nunittest.main(argv=['prog'], exit=False)",
    "pickle_main_class": "import pickle\nclass P:\n    def __init__(self): self.v = 3\nd = pickle.dumps(P())\nprint(d[:60])\nprint(pickle.loads(d).v)",
    "pickle_dataclass": "import pickle, copy\nfrom dataclasses import dataclass\n@dataclass\nclass D:\n    x: int\n    y: list\nd = D(1, [2])\nprint(pickle.loads(pickle.dumps(d)), copy.deepcopy(d), copy.copy(d))\nprint(pickle.dumps(d, protocol=0))",
    "pickle_function": "import pickle\ndef f(): return 1\nprint(pickle.dumps(f), pickle.loads(pickle.dumps(f))())",
    "pickle_lambda_fails": "import pickle\npickle.dumps(lambda: 1)",
    "pickle_numpy": "import pickle, numpy as np\nprint(pickle.dumps(np.arange(3))[:80])",
    "pickle_to_file": "import pickle\nclass K: pass\nwith open('obj.pkl', 'wb') as f:\n    pickle.dump({'k': 1, 'l': [1, 2]}, f)\nprint(open('obj.pkl', 'rb').read())",
    "copyreg_main": "import copyreg, copy\nclass C:\n    pass\ncopyreg.pickle(C, lambda c: (C, ()))\nprint(type(copy.deepcopy(C())).__name__, len(copyreg.dispatch_table) > 0)",
    "sys_modules_keys_main": "import sys\nprint('__main__' in sys.modules, sys.modules['__main__'].__name__)",
    "delete_modules_reimport_json": "import sys, json\ndel sys.modules['json']\nimport json as j2\nprint(j2 is json, j2.dumps([1]))",
    "delete_numpy_reimport": "import sys\nimport numpy\nfor m in [m for m in sys.modules if m == 'numpy' or m.startswith('numpy.')]:\n    del sys.modules[m]\nimport numpy as np2\nprint(np2.arange(3))",
    "delete_all_modules": "import sys\nfor m in list(sys.modules):\n    if m not in ('sys', 'builtins', '__main__'):\n        del sys.modules[m]\nimport collections\nprint(collections.Counter('aab'))",
    "reload_numpy": "import importlib, numpy\nimportlib.reload(numpy)\nprint(numpy.arange(3))",
    "reload_math": "import importlib, math\nmath.pi = 3\nimportlib.reload(math)\nprint(math.pi)",
    "reload_json": "import importlib, json\njson.dumps = None\nimportlib.reload(json)\nprint(json.dumps({'a': 1}))",
    "monkeypatch_numpy": "import numpy as np\nnp.sum = lambda *a, **k: 'patched'\nprint(np.sum([1, 2]), np.array([1, 2]).sum())",
    "monkeypatch_random": "import random\nrandom.random = lambda: 0.5\nprint(random.random(), random.choice([1, 2, 3]) in (1, 2, 3))",
    "monkeypatch_builtins_input": "import builtins\nbuiltins.input = lambda *a: '42'\nprint(int(input()) + 1)",
    "import_this": "import this",
    "import_antigravity_like": "import __hello__\n__hello__.main()",
    "import_readline": "import readline\nprint('readline ok')",
    "import_tkinter": "try:\n    import tkinter\n    print('tk')\nexcept ImportError as e:\n    print('no tk', e)",
    "import_missing": "import not_a_module_xyz",
    "import_missing_from": "from collections import NotAThing",
    "import_star": "from math import *\nprint(sqrt(16), 'pi' in dir())",
    "import_private_cache": "import functools\nprint(functools._lru_cache_wrapper is not None)",
    "importlib_metadata": "import importlib.metadata as md\nprint(md.version('numpy'), md.version('pandas') is not None)",
    "pkgutil_walk": "import pkgutil\nprint(sorted(m.name for m in pkgutil.iter_modules() if m.name in ('numpy', 'sympy', 'json', 'main')))",
    "sys_modules_count_stdlib_only": "import sys\nprint('numpy' in sys.modules, 'sympy' in sys.modules)",
    "encoding_utf8_source": "s = 'naïve café ✓ 你好 🎉'\nprint(s, len(s), s.encode())",
    "encoding_latin1_decl": "# -*- coding: latin-1 -*-\ns = 'é'\nprint(len(s), repr(s))",
    "encoding_bom": "\ufeffprint('bom')\nimport sys\nprint(open(__file__, 'rb').read()[:3])",
    "encoding_bad_decl": "# -*- coding: not-a-codec -*-\nprint(1)",
    "null_byte_source": "print(1)\x00",
    "null_byte_in_string": "print('a\x00b')",
    "tabs_mixed": "if True:\n\tprint('tab')\n        print('spaces')",
    "indentation_error": "def f():\nreturn 1",
    "unexpected_indent": "x = 1\n    y = 2",
    "syntax_error_deep": "x = (1 +\n\n\n",
    "syntax_error_fstring": "print(f'{1 +}')",
    "syntax_error_unicode": "print('ok')\nx = 1 ✓ 2",
    "syntax_error_line_continuation": "x = 1 + \\ \n2",
    "syntax_error_walrus": "(a, b) := (1, 2)",
    "syntax_error_invalid_escape_bytes": "print(b'\\xZZ')",
    "syntax_error_long_line": "x = " + " + ".join(["1"] * 200) + " +",
    "syntax_error_return_outside": "return 5",
    "syntax_error_await_outside": "await f()",
    "syntax_error_nonlocal": "def f():\n    nonlocal x",
    "syntax_error_too_many_nested": "x = " + "(" * 250 + ")" * 250,
    "syntax_error_nested_blocks": "\n".join("    " * i + "if True:" for i in range(101)) + "\n" + "    " * 101 + "pass",
    "syntaxwarning_is_literal": "x = 5\nif x is 5:\n    print('five')",
    "crlf_source": "print('a')\r\nprint('b')\r\n",
    "cr_only_source": "print('a')\rprint('b')\r",
    "empty_source": "",
    "only_comment": "# nothing",
    "form_feed_source": "\x0cprint('ff')",
    "shebang_source": "#!/usr/bin/env python3\nprint('shebang')",
    "very_long_line": "print(len('" + "x" * 100000 + "'))",
    "docstring_module": "'''Module doc.'''\nprint(__doc__)",
    "dunder_doc_none": "print(__doc__)",
    "name_main_guard": "def main():\n    print('main ran')\nif __name__ == '__main__':\n    main()",
    "qualname_module": "class A:\n    class B:\n        def m(self): pass\nprint(A.B.m.__qualname__, A.__module__, A.B.m.__module__)",
    "func_code_filename": "def f(): pass\nprint(f.__code__.co_filename, f.__code__.co_firstlineno, f.__globals__ is globals())",
    "code_object_flags": "import sys\nprint(sys._getframe().f_code.co_flags, sys._getframe().f_code.co_name, sys._getframe().f_code.co_filename)",
    "lineno_from_frame": "import sys\nprint(sys._getframe().f_lineno)",
    "random_reseed_same": "import random\nrandom.seed(42)\nprint(random.random(), random.randint(1, 100), random.sample(range(100), 5))",
    "random_getstate_version": "import random\nprint(random.getstate()[0], len(random.getstate()[1]))",
    "random_instance_module": "import random\nprint(type(random._inst).__name__, random.random is random._inst.random)",
    "secrets_tokens": "import secrets\nprint(len(secrets.token_hex(16)), len(secrets.token_bytes(8)))",
    "uuid_version": "import uuid\nprint(uuid.uuid4().version, uuid.uuid1().version)",
    "hash_numbers": "print(hash(1), hash(1.5), hash((1, 2)), hash(None) != 0, hash(-1))",
    "id_ordering": "class A: pass\nprint(sorted([A() for _ in range(3)], key=id) is not None)",
    "time_process_time": "import time, resource\nprint(time.process_time() < 1.0, resource.getrusage(resource.RUSAGE_SELF).ru_utime < 1.0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)",
    "os_times": "import os\nt = os.times()\nprint(t.children_user, t.children_system, t.user < 1, t.elapsed > 0)",
    "rusage_minflt": "import resource\nr = resource.getrusage(resource.RUSAGE_SELF)\nprint(r.ru_nvcsw >= 0, r.ru_inblock, r.ru_oublock)",
    "rlimit_as_limit": "import resource\nresource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\nx = bytearray(50 << 20)\nprint('ok', len(x))",
    "rlimit_as_limit_numpy": "import resource, numpy as np\nresource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\nx = np.ones(5 << 20)\nprint('ok', x.sum())",
    "rlimit_as_limit_sympy": "import resource, sympy\nresource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\nprint(sympy.factorint(123456789))",
    "rlimit_data_limit": "import resource\nresource.setrlimit(resource.RLIMIT_DATA, (256 << 20, 256 << 20))\nx = [0] * (10 << 20)\nprint('ok', len(x))",
    "rlimit_data_limit_numpy": "import resource, numpy\nresource.setrlimit(resource.RLIMIT_DATA, (256 << 20, 256 << 20))\nx = [0] * (10 << 20)\nprint('ok', len(x))",
    "reliability_guard": """
import faulthandler, resource, platform, builtins, os, shutil, subprocess
def reliability_guard(maximum_memory_bytes=None):
    if maximum_memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (maximum_memory_bytes, maximum_memory_bytes))
        resource.setrlimit(resource.RLIMIT_DATA, (maximum_memory_bytes, maximum_memory_bytes))
        if not platform.uname().system == 'Darwin':
            resource.setrlimit(resource.RLIMIT_STACK, (maximum_memory_bytes, maximum_memory_bytes))
    faulthandler.disable()
    builtins.exit = None
    builtins.quit = None
    os.environ['OMP_NUM_THREADS'] = '1'
    os.kill = None
    os.system = None
    os.putenv = None
    os.remove = None
    shutil.rmtree = None
    subprocess.Popen = None
reliability_guard(256 * 1024 * 1024)
def solve(n):
    return sum(i * i for i in range(n))
assert solve(10) == 285
print('passed')
""",
    "reliability_guard_numpy": """
import resource, numpy as np
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
print(np.arange(10).sum())
""",
    "vm_size_small": "for l in open('/proc/self/status'):\n    if l.startswith('VmSize'):\n        print(int(l.split()[1]) < 400000)",
    "mem_available": "import os\nprint(os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') > 0)",
    "open_fds_after_files": "import os\nf = open('x.txt', 'w')\nprint(f.fileno(), os.open('/dev/null', os.O_RDONLY))",
    "fd_numbers": "import os, socket\nr, w = os.pipe()\ns = socket.socket()\nprint(r, w, s.fileno())",
    "dev_listing": "import os\nprint(sorted(os.listdir('/dev')))",
    "dev_shm_tmp": "import os\nprint(sorted(os.listdir('/dev/shm')), sorted(os.listdir('/tmp')))",
    "shm_multiprocessing": "from multiprocessing import shared_memory\nshm = shared_memory.SharedMemory(create=True, size=10)\nshm.buf[0] = 7\nprint(shm.buf[0])\nshm.close(); shm.unlink()",
    "mp_lock_semaphore": "import multiprocessing as mp\nl = mp.Lock()\nwith l:\n    print('locked')\nprint(mp.Value('i', 3).value)",
    "mp_manager": "import multiprocessing as mp\nif __name__ == '__main__':\n    with mp.Manager() as m:\n        d = m.dict(); d['a'] = 1\n        print(dict(d))",
    "socket_loopback_server": "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\nprint(s.getsockname()[0])",
    "socket_dns": "import socket\ntry:\n    print(socket.gethostbyname('example.com'))\nexcept OSError as e:\n    print('dns fails', type(e).__name__, e.errno)",
    "socket_getfqdn": "import socket\nprint(socket.getfqdn() == socket.gethostname())",
    "urllib_blocked": "import urllib.request\ntry:\n    urllib.request.urlopen('http://example.com', timeout=3)\nexcept Exception as e:\n    print(type(e).__name__)",
    "ssl_default": "import ssl\nprint(ssl.OPENSSL_VERSION[:7], ssl.create_default_context().verify_mode)",
    "sqlite_use": "import sqlite3\nc = sqlite3.connect(':memory:')\nc.execute('create table t(x)')\nc.executemany('insert into t values (?)', [(i,) for i in range(5)])\nprint(c.execute('select sum(x) from t').fetchone(), sqlite3.sqlite_version)",
    "sqlite_file": "import sqlite3\nc = sqlite3.connect('db.sqlite')\nc.execute('create table t(x)')\nc.execute('insert into t values (1)')\nc.commit()\nprint(c.execute('select * from t').fetchall())",
    "csv_module": "import csv, io\nw = csv.writer(open('o.csv', 'w', newline=''))\nw.writerows([[1, 'a,b'], [2, 'c']])\nprint(open('o.csv').read())",
    "zipfile_use": "import zipfile\nwith zipfile.ZipFile('a.zip', 'w') as z:\n    z.writestr('x.txt', 'hello')\nprint(zipfile.ZipFile('a.zip').read('x.txt'))",
    "shutil_which": "import shutil\nprint(shutil.which('python3'), shutil.which('ls'), shutil.get_terminal_size())",
    "os_get_terminal_size": "import os\ntry:\n    print(os.get_terminal_size())\nexcept OSError as e:\n    print('no tty', e.errno)",
    "curses_setupterm": "import os\nprint(os.environ.get('TERM'), os.environ.get('COLUMNS'), os.environ.get('LINES'))",
    "breakpoint_cont": "x = 1\nbreakpoint()\nprint('after bp', x)",
    "pdb_run": "import pdb\ndef f():\n    return 3\nprint(pdb.runcall(f))",
    "code_interact": "import code\ncode.interact(local={'a': 5}, banner='B', exitmsg='E')",
    "timeit_use": "import timeit\nt = timeit.timeit('sum(range(100))', number=1000)\nprint(t > 0)\nprint(timeit.Timer('x=1').autorange()[0] > 0)",
    "cprofile_run": "import cProfile, pstats, io\npr = cProfile.Profile()\npr.enable()\nsum(i for i in range(1000))\npr.disable()\ns = io.StringIO()\npstats.Stats(pr, stream=s).sort_stats('calls').print_stats(3)\nprint('function calls' in s.getvalue())",
    "cprofile_run_str": "import cProfile\ncProfile.run('sum(range(10))', sort='ncalls')",
    "dis_module": "import dis\ndef f(x): return x + 1\ndis.dis(f)",
    "ast_unparse": "import ast\nt = ast.parse('x = 1 + 2 * y')\nprint(ast.dump(t.body[0].value, indent=1))\nprint(ast.unparse(t))",
    "tokenize_own_file": "import tokenize\nwith open(__file__, 'rb') as f:\n    print(len(list(tokenize.tokenize(f.readline))))",
    "linecache_own": "import linecache\nprint(repr(linecache.getline(__file__, 1)), len(linecache.cache))",
    "linecache_cache_keys": "import linecache\nprint(sorted(linecache.cache))",
    "functools_cache_info": "import functools, re\nprint(re._cache if hasattr(re, '_cache') else None)\nprint(len(re._cache) if hasattr(re, '_cache') else None)",
    "re_cache_size": "import re\nprint(len(getattr(re, '_cache', {})), len(getattr(re, '_cache2', {})))",
    "typing_cache": "import typing\nprint(len(typing._caches) if hasattr(typing, '_caches') else None)",
    "abc_registry": "import collections.abc, numbers\nprint(issubclass(int, numbers.Integral), isinstance([], collections.abc.Sequence))",
    "numbers_registered_numpy": "import numbers\nprint(issubclass(float, numbers.Real))\ntry:\n    import numpy as np\n    print(isinstance(np.float64(1), numbers.Real))\nexcept ImportError:\n    pass",
    "decimal_after_sympy": "import decimal\nprint(decimal.getcontext().prec, decimal.getcontext().rounding, decimal.getcontext().traps)",
    "float_format_globals": "print(format(1e16, ''), format(123456789.123456789, 'g'), '%.17g' % 0.1)",
    "sys_float_repr": "import sys\nprint(sys.float_repr_style, sys.float_info.dig, sys.hash_info.algorithm)",
    "int_max_str_digits_env": "import sys\nprint(sys.flags.int_max_str_digits, sys.get_int_max_str_digits())",
    "contextvars_copy": "import contextvars\nctx = contextvars.copy_context()\nprint(len(ctx), sorted(v.name for v in ctx))",
    "contextvars_numpy": "import contextvars, numpy\nprint(sorted(v.name for v in contextvars.copy_context()))",
    "contextvars_all": "import contextvars, numpy, scipy, sympy, pandas\nprint(sorted(v.name for v in contextvars.copy_context()))",
    "open_file_default_encoding": "f = open('t.txt', 'w')\nprint(f.encoding, f.errors, f.newlines, f.line_buffering)\nf.close()",
    "io_default_buffer": "import io\nprint(io.DEFAULT_BUFFER_SIZE, io.text_encoding(None))",
    "os_umask": "import os\nm = os.umask(0)\nos.umask(m)\nprint(oct(m))\nopen('f', 'w').close()\nprint(oct(os.stat('f').st_mode))",
    "os_nice_prio": "import os\nprint(os.getpriority(os.PRIO_PROCESS, 0), os.nice(0))",
    "os_sched": "import os\nprint(os.sched_getscheduler(0), os.sched_getparam(0))",
    "os_getcwd_after_chdir": "import os\nos.chdir('/tmp')\nprint(os.getcwd())\nopen('t', 'w').write('x')\nprint(os.listdir('/tmp'))",
    "os_listdir_root": "import os\nprint(sorted(os.listdir('/')))",
    "os_statvfs_tmp": "import os\nv = os.statvfs('/tmp')\nprint(v.f_bsize, v.f_blocks * v.f_frsize // (1 << 20))",
    "os_statvfs_sandbox": "import os\nv = os.statvfs('.')\nprint(v.f_bsize, v.f_blocks * v.f_frsize // (1 << 20), v.f_flag)",
    "mountinfo_sandbox": "for l in open('/proc/self/mounts'):\n    f = l.split()\n    if f[1] in ('/', '/sandbox', '/tmp', '/proc', '/dev/shm', '/dev'):\n        print(f[1], f[2], ','.join(sorted(f[3].split(','))))",
    "write_big_file": "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (50 << 20))\nimport os\nprint(os.path.getsize('big.bin'))",
    "write_tmp_big": "with open('/tmp/big.bin', 'wb') as f:\n    f.write(b'0' * (50 << 20))\nprint('ok')",
    "big_output": "for i in range(200000):\n    print(i)",
    "big_output_one_write": "import sys\nsys.stdout.write('y' * (3 << 20))",
    "big_stderr": "import sys\nfor i in range(100000):\n    print(i, file=sys.stderr)",
    "interleave_os_write": "import os, sys\nprint('print 1')\nos.write(1, b'os.write\\n')\nsys.stdout.write('write 2\\n')\nos.write(2, b'err os.write\\n')\nprint('print 3', file=sys.stderr)",
    "print_no_flush_then_crash": "print('before crash', end='', flush=False)\nraise SystemError('crash')",
    "print_no_flush_then_abort": "import os\nprint('before abort', flush=False)\nos.abort()",
    "print_end_no_newline": "print('no newline at end', end='')",
    "sys_stdout_errors_print": "import sys\nprint(sys.stdout.errors, sys.stderr.errors, sys.stdin.errors)",
    "isatty_all": "import sys\nprint(sys.stdin.isatty(), sys.stdout.isatty(), sys.stderr.isatty())",
    "stdout_repr": "import sys\nprint(repr(sys.stdout), repr(sys.stderr), repr(sys.stdin))",
    "stdout_buffer_repr": "import sys\nprint(repr(sys.stdout.buffer), repr(sys.stdin.buffer), repr(sys.stdout.buffer.raw))",
    "stdout_is_dunder": "import sys\nprint(sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__, sys.stdin is sys.__stdin__)",
    "stdin_buffer_peek": "import sys\nprint(sys.stdin.buffer.peek(3)[:3])\nprint(sys.stdin.read())",
    "stdin_tell": "import sys\ntry:\n    print(sys.stdin.buffer.tell())\nexcept OSError as e:\n    print('tell fails', e.errno)",
    "stdin_open0": "import sys\nprint(open(0).read().split(), open(0).closed)",
    "stdin_fileinput": "import fileinput\nfor line in fileinput.input():\n    print('>', line, end='')",
    "stdin_closed_then_input": "import sys\nsys.stdin.close()\ntry:\n    input()\nexcept ValueError as e:\n    print('ValueError', e)",
    "stdin_readline_size": "import sys\nprint(repr(sys.stdin.readline(3)), repr(sys.stdin.readline()))",
    "stdin_binary_read_all": "import sys\nb = sys.stdin.buffer.read()\nprint(len(b), b[:20])",
    "stdin_large": "import sys\nd = sys.stdin.read()\nprint(len(d), d.count('\\n'))",
    "getpass_prompt": "import getpass, warnings\nprint(getpass.getuser())",
    "os_kill_pgrp": "import os, signal\nsignal.signal(signal.SIGUSR2, lambda *a: print('got usr2'))\nos.killpg(os.getpgrp(), signal.SIGUSR2)\nprint('after')",
    "os_kill_zero": "import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('got usr1'))\nos.kill(0, signal.SIGUSR1)\nprint('after')",
    "kill_parent": "import os, signal\ntry:\n    os.kill(os.getppid(), 0)\n    print('parent alive')\nexcept OSError as e:\n    print('err', e.errno)",
    "kill_pid1": "import os, signal\ntry:\n    os.kill(1, 0)\n    print('pid1 reachable')\nexcept OSError as e:\n    print('err', e.errno)",
    "pid1_cmdline": "print(repr(open('/proc/1/comm').read()))",
    "setsid_fails": "import os\ntry:\n    os.setsid()\n    print('setsid ok')\nexcept OSError as e:\n    print('setsid', e.errno)",
    "setpgid": "import os\ntry:\n    os.setpgid(0, 0)\n    print('setpgid ok', os.getpgrp())\nexcept OSError as e:\n    print('setpgid', e.errno)",
    "prctl_name": "import ctypes\nlibc = ctypes.CDLL(None)\nbuf = ctypes.create_string_buffer(16)\nlibc.prctl(16, buf, 0, 0, 0)\nprint(buf.value)",
    "prctl_dumpable_misc": "import ctypes\nlibc = ctypes.CDLL(None)\nprint([libc.prctl(op, 0, 0, 0, 0) for op in (1 + 1, 3, 21, 39, 40, 42)])",
    "proc_self_exe": "import os\nprint(os.readlink('/proc/self/exe'), os.path.realpath('/proc/self/cwd'))",
    "proc_self_maps_count": "print(sum(1 for _ in open('/proc/self/maps')) < 5000)",
    "sys_getallocatedblocks": "import sys\nprint(sys.getallocatedblocks() > 0)",
    "refcount_main_obj": "import sys\nx = object()\nprint(sys.getrefcount(x))\nclass A: pass\nprint(sys.getrefcount(A()), sys.getrefcount([]))",
    "refcount_module_attr": "import sys, collections\nprint(sys.getrefcount(collections.Counter) > 3)",
    "weakref_to_main": "import weakref, gc\nclass A: pass\na = A()\nr = weakref.ref(a)\ndel a\nprint(r() is None)",
    "sizeof_objects": "import sys\nprint(sys.getsizeof([]), sys.getsizeof({}), sys.getsizeof('a'), sys.getsizeof(10**100), sys.getsizeof(1.0))",
    "str_intern": "import sys\na = ''.join(['hel', 'lo_world'])\nprint(a is 'hello_world', sys.intern(a) is 'hello_world')",
    "small_str_identity": "a = 'x' * 3\nb = 'xxx'\nprint(a is b)",
    "code_consts_identity": "def f(): return 'ab'\ndef g(): return 'ab'\nprint(f() is g())",
    "float_identity": "a = 1.5\nb = 1.5\nprint(a is b, 257 is 257)",
    "gc_freeze_count": "import gc\nprint(gc.get_freeze_count() > 0)",
    "gc_get_objects_len": "import gc\nprint(len(gc.get_objects()) > 0)",
    "gc_get_count": "import gc\nprint(gc.get_count())",
    "gc_stats": "import gc\nprint([s['collections'] for s in gc.get_stats()])",
    "sys_audit_hook": "import sys\nseen = []\nsys.addaudithook(lambda e, a: seen.append(e) if e == 'open' else None)\nopen('/etc/hostname').close()\nprint(seen)",
    "sys_audit_hooks_existing": "import sys\nev = []\nsys.addaudithook(lambda e, a: ev.append(e))\nimport colorsys\nprint('import' in ev)",
    "sys_stdlib_module_names": "import sys\nprint(len(sys.stdlib_module_names) > 100, 'json' in sys.builtin_module_names)",
    "email_policy": "from email.message import EmailMessage\nm = EmailMessage()\nm['Subject'] = 'hi'\nm.set_content('body')\nprint(m.as_string())",
    "hashlib_all": "import hashlib\nprint(sorted(hashlib.algorithms_available)[:5], hashlib.md5(b'x').hexdigest())",
    "zlib_version": "import zlib, bz2, lzma\nprint(zlib.ZLIB_RUNTIME_VERSION, len(zlib.compress(b'x' * 1000)))",
    "locale_format": "import locale\nlocale.setlocale(locale.LC_ALL, '')\nprint(locale.format_string('%.2f', 1234567.891, grouping=True), locale.getlocale())",
    "locale_c_utf8": "import locale\ntry:\n    print(locale.setlocale(locale.LC_ALL, 'C.UTF-8'))\nexcept locale.Error as e:\n    print('err', e)\ntry:\n    print(locale.setlocale(locale.LC_ALL, 'en_US.UTF-8'))\nexcept locale.Error as e:\n    print('err', e)",
    "time_strftime_locale": "import time\nprint(time.strftime('%c', time.gmtime(0)), time.strftime('%x %X %p', time.gmtime(0)))",
    "zoneinfo": "from zoneinfo import ZoneInfo, available_timezones\nfrom datetime import datetime\nprint(datetime(2024, 6, 1, tzinfo=ZoneInfo('Europe/Paris')).utcoffset(), len(available_timezones()) > 0)",
    "tz_env_change": "import os, time\nos.environ['TZ'] = 'Asia/Tokyo'\ntime.tzset()\nprint(time.tzname, time.localtime(0).tm_hour)",
    "datetime_now_tz": "from datetime import datetime\nprint(datetime.now().astimezone().tzname())",
    "pprint_use": "from pprint import pprint, pformat\npprint({'b': list(range(30)), 'a': {'x': 1}}, width=40)\nprint(pformat(set('abc')))",
    "repr_of_builtins_objects": "print(print, len, repr(__builtins__)[:25], int.__repr__)",
    "object_default_repr_main": "class A: pass\nprint(repr(A()).split(' at ')[0], A, type(A()))",
    "func_repr_main": "def f(): pass\nprint(repr(f).split(' at ')[0], f.__module__)",
    "module_repr_main_import": "import json, numpy\nprint(repr(json), repr(numpy).split(' from ')[0])",
    "module_file_paths": "import json, collections, numpy, os\nprint(json.__file__, collections.__file__, numpy.__file__, os.__file__)",
    "module_cached_paths": "import json, numpy\nprint(json.__cached__, numpy.__cached__, json.__spec__.origin, json.__spec__.cached)",
    "module_loader_types": "import json, math, sys, numpy.core._multiarray_umath as m\nprint(type(json.__loader__).__name__, math.__loader__, type(m.__loader__).__name__)",
    "numpy_import_time_attrs": "import numpy as np\nprint(np.__config__ is not None, hasattr(np, '_NoValue'), np.random.mtrand._rand.get_state()[0])",
    "numpy_random_global_type": "import numpy as np\nprint(type(np.random.mtrand._rand._bit_generator).__name__, np.random.get_state()[2:])",
    "numpy_random_bitgen_legacy_gauss": "import numpy as np\ns = np.random.get_state()\nprint(s[0], s[3], s[4])",
    "numpy_threads_env": "import os\nprint({k: v for k, v in os.environ.items() if 'THREAD' in k or 'OMP' in k or 'BLAS' in k})",
    "numpy_omp_env_set_late": "import os\nos.environ['OMP_NUM_THREADS'] = '1'\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\nimport numpy as np\nprint(np.ones((100, 100)).dot(np.ones(100)).sum())",
    "numpy_seterr_raise": "import numpy as np\nnp.seterr(all='raise')\ntry:\n    np.array([1.0]) / 0\nexcept FloatingPointError as e:\n    print('raised', e)",
    "numpy_errstate_thread": "import numpy as np, threading\nnp.seterr(all='ignore')\ndef f(): print(np.geterr())\nt = threading.Thread(target=f); t.start(); t.join()",
    "numpy_longdouble": "import numpy as np\nprint(np.finfo(np.longdouble).eps, np.finfo(np.float32))",
    "numpy_typecodes": "import numpy as np\nprint(np.dtype('int').name, np.intp, np.array([1]).dtype)",
    "numpy_pickle_roundtrip": "import numpy as np, pickle\na = np.arange(5.0)\nprint(pickle.loads(pickle.dumps(a)))",
    "numpy_save_load": "import numpy as np\nnp.save('a.npy', np.arange(6).reshape(2, 3))\nprint(np.load('a.npy'))\nnp.savetxt('a.txt', np.eye(2))\nprint(open('a.txt').read())",
    "numpy_memmap": "import numpy as np\nm = np.memmap('m.dat', dtype='float32', mode='w+', shape=(4,))\nm[:] = 1.5\nm.flush()\nprint(np.fromfile('m.dat', dtype='float32'))",
    "numpy_tempfile": "import numpy as np, tempfile\nwith tempfile.NamedTemporaryFile(suffix='.npy') as f:\n    np.save(f, np.ones(2))\n    f.seek(0)\n    print(np.load(f))",
    "numpy_fft": "import numpy as np\nprint(np.fft.fft(np.arange(8)).round(3))",
    "numpy_polyfit_warning": "import numpy as np\nprint(np.polyfit([1, 2, 3], [1, 2, 3], 5).round(3))",
    "numpy_deprecated_alias": "import numpy as np\ntry:\n    np.float\nexcept AttributeError as e:\n    print(str(e)[:60])",
    "numpy_rank_warning": "import numpy as np\nprint(np.linalg.lstsq(np.ones((3, 2)), np.ones(3), rcond=None)[2])",
    "numpy_nan_warnings": "import numpy as np\nprint(np.nanmean([np.nan, np.nan]))\nprint(np.nanmean([np.nan, np.nan]))",
    "numpy_overflow_warning": "import numpy as np\nprint(np.int8(127) + np.int8(1))",
    "numpy_str_bytes": "import numpy as np\nprint(np.array(['a', 'bc']), np.array([b'x']))",
    "numpy_datetime": "import numpy as np\nprint(np.datetime64('2024-01-01') + np.timedelta64(5, 'D'), np.datetime64('now', 'Y') >= np.datetime64('2024'))",
    "numpy_array_api_repr": "import numpy as np\nprint(repr(np.array([1.5, np.nan, np.inf])), repr(np.float32(1/3)), str(np.float64(2)))",
    "numpy_printoptions_legacy": "import numpy as np\nnp.set_printoptions(legacy='1.13')\nprint(np.array([0.1, 1.0]))",
    "numpy_masked": "import numpy as np\nm = np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])\nprint(m, m.mean())",
    "numpy_matrix_pending_dep": "import numpy as np\nprint(np.matrix([[1, 2], [3, 4]]) * 2)",
    "numpy_einsum_path": "import numpy as np\na = np.ones((4, 5)); b = np.ones((5, 6)); c = np.ones((6, 2))\nprint(np.einsum_path('ij,jk,kl->il', a, b, c, optimize='greedy')[1].splitlines()[:3])",
    "scipy_linalg_lapack": "import numpy as np, scipy.linalg as sl, hashlib\nrng = np.random.default_rng(5)\na = rng.random((150, 150))\nlu, piv = sl.lu_factor(a)\nprint(hashlib.sha256(lu.tobytes()).hexdigest())\nprint(sl.expm(np.eye(2)).round(6))",
    "scipy_fft_workers": "import scipy.fft as sf, numpy as np\nprint(sf.get_workers(), sf.fft(np.arange(4)).round(3))",
    "scipy_spatial": "from scipy.spatial import KDTree, ConvexHull\nimport numpy as np\npts = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [0.5, 0.5]])\nprint(sorted(ConvexHull(pts).vertices), KDTree(pts).query([0.4, 0.4]))",
    "scipy_optimize_warning": "from scipy.optimize import fsolve\nimport numpy as np\nprint(fsolve(lambda x: x**2 + 1, 1.0))",
    "scipy_curve_fit_warning": "from scipy.optimize import curve_fit\nimport numpy as np\nx = np.arange(3.0)\nprint(curve_fit(lambda x, a, b, c, d: a * x + b, x, 2 * x, maxfev=1000)[0].round(3))",
    "scipy_stats_random_unseeded_shape": "from scipy import stats\nprint(stats.norm.rvs(size=3).shape)",
    "scipy_io": "import scipy.io as sio, numpy as np\nsio.savemat('m.mat', {'a': np.arange(3)})\nprint(sio.loadmat('m.mat')['a'])",
    "sympy_printing_settings": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.printing.str.StrPrinter._default_settings['order'], x**2 + x)\nprint(sp.init_printing.__module__)",
    "sympy_global_params": "import sympy\nfrom sympy.core.parameters import global_parameters\nprint(global_parameters.evaluate, global_parameters.distribute, global_parameters.exp_is_pow)",
    "sympy_cache_size": "import sympy\nfrom sympy.core.cache import cached_property\nimport sympy.core.cache as c\nprint(c.USE_CACHE, c.SYMPY_CACHE_SIZE)",
    "sympy_symbol_registry": "import sympy as sp\nx1 = sp.Symbol('x')\nx2 = sp.Symbol('x')\nprint(x1 is x2, sp.Symbol('y', positive=True) == sp.Symbol('y'))",
    "sympy_numbered_symbols": "import sympy as sp\ng = sp.numbered_symbols('c')\nprint([next(g) for _ in range(3)])\nprint(sp.Wild('w'), sp.Dummy('d').dummy_index > 0)",
    "sympy_dummy_after_integrate": "import sympy as sp\nx = sp.symbols('x')\nr = sp.integrate(x**2, x)\nprint(r, sp.Dummy())",
    "sympy_dummy_after_sum": "import sympy as sp\nn, k = sp.symbols('n k', integer=True)\ns = sp.summation(k, (k, 1, n))\nprint(s, sp.Dummy())",
    "sympy_dummy_after_factor": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.factor(x**2 - 1), sp.Dummy())",
    "sympy_dummy_after_solve2": "import sympy as sp\nx = sp.symbols('x')\nsp.solve(x**2 - 5*x + 6, x)\nprint(sp.Dummy())",
    "sympy_dummy_after_limit": "import sympy as sp\nx = sp.symbols('x')\nsp.limit(sp.sin(x) / x, x, 0)\nprint(sp.Dummy())",
    "sympy_dummy_after_simplify": "import sympy as sp\nx = sp.symbols('x')\nsp.simplify(sp.sin(x)**2 + sp.cos(x)**2)\nprint(sp.Dummy())",
    "sympy_dummy_after_solve_system": "import sympy as sp\nx, y = sp.symbols('x y')\nsp.solve([x + y - 3, x - y - 1], [x, y])\nprint(sp.Dummy())",
    "sympy_lambdify_source": "import sympy as sp, inspect\nx = sp.symbols('x')\nf = sp.lambdify(x, sp.sin(x) + x**2)\nprint(inspect.getsource(f))\nprint(f(1.0))",
    "sympy_lambdify_filename": "import sympy as sp\nx = sp.symbols('x')\nf = sp.lambdify(x, x + 1)\nprint(f.__code__.co_filename)",
    "sympy_lambdify_count": "import sympy as sp\nx = sp.symbols('x')\nfs = [sp.lambdify(x, x + i) for i in range(3)]\nprint([f.__code__.co_filename for f in fs])",
    "sympy_srepr_assumptions": "import sympy as sp\nx = sp.Symbol('x', positive=True)\nprint(sp.srepr(x), x.assumptions0)",
    "sympy_solve_order": "import sympy as sp\nx, y, z = sp.symbols('x y z')\nprint(sp.solve([x**2 + y**2 - 1, x - y], [x, y]))\nprint(sp.solve(x**3 + y, [x, y], dict=True))",
    "sympy_free_symbols_order": "import sympy as sp\nprint(sp.sympify('a*b + c*d + e').free_symbols)",
    "sympy_set_printing": "import sympy as sp\nprint(sp.FiniteSet(3, 1, 2), sp.FiniteSet(*sp.symbols('c a b')), {sp.Symbol('q'), sp.Symbol('p')})",
    "sympy_parse_expr": "from sympy.parsing.sympy_parser import parse_expr, standard_transformations, implicit_multiplication_application\nprint(parse_expr('2x^2 + 3x', transformations=standard_transformations + (implicit_multiplication_application,)))",
    "sympy_randprime_range": "import sympy\np = sympy.randprime(10**6, 10**7)\nprint(sympy.isprime(p), 10**6 <= p < 10**7)",
    "sympy_random_matrix_shape": "import sympy\nprint(sympy.randMatrix(3, 3, 0, 9).shape)",
    "sympy_evalf_precision": "import sympy as sp\nprint(sp.pi.evalf(30), sp.E.evalf(), sp.sqrt(2).n(100))",
    "sympy_nsimplify": "import sympy as sp\nprint(sp.nsimplify(0.333333333333333), sp.nsimplify(1.4142135623730951, [sp.sqrt(2)]))",
    "sympy_ntheory_ops": "from sympy.ntheory import discrete_log, primitive_root, sqrt_mod, n_order\nprint(discrete_log(41, 15, 7), primitive_root(41), sqrt_mod(11, 43, all_roots=True), n_order(3, 7))",
    "sympy_factor_finite_field": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.factor_list(x**10 - 1, modulus=11))\nprint(sp.factor(x**8 + x**4 + 1, modulus=7))",
    "sympy_polys_groebner": "import sympy as sp\nx, y = sp.symbols('x y')\nprint(sp.groebner([x**2 + y, x*y - 1], x, y, order='lex'))",
    "sympy_use_cache_env": "import os\nprint(os.environ.get('SYMPY_USE_CACHE'), os.environ.get('SYMPY_GROUND_TYPES'))\nimport sympy\nfrom sympy.external.gmpy import GROUND_TYPES\nprint(GROUND_TYPES)",
    "sympy_ground_types_env_late": "import os\nos.environ['SYMPY_GROUND_TYPES'] = 'python'\nimport sympy\nfrom sympy.external.gmpy import GROUND_TYPES\nprint(GROUND_TYPES)",
    "env_set_before_import_numpy": "import os\nos.environ['NPY_PROMOTION_STATE'] = 'legacy'\nimport numpy as np\nprint(np.float32(3) + 3.0, type(np.float32(3) + 3.0).__name__)",
    "env_set_before_import_pandas": "import os\nos.environ['PANDAS_COPY_ON_WRITE'] = '1'\nimport pandas as pd\nprint(pd.options.mode.copy_on_write)",
    "pandas_options_set": "import pandas as pd\npd.set_option('display.max_columns', 3)\nprint(pd.DataFrame([[1, 2, 3, 4, 5]]))",
    "pandas_read_stdin": "import sys, pandas as pd\ndf = pd.read_csv(sys.stdin)\nprint(df.sum())",
    "pandas_to_markdown": "import pandas as pd\ntry:\n    print(pd.DataFrame({'a': [1]}).to_markdown())\nexcept ImportError as e:\n    print('no tabulate', str(e)[:40])",
    "pandas_excel": "import pandas as pd\ntry:\n    pd.DataFrame({'a': [1]}).to_excel('x.xlsx')\n    print('excel ok')\nexcept ImportError as e:\n    print('no excel', str(e)[:40])",
    "pandas_show_versions_head": "import pandas as pd, io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    pd.show_versions()\nprint([l for l in buf.getvalue().splitlines() if l.startswith(('python ', 'numpy ', 'pandas '))])",
    "pandas_copy_warning_chained": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\ndf['a'][0] = 10\nprint(df)",
    "pandas_applymap_deprecated": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\nprint(df.applymap(lambda v: v * 2))\nprint(df.applymap(lambda v: v * 3))",
    "pandas_groupby_apply_warning": "import pandas as pd\ndf = pd.DataFrame({'g': [1, 1, 2], 'v': [1, 2, 3]})\nprint(df.groupby('g').apply(lambda d: d.v.sum()))",
    "pandas_concat_empty_warning": "import pandas as pd\nprint(pd.concat([pd.DataFrame({'a': [1]}), pd.DataFrame({'a': [None]}).astype(object)]))",
    "pandas_future_warning_twice": "import pandas as pd\ns = pd.Series([1, 2])\nfor _ in range(2):\n    s.swapaxes(0, 0) if hasattr(s, 'swapaxes') else None\nprint('ok')",
    "datetime_utcnow_twice": "import datetime\nfor _ in range(2):\n    datetime.datetime.utcnow()\nprint('ok')",
    "warnings_in_imported_lib_once": "import warnings\nimport numpy as np\nfor _ in range(2):\n    np.array([1, 2]).tostring() if hasattr(np.ndarray, 'tostring') else np.trapz([1, 2])\nprint('ok')",
    "np_trapz_deprecated": "import numpy as np\nprint(np.trapz([1, 2, 3]))",
    "np_in1d_deprecated": "import numpy as np\nprint(np.in1d([1, 2], [2]))\nprint(np.row_stack([[1], [2]]).shape)",
    "np_product_deprecated": "import numpy as np\nprint(np.product([1, 2, 3]) if hasattr(np, 'product') else 'gone')",
    "scipy_misc_deprecated": "import scipy.integrate\nprint(scipy.integrate.cumulative_trapezoid([1, 2, 3]))",
    "excepthook_none": "import sys\nsys.excepthook = None\nraise ValueError('v')",
    "excepthook_sysexit": "import sys\ndef h(*a):\n    raise SystemExit(4)\nsys.excepthook = h\n1/0",
    "excepthook_print_exc": "import sys, traceback\nsys.excepthook = lambda *a: traceback.print_exc()\nraise ValueError('v')",
    "excepthook_exc_info": "import sys\nsys.excepthook = lambda *a: print('exc_info', sys.exc_info()[0])\nraise ValueError('v')",
    "last_exc_at_exit": "import sys, atexit\natexit.register(lambda: print(hasattr(sys, 'last_exc'), getattr(sys, 'last_value', None)))\nraise ValueError('v')",
    "file_at_exit": "import atexit\natexit.register(lambda: print('__file__' in globals(), '__cached__' in globals()))\nprint('x')",
    "file_at_exit_raise": "import atexit\natexit.register(lambda: print('__file__' in globals()))\n1/0",
    "file_at_exit_sysexit": "import atexit, sys\natexit.register(lambda: print('__file__' in globals()))\nsys.exit(2)",
    "file_in_del_at_exit": "import os\nclass A:\n    def __del__(self):\n        print(os.path.basename(__file__))\na = A()",
    "stdout_detach_rewrap": "import sys, io\nsys.stdout = io.TextIOWrapper(sys.stdout.detach(), encoding='utf-8')\nprint('rewrapped ✓')",
    "stdout_detach_rewrap_buffered": "import sys, io\nsys.stdout = io.TextIOWrapper(sys.stdout.detach(), encoding='utf-8', line_buffering=False)\nprint('rewrapped')\nclass A:\n    def __del__(self): print('del at exit')\na = A()",
    "stdout_closed_at_exit": "import sys\nprint('a')\nsys.stdout.close()",
    "sys_exit_neg_huge": "import sys\nsys.exit(-2**63 - 1)",
    "sys_exit_long_max": "import sys\nsys.exit(2**63 - 1)",
    "sys_exit_stderr_none": "import sys\nsys.stderr = None\nsys.exit('msg')",
    "unicode_escape_error": "print('\\N{NOTANAME}')",
    "null_byte_third_line": "x = 1\ny = 2\x00\nprint(x)",
    "unraisablehook_fails": "import sys\nsys.unraisablehook = lambda a: print('UH', a.err_msg, type(a.exc_value).__name__, a.exc_traceback, a.object)\nsys.stdout.detach()",
    "unraisablehook_custom": "import sys\nsys.unraisablehook = lambda a: sys.stderr.write(f'UH {a.err_msg} {type(a.exc_value).__name__} {a.exc_traceback} {a.object}\\n')\nsys.stdout.detach()",
    "sympy_rng_between_runs": "import sympy\nfrom sympy.core.random import rng\nprint(len(str(sympy.randprime(10**8, 10**9))), rng.random() < 1)",
    "env_tz_before_time": "import os\nos.environ['TZ'] = 'UTC-05'\nimport time\nprint(time.tzname, time.localtime(0).tm_hour)",
    "env_pandas_cow_before_import": "import os\nos.environ['PANDAS_COPY_ON_WRITE'] = '1'\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ns = df['a']\ns[0] = 100\nprint(df.a.tolist(), pd.options.mode.copy_on_write)",
    "env_omp_threads_numpy": "import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\nimport numpy as np\na = np.ones((500, 500))\nb = a @ a\nprint(len(os.listdir('/proc/self/task')))",
    "sympy_deprecated_call": "import sympy\nfrom sympy import Matrix\nm = Matrix([[1, 2], [3, 4]])\nprint(m.dot(Matrix([1, 1])) if hasattr(m, 'dot') else None)",
}
for _name, _code in EDGE.items():
    body = {"run_timeout": 20}
    if _name in ("input_with_stdin", "stdin_select", "stdin_fstat", "stdin_fcntl",
                 "stdin_buffer_peek", "stdin_tell", "stdin_open0", "stdin_fileinput",
                 "stdin_readline_size", "stdin_binary_read_all", "breakpoint_cont", "code_interact"):
        body["stdin"] = {"breakpoint_cont": "p x\nc\n", "code_interact": "print(a * 2)\n"}.get(
            _name, "hello there\nsecond line\n")
    if _name == "stdin_large":
        body["stdin"] = "0123456789" * 100000 + "\n"
    if _name == "pandas_read_stdin":
        body["stdin"] = "a,b\n1,2\n3,4\n"
    if _name in ("sent_files_stat", "write_into_sent_dir", "relative_file_read", "cwd_listing",
                 "import_sent_module", "import_sent_package"):
        body["files"] = {"data/in.txt": b64("some text"), "utils.py": b64("def double(x):\n    return 2 * x\n"),
                         "pkg/__init__.py": b64(""), "pkg/sub.py": b64("X = 'sub'\n")}
    if _name in ("write_into_sent_dir",):
        body["fetch_files"] = ["data/in.txt", "data/new.txt"]
    if _name in ("ctypes_fopen_unclosed",):
        body["fetch_files"] = ["cfile.txt"]
    if _name in ("sqlite_file", "pickle_to_file", "numpy_save_load", "scipy_io", "zipfile_use"):
        body["fetch_files"] = {"sqlite_file": ["db.sqlite"], "pickle_to_file": ["obj.pkl"],
                               "numpy_save_load": ["a.npy", "a.txt"], "scipy_io": ["m.mat"],
                               "zipfile_use": ["a.zip"]}[_name]
    P(f"edge_{_name}", _code, **body)

# Programs sent as raw bytes: main.py itself among the files (non-UTF-8 source and the like).
RAW = {
    "non_utf8_source": b"print('\xe9')\n",
    "latin1_declared_bytes": b"# -*- coding: latin-1 -*-\nprint('\xe9', len('\xe9'))\n",
    "bom_bytes": b"\xef\xbb\xbfprint('bom ok')\n",
    "bom_with_latin1_decl": b"\xef\xbb\xbf# -*- coding: latin-1 -*-\nprint(1)\n",
    "utf16_bytes": "print('x')\n".encode("utf-16"),
    "nul_in_source_bytes": b"print(1)\n\x00\n",
}
for _name, _raw in RAW.items():
    P(f"raw_{_name}", "", files={"main.py": b64(_raw)})


# --- the comparison -----------------------------------------------------------------------
TIMING = [
    (re.compile(r"Ran (\d+) tests? in [\d.]+s"), r"Ran \1 tests in Xs"),
    (re.compile(r"0x[0-9a-f]{6,16}"), "0xADDR"),
    (re.compile(r"started \d+\)"), "started IDENT)"),  # a thread's ident: an address
]


def normalize(text):
    if not isinstance(text, str):
        return text
    for pattern, replacement in TIMING:
        text = pattern.sub(replacement, text)
    return text


def comparable(result: dict) -> dict:
    run = result.get("run_result") or {}
    return {"status": result.get("status"), "message": result.get("message"),
            "run_status": run.get("status"), "return_code": run.get("return_code"),
            "stdout": normalize(run.get("stdout")), "stderr": normalize(run.get("stderr")),
            "stdout_truncated": run.get("stdout_truncated"),
            "stderr_truncated": run.get("stderr_truncated"),
            "files": result.get("files"), "oom_killed": result.get("oom_killed")}


def send(url: str, name: str) -> dict:
    code, body = PROGRAMS[name]
    payload = {"language": "python", "code": code, "run_timeout": 10, "memory_limit_MB": 1024,
               **body}
    response = requests.post(f"{url}/run_code", json=payload, timeout=300)
    try:
        return response.json()
    except ValueError:
        return {"status": f"HTTP {response.status_code}", "message": response.text[:500]}


def compare(warm: str, cold: str, name: str) -> tuple[dict, dict]:
    return comparable(send(warm, name)), comparable(send(cold, name))


def show_diff(name: str, w: dict, c: dict) -> str:
    a = json.dumps(c, indent=1, ensure_ascii=False, sort_keys=True).splitlines()
    b = json.dumps(w, indent=1, ensure_ascii=False, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "cold", "warm", lineterm="", n=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm", default="http://127.0.0.1:8091")
    parser.add_argument("--cold", default="http://127.0.0.1:8092")
    parser.add_argument("--only", default=None)
    parser.add_argument("--repeat", type=int, default=1, help="tries for a program that differs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--show", action="store_true", help="print every answer")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    names = [n for n in PROGRAMS if args.only is None or re.search(args.only, n)]
    if args.list:
        print("\n".join(names), f"\n{len(names)} programs")
        return
    differing = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(compare, args.warm, args.cold, n): n for n in names}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            w, c = future.result()
            if args.show:
                print(f"=== {name}\n{json.dumps(c, indent=1, ensure_ascii=False)}")
            if w != c:
                differing[name] = (w, c)
    confirmed = {}
    for name, (w, c) in sorted(differing.items()):
        tries = [(w, c)] + [compare(args.warm, args.cold, name) for _ in range(args.repeat - 1)]
        same_in = sum(1 for tw, tc in tries if tw == tc)
        confirmed[name] = same_in
        print(f"### {name}: differs in {len(tries) - same_in}/{len(tries)}")
        print(show_diff(name, w, c)[:6000])
    print(f"\n{len(names)} programs, {len(differing)} differ: {sorted(differing)}")


if __name__ == "__main__":
    main()
