"""The results store: resume clean-up of a crashed test's rows, and appending to older run folders."""
import csv

from experiments.traffic.model import experiment_from_dict
from experiments.store import FLOW_COLUMNS, ResultsStore

EXP = experiment_from_dict({"name": "st", "sizes": [2], "protocols": ["tcp"], "duration": 1})


def _rows(path):
    with path.open() as f:
        return list(csv.DictReader(f))


def test_resume_drops_flow_and_fault_rows_of_an_unfinished_test(tmp_path):
    store = ResultsStore.create(tmp_path, EXP, {})
    store.append_flows([{"test_id": "t1", "src": "a"}, {"test_id": "t2", "src": "a"}])
    store.append_faults([{"test_id": "t1", "kind": "cut"}, {"test_id": "t2", "kind": "cut"}])
    store.append_test({"test_id": "t1"})  # t2 crashed after its flow and fault rows
    store.drop_incomplete_flows()
    assert [r["test_id"] for r in _rows(store.dir / "flows.csv")] == ["t1"]
    assert [r["test_id"] for r in _rows(store.dir / "faults.csv")] == ["t1"]


def test_appending_to_a_folder_with_older_columns_keeps_its_header(tmp_path):
    store = ResultsStore.create(tmp_path, EXP, {})
    old = [c for c in FLOW_COLUMNS if c != "sent_bits_per_second"]
    with (store.dir / "flows.csv").open("w", newline="") as f:
        csv.writer(f).writerow(old)
    store.append_flows([{"test_id": "t1", "src": "a", "sent_bits_per_second": 1.0}])
    with (store.dir / "flows.csv").open() as f:
        lines = list(csv.reader(f))
    assert lines[0] == old and len(lines[1]) == len(old)
