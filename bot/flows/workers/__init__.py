"""Fan-outs out of the chat process: a fan-out is a *run* (data: its hosts, who asked), executed by
worker processes that write snapshots and per-host progress to the database; the process that
answers Slack reads the progress back (:mod:`bot.flows.workers.dispatch`). Executors: a local process pool
(:mod:`bot.flows.workers.local`, the default) and procrastinate jobs on PostgreSQL consumed by
``gpubot worker`` (:mod:`bot.flows.workers.queue`)."""
