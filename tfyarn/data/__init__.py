"""Training data from Spark to tasks: Example/TFRecord encoding, committed datasets
(a manifest as the commit point), and what tasks read: `tfyarn.data.dataset()` (tf.data)
`tfyarn.data.rows()` (plain Python) and `tfyarn.data.batches()` (numpy columns), for
PyTorch and Horovod.

Must not import TensorFlow or Spark at import time: each loads where it is used.
"""

from tfyarn.data.read import batches, dataset, rows

__all__ = ["batches", "dataset", "rows"]
