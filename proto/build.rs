//! Compiles `sandpool/v1/*.proto` with protox (pure Rust, no system `protoc`).
use prost::Message;
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["sandpool/v1/executor.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["."])?;
    // Server reflection serves this encoded descriptor set.
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("sandpool_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
