"""Flower's options for Baton: `celery -A tasks flower` reads this file from the directory it starts in.

Flower's `--conf` option defaults to `flowerconfig.py` in the working directory; the image keeps this file
in its working directory and docker-compose.yml names it with `--conf`, so a missing copy fails at start.
Options on the command line (`--port`, `--basic-auth`) win over this file; this file wins over `FLOWER_*`
variables (Flower reads those first).
"""

# Retries at a glance. A drained run or an auto-resumed turn is a Celery retry of the same task, and it ends
# as plain SUCCESS: the "Retried" filter lists it only while it waits to be picked up again. What stays on the
# task is its retry count and its last exception, the reason (`PlatformInterrupt(...)` for a drain,
# `AutoResume(...)` for a resume from the stored round), so the task list shows both as columns; and the
# result, the unit's own outcome (`{'status': 'completed'}`): a drained worker's late task-retried event can
# leave a finished task in RETRY (Celery's event state always applies a RETRY), and the result tells. The
# args hold the chat id (and turn id) or the run id.
tasks_columns = "name,uuid,state,retries,exception,result,args,received,started,runtime,worker"
