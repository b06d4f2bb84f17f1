"""What a bench's shell script prints around each experiment, and how its
output is read back: one protocol for a boot of a lab kernel (lab/bench.py)
and a run on this machine's kernel (lab/host.py).

The script runs each experiment's command bracketed by markers:

    UNFLUSH-BEGIN <experiment id> <configuration>
    UNFLUSH-RESULT {...}            (one per repetition, from the program)
    UNFLUSH-END <experiment id> <configuration> <exit status>

parse_output() folds the results into a bench's results (keyed by
suite.result_key()) and each non-zero exit status into its failures, with
the program's last lines as the message.
"""

from lab import guest_output, suite


def bracket(exp_id, config, command):
    """The script's lines that run @command as @exp_id in @config."""
    return [f"echo {guest_output.BEGIN} {exp_id} {config}",
            f"{command} 2>&1",
            f"echo {guest_output.END} {exp_id} {config} $?"]


def _aside(line):
    """A line that cannot say why a program failed: the profiler's window
    marks, and the notes of guest/lib/snapshot.c about counters this kernel
    lacks (which a host run prints for every experiment)."""
    return line.startswith(guest_output.PREFIX) or ": note: " in line


def parse_output(text, experiments, results, failures, context):
    """Fold one script's output (a boot's, or a host program's) into
    `results` and `failures`."""
    by_id = {e.id: e for e in experiments}
    current, messages = None, []
    for line in text.splitlines():
        if line.startswith(guest_output.BEGIN + " "):
            _, exp_id, config = line.split()
            current, messages = (by_id[exp_id], config), []
        elif line.startswith(guest_output.END + " "):
            _, exp_id, config, status = line.split()
            if status != "0":
                failures.append(dict(context, experiment=exp_id, configuration=config,
                                     exit=int(status),
                                     message=" | ".join(messages[-3:]) or "(no output)"))
            current = None
        elif current and (t := guest_output.tagged(line, (guest_output.RESULT,))):
            record = t[1]
            exp, config = current
            rep = dict(record, round=context["round"])
            key = suite.result_key(exp, record)
            results.setdefault(key, {}).setdefault(config, []).append(rep)
        elif line.strip() and current and not _aside(line):
            messages.append(line.strip())
