"""tfyarn: TensorFlow (and friends) on Hadoop YARN with an el_submit-compatible CLI."""

__version__ = "0.1.0"
