"""What the two notebook-like interpreters of the Python image share (python-session.py for
/v1/sessions and /run_jupyter, sandbox-kernel.py for an E2B sandbox's code contexts): how a
cell is compiled, how its traceback and its figures are reported.

Only C modules at import: a session's start-up time is its create time."""

import _ast
import io
import os
import sys

PyCF_ONLY_AST, PyCF_ALLOW_TOP_LEVEL_AWAIT, CO_COROUTINE = 0x400, 0x2000, 0x80
CELL_FILE = "<cell-%d>"
_loop = None  # a notebook's event loop, kept from cell to cell
# Where the standard library and these files are: what the interpreter's own imports may read.
TRUSTED = tuple({sys.prefix, sys.base_prefix, os.path.dirname(os.path.abspath(__file__))})


def stdlib(name: str):
    """The standard library's module ``name``, for the interpreter's own use (tracebacks,
    results), never a file of the work directory of that name: a cell that wrote json.py or
    traceback.py would otherwise break how every later cell is reported. What a cell imports
    itself is python3's: its folder first."""
    module = sys.modules.get(name)
    if module is None:
        saved = sys.path[:]
        sys.path[:] = [entry for entry in saved
                       if any(entry == top or entry.startswith(top + os.sep) for top in TRUSTED)]
        try:
            __import__(name)
        finally:
            sys.path[:] = saved
        module = sys.modules[name]
    return module


def compile_cell(source: str, seq: int, notebook: bool = False):
    """(statements, last expression or None): a notebook shows the last expression's value.
    ``notebook``: as IPython compiles a cell (a notebook's, an E2B context's), not as `python3`
    runs a file (a plain session's): `await` outside a function is allowed, and a cell ending
    in `;` shows no value."""
    name = CELL_FILE % seq
    flags = PyCF_ALLOW_TOP_LEVEL_AWAIT if notebook else 0
    tree = compile(source, name, "exec", PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr) and not (notebook and _silenced(source)):
        last = compile(_ast.Expression(tree.body.pop().value), name, "eval", flags)
    return compile(tree, name, "exec", flags), last


def _silenced(source: str) -> bool:
    """Whether the cell's last token is `;` (comments and blank lines aside), as IPython asks."""
    if ";" not in source:
        return False
    tokenize = stdlib("tokenize")
    last = ""
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
               tokenize.ENDMARKER}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in skipped:
                last = token.string
    except (tokenize.TokenError, SyntaxError):
        return False
    return last == ";"


def run_compiled(code, namespace: dict):
    """``code`` from compile_cell run in ``namespace``: its value (an expression's). Code with a
    top-level `await` runs on one event loop kept for the interpreter's life, as IPython's is:
    a task one cell starts goes on while a later cell awaits."""
    value = eval(code, namespace)
    if code.co_flags & CO_COROUTINE:
        global _loop
        if _loop is None or _loop.is_closed():
            asyncio = stdlib("asyncio")
            _loop = asyncio.new_event_loop()
            asyncio.set_event_loop(_loop)
        value = _loop.run_until_complete(value)
    return value


def remember_source(source: str, seq: int) -> None:
    """Tracebacks quote the cell's lines, as IPython's do."""
    stdlib("linecache").cache[CELL_FILE % seq] = (len(source), None, source.splitlines(True), CELL_FILE % seq)


def cell_traceback(exc: BaseException) -> list[str]:
    """The exception's traceback from the cell's own frames on, not the interpreter's."""
    traceback = stdlib("traceback")
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    return traceback.format_exception(type(exc), exc, tb)


def figures() -> list[str]:
    """The matplotlib figures the cell left open, as base64 PNG; they are closed after."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    base64 = stdlib("base64")
    images = []
    for number in pyplot.get_fignums():
        buffer = io.BytesIO()
        pyplot.figure(number).savefig(buffer, format="png")
        images.append(base64.b64encode(buffer.getvalue()).decode())
    pyplot.close("all")
    return images


def exit_code(code) -> int:
    """A SystemExit's code as a process would exit with it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
