// Empty: this crate only names hdfs-sys for `cargo fetch` (see Cargo.toml).
