"""An evaluation report on disk: `report.json` (everything, for machines), `report.md`
(the tables a person reads) and PNG plots: accuracy by tool, accuracy against step index
(one-step and closed-loop), and the model against the baselines.

    from simworld.eval.report import write_report
    paths = write_report(report, Path("out/eval"))     # the dict `evaluate` returns

matplotlib is imported only when the plots are drawn (the `eval` extra provides it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LABELS = {
    "readable": "readable",
    "exact": "exact",
    "json_canonical": "JSON-canonical",
    "field_f1": "field F1",
    "error_flag": "error flag",
    "schema_valid": "schema valid",
    "rouge_l": "ROUGE-L",
    "cosine": "cosine",
    "cosine_tau": "cosine≥τ",
    "state_match": "next state",
    "state_fields": "state fields",
}
CURVE_ROWS = 20  # the Markdown shows the first steps; report.json has them all
CURVE_ROWS = 20  # the Markdown shows the first steps of the closed-loop curve
PLOTS = ("baselines.png", "accuracy_by_tool.png", "accuracy_by_step.png")


def write_report(report: dict[str, Any], out: Path) -> list[Path]:
    """Write the JSON, the Markdown and the plots; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "report.md"]
    paths[0].write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    paths[1].write_text(markdown(report))
    return paths + plot(report, out)


def _cell(summary: dict[str, Any] | None, ci: bool = False) -> str:
    if not summary or not summary["n"]:
        return "–"
    text = f"{summary['mean']:.3f}"
    return text + f" [{summary['low']:.3f}, {summary['high']:.3f}]" if ci else text


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _results_table(
    results: dict[str, dict[str, Any]], metrics: Sequence[str], headline: str
) -> list[str]:
    shown = [m for m in metrics if any(m in r for r in results.values())]
    header = ["predictor", *(LABELS[m] + (" (95% CI)" if m == headline else "") for m in shown)]
    rows = [
        [name, *(_cell(r.get(m), ci=m == headline) for m in shown)] for name, r in results.items()
    ]
    return _table(header, rows)


def markdown(report: dict[str, Any]) -> str:
    """The report's tables as Markdown."""
    data, headline = report["data"], report["headline"]
    envs = ", ".join(
        f"{env} {d['episodes']} episodes / {d['steps']} steps" for env, d in data["per_env"].items()
    )
    lines = [
        f"# simworld eval: `{report['model']}`",
        "",
        f"{data['steps']} steps of {data['episodes']} episodes ({envs}); "
        f"τ = {report['config']['tau']} for cosine≥τ. Headline metric: {LABELS[headline]}.",
        *_schema_note(report.get("schemas_replaced", {})),
        "",
        "## Model against baselines (every step)",
        "",
        *_results_table(report["results"], report["metrics"], headline),
    ]
    if "results_by_env" in report:
        by_env = report["results_by_env"]
        names = list(data["per_env"])
        rows = [[n, *(_cell(r.get(env), ci=True) for env in names)] for n, r in by_env.items()]
        lines += ["", f"## {LABELS[headline]} by env", "", *_table(["predictor", *names], rows)]
    if "llm_sample" in report:
        sample = report["llm_sample"]
        lines += [
            "",
            f"## Prompted LLM ({sample['llm']}) on a fixed sample of {sample['size']} steps",
            "",
            *_results_table(sample["results"], report["metrics"], headline),
        ]
    for grouping, title in (
        ("env", "env"),
        ("outcome", "real outcome"),
        ("step", "step index"),
        ("tool", "tool"),
    ):
        per_metric = report["breakdowns"][grouping]
        metrics = list(per_metric)
        groups = list(per_metric[metrics[0]])
        rows = [
            [
                g,
                str(per_metric[metrics[0]][g]["n"]),
                *(_cell(per_metric[m][g], ci=m == headline) for m in metrics),
            ]
            for g in groups
        ]
        lines += [
            "",
            f"## Model by {title}",
            "",
            *_table([title, "steps", *(LABELS[m] for m in metrics)], rows),
        ]
    if "closed_loop" in report:
        lines += ["", *_closed_loop_lines(report["closed_loop"])]
    seconds = ", ".join(f"{k} {v} s" for k, v in report["seconds"].items())
    return "\n".join([*lines, "", f"Wall time: {seconds}.", ""])


def _schema_note(replaced: dict[str, list[str]]) -> list[str]:
    if not replaced:
        return []
    listed = "; ".join(f"{env}: {', '.join(names)}" for env, names in replaced.items())
    return [
        "Schema validity checks each tool's declared output schema, except where the recorded "
        f"train results break it; those are inferred from the train results instead ({listed})."
    ]


def _closed_loop_lines(closed: dict[str, Any]) -> list[str]:
    def fmt(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    rows = [
        [
            str(p["step"]),
            str(p["episodes"]),
            fmt(p["one_step"]),
            fmt(p["closed_loop"]),
            fmt(p["state_one_step"]),
            fmt(p["state_closed_loop"]),
        ]
        for p in closed["curve"][:CURVE_ROWS]
    ]
    more = len(closed["curve"]) - len(rows)
    tail = ["", f"The next {more} steps are in report.json."] if more else []
    summary = ", ".join(
        f"{k}: {fmt(v) if isinstance(v, float) or v is None else v}"
        for k, v in closed["summary"].items()
    )
    return [
        "## Closed loop: the model on its own predictions",
        "",
        f"Each episode's actions replayed through the model, carrying its own predicted "
        f"observations and state; {LABELS[closed['metric']]} per step index, against the "
        f"one-step (teacher-forced) score of the same steps. Patches that failed to apply: "
        f"{closed['patch_failures']}. Summary: {summary}.",
        "",
        *_table(
            ["step", "episodes", "one-step", "closed-loop", "state one-step", "state closed-loop"],
            rows,
        ),
        *tail,
    ]


def plot(report: dict[str, Any], out: Path) -> list[Path]:
    """Draw the three plots (PNG); return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    headline = report["headline"]
    paths = [out / name for name in PLOTS]
    # 1. The model against the baselines on the headline metric and cosine, with CIs.
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(report["results"])
    shown = [m for m in (headline, "field_f1", "cosine_tau") if m in report["results"]["model"]]
    width = 0.8 / len(shown)
    for k, metric in enumerate(shown):
        stats = [report["results"][n].get(metric, {"mean": 0, "low": 0, "high": 0}) for n in names]
        means = [s["mean"] for s in stats]
        err = [[s["mean"] - s["low"] for s in stats], [s["high"] - s["mean"] for s in stats]]
        ax.bar(
            [i + k * width for i in range(len(names))],
            means,
            width,
            yerr=err,
            label=LABELS[metric],
            capsize=3,
        )
    ax.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(names))], names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("score (95% CI)")
    ax.set_title("model against baselines")
    ax.legend(fontsize=8)
    _save(fig, paths[0])
    # 2. Headline accuracy by tool (the 30 most frequent), sorted.
    tools = report["breakdowns"]["tool"][headline]
    top = sorted(tools.items(), key=lambda kv: -kv[1]["n"])[:30]
    top.sort(key=lambda kv: kv[1]["mean"])
    fig, ax = plt.subplots(figsize=(7, max(3.0, 0.22 * len(top) + 1)))
    ax.barh([f"{k} ({v['n']})" for k, v in top], [v["mean"] for _, v in top])
    ax.set_xlim(0, 1)
    ax.set_xlabel(LABELS[headline])
    ax.set_title("accuracy by tool (steps)")
    ax.tick_params(axis="y", labelsize=7)
    _save(fig, paths[1])
    # 3. Accuracy against step index, one-step and closed-loop, for the observation and
    # (where the env has states) the next state; only steps that >= 10 episodes reach.
    fig, ax = plt.subplots(figsize=(7, 3.5))
    curve = [p for p in report.get("closed_loop", {}).get("curve", []) if p["episodes"] >= 10]
    if curve:
        steps = [p["step"] for p in curve]
        for key, label, style in (
            ("one_step", "observation, one-step", "o--"),
            ("closed_loop", "observation, closed-loop", "o-"),
            ("state_one_step", "next state, one-step", "s--"),
            ("state_closed_loop", "next state, closed-loop", "s-"),
        ):
            values = [p[key] for p in curve]
            if any(v is not None for v in values):
                ax.plot(steps, [math.nan if v is None else v for v in values], style, label=label)
        ax.set_xlabel("step index (steps that at least 10 episodes reach)")
    else:
        buckets = report["breakdowns"]["step"][headline]
        ax.plot(list(buckets), [v["mean"] for v in buckets.values()], marker="o", label="one-step")
        ax.set_xlabel("step index (bucket)")
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"{LABELS[headline]} / state match")
    ax.set_title("accuracy against step")
    ax.legend(fontsize=7)
    _save(fig, paths[2])
    return paths


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


__all__ = ["PLOTS", "markdown", "plot", "write_report"]
