//! Names the spec chooses: the pool's own (every child takes it), its languages', and its
//! pod labels (which must not collide with the operator's).

use std::collections::{BTreeMap, BTreeSet};

use super::invalid::InvalidSpec;
use crate::labels;

/// Child objects are named after the pool, and a Service name must be a DNS-1035 label.
pub(super) fn check_name(name: &str) -> Result<(), InvalidSpec> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(InvalidSpec::new(
            "metadata.name",
            "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters) because the pool's Service takes its name",
        ))
    }
}

pub(super) fn check_languages(list: &[String]) -> Result<Vec<String>, InvalidSpec> {
    if list.is_empty() {
        return Err(InvalidSpec::new(
            "spec.languages",
            "must name at least one language (omit it to enable all)",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, lang) in list.iter().enumerate() {
        let valid = lang.starts_with(|c: char| c.is_ascii_lowercase())
            && lang
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_+#.-".contains(c));
        if !valid {
            return Err(InvalidSpec::new(
                format!("spec.languages[{i}]"),
                format!("{lang:?} is not a language name"),
            ));
        }
        if !seen.insert(lang.as_str()) {
            return Err(InvalidSpec::new(
                format!("spec.languages[{i}]"),
                format!("{lang:?} is listed twice"),
            ));
        }
    }
    Ok(list.to_vec())
}

/// Extra pod labels may not set one the operator sets (its selector would break).
pub(super) fn check_pod_labels(pod_labels: &BTreeMap<String, String>) -> Result<(), InvalidSpec> {
    match pod_labels.keys().find(|k| labels::is_reserved(k)) {
        Some(key) => Err(InvalidSpec::new(
            format!("spec.podTemplate.labels[{key:?}]"),
            "is set by the operator and may not be overridden",
        )),
        None => Ok(()),
    }
}
