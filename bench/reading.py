"""How many lines a reader reads from SAC's config to its three optimizer steps.

    python bench/reading.py               # the table of spans, and the total
    python bench/reading.py --algo td3    # another built-in algorithm's path
    python bench/reading.py --algo dqn-pixels   # DQN from pixels: config to its optimizer step

Issue 31 asked that reading SAC "from its config to its three optimizer steps" take no more than a
third of the ~900 lines it took when the issue was filed (CleanRL shows it in 51). The path is the
one a reader follows from ``python -m beyondfit +task=pendulum algo=sac`` to the optimizers: the
declaration (the algo file, the loss factory and every helper it calls, what an
``OffPolicyUpdate`` and a ``Target`` are: enough to know each optimizer's loss, part, ratio and
target), then the binding (the task code that makes the declared updates the engine's
``Update``s, one optimizer each, the ``optimizer`` group's settings under the update's own). Not
on it: the agent's networks (the model, as a user's own ``nn.Module`` would be), the replay
collector (the data), the RL tasks' evaluation and ending, and the engine (``core/``: every task's,
documented as the ``Update`` API; as CleanRL's 51 lines leave out ``torch.optim``). The engine's
part and the ending are printed beside the path, uncounted. ``--issue`` prints the path with the
same roles at the issue's commit, where the loss returned named closures and the builder alone
knew what each trained (``PARTS``), how often (a function attribute) and which target followed.

Each span is a whole definition (decorators, docstring, comments, blank lines inside it) or a
whole file, found by name, so a definition that grows is counted as it grows. ``lines`` counts
every line; ``code`` leaves out blank lines, comments and docstrings. Nothing here is asserted:
``tests/bench/test_bench_smoke.py`` runs the command for every path and checks that each span
still exists and the totals add up; the counts are reported, not held to a bound.
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Per algorithm, in reading order: (file, definitions in it, empty for the whole file). The
#: declaration (what the algorithm is: its config, its loss factory, what an update declares)
#: comes first, then the binding (the task code making the declared updates the engine's).
DECLARATION: dict[str, list[tuple[str, list[str]]]] = {
    "sac": [
        ("conf/algo/sac.yaml", []),
        ("beyondfit/rl/algos/offpolicy.py",
         ["sac_loss", "Handoff", "_check_gamma", "_check_tau", "_td_target"]),
        ("beyondfit/rl/algos/algorithm.py", ["OffPolicyUpdate", "Target"]),
    ],
    "td3": [
        ("conf/algo/td3.yaml", []),
        ("beyondfit/rl/algos/offpolicy.py",
         ["td3_loss", "_check_gamma", "_check_tau", "_td_target"]),
        ("beyondfit/rl/algos/algorithm.py", ["OffPolicyUpdate", "Target"]),
    ],
}
# DQN from pixels (+task=atari algo=dqn; +experiment=atari100k is DrQ(eps) over the same
# path): the pixel-specific parts count too, the encoder and the Q network with its head, since
# a reader from pixels asks what reads the frames (CleanRL's dqn_atari.py shows its QNetwork).
DECLARATION["dqn-pixels"] = [
    ("conf/task/atari.yaml", []),
    ("conf/algo/dqn.yaml", []),
    ("conf/experiment/tuned/atari_dqn.yaml", []),
    ("beyondfit/rl/algos/offpolicy.py", ["dqn_loss", "_check_gamma", "_check_tau", "_td_target"]),
    ("beyondfit/rl/algos/algorithm.py", ["OffPolicyUpdate", "Target"]),
    ("beyondfit/rl/nets/encoders.py", ["Pixels", "ScaledConv2d", "NatureCNN"]),
    ("beyondfit/rl/nets/heads.py", ["mlp_head", "DuelingHead"]),
    ("beyondfit/rl/nets/agents.py", ["QNetwork", "QAgent"]),
]
BINDING: list[tuple[str, list[str]]] = [
    ("beyondfit/rl/algos/algorithm.py", ["engine_updates", "_declared", "_own_settings"]),
    ("beyondfit/tasks/offpolicy.py", ["build"]),
]
PATHS = {algo: [*spans, *BINDING] for algo, spans in DECLARATION.items()}

#: The issue's commit (the parent of its first change) and SAC's path then, with the same roles:
#: the loss returned ``{name: closure}``, and the builder mapped each name to its parameters and
#: target through ``PARTS``, then ``UpdateSpec`` and ``bind_updates`` made the engine's Updates.
ISSUE_COMMIT = "92e4742"
PATH_AT_ISSUE: list[tuple[str, list[str]]] = [
    ("conf/algo/sac.yaml", []),
    ("beyondfit/rl/offpolicy_losses.py", ["sac_loss", "_check_gamma", "_td_target"]),
    ("beyondfit/tasks/offpolicy.py", ["PARTS", "build", "_optimizer_settings"]),
    ("beyondfit/tasks/contract.py", ["UpdateSpec", "several_updates", "bind_updates"]),
]

#: Shown beside the path, not counted: where the Updates go next. The engine's part (``core/``,
#: every task's, documented as the ``Update`` API) and the RL tasks' evaluation and ending.
BESIDE: list[tuple[str, list[str]]] = [
    ("beyondfit/core/update.py", ["build_updates", "Update.inherit", "check_names"]),
    ("beyondfit/tasks/rl_task.py", ["rl_task"]),
]


def definition(tree: ast.Module, dotted: str) -> ast.AST:
    """The function, class or assignment ``dotted`` names (``Class.method`` for a method)."""
    scope: ast.AST = tree
    for name in dotted.split("."):
        found = [node for node in ast.iter_child_nodes(scope)
                 if (isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name)
                 or (isinstance(node, ast.Assign | ast.AnnAssign) and name in _targets(node))]
        if not found:
            raise SystemExit(f"bench/reading.py: no definition {dotted!r}; update PATHS")
        scope = found[0]
    return scope


def _targets(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def span(node: ast.AST) -> tuple[int, int]:
    """First and last line of a definition, its decorators included."""
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)])
    return first, node.end_lineno or node.lineno


def docstring_lines(tree: ast.AST) -> set[int]:
    """Lines of every docstring (module, class or function) in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def code_lines(text: str, suffix: str) -> set[int]:
    """Lines holding code: not blank, not only a comment, not a docstring."""
    if suffix != ".py":
        return {i for i, line in enumerate(text.splitlines(), 1)
                if line.strip() and not line.strip().startswith("#")}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                              tokenize.DEDENT, tokenize.ENDMARKER):
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - docstring_lines(ast.parse(text))


def read(file: str, commit: str | None) -> str:
    """``file``'s text in the working tree, or at ``commit``."""
    if commit is None:
        return (ROOT / file).read_text()
    shown = subprocess.run(["git", "show", f"{commit}:{file}"], cwd=ROOT, capture_output=True,
                           text=True)
    if shown.returncode != 0:
        raise SystemExit(f"bench/reading.py: git cannot show {file} at {commit} (a shallow "
                         "clone lacks the commit: git fetch --unshallow)")
    return shown.stdout


def count(spans: list[tuple[str, list[str]]],
          commit: str | None = None) -> list[tuple[str, str, int, int]]:  # fmt: skip
    """(file, definition, lines, code lines) for each of ``spans`` (at ``commit``, if given)."""
    rows = []
    for file, names in spans:
        text = read(file, commit)
        code = code_lines(text, Path(file).suffix)
        if not names:
            total = len(text.splitlines())
            rows.append((file, "(whole file)", total, len(code)))
            continue
        tree = ast.parse(text)
        for name in names:
            first, last = span(definition(tree, name))
            rows.append((file, name, last - first + 1,
                         len([i for i in code if first <= i <= last])))
    return rows


def table(rows: list[tuple[str, str, int, int]], total: bool = True) -> str:
    """``rows`` as a markdown table, with a totals row."""
    out = ["| file | definition | lines | code |", "|---|---|---:|---:|"]
    out += [f"| `{file}` | `{name}` | {lines} | {code} |" for file, name, lines, code in rows]
    if total:
        out.append(f"| **{len({r[0] for r in rows})} files** | | **{sum(r[2] for r in rows)}** "
                   f"| **{sum(r[3] for r in rows)}** |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the markdown tables of ``--algo``'s reading path, its totals and what is beside it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", choices=sorted(PATHS), default="sac")
    parser.add_argument("--issue", action="store_true",
                        help=f"also SAC's path at the issue's commit ({ISSUE_COMMIT}; needs git)")
    args = parser.parse_args(argv)
    print(f"Reading {args.algo.upper()} from its config to its optimizers\n")
    print(table(count(PATHS[args.algo])))
    declared = count(DECLARATION[args.algo])
    print(f"\nOf which the declaration (config, loss factory, what an update is): "
          f"{sum(r[2] for r in declared)} lines, {sum(r[3] for r in declared)} of code.")
    print("\nBeside the path, not counted (where the Updates go next):\n")
    print(table(count(BESIDE), total=False))
    if args.issue:
        print(f"\nSAC's path at {ISSUE_COMMIT}, the same roles:\n")
        print(table(count(PATH_AT_ISSUE, ISSUE_COMMIT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
