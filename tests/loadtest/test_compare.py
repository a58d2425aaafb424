"""`bench compare`: a server made 30 % slower is a regression (exit 1), the same server measured
again is not; results whose six variables differ are refused unless forced; several results
make one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.loadtest.compare import compare, parse_threshold
from monitor.loadtest.conditions import differences
from monitor.loadtest.load import Level
from monitor.loadtest.result import write_result
from monitor.sim import LatencyProfile
from tests.loadtest.conftest import bench

# Alone (tests/conftest.py): "the same server measured again is not a regression" holds while the client's
# own lateness stays under the delays; beside a worker's burst in a hog run it did not.
pytestmark = pytest.mark.alone

# No jitter: the server's delays are the same for every request; what varies is the client's noise.
# Delays long against the client's own lateness on a busy machine (up to ~0.15 s), short enough for seconds of load.
STEADY = LatencyProfile(prefill_s=1.2, prefill_per_token_s=0.0, per_token_s=0.1, output_tokens=(4, 4), jitter=0.0)


def _run(start_sim: Any, prompts: Path, path: Path, time_scale: float = 1.0) -> Path:
    server = start_sim(STEADY, time_scale=time_scale)
    write_result(bench(server.url, prompts, levels=[Level("concurrency", 8)], duration_s=1.0, repeats=2,
                       warmup=4), path)
    return path


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["bench", "compare", *args])


def test_a_server_thirty_percent_slower_is_a_regression_and_noise_is_not(start_sim, prompts: Path,
                                                                        tmp_path: Path) -> None:
    a = _run(start_sim, prompts, tmp_path / "a.json")
    again = _run(start_sim, prompts, tmp_path / "again.json")
    slower = _run(start_sim, prompts, tmp_path / "slower.json", time_scale=1.3)

    # (the machine's other load may move between the three runs inside the suite: the drift refusal is
    # tested in test_verdict.py; here the regression verdict)
    same = _invoke(str(a), str(again), "--threshold", "15%", "--max-drift", "100%")
    assert same.exit_code == 0, same.output
    assert "REGRESSION" not in same.output

    worse = _invoke(str(a), str(slower), "--threshold", "15%", "--max-drift", "100%")
    assert worse.exit_code == 1, worse.output
    flagged = {c.figure for c in compare(json.loads(a.read_text()), json.loads(slower.read_text()), 0.15)
               if c.regression}
    # Which figures clear the noise depends on how busy the machine is; a median latency always does.
    assert flagged & {"TTFT P50", "TPOT P50", "E2E P50"}


def _result(mean_tps: float, stdev: float, gpu: str = "NVIDIA H200") -> dict[str, Any]:
    summary = {"output_tokens_per_s": {"mean": mean_tps, "stdev": stdev, "n": 3},
               "ttft_s": {"p99": {"mean": 0.1, "stdev": 0.0, "n": 3}}}
    conditions = {"workload": {"lengths": {"input_tokens": {"mean": 200.0}, "output_tokens": {"mean": 100.0}},
                               "levels": [{"kind": "concurrency", "value": 8, "label": "c=8"}]},
                  "gpu": {"model": gpu, "count": 1, "driver": "580"}, "server": {"engine": "vllm", "version": "1"},
                  "user": {"precision": "fp8", "note": None}}
    return {"schema": "infermon-bench", "schema_version": 1, "conditions": conditions,
            "levels": [{"level": {"kind": "concurrency", "value": 8, "label": "c=8"}, "summary": summary}]}


def test_a_change_inside_the_repeats_noise_is_not_counted() -> None:
    (change,) = [c for c in compare(_result(1000, 40), _result(900, 40), 0.05) if c.figure == "output tok/s"]
    assert change.relative == pytest.approx(-0.1)
    assert change.noise == pytest.approx(2 * (2 * 40**2) ** 0.5 / 1000)  # 11.3 %: beyond the 5 % threshold
    assert not change.beyond and not change.regression
    (tight,) = [c for c in compare(_result(1000, 5), _result(900, 5), 0.05) if c.figure == "output tok/s"]
    assert tight.regression
    assert parse_threshold("5%") == 0.05 and parse_threshold("0.1") == 0.1


def test_different_variables_are_refused_unless_forced(tmp_path: Path) -> None:
    h200, h100 = _result(1000, 5), _result(700, 5, gpu="NVIDIA H100 80GB HBM3")
    assert differences(h200["conditions"], h100["conditions"]) == ["GPU: NVIDIA H200 vs NVIDIA H100 80GB HBM3"]
    write_result(h200, tmp_path / "h200.json")
    write_result(h100, tmp_path / "h100.json")
    refused = _invoke(str(tmp_path / "h200.json"), str(tmp_path / "h100.json"))
    assert refused.exit_code == 2
    assert "  - GPU: NVIDIA H200 vs NVIDIA H100 80GB HBM3\n" in refused.output and refused.output.endswith("\n")
    forced = _invoke(str(tmp_path / "h200.json"), str(tmp_path / "h100.json"), "--force")
    assert forced.exit_code == 1 and "REGRESSION" in forced.output
    # Choosing between two GPUs is no regression test: --table puts them side by side, no verdict.
    side = CliRunner().invoke(app, ["bench", "compare", str(tmp_path / "h200.json"), str(tmp_path / "h100.json"),
                                    "--table"], env={"COLUMNS": "220"})
    assert side.exit_code == 0 and "not comparable" not in side.output and "REGRESSION" not in side.output
    assert "H200" in side.output and "H100" in side.output


def test_several_results_make_one_table(tmp_path: Path) -> None:
    paths = []
    for name, gpu, tps in (("h200", "NVIDIA H200", 2400.0), ("a100", "NVIDIA A100-SXM4-80GB", 1100.0),
                           ("l40s", "NVIDIA L40S", 700.0)):
        result = _result(tps, 10, gpu)
        result["levels"][0]["summary"]["cost"] = {"usd_per_million_output_tokens": {"mean": 1.0, "n": 3}}
        result["capacity"] = {"concurrency": round(tps / 100)}  # as a --capacity run says it
        write_result(result, tmp_path / f"{name}.json")
        paths.append(str(tmp_path / f"{name}.json"))
    table = CliRunner().invoke(app, ["bench", "compare", *paths], env={"COLUMNS": "220"})
    assert table.exit_code == 0, table.output
    # A result a column, a figure a row: each row holds the results in the order given.
    rows = {line.split()[0]: line for line in table.output.splitlines() if line.strip()}
    assert rows["output"].split()[-3:] == ["2,400", "1,100", "700"]
    assert rows["capacity"].split()[1:] == ["24", "users", "11", "users", "7", "users"]
    assert [rows["gpu"].index(gpu) for gpu in ("H200", "A100", "L40S")] == sorted(
        rows["gpu"].index(gpu) for gpu in ("H200", "A100", "L40S"))


def test_a_file_that_is_not_a_result_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"schema": "other"}')
    out = _invoke(str(tmp_path / "x.json"), str(tmp_path / "x.json"))
    assert out.exit_code == 2 and "not an infermon bench result" in out.output
    newer = _result(1, 0)
    newer["schema_version"] = 99
    write_result(newer, tmp_path / "new.json")
    out = _invoke(str(tmp_path / "new.json"), str(tmp_path / "new.json"))
    assert out.exit_code == 2 and "schema_version 99" in out.output


def test_a_level_the_client_kept_less_in_flight_is_called_out_by_littles_law_not_the_gauge() -> None:
    from monitor.loadtest.summary import shortfalls

    result = _result(1000, 5)
    summary = result["levels"][0]["summary"]
    # The misfire: the engine's polled gauge read 2.3 running at c=8 ... while throughput x mean
    # latency says 7.4 were in flight: the gauge's sampling missed them, the client did not limit.
    summary["engine"] = {"requests_running": {"mean": {"mean": 2.3, "n": 2}}}
    summary["in_flight_mean"] = {"mean": 7.4, "n": 2}
    assert shortfalls(result) == []
    # Fewer in flight on the client's own clock than asked: the client limited the load.
    summary["in_flight_mean"]["mean"] = 4.5
    assert shortfalls(result) == ["c=8: 4.5 requests in flight on average (throughput x mean latency), not 8: "
                                  "the client limited the load; the engine's gauge read 2.3 running"]
    # A result without the client's figure (written before it was kept): the gauge alone judges nothing.
    del summary["in_flight_mean"]
    assert shortfalls(result) == []


def test_a_level_whose_client_was_short_of_cpu_says_so() -> None:
    from monitor.loadtest.summary import client_short, warnings

    result = _result(1000, 5)
    summary = result["levels"][0]["summary"]
    summary["client"] = {"client_cpu_ratio": {"mean": 0.35, "n": 2}, "machine_busy_ratio": {"mean": 0.40, "n": 2},
                         "cpu_count": {"mean": 4, "n": 2}}
    assert client_short(result) == []  # a third of a core, and the machine's others at 31 %: nothing to say
    summary["client"]["client_cpu_ratio"]["mean"] = 0.93
    (line,) = client_short(result)
    assert line.startswith("c=8: the client was short of CPU: the client used 93% of a CPU") and "other" not in line
    summary["client"]["machine_busy_ratio"]["mean"] = 0.95  # and others kept 72 % of the 4 CPUs busy
    (line,) = client_short(result)
    assert "93% of a CPU" in line and "other work kept 72% of the client machine's 4 CPUs busy" in line
    assert line in warnings(result)
    del summary["client"]  # a result written before the client's figures were kept: nothing judged
    assert client_short(result) == []
