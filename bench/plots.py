#!/usr/bin/python3
"""PNG plots of one `make bench` run (issue 16, item 5), from the JSON the
benches wrote into one directory (bench/run.sh: $BUILD/bench/):

  latency.png     start-up latency per configuration, every sample
                  (hyperfine --export-json: isolation.json), bare /bin/true,
                  cordon --isolation none and standard, bubblewrap, firejail
                  and unshare where they ran, and the daemon's
                  POST /v1/runs (daemon.json); log scale
  throughput.png  runs per second against clients (1, 2, 4, 8) and against
                  cores (the daemon under taskset -c 0 and -c 0,1), from
                  daemon.json
  gateway.png     Kernel Gateway `1+1` round trips, new and open websocket,
                  cordon against jupyter-server and the direct ZeroMQ floor
                  (gateway.json)
  memory.png      the daemon's VmRSS during a 2 GB output flood, with 64
                  live sessions, and over 1000 ended ones (memory.json)

A plot whose JSON is missing is skipped (and says so). Agg backend, 100 dpi.
meta.json (written by bench/run.sh: date, load) goes into each plot's
footer.

Usage: bench/plots.py DIR [--out DIR]"""
import argparse
import json
import os
import statistics
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 100


def load(directory, name):
    """The JSON, with "_older": its date when it is older than meta.json
    (a section that this run of bench/run.sh left out: an earlier run's)."""
    path = os.path.join(directory, name)
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError:
        return None
    meta = os.path.join(directory, "meta.json")
    if name != "meta.json" and os.path.exists(meta) and \
            os.path.getmtime(path) < os.path.getmtime(meta):
        data["_older"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(path)))
    return data


def footer(fig, meta, what, data=None):
    text = f"cordon `make bench`: {what}"
    if data and data.get("_older"):
        text += f"; from an earlier run, {data['_older']}"
    elif meta:
        text += f"; {meta.get('date', '?')}, {meta.get('cpus', '?')} cores, " \
                f"load {meta.get('load_start', '?')} at the start of the run"
    fig.text(0.01, 0.01, text, fontsize=7, color="0.35")


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path} ({os.path.getsize(path) // 1024} KiB)")


def boxes(ax, labels, samples, colors):
    """Horizontal box plots (whiskers 5-95%), the median written beside each."""
    bp = ax.boxplot(samples, vert=False, whis=(5, 95), widths=0.6, patch_artist=True,
                    showfliers=True, flierprops={"markersize": 2, "alpha": 0.4})
    for patch, color in zip(bp["boxes"], colors):
        patch.set_facecolor(color)
        patch.set_alpha(0.7)
    for median in bp["medians"]:
        median.set_color("black")
    ax.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
    for i, s in enumerate(samples, start=1):
        m = statistics.median(s)
        ax.annotate(f"{m:.2f} ms", (max(s), i), xytext=(4, -3), textcoords="offset points",
                    fontsize=7)
    ax.invert_yaxis()
    ax.grid(axis="x", which="both", alpha=0.3)


def latency(directory, out, meta):
    iso = load(directory, "isolation.json")
    if iso is None:
        return "isolation.json is missing"
    names = iso.get("names") or [r["command"] for r in iso["results"]]
    labels, samples, colors = [], [], []
    for name, r in zip(names, iso["results"]):
        labels.append(name)
        samples.append([t * 1000 for t in r["times"]])
        colors.append("tab:blue" if name.startswith("cordon") else "tab:gray")
    daemon = load(directory, "daemon.json")
    if daemon:
        for name, s in daemon["latency_ms"].items():
            if name.startswith("POST /v1/runs"):
                level = name.rsplit(", ", 1)[-1].rstrip(")")
                labels.append(f"daemon: POST /v1/runs ({level})")
                samples.append(s)
                colors.append("tab:green")
    height = 0.45 * len(labels) + 1.6
    fig, ax = plt.subplots(figsize=(8, height))
    boxes(ax, labels, samples, colors)
    ax.set_xscale("log")
    ax.set_xlabel("ms per /bin/true, whole process (log scale); box: quartiles, "
                  "whiskers: 5-95%")
    ax.set_title("Start-up latency per configuration (every sample)", fontsize=10)
    fig.subplots_adjust(left=0.33, right=0.93, top=1 - 0.4 / height, bottom=0.8 / height)
    footer(fig, meta, f"{len(samples[0])} runs each (hyperfine -N), "
                      f"{daemon['rounds'] if daemon else 0} HTTP runs", iso)
    save(fig, out, "latency.png")


def throughput(directory, out, meta):
    d = load(directory, "daemon.json")
    if d is None or not d.get("clients"):
        return "daemon.json is missing (or has no throughput)"
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), width_ratios=(1, 1))
    colors = {"standard": "tab:blue", "none": "tab:orange", "bwrap": "tab:gray", "bare": "silver"}
    for level, by in d["clients"].items():
        xs = sorted(int(n) for n in by)
        ys = [by[str(n)]["runs_per_s"] for n in xs]
        left.plot(xs, ys, "o-", color=colors.get(level), label=f"isolation {level}")
        for x, y in zip(xs, ys):
            left.annotate(f"{y:.0f}", (x, y), xytext=(0, 5), textcoords="offset points",
                          fontsize=7, ha="center")
    left.set_xscale("log", base=2)
    left.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    left.set_xlabel("concurrent clients (keep-alive)")
    left.set_ylabel("runs of /bin/true per second")
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    left.set_title("against clients (both cores)", fontsize=9)
    levels = list(d["cores"])
    width = 0.38
    for i, level in enumerate(levels):
        c = d["cores"][level]
        for j, key in enumerate(("1 core", "2 cores")):
            if key in c:
                x = i + (j - 0.5) * width
                y = c[key]["runs_per_s"]
                right.bar(x, y, width, color=colors.get(level), alpha=0.5 if j == 0 else 0.9)
                right.annotate(f"{key.split()[0]}\n{y:.0f}", (x, y), xytext=(0, 2),
                               textcoords="offset points", fontsize=7, ha="center")
        if "ratio" in c:
            right.annotate(f"{c['ratio']:.2f}x", (i, 0), xytext=(0, 4), textcoords="offset points",
                           ha="center", fontsize=9, fontweight="bold",
                           color="black" if level == "bare" else "white")
    right.set_xticks(range(len(levels)),
                     [{"bwrap": "bwrap\n(4 loops)", "bare": "bare /bin/true\n(4 loops)"}.get(
                         lv, f"isolation\n{lv}") for lv in levels],
                     fontsize=8)
    right.set_ylim(0, right.get_ylim()[1] * 1.2)
    right.set_title("against cores (1, 2): 4 clients, daemon under taskset\n"
                    "(2 cores / 1 core; issue 16 targets 1.7x)", fontsize=9)
    right.grid(axis="y", alpha=0.3)
    fig.suptitle("Daemon throughput: POST /v1/runs /bin/true", fontsize=10)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.82, bottom=0.2, wspace=0.25)
    footer(fig, meta, "bench/daemon.py", d)
    save(fig, out, "throughput.png")


def gateway(directory, out, meta):
    g = load(directory, "gateway.json")
    if g is None:
        return "gateway.json is missing"
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True)
    for ax, key, title in ((axes[0], "new_ws", "`1+1`, a new websocket each"),
                           (axes[1], "open_ws", "`1+1`, one open websocket")):
        subjects = [s for s in g["subjects"] if s[key]]
        labels = [s["name"] for s in subjects]
        colors = ["tab:gray" if s["key"] == "jupyter" else
                  "tab:olive" if s["key"] in ("direct", "sandboxed") else "tab:blue"
                  for s in subjects]
        boxes(ax, labels, [s[key] for s in subjects], colors)
        if key == "open_ws" and g.get("cpp_floor"):
            x = g["cpp_floor"]["round_trip_ms"]
            ax.axvline(x, color="tab:red", linestyle=":", linewidth=1)
            ax.annotate(f"C++ ZeroMQ client (reference) {x:.2f} ms", (x, 0.03), fontsize=7,
                        color="tab:red", xytext=(3, 0), textcoords="offset points",
                        xycoords=ax.get_xaxis_transform())
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
    axes[1].set_xlabel("ms (log scale); box: quartiles, whiskers: 5-95%")
    fig.suptitle("Kernel Gateway round trips, the same ipykernel behind each", fontsize=10)
    fig.subplots_adjust(left=0.3, right=0.93, top=0.9, bottom=0.14, hspace=0.3)
    footer(fig, meta, f"bench/gateway_bench.py, {g['runs']} round trips each, taking turns", g)
    save(fig, out, "gateway.png")


def memory(directory, out, meta):
    m = load(directory, "memory.json")
    if m is None:
        return "memory.json is missing"
    MiB = 1 << 20
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    for case in m["cases"]:
        ax = left if case["case"].startswith("flood") else right
        xs = [t for t, _ in case["series"]]
        ys = [r / MiB for _, r in case["series"]]
        line, = ax.plot(xs, ys, linewidth=1,
                        label=f"{case['case']}: peak {case['peak'] / MiB:.1f} MiB")
        ax.axhline(case["peak"] / MiB, color=line.get_color(), linestyle=":", linewidth=0.8)
    left.axhline(64, color="tab:red", linestyle="--", linewidth=1, label="target 64 MiB")
    left.set_title("a 2 GB output flood (`yes | head -c 2G`)", fontsize=9)
    right.set_title("sessions created one after another (live, or each closed in turn)",
                    fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("s")
        ax.set_ylabel("daemon VmRSS, MiB")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("The daemon's resident memory under load (sampled every 20 ms; "
                 "dotted: VmHWM)", fontsize=10)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.85, bottom=0.2, wspace=0.25)
    footer(fig, meta, "bench/memory.py, default limits, a daemon per case", m)
    save(fig, out, "memory.png")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir", help="where the benches wrote their JSON")
    p.add_argument("--out", help="where the PNGs go (default: DIR)")
    a = p.parse_args()
    out = a.out or a.dir
    os.makedirs(out, exist_ok=True)
    meta = load(a.dir, "meta.json")
    print(f"== plots from {a.dir}")
    for fn in (latency, throughput, gateway, memory):
        why = fn(a.dir, out, meta)
        if why:
            print(f"(no {fn.__name__}.png: {why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
