"""tfyarn: TensorFlow (and friends) on Hadoop YARN with an el_submit-compatible CLI.

Must not import anything heavy (skein, TensorFlow, a JVM): `el_submit --help` stays instant.
"""

__version__ = "0.1.0"
