"""Run as a script under the JAX or the PyTorch backend of Keras: the packed
models' equivalence checks, printed as one JSON line.

    KERAS_BACKEND=jax python -m tests.backends.equivalence_check
    KERAS_BACKEND=torch python -m tests.backends.equivalence_check

The backend is chosen when Keras is imported, hence a process of its own
(see test_backend_equivalence.py). For the pre-training, SQuAD and classifier
models (tiny config, no dropout), against standard BERT (``packed=False``)
with the same weights on the same sequences one per row:

* ``outputs``: the largest difference of any sequence's outputs (hidden
  states and logits), and the largest output;
* ``losses``: the relative difference of each loss (``compute_loss`` and the
  pre-training losses, either masked-LM normalisation), packed against
  unpacked; ``accuracies``: the difference of the pre-training accuracies;
* ``gradients``: the largest per-variable relative difference of the
  gradients of ``compute_loss`` (see `tests.models.packed_batches.gradient_errors`),
  by ``jax.value_and_grad`` under ``jax.jit`` or by ``torch.autograd``;
* ``bits``: changing one token of one sequence, how many outputs of the
  other sequences changed in any bit (``changed_others``), and how many
  changed sequences kept theirs (``unchanged_targets``), per forward pass:
  under JAX eager and ``jax.jit``, under PyTorch eager in ``torch.no_grad``
  (see `forward_passes`);
* ``ablations``: how far the packed model is off without the block-diagonal
  mask or with positions counted along the row (both must be far);
* ``tensorflow_imported``: whether importing the package and running a
  model and its loss imported TensorFlow (checked first: after it the
  script makes TensorFlow unimportable, so that
  ``keras.utils.set_random_seed`` does not import it).
"""

import json
import sys

import keras
import numpy as np
from keras import ops

from packed_bert_tf.models import BertClassifierModel, BertPretrainingModel, BertSquadModel
from packed_bert_tf.models.bert_pretraining import pretraining_losses
from tests.models.packed_batches import (
    TINY_CONFIG,
    gradient_errors,
    layout,
    random_packs,
    relative_error,
)

S, D, M = 48, 3, 12
SHAPES = dict(sequence_length=S, max_sequences_per_pack=D, max_masked=M)
BACKEND = keras.backend.backend()


def task_features(packs, max_sequences_per_pack, seed):
    """The pre-training layout of ``packs`` plus the SQuAD and classifier
    labels of every sequence (an answer span inside it, a label 0..2), numpy."""
    features, placements = layout(packs, sequence_length=S,
                                  max_sequences_per_pack=max_sequences_per_pack,
                                  max_masked=M)
    arrays = {name: ops.convert_to_numpy(value) for name, value in features.items()}
    rng = np.random.default_rng(seed)
    shape = arrays["next_sentence_weights"].shape  # [B, D]
    for name in ("start_positions", "end_positions", "label_ids"):
        arrays[name] = np.zeros(shape, np.int32)
    for place in placements:
        start = int(rng.integers(place.length))
        end = int(rng.integers(start, place.length))
        arrays["start_positions"][place.row, place.slot] = place.offset + start
        arrays["end_positions"][place.row, place.slot] = place.offset + end
        arrays["label_ids"][place.row, place.slot] = rng.integers(0, 3)
    arrays["cls_positions"] = arrays["next_sentence_positions"]
    arrays["sequence_weights"] = arrays["next_sentence_weights"]
    return arrays, placements


def per_sequence(name, outputs, placements):
    """Each sequence's outputs, numpy, as a list (one tuple per sequence)."""
    out = {key: ops.convert_to_numpy(value) for key, value in outputs.items()}
    result = []
    for p in placements:
        tokens = slice(p.offset, p.offset + p.length)
        hidden = out["sequence_output"][p.row, tokens]
        if name == "pretraining":
            result.append((hidden, out["mlm_logits"][p.row, p.mlm_slots],
                           out["nsp_logits"][p.row, p.slot]))
        elif name == "squad":
            result.append((hidden, out["start_logits"][p.row, tokens],
                           out["end_logits"][p.row, tokens]))
        else:
            result.append((hidden, out["logits"][p.row, p.slot]))
    return result


def loss_and_gradients(model, features):
    """``compute_loss`` (training mode) and its gradients by the backend's own
    differentiation: under JAX ``jax.value_and_grad``, compiled (``jax.jit``:
    run eagerly, JAX compiles each op of the backward pass for each new shape,
    several times the CPU); under PyTorch ``torch.autograd.grad``, eager."""
    if BACKEND == "torch":
        import torch

        trainable = [v.value for v in model.trainable_variables]
        value = model.compute_loss(x=features, y_pred=model(features, training=True))
        return float(value.detach()), torch.autograd.grad(value, trainable)
    import jax

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss(values):
        outputs, _ = model.stateless_call(values, non_trainable, features, training=True)
        return model.compute_loss(x=features, y_pred=outputs)

    value, gradients = jax.jit(jax.value_and_grad(loss))(trainable)
    return float(value), gradients


def mixed_packs(rng):
    """Three packs, of one, two and three sequences."""
    return [pack for k in (1, 2, 3) for pack in random_packs(rng, k, num_packs=1,
                                                             sequence_length=S)]


def compare_with_unpacked(name, model_class, args, rng):
    keras.utils.set_random_seed(0)
    packed_model = model_class.from_bert_config(TINY_CONFIG, *args, packed=True)
    packed_model.build()
    reference = model_class.from_bert_config(TINY_CONFIG, *args, packed=False)
    reference.build()
    reference.set_weights(packed_model.get_weights())
    packs = mixed_packs(rng)
    packed, packed_at = task_features(packs, D, seed=1)
    unpacked, unpacked_at = task_features([[s] for pack in packs for s in pack], 1, seed=1)
    # The same labels in both layouts: copy them sequence by sequence.
    for p, u in zip(packed_at, unpacked_at):
        for key in ("start_positions", "end_positions"):
            unpacked[key][u.row, u.slot] = packed[key][p.row, p.slot] - p.offset + u.offset
        unpacked["label_ids"][u.row, u.slot] = packed["label_ids"][p.row, p.slot]
    packed_outputs, unpacked_outputs = packed_model(packed), reference(unpacked)
    got = per_sequence(name, packed_outputs, packed_at)
    want = per_sequence(name, unpacked_outputs, unpacked_at)
    result = {
        "outputs": max(float(np.abs(g - w).max()) for gs, ws in zip(got, want)
                       for g, w in zip(gs, ws)),
        "largest_output": max(float(np.abs(w).max()) for ws in want for w in ws),
    }
    loss, gradients = loss_and_gradients(packed_model, packed)
    loss_u, gradients_u = loss_and_gradients(reference, unpacked)
    result["losses"] = {"compute_loss": relative_error(loss, loss_u)}
    result["gradients"] = max(gradient_errors(gradients, gradients_u))
    if name == "pretraining":
        for per_sequence_loss in (False, True):
            packed_losses, unpacked_losses = (
                {key: ops.convert_to_numpy(value) for key, value in pretraining_losses(
                    features, outputs, per_sequence=per_sequence_loss).items()}
                for features, outputs in ((packed, packed_outputs),
                                          (unpacked, unpacked_outputs)))
            for key in packed_losses:
                label = f"{key},per_sequence={per_sequence_loss}"
                if "accuracy" in key:
                    result.setdefault("accuracies", {})[label] = abs(
                        float(packed_losses[key]) - float(unpacked_losses[key]))
                else:
                    result["losses"][label] = relative_error(packed_losses[key],
                                                             unpacked_losses[key])
        result["ablations"] = ablations(packed_model, packed, packed_at, want)
        result.update(bits_of_other_sequences(packed_model, rng))
    return result


def ablations(packed_model, packed, placements, want):
    """Largest hidden-state difference to standard BERT (``want``, per
    sequence) without each change, on the comparison's packs (one, two and
    three sequences: the batch shapes the model has run, so that JAX's eager
    op caches serve)."""
    def off_by(features):
        got = per_sequence("pretraining", packed_model(features), placements)
        return max(float(np.abs(g[0] - w[0]).max()) for g, w in zip(got, want))

    one_block = dict(packed, input_mask=(packed["input_mask"] > 0).astype(np.int32))
    real = packed["input_mask"] > 0
    along_row = dict(packed, positions=np.where(real, np.arange(S)[None], 0)
                     .astype(np.int32))
    return {"none": off_by(packed), "no_block_diagonal_mask": off_by(one_block),
            "positions_along_the_row": off_by(along_row)}


def forward_passes(model):
    """The forward passes the bits check runs, by name: under JAX the model
    called eagerly and ``jax.jit`` of its ``stateless_call``; under PyTorch
    the model called eagerly in ``torch.no_grad`` only. ``torch.compile``
    (Dynamo tracing the Keras layers' Python) adds about 20 s of CPU with the
    ``aot_eager`` backend, which runs the eager kernels, and about 45 s with
    ``inductor``."""
    if BACKEND == "torch":
        import torch

        def no_grad(features):
            with torch.no_grad():
                return model(features)

        return {"eager": no_grad}
    import jax

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    return {"eager": model,
            "jit": jax.jit(lambda features: model.stateless_call(trainable, non_trainable,
                                                                 features)[0])}


def bits_of_other_sequences(model, rng):
    """Changes one token of each sequence in turn: do the others move in any
    bit? Per forward pass (`forward_passes`), on new packs of one, two and
    three sequences (the comparison's shapes: JAX's eager op caches serve)."""
    features, placements = task_features(mixed_packs(rng), D, seed=2)
    counts = {}
    for mode, forward in forward_passes(model).items():
        baseline = per_sequence("pretraining", forward(features), placements)
        changed_others = unchanged_targets = 0
        for target, place in enumerate(placements):
            changed = {key: value.copy() for key, value in features.items()}
            column = place.offset + int(rng.integers(place.length))
            changed["input_ids"][place.row, column] = \
                changed["input_ids"][place.row, column] % 99 + 1
            outputs = per_sequence("pretraining", forward(changed), placements)
            for index, (before, after) in enumerate(zip(baseline, outputs)):
                same = all(np.array_equal(b, a) for b, a in zip(before, after))
                if index == target:
                    unchanged_targets += same
                else:
                    changed_others += not same
        counts[mode] = {"changed_others": changed_others,
                        "unchanged_targets": unchanged_targets,
                        "sequences": len(placements)}
    return {"bits": counts}


def main():
    results = {"backend": BACKEND}
    model = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    # The shapes of the comparisons' packed batch: JAX's eager op caches then
    # serve them.
    features, _ = task_features(mixed_packs(np.random.default_rng(1)), D, seed=0)
    model.compute_loss(x=features, y_pred=model(features))
    results["tensorflow_imported"] = "tensorflow" in sys.modules
    if not results["tensorflow_imported"]:
        # keras.utils.set_random_seed seeds TensorFlow too when it can import
        # it: seconds of CPU for a framework nothing here runs.
        sys.modules["tensorflow"] = None
    rng = np.random.default_rng(0)
    for name, model_class, args in (("pretraining", BertPretrainingModel, ()),
                                    ("squad", BertSquadModel, ()),
                                    ("classifier", BertClassifierModel, (3,))):
        results[name] = compare_with_unpacked(name, model_class, args, rng)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
