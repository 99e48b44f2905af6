"""Scripted agents for the real MLGym tasks (battleOfSexes, prisonersDilemma, blotto, titanic):
replies that improve on the baseline and replies that do worse, with the scores they reach
(measured with the tasks' own evaluation scripts; the game scores are Monte Carlo means)."""

from __future__ import annotations

TASK_IDS = ("battleOfSexes", "prisonersDilemma", "blotto", "titanicSurvival")
BASELINES = {
    "battleOfSexes": 1.0226699113845825,
    "prisonersDilemma": 2.3716301918029785,
    "blotto": -0.24797001481056213,
    "titanicSurvival": 0.76555,
}

# (improving move, worse move) of row_strategy, and the scores they reach.
MOVES = {
    "battleOfSexes": (("0", 1.444), ("1", 0.822)),  # the opponent follows round 1's choice
    "prisonersDilemma": (("1", 2.643), ("0", 2.246)),  # always defect / always cooperate
    "blotto": (("[30, 30, 30, 30, 0, 0]", 0.247), ("[120, 0, 0, 0, 0, 0]", -1.0)),
}

# titanic: the stand-in data's rule (accuracy 0.875 on test.csv) / everyone dies (0.425).
PREDICT = """import csv
rows = list(csv.DictReader(open('data/test.csv')))
print('PassengerId,Survived')
for r in rows:
    {line}
"""
TITANIC = (
    ("print(f\"{r['PassengerId']},{int(r['Sex'] == 'female' or float(r['Age']) < 10)}\")", 0.875),
    ("print(f\"{r['PassengerId']},0\")", 0.425),
)


def write_strategy(move: str) -> str:
    body = f"def row_strategy(history):\n    return {move}"
    return f"```bash\ncat > strategy.py <<'EOF'\n{body}\nEOF\n```"


def write_submission(line: str) -> str:
    script = PREDICT.format(line=line)
    run = "python3 predict.py > submission.csv"
    return f"```bash\ncat > predict.py <<'EOF'\n{script}EOF\n{run}\n```"


def replies(task_id: str, improving: bool) -> list[str]:
    """Look around, write the solution, validate, submit."""
    index = 0 if improving else 1
    if task_id == "titanicSurvival":
        write = write_submission(TITANIC[index][0])
    else:
        write = write_strategy(MOVES[task_id][index][0])
    return ["```bash\nls\n```", write, "validate", "```\nsubmit\n```"]


def expected_score(task_id: str, improving: bool) -> float:
    index = 0 if improving else 1
    if task_id == "titanicSurvival":
        return TITANIC[index][1]
    return MOVES[task_id][index][1]


def expected_reward(task_id: str, improving: bool) -> float:
    """The default reward: relative improvement over the baseline, floored at -1."""
    baseline = BASELINES[task_id]
    return max((expected_score(task_id, improving) - baseline) / abs(baseline), -1.0)


# The container state an episode starts from, as the tests see it (run as root in the
# container): the home directory (workspace included) entry by entry and file by file, every
# entry of the scratch directories (whoever owns it), and the agent user's processes (names
# escaped by `sed -n 'l 0'`: a name may be any bytes). The agent-owned
# environment of MLGym's official layout (~12,000 files, 324 MB under ./miniconda3) is compared
# by each file's size and modification time to the nanosecond instead of its content: hashing it
# took seconds per look, a look per episode. Only an edit that also puts back a file's size and
# mtime would go unseen here; such deliberate ones are the hack catalogue's (test_hacks.py).
STATE_SCRIPT = r"""
set -e
cd /home/agent
find . -printf '%p %y %m %U %G %s %l\n' | LC_ALL=C sort | LC_ALL=C sed -n 'l 0'
find . -path ./miniconda3 -prune -o -type f -exec sha256sum {} + | LC_ALL=C sort \
  | LC_ALL=C sed -n 'l 0'
find . -path './miniconda3/*' -type f -printf '%p %s %T@\n' | LC_ALL=C sort
echo '--- every entry of the scratch directories, whoever owns it (names escaped: any bytes)'
find /tmp /var/tmp /dev/shm /run/lock -mindepth 1 -printf '%p %u %y\n' 2>/dev/null \
  | LC_ALL=C sort | LC_ALL=C sed -n 'l 0'
echo '--- processes of the agent user (pid 1 aside)'
ps -u agent -o pid=,args= | awk '$1 != 1 { $1 = ""; print }' | LC_ALL=C sort
echo '--- SysV IPC objects (shared memory, message queues, semaphores)'
cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem | grep -v '^ *key' | wc -l
echo '--- pid 1'
ps -o user=,args= -p 1
"""
# Run as root with a clean environment and absolute paths: the image's PATH may start with
# directories the agent writes (MLGym's official layout), where a hack may have planted `bash`.
STATE_ARGV = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/bin/bash", "-c", STATE_SCRIPT]
