"""The seed of a run not given ``--seed``: the folder's own on a resume, else
one drawn and logged (`packed_bert_tf.training.startup.resolve_seed`)."""

import logging
import types

from packed_bert_tf.training import cluster, startup, trajectory
from packed_bert_tf.training.trajectory import Segment

ONE_WORKER = cluster.WorkerTask("worker", 0, ("localhost:1",), 0)


def _context(folder):
    return types.SimpleNamespace(dirs=types.SimpleNamespace(shared=str(folder)),
                                 strategy=None, worker=ONE_WORKER)


def _trained(folder, step: int, *seeds_by_start) -> None:
    """``folder`` as a run leaves it at ``step``: a checkpoint, and a record of
    segments ``(start_step, seed)``."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / f"ckpt-{step}.index").write_bytes(b"")
    for start, seed in seeds_by_start:
        trajectory.resume(str(folder), Segment(start, 1, 4, {"--seed": seed}), step=start,
                          allow_changes=True, allow_flag=None)


def test_a_given_seed_is_the_runs(tmp_path):
    _trained(tmp_path, 8, (0, 5))
    assert startup.resolve_seed(0, _context(tmp_path)) == 0
    assert startup.resolve_seed(17, _context(tmp_path)) == 17


def test_a_new_run_draws_a_seed_and_logs_it(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        seeds = [startup.resolve_seed(None, _context(tmp_path)) for _ in range(3)]
    assert all(isinstance(seed, int) and 0 <= seed < startup.SEED_RANGE for seed in seeds)
    assert len(set(seeds)) == 3
    for seed in seeds:
        assert f"--seed not given: drew --seed={seed} (pass it to repeat this run)" in \
            caplog.text


def test_a_resumed_run_keeps_the_seed_of_the_segment_it_resumes_in(tmp_path, caplog):
    _trained(tmp_path, 8, (0, 5), (4, 6))
    with caplog.at_level(logging.INFO):
        assert startup.resolve_seed(None, _context(tmp_path)) == 6
    assert f"--seed=6: the seed {tmp_path} was started with" in caplog.text
    (tmp_path / "checkpoints" / "ckpt-8.index").rename(
        tmp_path / "checkpoints" / "ckpt-4.index")
    assert startup.resolve_seed(None, _context(tmp_path)) == 5


def test_a_folder_without_a_checkpoint_is_a_new_run(tmp_path):
    trajectory.resume(str(tmp_path), Segment(0, 1, 4, {"--seed": 5}), step=0,
                      allow_changes=False, allow_flag=None)
    seeds = {startup.resolve_seed(None, _context(tmp_path)) for _ in range(3)}
    assert len(seeds) == 3


def test_a_run_started_unseeded_resumes_unseeded(tmp_path):
    _trained(tmp_path, 8, (0, None))
    assert startup.resolve_seed(None, _context(tmp_path)) is None


def test_one_worker_decides_alone():
    assert cluster.chief_value(None, 41, ONE_WORKER) == 41
