"""A multi-turn agent loop on a Sandpool session: write code, run the tests, read the failure, fix, repeat.

The "model" here is scripted (it plays back a fixed sequence of actions and reacts to test results)
so the example runs anywhere; swap `ScriptedModel` for a call to your LLM: it gets the transcript
and returns the next action. Every action runs in one session, so files and Python variables
carry over between turns, as they would for an agent in a terminal or a notebook.

    python examples/agent_session.py --target 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import json
from typing import NamedTuple, Optional

from sandpool import Client, Limits, SessionLimits


class Action(NamedTuple):
    """One turn: a shell command or Python code (run in the session), or the final answer."""

    kind: str  # "bash", "python" or "done"
    body: str


BUGGY = """def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
"""

FIXED = """def median(xs):
    xs = sorted(xs)
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
"""

TESTS = """from stats import median

def test_odd():
    assert median([3, 1, 2]) == 2

def test_even():
    assert median([4, 1, 3, 2]) == 2.5
"""

# Each command is a fresh shell in the interpreter's working directory: say where the tests are.
RUN_TESTS = "cd /work/proj && python3 -c 'import test_stats as t; [getattr(t, n)() for n in dir(t) if n.startswith(\"test_\")]; print(\"all passed\")'"


class ScriptedModel:
    """Stands in for an LLM: writes a buggy function, tests it, reads the failure, fixes it."""

    def __init__(self) -> None:
        self.turn = 0

    def next_action(self, transcript: list[dict]) -> Action:
        self.turn += 1
        last = transcript[-1]["observation"] if transcript else ""
        if self.turn == 1:
            return Action("bash", f"mkdir -p proj && cd proj && cat > stats.py <<'EOF'\n{BUGGY}EOF\ncat > test_stats.py <<'EOF'\n{TESTS}EOF\nls")
        if self.turn == 2:
            return Action("bash", RUN_TESTS)
        if "AssertionError" in last and self.turn < 6:
            # Look at the failing case in the interpreter, then rewrite the file.
            return Action("python", "import os, sys; os.chdir('/work/proj'); sys.path.insert(0, '.')\nfrom stats import median\nmedian([4, 1, 3, 2])")
        if self.turn < 6 and "median" in transcript[-1]["action"] and "3" in last:
            return Action("bash", f"cat > stats.py <<'EOF'\n{FIXED}EOF\n{RUN_TESTS}")
        if "all passed" in last:
            return Action("done", "median() fixed: even-length lists now average the two middle values")
        return Action("done", "gave up")


def observe(result) -> str:
    """What the model sees of a call: its output, its displayed value, and what went wrong."""
    parts = [result.stdout, result.stderr]
    if result.display:
        parts.append(f"[value] {result.display}")
    if not result.ok:
        parts.append(f"[{result.verdict.name}] {result.message}".rstrip())
    return "\n".join(p for p in parts if p).strip()


def agent(target: str, model: Optional[ScriptedModel] = None, max_turns: int = 8) -> dict:
    """Runs the loop; returns the transcript and the answer."""
    model = model or ScriptedModel()
    transcript: list[dict] = []
    with Client(target) as client:
        # One session for the whole episode; closed (its processes killed) when the block ends.
        with client.session(
            "python",
            limits=SessionLimits(max_calls=max_turns, idle_timeout_ms=60_000),
            call_limits=Limits(wall_time_ms=10_000),
        ) as session:
            for _ in range(max_turns):
                action = model.next_action(transcript)
                if action.kind == "done":
                    return {"answer": action.body, "turns": transcript}
                if action.kind == "bash":
                    result = session.command(action.body)
                else:
                    result = session.run(action.body)
                transcript.append({"action": action.body, "observation": observe(result), "cwd": result.cwd})
    return {"answer": "out of turns", "turns": transcript}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="executor address (default: $SANDPOOL_TARGET)")
    args = ap.parse_args()
    out = agent(args.target)
    for i, t in enumerate(out["turns"], 1):
        print(f"--- turn {i} ({t['cwd']})\n$ {t['action']}\n{t['observation']}")
    print(json.dumps({"answer": out["answer"], "turns": len(out["turns"])}))


if __name__ == "__main__":
    main()
