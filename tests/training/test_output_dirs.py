"""The output folder checks of the front ends."""

import pytest

from packed_bert_tf.training.output_dirs import make_output_dir


def test_an_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        make_output_dir(str(tmp_path / "file"))
    with pytest.raises(ValueError, match=r"file/sub cannot be created \(\w+Error"):
        make_output_dir(str(tmp_path / "file" / "sub"))
