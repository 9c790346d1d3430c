"""Flower's options for Baton: `celery -A tasks flower` reads this file from the directory it starts in.

Flower's `--conf` option defaults to `flowerconfig.py` in the working directory; the image keeps this file
in its working directory and docker-compose.yml names it with `--conf`, so a missing copy fails at start.
Options on the command line (`--port`, `--basic-auth`) and `FLOWER_*` variables still apply on top of it.
"""

# Retries at a glance. A drained run or an auto-resumed turn is a Celery retry of the same task, and it ends
# as plain SUCCESS: the "Retried" filter lists it only while it waits to be picked up again. What stays on the
# task is its retry count and its last exception, the reason (`PlatformInterrupt(...)` for a drain,
# `AutoResume(...)` for a resume from the stored round), so the task list shows both as columns, and the
# task's args, which hold the chat id (and turn id) or the run id.
tasks_columns = "name,uuid,state,retries,exception,args,received,started,runtime,worker"
