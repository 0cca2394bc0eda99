//! The operator writes executor flags into its pods and leaves others out, relying on the
//! executor's defaults for them (and quoting them in its messages). It cannot read them
//! from the executor crate, so it keeps a copy (`sandpool_operator::resolve::executor_defaults`);
//! this holds the copy against the flags' declared defaults (`ExecutorArgs`, not the
//! environment, so `SANDPOOL_*` variables set for other tests cannot hide a drift).

use clap::{Args, Command};
use sandpool_executor::config::ExecutorArgs;
use sandpool_operator::resolve::executor_defaults;

#[test]
fn the_operators_executor_defaults_are_the_executors_flag_defaults() {
    let mut executor = ExecutorArgs::augment_args(Command::new("sandpool-executor"));
    // Building fills in implied defaults (a switch's `false`).
    executor.build();
    let operator = executor_defaults::flags();
    assert!(!operator.is_empty());
    for (flag, operator_default) in operator {
        let long = flag.strip_prefix("--").expect("flags are written in full");
        let arg = executor
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("the executor has no {flag} (the operator relies on its default)"));
        let executor_default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            executor_default,
            [operator_default],
            "{flag}: the executor's default differs from the operator's copy in operator/src/resolve/executor_defaults.rs"
        );
    }
}
