"""The memory benchmarks' harness: evidence normalization, recall, JSON shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import locomo, memory_latency


def test_normalize_evidence_fixes_the_datasets_malformed_ids() -> None:
    assert locomo.normalize_evidence(["D8:6; D9:17", "D:11:26", "D1:3", "D1:3"]) == [
        "D8:6", "D9:17", "D11:26", "D1:3"]
    assert locomo.normalize_evidence([]) == []


def test_session_time_parses_locomo_dates() -> None:
    when = locomo.session_time("1:56 pm on 8 May, 2023")
    assert (when.year, when.month, when.day, when.hour, when.minute) == (2023, 5, 8, 13, 56)


def _tiny_dataset(path: Path) -> None:
    sample = {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Rex!"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "The weather is awful today."},
            ],
            "session_2_date_time": "10:00 am on 9 June, 2023",
            "session_2": [
                {"speaker": "Bo", "dia_id": "D2:1", "text": "I started learning the cello."},
            ],
        },
        "qa": [
            {"question": "What is the name of Ann's puppy?", "answer": "Rex",
             "evidence": ["D1:1"], "category": 4},
            {"question": "Which instrument did Bo start learning?", "answer": "cello",
             "evidence": ["D:2:1"], "category": 1},
            {"question": "no evidence", "answer": "x", "evidence": [], "category": 5},
        ],
    }
    path.write_text(json.dumps([sample]))


def test_locomo_reports_recall_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "tiny.json"
    _tiny_dataset(data)
    assert locomo.main(["--data", str(data), "--backend", "file", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["backend"] == "file"
    assert result["questions"] == 2
    assert result["recall@5"] == 1.0
    assert set(result["by_category"]) == {"1", "4"}
    assert result["by_category"]["4"]["recall@10"] == 1.0


def test_locomo_skips_cleanly_without_data(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert locomo.main(["--data", str(tmp_path / "absent.json"), "--json"]) == 0
    out = capsys.readouterr()
    assert "not found" in out.err
    assert "skipped" in json.loads(out.out.strip().splitlines()[-1])


def test_memory_latency_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory_latency.main(["--sizes", "60", "--backends", "file", "--queries", "5",
                                "--writes", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    row = result["file"]["60"]
    assert row["memories"] == 60
    for key in ("search_p50_ms", "search_p95_ms", "write_p95_ms", "rebuild_per_s", "rss_mb"):
        assert row[key] > 0
    assert row["exact_top10_overlap"] == 1.0  # 60 records: never pruned


def test_locomo_reports_the_tuning_and_held_out_split(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "tiny.json"
    _tiny_dataset(data)
    tuned = json.loads(data.read_text())[0]
    held = {**tuned, "sample_id": "other", "qa": tuned["qa"][:1]}
    data.write_text(json.dumps([tuned, held]))
    assert locomo.main(["--data", str(data), "--backend", "file", "--tune", "tiny",
                        "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["questions"] == 3
    assert result["tune_samples"] == ["tiny"]
    assert result["splits"]["tune"]["questions"] == 2
    assert result["splits"]["heldout"]["questions"] == 1
    assert result["splits"]["heldout"]["by_category"].keys() == {"4"}

    assert locomo.main(["--data", str(data), "--backend", "file", "--tune", "tiny",
                        "--split", "heldout", "--json"]) == 0
    only = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert only["questions"] == 1
    assert only["splits"]["tune"]["questions"] == 0
