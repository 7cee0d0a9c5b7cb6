"""Flight records for the trace tests: one good single-rank record, as the runtime writes it."""
import contextlib
import json
import os
import tempfile


def good_record(run_id, dumped_at_us):
    """Rank 0 of a 1-rank run that completed one barrier."""
    head = {"format": "dtlaunch-flight-record", "version": 2, "run_id": run_id, "attempt": 0,
            "rank": 0, "world_size": 1, "local_rank": 0, "host": "node01", "kind": "exit",
            "reason": "exit", "dumped_at_us": dumped_at_us, "clock_offset_us": 0,
            "clock_error_us": 30, "collectives_started": 1, "entries_capacity": 2000}
    return (json.dumps(head)[:-1] + ',\n "entries": [\n  {"seq": 1, "op": "barrier", '
            '"dtype": "float32", "numel": 0, "shape": [], "root": -1, "enqueue_us": 1000, '
            '"start_us": 1000, "end_us": 2000, "state": "completed"}\n ]}\n')


@contextlib.contextmanager
def traces_dir(prefix, name):
    """A scratch folder (removed after) holding an empty folder NAME; yields NAME's path."""
    with tempfile.TemporaryDirectory(prefix=prefix) as top:
        path = os.path.join(top, name)
        os.mkdir(path)
        yield path
