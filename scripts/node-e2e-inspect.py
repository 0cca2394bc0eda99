"""An unmodified Inspect task on a pool, run by scripts/node-e2e.sh from a role=sandbox-user pod.

The task of clients/python/tests/test_inspect.py: an agent loop driven by a scripted mockllm model
(no network) calling bash() and python(), scored by reading the file the agent wrote, with
sandbox="sandpool" pointed at the pool's Service (its dns:/// name, every executor of the pool).

    python node-e2e-inspect.py TARGET SAMPLES

Prints one line `inspect: status=... samples=N correct=N errors=N accuracy=X seconds=S`; exits 0
only when every sample was scored correct and none failed.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import bash, python
from inspect_ai.util import sandbox

from sandpool.inspect_sandbox import SandpoolSandboxConfig


def scripted(messages: list, tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
    """An agent's turns, chosen by how many tool results it has seen (so concurrent samples never mix)."""
    seen = [m for m in messages if m.role == "tool"]
    if len(seen) == 0:
        out = ModelOutput.for_tool_call("mockllm/model", "bash", {"command": "mkdir -p out && echo hi from bash | tee out/log"})
    elif len(seen) == 1:
        assert "hi from bash" in seen[0].text, seen[0].text
        code = "import pathlib\np = pathlib.Path('out/answer.txt')\np.write_text(str(6 * 7))\nprint(p.resolve())"
        out = ModelOutput.for_tool_call("mockllm/model", "python", {"code": code})
    else:
        assert "/work/out/answer.txt" in seen[1].text, seen[1].text
        out = ModelOutput.from_content("mockllm/model", "done")
    # Usage given, so mockllm does not count tokens with tiktoken (which downloads its encoding).
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


@scorer(metrics=[accuracy()])
def file_written() -> Any:
    async def score(state: TaskState, target: Target) -> Score:
        answer = await sandbox().read_file("out/answer.txt")
        log = await sandbox().read_file("out/log")
        return Score(value="C" if answer == target.text and log == "hi from bash\n" else "I", answer=answer)

    return score


def wait_reachable(target: str, seconds: float) -> None:
    """A new pod's address reaches the policy engine a moment after it starts: wait for a connection."""
    host, _, port = target.split("///", 1)[-1].rpartition(":")
    deadline = time.time() + seconds
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError as e:
            if time.time() > deadline:
                sys.exit(f"inspect: {host}:{port} not reachable: {e}")
            time.sleep(0.5)


def main() -> None:
    target, samples = sys.argv[1], int(sys.argv[2])
    wait_reachable(target, 20)
    task = Task(
        dataset=[Sample(input="Write the answer to out/answer.txt.", target="42", id=i) for i in range(samples)],
        solver=[use_tools([bash(timeout=60), python(timeout=60)]), generate()],
        scorer=file_written(),
    )
    start = time.monotonic()
    [log] = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=scripted),
        sandbox=("sandpool", SandpoolSandboxConfig(target=target)),
        display="none",
        max_samples=samples,
        max_sandboxes=samples,
    )
    took = time.monotonic() - start
    done = log.samples or []
    errors = [s for s in done if s.error]
    correct = sum(1 for s in done if s.scores and s.scores["file_written"].value == "C")
    acc = log.results.scores[0].metrics["accuracy"].value if log.results and log.results.scores else None
    print(f"inspect: status={log.status} samples={len(done)} correct={correct} errors={len(errors)} accuracy={acc} seconds={took:.1f}")
    for s in errors[:3]:
        print(f"inspect: sample {s.id}: {s.error.message[:600] if s.error else ''}")
    if log.error:
        print(f"inspect: {log.error.message[:1000]}")
    sys.exit(0 if log.status == "success" and correct == samples and not errors else 1)


if __name__ == "__main__":
    main()
