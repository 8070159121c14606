# The README's commands. Each starts from nothing: a fresh clone, no venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: demo test lint benchmark clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Editable installs; the stamps re-run pip when setup.py or the C extension
# (which pip compiles into the source tree) changes.
EXTENSION := packed_bert_tf/data/records/_record_codec.c
$(VENV)/.installed: setup.py $(EXTENSION) | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# The tests take the keras-hub extra (weights in and out, the peer benchmark)
# and the reference extra (google-research/bert's tool from bert-tensorflow,
# Grain's packers) too, so that the tests comparing with them run here instead
# of being skipped; the Makefile is a prerequisite so that a venv stamped
# before a change of these lines gets the extras.
$(VENV)/.installed-test: setup.py Makefile $(EXTENSION) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,keras-hub,reference]'
	touch $@

# The main job on the embedded default, from nothing: the packing report on
# the paper's histograms (Wikipedia pre-training at 512, SQuAD 1.1 at 384),
# then Python's own documentation -> WordPiece vocab -> pre-training TFRecords
# -> packed TFRecords (verified) -> a small BERT trained packed and unpacked
# with the same number of sequences per update (steps count micro-batches, as
# in MLPerf: 300 steps of 5 micro-batches per update are 60 updates of 40
# sequences; the packed run makes each of 3 micro-batches of packs, about 41
# sequences) -> throughputs, final losses and the loss curves
# (out/demo/loss_curves.png).
DEMO := $(OUT)/demo
DEMO_DATA := --max_seq_length=512 --max_predictions_per_seq=76
DEMO_TRAIN := --bert_config_file=configs/demo_bert_config.json $(DEMO_DATA) \
  --do_train --train_batch_size=8 --steps_per_update=5 --num_train_steps=300 \
  --num_warmup_steps=30 --learning_rate=2e-3 --log_every_n_steps=20 \
  --iterations_per_loop=20 --save_checkpoints_steps=0 --seed=0

demo: $(VENV)/.installed
	mkdir -p $(OUT)
	$(BIN)/python -m data_prep.packing_report --histogram=wikipedia_512 \
	  --max_sequences_per_pack=3 --algorithms=all \
	  --plot=$(OUT)/packing_wikipedia_512.png --output_json=$(OUT)/packing_wikipedia_512.json
	$(BIN)/python -m data_prep.packing_report --histogram=squad_1_1_384 \
	  --max_sequences_per_pack=3 --algorithms=all \
	  --plot=$(OUT)/packing_squad_1_1_384.png --output_json=$(OUT)/packing_squad_1_1_384.json
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN)/python -m data_prep.builtin_corpus --output_file=$(DEMO)/corpus.txt
	$(BIN)/python -m data_prep.create_pretraining_data --input_file=$(DEMO)/corpus.txt \
	  --output_file=$(DEMO)/unpacked/train.tfrecord --vocab_size=8000 $(DEMO_DATA) \
	  --dupe_factor=4 --random_seed=12345
	$(BIN)/python -m data_prep.pack_pretraining_data \
	  --input_file=$(DEMO)/unpacked/train.tfrecord --output_dir=$(DEMO)/packed \
	  $(DEMO_DATA) --num_output_shards=2
	$(BIN)/python -m data_prep.verify_packing --unpacked=$(DEMO)/unpacked/train.tfrecord \
	  --packed='$(DEMO)/packed/*.tfrecord'
	$(BIN)/python run_pretraining.py $(DEMO_TRAIN) --output_dir=$(DEMO)/train_unpacked \
	  --input_file=$(DEMO)/unpacked/train.tfrecord --batching=padded
	$(BIN)/python run_pretraining.py $(DEMO_TRAIN) --output_dir=$(DEMO)/train_packed \
	  --input_file='$(DEMO)/packed/*.tfrecord' --packing_hyperparameter_adjustment=accumulation
	$(BIN)/python compare_runs.py --runs=$(DEMO)/train_unpacked,$(DEMO)/train_packed \
	  --labels=unpacked,packed --plot=$(DEMO)/loss_curves.png

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

# The house's rules (pyproject.toml's [tool.ruff]): Google docstrings, at
# most 8 arguments, sorted imports, nothing unused. ruff comes with the test
# extra.
lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

benchmark: $(VENV)/.installed
	$(BIN)/python benchmarks/packing_benchmark.py --write_markdown=BENCHMARKS.md

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis *.egg-info build packed_bert_tf/data/records/_*.so
