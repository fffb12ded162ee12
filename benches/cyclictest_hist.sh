# Sourced by the bench scripts that put rtloop beside cyclictest.

# cyclictest -h N prints one "%06d %06d" row per µs bucket: latency, count. pct_from_hist FILE
# [SLACK] prints "p50 p99 late mean max n" (µs, mean to 0.01): late counts the wakeups later
# than SLACK µs (default: none counted) — what would have been an overrun for a loop whose
# cycle takes period − SLACK after it wakes; n is the number of wakeups.
pct_from_hist() {
  python3 -c '
import sys
slack = float(sys.argv[2]) if len(sys.argv) > 2 else float("inf")
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
h = [(int(r[0]), int(r[1])) for r in rows if len(r) == 2]
# Wakeups beyond the histogram (-h N µs) are only counted, as overflows: late whatever the slack.
over = sum(int(l.split(":")[1].split()[0]) for l in open(sys.argv[1]) if l.startswith("# Histogram Overflows:"))
n = sum(c for _, c in h) + over
def q(p):
    acc = 0
    for v, c in h:
        acc += c
        if acc >= p * n:
            return v
    return h[-1][0] if h else 0
# Bucket v holds the wakeups in [v, v+1) µs (cyclictest truncates to whole µs): the bucket
# the slack falls in counts for the part of it above the slack.
late = round(sum(c if v >= slack else c * (v + 1 - slack) for v, c in h if v + 1 > slack)) + (over if slack != float("inf") else 0)
mean = sum(v * c for v, c in h) / max(n, 1)
mx = max((v for v, c in h if c), default=0)
print(q(0.5), q(0.99), late, "%.2f" % mean, mx, n)' "$@"
}
