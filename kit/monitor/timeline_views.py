"""What a memory timeline shows once it has recorded: the table per workspace and thread
(`summary`, the notebook's HTML), one cycle's events (`cycle_events`), the bar chart of a cycle
(`plot`), and Chrome's trace event format (`trace_events`, `save_trace`: chrome://tracing,
ui.perfetto.dev). A mixin of kit.timeline.MemoryTimeline, which records the events these read.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from kit.files import atomic_write

__all__ = ["FIELDS", "TimelineError", "TimelineViews"]

FIELDS = ("time", "thread", "device", "workspace", "cycle", "offset", "nbytes", "array_type", "kind")


class TimelineError(RuntimeError):
    """A timeline started twice, or while another records, or plotted with nothing to draw."""


# ND4J's ArrayType names in a fixed order, so a type keeps its colour from plot to plot
_TYPE_ORDER = ("INPUT", "ACTIVATIONS", "ACTIVATION_GRAD", "FF_WORKING_MEM", "BP_WORKING_MEM", "UPDATER_WORKING_MEM")
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
_UNTYPED = "#c7c7c7"
_COUNTED = {"spill": "spills", "reset": "resets", "release": "releases", "replay": "replays"}  # kind: summary column


class TimelineViews:
    """The tables, plot and trace of a MemoryTimeline's events and cycles."""

    def summary(self) -> list[dict[str, Any]]:
        """Per workspace (and thread and device; workspace None: the heap): complete cycles,
        allocations (allocs and spills, as Workspace.allocations counts them), bytes, the peak
        offset + nbytes of a carved array, spills and spilled bytes, resets, releases."""
        rows: dict[tuple, dict[str, Any]] = {}
        for e in self.events:
            key = _key(e)
            row = rows.get(key)
            if row is None:
                row = rows[key] = {"workspace": key[0], "thread": key[1], "device": key[2], "cycles": 0}
                # a workspace that carved nothing peaked at offset 0, as Workspace.peak_used says;
                # the heap has no offsets
                peak = None if key[0] is None else 0
                row.update(allocations=0, bytes=0, peak_offset=peak, spills=0, spilled_bytes=0, resets=0, releases=0)
                row["replays"] = 0
            kind, n = e["kind"], e["nbytes"]
            if kind in _COUNTED:
                row[_COUNTED[kind]] += 1
            if kind in ("alloc", "spill"):
                row["allocations"] += 1
                row["bytes"] += n
            if kind == "spill":
                row["spilled_bytes"] += n
            elif kind == "alloc" and e["offset"] is not None:
                row["peak_offset"] = max(row["peak_offset"], e["offset"] + n)
        for c in self.cycles:
            key = _key(c)
            if key in rows:
                rows[key]["cycles"] += 1
        return sorted(rows.values(), key=lambda r: (r["workspace"] is None, r["workspace"] or "", r["thread"]))

    def _repr_html_(self) -> str:
        cols = ("workspace", "thread", "device", "cycles", "allocations", "bytes", "peak_offset", "spills", "releases")
        head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in cols)
        body = []
        for row in self.summary():
            cells = []
            for c in cols:
                v = row[c]
                text = "(heap)" if c == "workspace" and v is None else ("-" if v is None else v)
                text = f"{text:,}" if isinstance(text, int) else html.escape(str(text))
                cells.append(f"<td>{text}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        state = "recording" if self.recording else "stopped"
        caption = f"memory timeline ({state}): {len(self._rows):,} events, {len(self._cycle_rows):,} cycles"
        return f"<table><caption>{caption}</caption><tr>{head}</tr>{''.join(body)}</table>"

    def __repr__(self) -> str:
        state = "recording" if self.recording else "stopped"
        return f"<MemoryTimeline {state}: {len(self._rows)} events, {len(self._cycle_rows)} cycles>"

    # ---- one cycle, drawn ----------------------------------------------------------
    def _choose(self, cycle: int | None, workspace: str | None, thread: str | None) -> dict[str, Any]:
        """The cycle record plot() draws: by default the last complete cycle of the workspace
        whose largest cycle took the most bytes."""
        done = [c for c in self.cycles if c["start"] is not None]
        if workspace is not None:
            done = [c for c in done if c["workspace"] == workspace]
        if thread is not None:
            done = [c for c in done if c["thread"] == thread]
        if not done:
            names = sorted({(c["workspace"], c["thread"]) for c in self.cycles})
            raise TimelineError(
                f"no complete workspace cycle recorded for workspace={workspace!r} thread={thread!r}; "
                f"recorded: {names or 'none'} (a cycle counts once it started and ended while recording)"
            )
        if workspace is None or thread is None:
            best = max(done, key=lambda c: c["bytes"])
            done = [c for c in done if _key(c) == _key(best)]
        if cycle is None:
            return done[-1]
        chosen = [c for c in done if c["cycle"] == cycle]
        if not chosen:
            raise TimelineError(
                f"workspace {done[0]['workspace']!r} has no complete cycle {cycle} in this timeline; "
                f"its complete cycles: {[c['cycle'] for c in done]}"
            )
        return chosen[-1]

    def cycle_events(
        self, cycle: int | None = None, workspace: str | None = None, thread: str | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The chosen cycle (as plot() chooses) and its allocs and spills, in order."""
        c = self._choose(cycle, workspace, thread)
        found = [
            e
            for e in self.events
            if e["kind"] in ("alloc", "spill") and _key(e) == _key(c) and e["cycle"] == c["cycle"]
        ]
        return c, found

    def plot(self, cycle: int | None = None, workspace: str | None = None, thread: str | None = None) -> Any:
        """One cycle of one workspace as a matplotlib Figure (by default the last complete cycle of
        the workspace whose largest cycle took the most bytes): each allocation a horizontal bar from
        its offset to offset + nbytes, one row per allocation in the order they were made (first at
        the top), coloured by ArrayType; spills hatched past the arena's end; the arena's capacity
        at the cycle's end dashed."""
        from matplotlib.figure import Figure

        c, allocs = self.cycle_events(cycle, workspace, thread)
        types = [e["array_type"] for e in allocs]
        order = [t for t in _TYPE_ORDER if t in types] + sorted({t for t in types if t and t not in _TYPE_ORDER})
        known = list(_TYPE_ORDER) + [t for t in order if t not in _TYPE_ORDER]
        colours = {t: _PALETTE[i % len(_PALETTE)] for i, t in enumerate(known)}
        fig = Figure(figsize=(8, max(2.5, 0.22 * len(allocs) + 1.5)), layout="constrained")
        ax = fig.add_subplot()
        spill_at = max([c["capacity"]] + [e["offset"] + e["nbytes"] for e in allocs if e["offset"] is not None])
        for i, e in enumerate(allocs):
            colour = colours.get(e["array_type"], _UNTYPED)
            if e["offset"] is None:  # a spill: heap memory, drawn past the arena
                ax.barh(i, e["nbytes"], left=spill_at, color=colour, hatch="//", edgecolor="black", linewidth=0.5)
                spill_at += e["nbytes"]
            else:
                ax.barh(i, e["nbytes"], left=e["offset"], color=colour, edgecolor="white", linewidth=0.5)
        ax.axvline(c["capacity"], color="#333", linestyle="--", linewidth=1)
        ax.set_ylim(len(allocs) - 0.5, -0.5)
        ax.set_xlabel("bytes from the arena start")
        ax.set_ylabel("allocation, in order made")
        ax.set_title(
            f"{c['workspace']}, cycle {c['cycle']} ({c['thread']}, {c['device']}): {len(allocs)} allocations, "
            f"{c['bytes']:,} bytes",
            fontsize=9,
        )
        handles = _legend_handles([colours[t] for t in order], order, allocs, c["capacity"])
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, title="ArrayType", title_fontsize=8)
        return fig

    # ---- Chrome trace --------------------------------------------------------------
    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace events: "X" per workspace cycle, "C" arena bytes in use per workspace (and
        thread), "i" per event; one tid per thread (named by "M" metadata), the device in args."""
        events, cycles, pid = self.events, self.cycles, os.getpid()
        tids: dict[str, int] = {}
        for t in sorted([(e["time"], e["thread"]) for e in events] + [(c["end"], c["thread"]) for c in cycles]):
            tids.setdefault(t[1], len(tids) + 1)
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": "kit memory timeline"}}
        ]
        for t, i in tids.items():
            meta.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": i, "args": {"name": t}})
        # a counter is named per process: a workspace name on several threads gets one per thread
        threads_of: dict[str, set[str]] = {}
        for e in events:
            if e["workspace"] is not None:
                threads_of.setdefault(e["workspace"], set()).add(e["thread"])
        timed = []
        for c in cycles:
            start = c["start"] if c["start"] is not None else 0.0
            args = {k: c[k] for k in ("workspace", "device", "cycle", "bytes", "spilled_bytes", "capacity")}
            name = f"{c['workspace']} cycle {c['cycle']}"
            timed.append({"name": name, "cat": "workspace", "ph": "X", "ts": _us(start), "dur": _us(c["end"] - start)})
            timed[-1].update(pid=pid, tid=tids[c["thread"]], args=args)
        for e in events:
            ts, tid, ws = _us(e["time"]), tids[e["thread"]], e["workspace"]
            name = e["kind"] if e["array_type"] is None else f"{e['kind']} {e['array_type']}"
            args = {k: e[k] for k in FIELDS if k not in ("time", "thread", "kind")}
            cat = "heap" if ws is None else "workspace"
            timed.append(
                {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid, "args": args}
            )
            if ws is not None and e["kind"] in ("alloc", "reset"):
                counter = f"{ws} arena bytes in use" + (f" [{e['thread']}]" if len(threads_of[ws]) > 1 else "")
                value = e["offset"] + e["nbytes"] if e["kind"] == "alloc" else e["offset"]
                timed.append({"name": counter, "ph": "C", "ts": ts, "pid": pid, "tid": tid, "args": {"bytes": value}})
        timed.sort(key=lambda ev: ev["ts"])
        return meta + timed

    def save_trace(self, path: str | os.PathLike) -> Path:
        """Write Chrome's trace event format ({"traceEvents": [...]}) to `path`, atomically (a
        temporary file beside it, then os.replace). Open it in ui.perfetto.dev or chrome://tracing."""
        doc = {"traceEvents": self.trace_events(), "displayTimeUnit": "ms"}
        with atomic_write(path, what="save_trace") as f:  # kit.files: through a link, the old file whole on failure
            json.dump(doc, f)
        return Path(path)


def _key(row: dict[str, Any]) -> tuple:
    """Which workspace an event or cycle belongs to: a name is per thread and device."""
    return row["workspace"], row["thread"], row["device"]


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _legend_handles(colours: list[str], order: list[str], allocs: list[dict[str, Any]], capacity: int) -> list[Any]:
    """The legend of a cycle's plot: each ArrayType's colour, the untyped and the spills where
    there are any, and the arena's capacity line."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=colour, label=t) for colour, t in zip(colours, order)]
    if None in (e["array_type"] for e in allocs):
        handles.append(Patch(color=_UNTYPED, label="untyped (a kit op)"))
    if any(e["offset"] is None for e in allocs):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="spill (heap)"))
    handles.append(Line2D([], [], color="#333", linestyle="--", label=f"arena capacity ({capacity:,} B)"))
    return handles
