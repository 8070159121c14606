"""The packed layout: packs laid out as rows (`packed_rows`) and sequences
packed into records and unpacked again (`sequence_batch`), in numpy."""
