"""Runs benchmarks/time_to_train.py as ``python benchmarks/time_to_train.py ARGS``
does, except that each tool the script starts (`common.run_tool`: the data-prep
tools, run_pretraining.py) is a child forked from this process, as
`tests.forked_tools` runs a tool, rather than a new interpreter that imports
TensorFlow, Beam and the library again (seconds of CPU each, eight tools).

    python -m tests.benchmarks.time_to_train_forked ARGS

`tests.benchmarks.test_time_to_train` runs it with `tests.conftest.run_tools_forked`,
which imports those modules once beforehand."""

import os
import runpy
import sys
import time

from absl import flags

from tests import forked_tools

SCRIPT = os.path.join(forked_tools.REPOSITORY, "benchmarks", "time_to_train.py")

#: The flags of a new interpreter that imported the same modules: a child
#: forgets the script's own flags and values before it runs a tool.
FRESH_FLAGS = set(flags.FLAGS)


def forget_the_scripts_flags():
    try:
        for name in set(flags.FLAGS) - FRESH_FLAGS:
            if name in flags.FLAGS:  # not gone with its other name
                delattr(flags.FLAGS, name)
        flags.FLAGS.unparse_flags()
    except BaseException:  # never back into the script's code
        import traceback

        traceback.print_exc()
        os._exit(1)


def run_tool(command, log_path):
    """`common.run_tool` with the tool forked: stdout then stderr in the log (the
    script's own run_tool interleaves both), its wall time."""
    import common

    _, *target = command
    tool, args = (target[1], target[2:]) if target[0] == "-m" else (target[0], target[1:])
    run = dict(tool=tool, args=args, cwd=common.REPOSITORY, env=common.ENVIRONMENT)
    start = time.perf_counter()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        forget_the_scripts_flags()
        forked_tools._child(run, log_path, log_path + ".err")
    _, status = os.waitpid(pid, 0)
    seconds = time.perf_counter() - start
    with open(log_path + ".err") as err, open(log_path, "a") as log:
        log.write(err.read())
    os.remove(log_path + ".err")
    if os.waitstatus_to_exitcode(status):
        with open(log_path) as log:
            tail = log.read()[-3000:]
        raise RuntimeError(f"{' '.join(command)} failed:\n{tail}")
    return seconds


def main():
    sys.argv[0] = SCRIPT
    sys.path[0] = os.path.dirname(SCRIPT)  # as `python SCRIPT`: common is importable
    import common  # after the run's environment is set: its ENVIRONMENT is the tools'

    common.run_tool = run_tool
    runpy.run_path(SCRIPT, run_name="__main__")


if __name__ == "__main__":
    main()
