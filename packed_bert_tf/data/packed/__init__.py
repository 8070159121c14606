"""The packed layout: sequences in compact form laid out as rows and back
(`packed_rows`), pre-training records to the compact form and back
(`pretraining_records`), in numpy."""
