"""The report page of one day's run: server-rendered HTML, inline SVG charts, nothing fetched.

Per model: the headline numbers, the score histogram, today's output-length distribution
against the baseline days', and the answers an engineer should read first — the lowest
scored, the refused, the hallucinated — with the judge's reasons.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from monitor.quality.calibration import expected, is_gold
from monitor.quality.checks import Judged, counted_refusals
from monitor.quality.store import QualityJudgment, QualityRun
from monitor.quality.summary import QualitySummary
from monitor.rulefiles.rules import RulesError, resolve
from monitor.rulefiles.thresholds import RuleThreshold, rule_thresholds

log = logging.getLogger("monitor.quality.report")

WORST = 10
KS_SIGNIFICANCE = 0.05  # the usual 5 % level: no alert rule compares the KS p-value
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#1d2430;padding:0 1em}
h1{font-size:22px}h2{font-size:18px;margin-top:2em;border-bottom:1px solid #ccd}h3{font-size:15px}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #e3e6ee;padding:4px 6px;text-align:left;
vertical-align:top}th{background:#f3f5f9}.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #dde;border-radius:6px;padding:8px 12px;
min-width:120px}.card b{display:block;font-size:20px}.bad{color:#b3261e}.charts{display:flex;gap:24px;
flex-wrap:wrap}.text{white-space:pre-wrap;max-height:9em;overflow:auto;font-size:13px}.muted{color:#667}
td:nth-child(2){width:22%}td:nth-child(4){width:24%}
nav{display:flex;gap:1em;flex-wrap:wrap}svg{max-width:100%;height:auto}td{overflow-wrap:anywhere}
@media (max-width:600px){body{margin:1em auto}td:nth-child(2),td:nth-child(4){width:auto}
table,tbody,tr,td,th{display:block;width:auto}tr{border-bottom:1px solid #ccd;padding:4px 0}th{display:none}}
"""
_HEAD = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
         '<meta name="viewport" content="width=device-width, initial-scale=1">')



@dataclass(frozen=True)
class ModelReport:
    run: QualityRun
    summary: QualitySummary
    judgments: Sequence[QualityJudgment]
    baseline_lengths: Sequence[int]


def _nav(date: str | None, dates: Sequence[str]) -> str:
    """Back to the overview, the index of runs, and the dates either side of this one."""
    links = ['<a href="/">← overview</a>', '<a href="/reports/quality">all runs</a>']
    ordered = sorted(set(dates))
    if date in ordered:
        at = ordered.index(date)
        if at > 0:
            links.append(f'<a href="/reports/quality/{escape(ordered[at - 1])}">← {escape(ordered[at - 1])}</a>')
        if at + 1 < len(ordered):
            links.append(f'<a href="/reports/quality/{escape(ordered[at + 1])}">{escape(ordered[at + 1])} →</a>')
    return f"<nav>{' · '.join(links)}</nav>"


@functools.cache
def shipped_thresholds() -> tuple[RuleThreshold, ...]:
    """The thresholds of the `alerts/` rules the monitor runs with (looked up as the evaluator does:
    the working directory, then the project). Unreadable rules leave the cards unflagged."""
    try:
        return tuple(rule_thresholds(resolve(Path("alerts"))))
    except RulesError as exc:
        log.warning("quality report: cannot read the alert rules' thresholds: %s", exc)
        return ()


def render_index(runs: Sequence[tuple[str, str, QualitySummary]]) -> str:
    """GET /reports/quality: every finished run (date, model, summary), newest first."""
    rows = [f'<tr><td><a href="/reports/quality/{escape(date)}">{escape(date)}</a></td><td>{escape(model)}</td>'
            f'<td class="n">{escape(_num(s.score_mean, 2))}</td><td class="n">{s.samples or 0}</td>'
            f'<td class="n">{escape(_pct(s.refusal_ratio))}</td>'
            f'<td class="n">{escape(_pct(s.hallucination_ratio))}</td></tr>' for date, model, s in runs]
    table = ("<table><tr><th>date</th><th>model</th><th class=\"n\">score</th><th class=\"n\">samples</th>"
             "<th class=\"n\">refusals</th><th class=\"n\">hallucinations</th></tr>" + "".join(rows) + "</table>"
             if rows else '<p class="muted">No finished quality run yet (daily; <code>infermon quality run</code> '
             "starts one now).</p>")
    return (f"{_HEAD}<title>Quality runs</title><style>{_CSS}</style></head><body>{_nav(None, [])}"
            f"<h1>Quality runs</h1>{table}</body></html>")


def render_report(date: str, models: Sequence[ModelReport], dates: Sequence[str] = (),
                  thresholds: Sequence[RuleThreshold] | None = None) -> str:
    """The day's page; a number is flagged where an alert rule on its metric fires (`thresholds`:
    the shipped rules' by default)."""
    rules = shipped_thresholds() if thresholds is None else thresholds
    body = [_nav(date, dates), f"<h1>Quality run {escape(date)}</h1>",
            '<p class="muted">Judged by an LLM on a daily sample; lengths in tokens (estimated where the '
            "request did not say). Compared with the previous days' sampled responses.</p>"]
    for model in models:
        body.append(_model_section(model, rules))
    return (f"{_HEAD}<title>Quality {escape(date)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>")


def _model_section(model: ModelReport, rules: Sequence[RuleThreshold]) -> str:
    s = model.summary
    samples = [j for j in model.judgments if not is_gold(j.sample_key)]
    gold = [j for j in model.judgments if is_gold(j.sample_key)]

    def fires(metric: str, value: float | None) -> bool:
        return value is not None and any(r.fires(value) for r in rules if r.metric == metric)

    cards = [
        ("score mean", _num(s.score_mean, 2), fires("inference_quality_score_mean", s.score_mean)),
        ("vs baseline", _num(s.score_baseline_delta, 2, signed=True),
         fires("inference_quality_score_baseline_delta", s.score_baseline_delta)),
        ("judged", f"{s.samples or 0} / {s.sampled or 0}", False),
        ("refusals", _pct(s.refusal_ratio) + _ci(s.refusal_ratio_ci95),
         fires("inference_quality_refusal_ratio", s.refusal_ratio)),
        ("hallucinations", _pct(s.hallucination_ratio),
         fires("inference_quality_hallucination_ratio", s.hallucination_ratio)),
        ("length PSI", _num(s.psi, 3), fires("inference_quality_output_length_psi", s.psi)),
        ("KS p-value", _num(s.ks_pvalue, 3), s.ks_pvalue is not None and s.ks_pvalue < KS_SIGNIFICANCE),
        ("mean length change", _pct(s.output_length_mean_change_ratio, signed=True),
         fires("inference_quality_output_length_mean_change_ratio", s.output_length_mean_change_ratio)),
        ("judge errors", str(s.judge_errors or 0), bool(s.judge_errors)),
        ("suspect verdicts", str(s.suspect_verdicts or 0), bool(s.suspect_verdicts)),
        ("judge cost", "unpriced" if s.judge_priced is False else f"${s.judge_cost_usd or 0.0:.4f}", False),
    ]
    if s.calibration_items:
        cards.append(("judge κ on known answers", _num(s.calibration_kappa, 2), bool(s.uncalibrated)))
    html = [f"<h2>{escape(model.run.model)}</h2>"]
    if s.failed:
        html.append(f'<p class="card bad">FAILED: {escape(str(s.failed))}: the run has no score; '
                    "its numbers are the judge's failure, not the model's quality.</p>")
    if s.judge_changed:
        html.append(f'<p class="card bad">{escape(str(s.judge_changed))}: today\'s score is not compared with the '
                    "baseline days; re-judge them with today's judge to compare like for like.</p>")
    html.append(_judge_line(s))
    html.append('<div class="cards">')
    html += [f'<div class="card{" bad" if bad else ""}">{escape(label)}<b>{escape(value)}</b></div>'
             for label, value, bad in cards]
    html.append("</div>")
    if s.note:
        html.append(f'<p class="muted">{escape(str(s.note))}</p>')
    lengths = [j.length_tokens for j in samples]
    html.append('<div class="charts">')
    html.append(_score_chart(s.score_histogram or {}))
    html.append(_length_chart(lengths, list(model.baseline_lengths)))
    html.append("</div>")
    judged = [j for j in samples if j.score is not None]
    html.append(_table("Lowest scored", sorted(judged, key=lambda j: (j.score or 0, j.id))[:WORST]))
    if s.uncalibrated:
        html.append('<h3>Refused</h3><p class="muted">withheld: the judge is uncalibrated</p>')
    else:  # the answers the refusal ratio counted, no others (checks.counted_refusals)
        counted = counted_refusals([Judged.of(j) for j in samples], s.failed is not None)
        html.append(_table("Refused", [j for j, refused in zip(samples, counted, strict=True) if refused][:WORST]))
    html.append(_table("Hallucinated", [j for j in samples if j.hallucination][:WORST]))
    if gold:
        html.append(_gold_table(gold))
    errors = [j for j in samples if j.error]
    if errors:
        html.append(_table("Judge errors", errors[:WORST]))
    return "".join(html)


def _judge_line(s: QualitySummary) -> str:
    """What judged the run, and how it did on the known answers."""
    if not s.has("judge_model"):
        return ""  # a run stored before the judge was recorded
    said = [f"judge {s.judge_model}"]
    for label, value in (("endpoint lists", s.judge_endpoint_model), ("answers say", s.judge_response_model),
                         ("fingerprint", s.judge_fingerprint)):
        if value:
            said.append(f"{label} {value}")
    said.append(f"template {s.judge_template_sha256}, rubric v{s.judge_rubric_version}")
    if s.calibration_items and not s.uncalibrated:
        said.append(f"κ {_num(s.calibration_kappa, 2)}, exact {_pct(s.calibration_exact_ratio)}, within 1 "
                    f"{_pct(s.calibration_within_one_ratio)}, refusal flag {_pct(s.calibration_refusal_agreement)}, "
                    f"hallucination flag {_pct(s.calibration_hallucination_agreement)} on "
                    f"{s.calibration_answered} known answers (mean difference "
                    f"{_num(s.calibration_bias, 2, signed=True)})")
    elif not s.calibration_items:
        said.append("no known answers judged (calibration off)")
    return f'<p class="muted">{escape("; ".join(said))}</p>'


def _gold_table(rows: Sequence[QualityJudgment]) -> str:
    """The known answers the judge got wrong: more than a point off, or a flag that disagrees."""
    wrong = []
    for row in rows:
        score, refusal, hallucination = expected(row.sample_key)
        off = row.score is None or abs(row.score - score) > 1
        flags = (refusal is not None and bool(row.refusal) != refusal) or (
            hallucination is not None and bool(row.hallucination) != hallucination)
        if off or flags:
            wrong.append((row, score))
    title = f"Known answers the judge got wrong ({len(wrong)} of {len(rows)})"
    if not wrong:
        return f'<h3>{escape(title)}</h3><p class="muted">none</p>'
    out = [f"<h3>{escape(title)}</h3><table><tr><th>expected / given</th><th>prompt</th><th>response</th>"
           "<th>judge's reason</th></tr>"]
    for row, score in wrong[:WORST]:
        given = "error" if row.error else str(row.score)
        out.append(f"<tr><td>{score} / {given}</td><td><div class=\"text\">{escape(row.prompt[:600])}</div></td>"
                   f"<td><div class=\"text\">{escape(row.response[:1200])}</div></td>"
                   f"<td><div class=\"text\">{escape(row.error or row.reason or '')}</div></td></tr>")
    out.append("</table>")
    return "".join(out)


def _score_chart(histogram: Mapping[str, int]) -> str:
    counts = [int(histogram.get(str(s), 0)) for s in range(1, 6)]
    top = max(counts) or 1
    width, height, bar = 320, 180, 44
    parts = [f'<svg width="{width}" height="{height + 40}" viewBox="0 0 {width} {height + 40}" role="img" '
             'aria-label="score histogram">',
             '<text x="0" y="14" font-size="13">Score histogram</text>']
    for index, count in enumerate(counts):
        h = count / top * (height - 40)
        x = 20 + index * (bar + 12)
        y = height - h
        colour = "#d9534f" if index < 2 else ("#f0ad4e" if index == 2 else "#4a90d9")
        parts.append(f'<rect x="{x}" y="{y:.1f}" width="{bar}" height="{h:.1f}" fill="{colour}"/>')
        parts.append(f'<text x="{x + bar / 2}" y="{y - 4:.1f}" font-size="12" text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + bar / 2}" y="{height + 16}" font-size="12" '
                     f'text-anchor="middle">{index + 1}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _length_chart(today: list[int], baseline: list[int], bins: int = 12) -> str:
    """Both distributions as shares over the same bins (bars: today, line: baseline)."""
    width, height = 520, 180
    parts = [f'<svg width="{width}" height="{height + 40}" viewBox="0 0 {width} {height + 40}" role="img" '
             'aria-label="output length distribution">',
             '<text x="0" y="14" font-size="13">Output length (tokens): today (bars) vs baseline (line)</text>']
    values = today + baseline
    if not values:
        return "".join([*parts, "</svg>"])
    edges = np.histogram_bin_edges(np.asarray(values, dtype=float), bins=bins)
    shares = [np.histogram(np.asarray(v, dtype=float), edges)[0] / max(1, len(v)) for v in (today, baseline)]
    top = max(float(shares[0].max()), float(shares[1].max()) if baseline else 0.0) or 1.0
    step = (width - 40) / bins
    for index, share in enumerate(shares[0]):
        h = float(share) / top * (height - 40)
        parts.append(f'<rect x="{20 + index * step:.1f}" y="{height - h:.1f}" width="{step - 2:.1f}" '
                     f'height="{h:.1f}" fill="#4a90d9" fill-opacity="0.75"/>')
    if baseline:
        points = " ".join(f"{20 + (i + 0.5) * step:.1f},{height - float(v) / top * (height - 40):.1f}"
                          for i, v in enumerate(shares[1]))
        parts.append(f'<polyline points="{points}" fill="none" stroke="#d9534f" stroke-width="2"/>')
    for index in (0, bins // 2, bins):
        parts.append(f'<text x="{20 + index * step:.1f}" y="{height + 16}" font-size="11" '
                     f'text-anchor="middle">{edges[index]:.0f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(title: str, rows: Sequence[QualityJudgment]) -> str:
    if not rows:
        return f'<h3>{escape(title)}</h3><p class="muted">none</p>'
    out = [f"<h3>{escape(title)}</h3><table><tr><th>score</th><th>prompt</th><th>response</th>"
           "<th>judge's reason</th><th class=n>tokens</th></tr>"]
    for row in rows:
        flags = " ".join(f for f, on in (("refusal", row.refusal or row.refusal_keyword),
                                          ("hallucination", row.hallucination)) if on)
        score = "error" if row.error else str(row.score)
        out.append(f"<tr><td>{score} <span class=muted>{flags}</span></td>"
                   f'<td><div class="text">{escape(row.prompt[:1500])}</div></td>'
                   f'<td><div class="text">{escape(row.response[:3000])}</div></td>'
                   f'<td><div class="text">{escape(row.error or row.reason or "")}</div></td>'
                   f"<td class=n>{row.length_tokens}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _num(value: Any, digits: int, signed: bool = False) -> str:
    return "–" if value is None else f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _pct(value: Any, signed: bool = False) -> str:
    return "–" if value is None else f"{value * 100:+.1f} %" if signed else f"{value * 100:.1f} %"


def _ci(interval: Any) -> str:
    return f" ({interval[0] * 100:.1f}–{interval[1] * 100:.1f})" if interval else ""

