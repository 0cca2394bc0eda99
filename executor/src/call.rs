//! What the transport knows about a call that its request message does not say: when it
//! must be answered, who is calling, and its share of the executor's byte budget. The
//! gRPC and HTTP adapters build one per call; the engine and the judge take it.

use crate::budget::Charge;
use crate::tenants::{Priority, Tenant};
use std::sync::Arc;
use tokio::time::Instant;

/// One call's context.
#[derive(Debug, Clone)]
pub struct Call {
    /// When the call must be answered by.
    pub deadline: Option<Instant>,
    /// Who is calling. Cached results are scoped by it: one caller never learns that
    /// another ran exactly this program.
    pub caller: Caller,
    /// The call's share of the byte budget; files read for its reply are charged here.
    /// None: not charged (the CLI's embedded executor, tests).
    pub charge: Option<Charge>,
    /// The caller's tenant (docs/tenants.md); anonymous unless the transport found one.
    pub tenant: Arc<Tenant>,
    /// A priority the transport carries outside the request message (HTTP's
    /// `X-Sandpool-Priority`); a priority in the message wins.
    pub priority: Option<Priority>,
}

impl Default for Call {
    fn default() -> Self {
        Call {
            deadline: None,
            caller: Caller::default(),
            charge: None,
            tenant: Tenant::anonymous(),
            priority: None,
        }
    }
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
    /// The caller of a call by `tenant` that presented `authorization`: a tenant found by
    /// its token is one caller, whichever of its tokens it used; without auth, callers are
    /// told apart by what they send.
    pub fn of(tenant: &Tenant, authorization: Option<&[u8]>) -> Self {
        if tenant.authenticated {
            // Not a header value (it has a NUL), so never equal to an unauthenticated caller.
            // The identity too: a later tenant given a removed one's name is another caller.
            Caller(
                [
                    b"tenant\0".as_slice(),
                    tenant.name.as_bytes(),
                    b"\0",
                    &tenant.identity.to_le_bytes(),
                ]
                .concat(),
            )
        } else {
            Caller::from_authorization(authorization)
        }
    }

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

    #[test]
    fn a_tenant_is_one_caller_whatever_it_sends_and_never_an_anonymous_one() {
        let mut t = (*Tenant::anonymous()).clone();
        t.name = "rl".into();
        t.authenticated = true;
        // Scoped by the tenant: the result cache and sessions see one caller.
        assert_eq!(Caller::of(&t, Some(b"Bearer a")), Caller::of(&t, Some(b"Bearer b")));
        // No header value can hold it, so no unauthenticated caller's can equal it.
        assert!(http::HeaderValue::from_bytes(Caller::of(&t, None).as_bytes()).is_err());
        let mut other = t.clone();
        other.name = "sweeps".into();
        assert_ne!(Caller::of(&t, None), Caller::of(&other, None));
        // Without auth, callers are told apart by what they send, as before.
        let anon = Tenant::anonymous();
        assert_ne!(
            Caller::of(&anon, Some(b"Bearer a")),
            Caller::of(&anon, Some(b"Bearer b"))
        );
    }
}
