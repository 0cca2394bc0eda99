"""An agent loop written against the E2B SDK, run on a local Sandpool with environment variables only.

The code below is plain E2B code: `e2b_code_interpreter.Sandbox`, `files.write`, `commands.run`,
`run_code`. Nothing in it names Sandpool. Point the SDK at an executor's HTTP port (or a pool's
gateway) and it runs there:

    sudo sandpool-executor --http-listen 127.0.0.1:8080 &      # or: a pool's gateway Service
    export E2B_API_URL=http://127.0.0.1:8080 E2B_SANDBOX_URL=http://127.0.0.1:8080
    export E2B_API_KEY=<the executor's token, or any string without auth>
    python examples/e2b_agent.py

Needs `pip install "e2b>=2.26,<3" "e2b-code-interpreter>=2.9,<3"` (the 3.x SDKs drop the URL
variables). The "model" is scripted so the example runs anywhere: it writes a buggy function,
runs the tests, reads the failure, inspects the function in the interpreter and fixes it. Swap
`ScriptedModel` for a call to your LLM.
"""

from __future__ import annotations

from typing import NamedTuple

from e2b import CommandExitException
from e2b_code_interpreter import Sandbox


class Action(NamedTuple):
    """One turn: a shell command, Python code, a file to write, or the final answer."""

    kind: str  # "shell", "python", "write" or "done"
    body: str
    path: str = ""


BUGGY = "def median(xs):\n    xs = sorted(xs)\n    return xs[len(xs) // 2]\n"
FIXED = (
    "def median(xs):\n    xs = sorted(xs)\n    n = len(xs)\n    mid = n // 2\n"
    "    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2\n"
)
TESTS = (
    "from stats import median\n\n"
    "assert median([3, 1, 2]) == 2, 'odd'\n"
    "assert median([4, 1, 3, 2]) == 2.5, 'even: got %r' % median([4, 1, 3, 2])\n"
    "print('all passed')\n"
)


class ScriptedModel:
    """Stands in for an LLM: reacts to the last observation."""

    def __init__(self) -> None:
        self.turn = 0

    def next_action(self, transcript: list[dict]) -> Action:
        self.turn += 1
        last = transcript[-1]["observation"] if transcript else ""
        if self.turn == 1:
            return Action("write", BUGGY, "proj/stats.py")
        if self.turn == 2:
            return Action("write", TESTS, "proj/test_stats.py")
        if "all passed" in last:
            return Action("done", "median() fixed: the tests pass")
        if "AssertionError" in last and "even" in last:
            return Action("python", "import sys; sys.path.insert(0, 'proj'); from stats import median; median([4, 1, 3, 2])")
        if "[value]" in last:
            return Action("write", FIXED, "proj/stats.py")
        return Action("shell", "cd proj && python3 test_stats.py")


def observe(sbx: Sandbox, a: Action) -> str:
    """Runs one action in the sandbox; what the model sees of it."""
    if a.kind == "write":
        sbx.files.write(a.path, a.body)
        return f"wrote {a.path}; now run the tests"
    if a.kind == "shell":
        try:
            r = sbx.commands.run(a.body, timeout=60)
            return r.stdout + r.stderr
        except CommandExitException as e:
            return f"exit {e.exit_code}\n{e.stdout}{e.stderr}"
    ex = sbx.run_code(a.body)
    if ex.error:
        return f"{ex.error.name}: {ex.error.value}"
    return "".join(ex.logs.stdout) + "".join(f"[value] {r.text}" for r in ex.results)


def agent(max_turns: int = 10) -> dict:
    """Runs the loop in one sandbox; the answer and the transcript."""
    model, transcript = ScriptedModel(), []
    with Sandbox.create(timeout=300, metadata={"example": "e2b_agent"}) as sbx:
        for _ in range(max_turns):
            a = model.next_action(transcript)
            if a.kind == "done":
                return {"answer": a.body, "turns": transcript, "sandbox": sbx.sandbox_id}
            transcript.append({"action": a._asdict(), "observation": observe(sbx, a)})
    raise RuntimeError("the agent did not finish")


if __name__ == "__main__":
    out = agent()
    for t in out["turns"]:
        print(f"> {t['action']['kind']} {t['action']['path'] or t['action']['body'][:60]!r}\n{t['observation'].strip()}\n")
    print(out["answer"])
