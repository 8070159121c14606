import json

import pytest

from packed_bert_tf.training.comparison import comparison_table, load_summary


def _summary(sequences_per_second, packing_factor, loss):
    return {"packing_factor": packing_factor, "train": {
        "final_step": 100, "sequences": 1600.0, "sequences_per_second": sequences_per_second,
        "tokens_per_second": 1000.0, "occupancy": 0.5, "final_metrics": {"loss": loss}}}


def test_the_table_gives_the_speed_up_over_the_first_run():
    table = comparison_table({"unpacked": _summary(10.0, None, 7.5),
                              "packed": _summary(19.5, 1.99, 7.4)})
    lines = table.splitlines()
    assert lines[0].split()[0] == "run" and lines[0].split()[-1] == "speed-up"
    assert lines[2].split()[-1] == "1.000" and lines[3].split()[-1] == "1.950"
    assert "1.9900" in lines[3] and "7.4000" in lines[3]


def test_an_unfinished_run_is_named(tmp_path):
    with pytest.raises(ValueError, match="no train_summary.json"):
        load_summary(str(tmp_path))
    (tmp_path / "train_summary.json").write_text(json.dumps({"eval": {}}))
    with pytest.raises(ValueError, match="did not train"):
        load_summary(str(tmp_path))
