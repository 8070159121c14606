"""Packed batches compute exactly what the same sequences compute unpacked."""

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import BertPretrainingModel
from packed_bert_tf.models.bert_pretraining import pretraining_losses
from tests.models.packed_batches import (
    TINY_CONFIG,
    gradient_errors,
    layout,
    packed_and_unpacked,
    per_sequence_outputs,
    random_packs,
    twin_models,
)

pytestmark = pytest.mark.slow  # XLA compilations

S, D, M = 48, 3, 12
SHAPES = dict(sequence_length=S, max_sequences_per_pack=D, max_masked=M)


@pytest.fixture(scope="module")
def models():
    """(packed model, standard unpacked BERT with the same weights)."""
    return twin_models(BertPretrainingModel, TINY_CONFIG)


def _assert_close(got, want):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sequences_per_pack", [1, 2, 3])
def test_per_sequence_outputs_equal_unpacked_bert(models, sequences_per_pack):
    packed_model, reference = models
    rng = np.random.default_rng(sequences_per_pack)
    packs = random_packs(rng, sequences_per_pack, num_packs=3, sequence_length=S)
    (packed, packed_at), (unpacked, unpacked_at) = packed_and_unpacked(packs, **SHAPES)
    got = per_sequence_outputs(packed_model(packed), packed_at)
    want = per_sequence_outputs(reference(unpacked), unpacked_at)
    # The packed model on the unpacked (D = 1) layout is standard BERT too.
    also = per_sequence_outputs(packed_model(unpacked), unpacked_at)
    for (hidden, mlm, nsp), (hidden_u, mlm_u, nsp_u), (hidden_a, mlm_a, nsp_a) in zip(
            got, want, also):
        _assert_close(hidden, hidden_u)
        _assert_close(mlm, mlm_u)
        _assert_close(nsp, nsp_u)
        _assert_close(hidden_a, hidden_u)
        _assert_close(mlm_a, mlm_u)
        _assert_close(nsp_a, nsp_u)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_changing_one_sequence_leaves_the_others_bit_for_bit_unchanged(models,
                                                                       jit_compile):
    packed_model, _ = models
    forward = tf.function(packed_model.__call__, jit_compile=jit_compile)
    rng = np.random.default_rng(7)
    packs = random_packs(rng, 3, num_packs=2, sequence_length=S)
    features, placements = layout(packs, **SHAPES)
    baseline = per_sequence_outputs(forward(features), placements)
    for target, place in enumerate(placements):
        # The sequence's [CLS], its last token and one in between.
        for token in {0, place.length - 1, int(rng.integers(place.length))}:
            changed = {name: value.numpy().copy() for name, value in features.items()}
            column = place.offset + token
            changed["input_ids"][place.row, column] = \
                (changed["input_ids"][place.row, column] % 99) + 1
            changed["segment_ids"][place.row, column] ^= 1
            outputs = per_sequence_outputs(forward(changed), placements)
            for index, (before, after) in enumerate(zip(baseline, outputs)):
                if index == target:
                    assert not np.array_equal(before[0], after[0])
                else:
                    for b, a in zip(before, after):
                        np.testing.assert_array_equal(a, b)


def test_padding_outputs_are_finite_and_independent_of_real_tokens(models):
    packed_model, _ = models
    packs = random_packs(np.random.default_rng(3), 2, num_packs=2, sequence_length=S)
    features, placements = layout(packs, **SHAPES)
    padding = features["input_mask"].numpy() == 0
    assert padding.any()
    hidden = packed_model(features)["sequence_output"].numpy()
    assert np.isfinite(hidden).all()
    changed = {name: value.numpy().copy() for name, value in features.items()}
    changed["input_ids"][placements[0].row, placements[0].offset + 1] += 1
    hidden_changed = packed_model(changed)["sequence_output"].numpy()
    np.testing.assert_array_equal(hidden_changed[padding], hidden[padding])


def _loss_and_gradients(model, features, per_sequence):
    with tf.GradientTape() as tape:
        losses = pretraining_losses(features, model(features, training=True),
                                    per_sequence=per_sequence)
    return losses, tape.gradient(losses["loss"], model.trainable_variables)


@pytest.mark.parametrize("per_sequence", [False, True])
def test_loss_and_gradients_equal_the_unpacked_batch(models, per_sequence):
    packed_model, reference = models
    rng = np.random.default_rng(11)
    packs = [pack for k in (1, 2, 3)
             for pack in random_packs(rng, k, num_packs=1, sequence_length=S,
                                      min_masked=0)]
    (packed, _), (unpacked, _) = packed_and_unpacked(packs, **SHAPES)
    losses, gradients = _loss_and_gradients(packed_model, packed, per_sequence)
    losses_u, gradients_u = _loss_and_gradients(reference, unpacked, per_sequence)
    for name in losses:
        np.testing.assert_allclose(losses[name], losses_u[name], rtol=1e-5)
    errors = gradient_errors(gradients, gradients_u)
    worst = int(np.argmax(errors))
    assert errors[worst] < 1e-5, packed_model.trainable_variables[worst].path
    assert min(np.abs(tf.convert_to_tensor(g)).max() for g in gradients_u) > 0


def _max_difference_to_reference(packed_model, reference, alter):
    rng = np.random.default_rng(5)
    packs = random_packs(rng, 3, num_packs=2, sequence_length=S)
    (packed, packed_at), (unpacked, unpacked_at) = packed_and_unpacked(packs, **SHAPES)
    packed = alter({name: value.numpy() for name, value in packed.items()})
    got = per_sequence_outputs(packed_model(packed), packed_at)
    want = per_sequence_outputs(reference(unpacked), unpacked_at)
    return max(np.abs(g[0] - w[0]).max() for g, w in zip(got, want))


def test_ablation_without_the_block_diagonal_mask_differs(models):
    def one_block_per_pack(features):
        features["input_mask"] = (features["input_mask"] > 0).astype(np.int32)
        return features
    assert _max_difference_to_reference(*models, lambda f: f) < 1e-5
    assert _max_difference_to_reference(*models, one_block_per_pack) > 1e-2


def test_ablation_with_contiguous_positions_differs(models):
    def contiguous(features):
        real = features["input_mask"] > 0
        features["positions"] = np.where(real, np.arange(S)[None], 0).astype(np.int32)
        return features
    assert _max_difference_to_reference(*models, contiguous) > 1e-2


def test_ablation_standard_bert_on_packed_data_differs(models):
    packed_model, reference = models
    rng = np.random.default_rng(5)
    packs = random_packs(rng, 2, num_packs=2, sequence_length=S)
    features, placements = layout(packs, **SHAPES)
    got = per_sequence_outputs(reference(features), placements)
    want = per_sequence_outputs(packed_model(features), placements)
    assert max(np.abs(g[1] - w[1]).max() for g, w in zip(got, want)) > 1e-2
