//! `sandpool bench`: placeholder until the benchmark lands.

#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

pub async fn run(_: BenchArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not yet")
}
