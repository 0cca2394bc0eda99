//! What the transport knows about a call that its request message does not say: when it
//! must be answered, who is calling, and its share of the executor's byte budget. The
//! gRPC and HTTP adapters build one per call; the engine and the judge take it.

use crate::budget::Charge;
use tokio::time::Instant;

/// One call's context.
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// When the call must be answered by.
    pub deadline: Option<Instant>,
    /// Who is calling. Cached results are scoped by it: one caller never learns that
    /// another ran exactly this program.
    pub caller: Caller,
    /// The call's share of the byte budget; files read for its reply are charged here.
    /// None: not charged (the CLI's embedded executor, tests).
    pub charge: Option<Charge>,
}

/// A call from no one in particular, with only a deadline (the CLI, tests).
impl From<Option<Instant>> for Call {
    fn from(deadline: Option<Instant>) -> Self {
        Call {
            deadline,
            ..Default::default()
        }
    }
}

/// Who is calling, as far as sessions' owner checks and the result cache's scopes go: the
/// `authorization` value as presented, with the scheme's case and surrounding blanks
/// normalised. With auth off, callers that send different values (or none) are still
/// kept apart, as sessions keep them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Caller(Vec<u8>);

impl Caller {
    /// From an `authorization` header or metadata value, if there is one.
    pub fn from_authorization(value: Option<&[u8]>) -> Self {
        let Some(h) = value else {
            return Caller::default();
        };
        let h = h.trim_ascii();
        Caller(match h.split_at_checked(7) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"bearer ") => {
                [b"Bearer ".as_slice(), rest.trim_ascii()].concat()
            }
            _ => h.to_vec(),
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_and_blanks_are_normalised_and_nothing_else() {
        let a = Caller::from_authorization(Some(b"  bearer   tok "));
        assert_eq!(a.as_bytes(), b"Bearer tok");
        assert_eq!(a, Caller::from_authorization(Some(b"Bearer tok")));
        assert_ne!(a, Caller::from_authorization(Some(b"Bearer tok2")));
        assert_ne!(a, Caller::from_authorization(None));
        assert_eq!(Caller::from_authorization(Some(b"Basic xyz")).as_bytes(), b"Basic xyz");
    }
}
