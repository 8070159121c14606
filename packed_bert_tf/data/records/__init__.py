"""Pre-training records: their format, the C record codec and TensorFlow's
fallback for it, record files, synthetic records and the proof that a packed
set holds exactly the sequences of an unpacked one."""
