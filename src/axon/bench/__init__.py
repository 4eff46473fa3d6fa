"""``axon bench``: the original article's load tests, run with wrk, against one server or many.

scenarios  real traffic (R1, R32, R256, F1 from a random-file pool; ``~``: a header new every request),
           the matrix (T1-T8, B32, health, error, echo) and the request each kind of server gets
lua        the Lua scripts wrk runs: JSON results, and constant-rate pacing without coordinated omission
wrk        running wrk and reading its results
procs      starting servers so that nothing outlives the benchmark
memory     peak RSS of a server's processes
nginx, original, targets   the servers ``--compare`` starts, each deployed as it would be for speed
runner     phases per scenario, scenarios per target
results, report, chart     figures and ratios, Markdown tables in the article's format, the chart
cli        the command line
relay      a TCP relay that delays each direction, where the kernel has no netem (its own process)
pipelines  fsspec's cat of many small files: axon:// against HTTPFileSystem on Axon and nginx
           (``python -m axon.bench.pipelines``; needs the fsspec extra)
"""
