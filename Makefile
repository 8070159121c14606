# The README's two commands. Both start from nothing: a fresh clone, no venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: demo test benchmark clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Editable installs; the stamps re-run pip when setup.py changes.
$(VENV)/.installed: setup.py | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: setup.py | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# The main job on the embedded default: the packing report on the paper's
# histograms (Wikipedia pre-training at 512, SQuAD 1.1 at 384).
demo: $(VENV)/.installed
	mkdir -p $(OUT)
	$(BIN)/python -m data_prep.packing_report --histogram=wikipedia_512 \
	  --max_sequences_per_pack=3 --algorithms=all \
	  --plot=$(OUT)/packing_wikipedia_512.png --output_json=$(OUT)/packing_wikipedia_512.json
	$(BIN)/python -m data_prep.packing_report --histogram=squad_1_1_384 \
	  --max_sequences_per_pack=3 --algorithms=all \
	  --plot=$(OUT)/packing_squad_1_1_384.png --output_json=$(OUT)/packing_squad_1_1_384.json

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

benchmark: $(VENV)/.installed
	$(BIN)/python benchmarks/packing_benchmark.py --write_markdown=BENCHMARKS.md

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis *.egg-info
