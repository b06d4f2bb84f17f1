"""Arguments of `lab bench`, apart from lab/bench.py so that parsing them
does not import the report's plotting libraries."""


def add(p):
    p.add_argument("-e", "--experiment", action="append", metavar="ID",
                   help="run only this experiment (repeatable): an exact id like "
                        "munmap-folio-size/64K, else every id it starts, like "
                        "munmap-folio-size; --list shows them")
    p.add_argument("--list", action="store_true", help="list experiments and exit")
    p.add_argument("-k", "--kernels", default="vanilla,patched",
                   help="comma-separated kernel variants (default vanilla,patched); "
                        "the first without the series is the baseline, and the "
                        "kernels with it must be built like it")
    p.add_argument("-r", "--reps", type=int, default=None,
                   help="repetitions per experiment and kernel (default 3, quick 1)")
    p.add_argument("--quick", action="store_true",
                   help="small sizes: a smoke run that checks set-up, not speed")
    p.add_argument("--icount", action="store_true",
                   help="time in instructions: -icount shift=0, one host thread")
    p.add_argument("--host", action="store_true",
                   help="run the programs on this machine's running kernel, no VM")
    p.add_argument("--model", action="append", metavar="PATH",
                   help="with --host: a GGUF model for llama-tiering (give it three "
                        "times: one inference per model, all at once)")
    p.add_argument("--llama", metavar="PATH",
                   help="with --host: llama.cpp's llama-simple for llama-tiering "
                        "(default: the lab's own build)")
    p.add_argument("--no-build", action="store_true",
                   help="use the kernels already built")
    p.add_argument("-o", "--out", help="results directory (default results/<timestamp>)")
