"""Templates render as Prometheus renders them (Go text/template, fmt, Prometheus' humanize*).

The same strings are checked against the real Prometheus by promtool in test_rule_files.py.
"""

from __future__ import annotations

import math

import pytest

from monitor.rulefiles.templates import (
    Template,
    TemplateData,
    TemplateError,
    go_float,
    humanize,
    humanize_duration,
    humanize_percentage,
    printf,
)


@pytest.mark.parametrize(("value", "text"), [
    (0.95, "0.95"), (100.0, "100"), (123456.0, "123456"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"),
    (0.0001, "0.0001"), (1.5e-05, "1.5e-05"), (-0.5, "-0.5"), (0.0, "0"), (0.1 + 0.2, "0.30000000000000004"),
    (math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN"), (1e21, "1e+21"),
])
def test_value_prints_as_go_prints_a_float64(value: float, text: str) -> None:
    assert go_float(value) == text


def test_humanize_functions() -> None:
    assert humanize(1234567) == "1.235M" and humanize(0.00123) == "1.23m" and humanize(-1500) == "-1.5k"
    assert humanize(0) == "0" and humanize(math.inf) == "+Inf" and humanize("2048") == "2.048k"
    assert humanize_percentage(0.1234) == "12.34%" and humanize_percentage(0.97) == "97%"
    assert humanize_duration(3725.5) == "1h 2m 5s" and humanize_duration(1.5) == "1.5s"
    assert humanize_duration(0.05) == "50ms" and humanize_duration(90061) == "1d 1h 1m 1s"
    assert humanize_duration(0) == "0s" and humanize_duration(-61) == "-1m 1s"


def test_printf_verbs() -> None:
    assert printf("%.2f", 0.956) == "0.96" and printf("%d%%", 5) == "5%"
    assert printf("%s=%v", "gpu", 0.5) == "gpu=0.5" and printf("%.1f", math.inf) == "+Inf"
    assert printf("%d", 1.5) == "%!d(float64=1.5)" and printf("%f") == "%!f(MISSING)"


def test_template_pipelines_labels_and_trim_markers() -> None:
    text = ('GPU {{ $labels.gpu }} on {{ .Labels.node }}: {{ $value | humanizePercentage }}, '
            '{{ printf "%.1f" $value }} [{{ $labels.nothing }}] {{- " x " -}} !')
    rendered = Template(text).render(TemplateData({"gpu": "0", "node": "n1"}, 0.9532))
    assert rendered == "GPU 0 on n1: 95.32%, 1.0 [] x !"
    assert Template("{{ .Value }} {{ $value | humanize | toUpper }}").render(TemplateData({}, 2500.0)) == "2500 2.5K"


@pytest.mark.parametrize("text", [
    "{{ if $value }}x{{ end }}", '{{ query "up" }}', "{{ $x := 1 }}", "{{ $labels }}", "{{ }}", "a }} b",
    "{{ range $labels }}{{ end }}", "{{ $labels.a | nosuchfunction }}",
])
def test_templates_outside_the_subset_are_refused(text: str) -> None:
    with pytest.raises(TemplateError):
        Template(text)
