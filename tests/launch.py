"""Runs a tool in this fresh interpreter after setting up what only a process
can have, for `tests.tool_runs.start_tool`:

    python -m tests.launch [OPTION...] -- TOOL ARGS...

Options (each before ``--``):
  --terminal: standard input is a terminal; make it this process's
    controlling terminal, in the session of its own the test started it in,
    as a terminal's shell starts a job (Ctrl-C typed there reaches it).
  --max_file_bytes=N: the largest file the process may write (``ulimit -f``).
  --two_cpu_replicas: 2 logical CPU devices, set before TensorFlow runs an op
    (``--distribution_strategy=mirrored`` then has 2 replicas).
  --grappler_off: TensorFlow's graph optimizer off (seconds of CPU a step
    function; for runs whose checks are not about it).

``TOOL`` is ``NAME.py`` (a script of the repository), ``-m MODULE``, or
``-c CODE``; it runs as ``__main__`` with ``sys.argv`` as Python would give it.
"""

import os
import runpy
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _set_up(options: list) -> None:
    for option in options:
        name, _, value = option.partition("=")
        if name == "--terminal":
            import fcntl
            import termios

            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        elif name == "--max_file_bytes":
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (int(value), int(value)))
        elif name == "--two_cpu_replicas":
            import tensorflow as tf

            tf.config.set_logical_device_configuration(
                tf.config.list_physical_devices("CPU")[0],
                [tf.config.LogicalDeviceConfiguration()] * 2)
        elif name == "--grappler_off":
            from tests.graph_options import switch_off_grappler

            switch_off_grappler()
        else:
            sys.exit(f"tests.launch: unknown option {option}")


def main(argv: list) -> None:
    separator = argv.index("--")
    _set_up(argv[1:separator])
    tool, *args = argv[separator + 1:]
    if tool == "-m":
        module, *args = args
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    elif tool == "-c":
        code, *args = args
        sys.argv = ["-c", *args]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    else:
        path = os.path.join(REPOSITORY, tool)
        sys.argv = [path, *args]
        sys.path[0] = os.path.dirname(path)
        runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
