"""The offline makers that the ``data_prep`` tools run: pre-training instances
from text and the Beam pipeline that packs records."""
