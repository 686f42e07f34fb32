#!/usr/bin/env bash
# fc1 bias vs bias + GELU (ping-pong), SM clock and power sampled every 50 ms during each run.
for v in bias gelu bias gelu; do
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 50 > /tmp/clk_$v.csv &
  P=$!
  python benchmarks/probe/gelu_sass.py $v time 2>/dev/null
  kill $P
  python - "$v" <<'PY'
import sys, statistics
rows = [l.split(",") for l in open(f"/tmp/clk_{sys.argv[1]}.csv") if l.strip()]
clk = [float(r[0]) for r in rows]; pw = [float(r[1]) for r in rows]
top = sorted(range(len(pw)), key=lambda i: -pw[i])[: max(1, len(pw) // 3)]
print(sys.argv[1], "samples", len(rows), "busiest third: SM MHz", round(statistics.mean(clk[i] for i in top)),
      "W", round(statistics.mean(pw[i] for i in top)), "min MHz", min(clk))
PY
done
