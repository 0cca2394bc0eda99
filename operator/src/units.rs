//! Parsing of the spec's durations (`10s`, `1m30s`) and quantities (`512Mi`, `2`, `500m`).
//!
//! The executor takes plain milliseconds and bytes, so these conversions must be exact and
//! must refuse anything ambiguous rather than guess. Messages about limits spell values back
//! the spec's way ([`show_ms`], [`show_bytes`]).

use std::str::FromStr;

/// Why a duration or quantity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a Go-style duration.
    #[error("{0:?} is not a duration like 500ms, 10s or 1m30s")]
    BadDuration(String),
    /// Not a Kubernetes quantity.
    #[error("{0:?} is not a quantity like 512Mi, 2Gi or 1000000")]
    BadQuantity(String),
    /// Parsed, but negative, zero or too large for the target unit.
    #[error("{0:?} is out of range: {1}")]
    OutOfRange(String, &'static str),
}

/// Parses a positive Go-style duration into whole milliseconds (sub-millisecond parts are refused
/// when they would round to zero).
pub fn duration_ms(text: &str) -> Result<u64, UnitError> {
    // kube's parser reads "" as zero; an empty field is a typo, not a request for no time.
    if text.is_empty() {
        return Err(UnitError::BadDuration(String::new()));
    }
    // kube's parser panics when a part overflows (`99999999999999999h`); twelve integer digits
    // per part are far past any limit a pool can have and far from overflow.
    let integer_digits = text
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|part| part.split('.').next().unwrap_or("").len());
    if integer_digits.max().unwrap_or(0) > 12 {
        return Err(UnitError::OutOfRange(text.to_owned(), "too large"));
    }
    let parsed = kube::core::Duration::from_str(text).map_err(|_| UnitError::BadDuration(text.to_owned()))?;
    if parsed.is_negative() {
        return Err(UnitError::OutOfRange(text.to_owned(), "must be positive"));
    }
    let std: std::time::Duration = parsed.into();
    let ms = u64::try_from(std.as_millis()).map_err(|_| UnitError::OutOfRange(text.to_owned(), "too large"))?;
    if ms == 0 {
        return Err(UnitError::OutOfRange(text.to_owned(), "must be at least 1ms"));
    }
    Ok(ms)
}

/// A parsed quantity as an exact fraction `numerator / 1000` (milli-units), which covers every
/// suffix Kubernetes accepts for the values we read (`m`, decimal and binary multipliers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Milli(u128);

impl Milli {
    /// The value rounded down to a whole unit.
    pub fn floor(self) -> u128 {
        self.0 / 1000
    }

    /// The value in thousandths of a unit.
    pub fn milli(self) -> u128 {
        self.0
    }

    /// The value if it is a whole number of units.
    pub fn whole(self) -> Option<u128> {
        self.0.is_multiple_of(1000).then_some(self.0 / 1000)
    }
}

/// Parses a non-negative Kubernetes quantity (`512Mi`, `2`, `1.5`, `500m`, `1e3` is refused).
pub fn quantity(text: &str) -> Result<Milli, UnitError> {
    let bad = || UnitError::BadQuantity(text.to_owned());
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let multiplier_milli: u128 = match suffix {
        "m" => 1,
        "" => 1_000,
        "k" => 1_000_000,
        "M" => 1_000_000_000,
        "G" => 1_000_000_000_000,
        "T" => 1_000_000_000_000_000,
        "P" => 1_000_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000_000,
        "Ki" => 1_000 << 10,
        "Mi" => 1_000 << 20,
        "Gi" => 1_000 << 30,
        "Ti" => 1_000 << 40,
        "Pi" => 1_000 << 50,
        "Ei" => 1_000 << 60,
        _ => return Err(bad()),
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part.chars().all(|c| c.is_ascii_digit())
        || !frac_part.chars().all(|c| c.is_ascii_digit())
        || frac_part.len() > 18
        || (number.contains('.') && frac_part.is_empty())
    {
        return Err(bad());
    }
    let too_large = || UnitError::OutOfRange(text.to_owned(), "too large");
    let int: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| too_large())?
    };
    let frac_digits = u32::try_from(frac_part.len()).map_err(|_| bad())?;
    let frac: u128 = if frac_part.is_empty() {
        0
    } else {
        frac_part.parse().map_err(|_| bad())?
    };
    let scale = 10u128.pow(frac_digits);
    let whole = int.checked_mul(multiplier_milli).ok_or_else(too_large)?;
    let part = frac.checked_mul(multiplier_milli).ok_or_else(too_large)? / scale;
    if frac.checked_mul(multiplier_milli).ok_or_else(too_large)? % scale != 0 {
        return Err(UnitError::OutOfRange(
            text.to_owned(),
            "finer than a thousandth of a unit",
        ));
    }
    whole.checked_add(part).map(Milli).ok_or_else(too_large)
}

/// Parses a quantity that must be a positive whole number of bytes.
pub fn bytes(text: &str) -> Result<u64, UnitError> {
    let value = quantity(text)?
        .whole()
        .ok_or(UnitError::OutOfRange(text.to_owned(), "not a whole number of bytes"))?;
    if value == 0 {
        return Err(UnitError::OutOfRange(text.to_owned(), "must be positive"));
    }
    u64::try_from(value).map_err(|_| UnitError::OutOfRange(text.to_owned(), "too large"))
}

/// A duration as the spec would spell it (`10s`, `1500ms`), for messages.
pub fn show_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A byte count as the spec would spell it (`2Gi`, `512Mi`, or plain bytes), for messages.
pub fn show_bytes(bytes: u64) -> String {
    const GI: u64 = 1 << 30;
    const MI: u64 = 1 << 20;
    if bytes.is_multiple_of(GI) {
        format!("{}Gi", bytes / GI)
    } else if bytes.is_multiple_of(MI) {
        format!("{}Mi", bytes / MI)
    } else {
        bytes.to_string()
    }
}

/// `milli` thousandths of a unit as a quantity the API server takes: a whole number the
/// way [`show_bytes`] spells it, else in milli-units (`1500m`).
pub fn show_milli(milli: u128) -> String {
    match u64::try_from(milli / 1000) {
        Ok(whole) if milli.is_multiple_of(1000) => show_bytes(whole),
        _ if milli.is_multiple_of(1000) => (milli / 1000).to_string(),
        _ => format!("{milli}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_convert_to_milliseconds() {
        assert_eq!(duration_ms("10s"), Ok(10_000));
        assert_eq!(duration_ms("1m30s"), Ok(90_000));
        assert_eq!(duration_ms("500ms"), Ok(500));
        assert_eq!(duration_ms("1.5s"), Ok(1_500));
        assert_eq!(duration_ms("2h"), Ok(7_200_000));
    }

    #[test]
    fn huge_durations_are_refused_not_a_panic() {
        for text in [
            "99999999999999999h",
            "18446744073709550000ms",
            "1h99999999999999999999s",
        ] {
            assert!(matches!(duration_ms(text), Err(UnitError::OutOfRange(..))), "{text}");
        }
        assert_eq!(duration_ms("999999999999ms"), Ok(999_999_999_999));
    }

    #[test]
    fn bad_durations_are_refused() {
        assert!(matches!(duration_ms("10"), Err(UnitError::BadDuration(_))));
        assert!(matches!(duration_ms("ten seconds"), Err(UnitError::BadDuration(_))));
        assert!(matches!(duration_ms(""), Err(UnitError::BadDuration(_))));
        assert!(matches!(duration_ms("-5s"), Err(UnitError::OutOfRange(..))));
        assert!(matches!(duration_ms("0s"), Err(UnitError::OutOfRange(..))));
        assert!(matches!(duration_ms("10us"), Err(UnitError::OutOfRange(..))));
    }

    #[test]
    fn quantities_convert_to_bytes() {
        assert_eq!(bytes("512Mi"), Ok(512 * 1024 * 1024));
        assert_eq!(bytes("2Gi"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(bytes("8Mi"), Ok(8 << 20));
        assert_eq!(bytes("1k"), Ok(1_000));
        assert_eq!(bytes("1000000"), Ok(1_000_000));
        assert_eq!(bytes("1.5Ki"), Ok(1_536));
    }

    #[test]
    fn bad_quantities_are_refused() {
        assert!(matches!(bytes("512MB"), Err(UnitError::BadQuantity(_))));
        assert!(matches!(bytes("lots"), Err(UnitError::BadQuantity(_))));
        assert!(matches!(bytes(""), Err(UnitError::BadQuantity(_))));
        assert!(matches!(bytes("1."), Err(UnitError::BadQuantity(_))));
        assert!(matches!(bytes("-1Mi"), Err(UnitError::BadQuantity(_))));
        assert!(matches!(bytes("0"), Err(UnitError::OutOfRange(..))));
        assert!(matches!(bytes("1.5"), Err(UnitError::OutOfRange(..))));
        assert!(matches!(bytes("500m"), Err(UnitError::OutOfRange(..))));
        assert!(matches!(bytes("99999999999E"), Err(UnitError::OutOfRange(..))));
    }

    #[test]
    fn milli_quantities_are_spelt_back_exactly() {
        assert_eq!(show_milli(1000 * (4 << 20)), "4Mi");
        assert_eq!(show_milli(1000 * (4 << 30)), "4Gi");
        assert_eq!(show_milli(1000 * 1_000_000_000), "1000000000");
        assert_eq!(show_milli(1500), "1500m");
        for text in ["20096Mi", "4Gi", "1000000000", "1500m"] {
            let milli = quantity(text).map(Milli::milli);
            assert_eq!(milli.map(show_milli).as_deref(), Ok(text));
        }
    }

    #[test]
    fn cpu_quantities_round_down() {
        assert_eq!(quantity("2").map(Milli::floor), Ok(2));
        assert_eq!(quantity("1500m").map(Milli::floor), Ok(1));
        assert_eq!(quantity("500m").map(Milli::floor), Ok(0));
        assert_eq!(quantity("2.5").map(Milli::floor), Ok(2));
        assert!(quantity("1e3").is_err());
    }
}
