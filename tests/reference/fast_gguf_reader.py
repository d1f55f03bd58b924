"""gguf-py's GGUFReader, parsing over a plain numpy view of the mapped file.

GGUFReader slices its numpy memmap once per value, and every slice of a
memmap runs memmap's own finalizer: a 50K-token vocabulary (three arrays of
50K values) takes about 4 s to open on these machines, a quarter of that
over a plain ndarray view of the same mapping. The parse is gguf-py's,
unchanged; only the array it walks differs, so fields and tensors are the
same values and still read from the file's pages."""

import gguf
import numpy as np


class FastGGUFReader(gguf.GGUFReader):
    # GGUFReader.__init__ assigns self.data = np.memmap(...) and then parses it:
    # this property takes that assignment and keeps a plain view instead.
    @property
    def data(self):
        return self._plain_data

    @data.setter
    def data(self, mapped):
        self._plain_data = mapped.view(np.ndarray)
