//! The rule of admission, pure integer arithmetic: the sliding window
//! counter ([`window`]) and the strict window ([`strict`]), the one answer
//! to "when does this request, whole cost included, fit?" ([`fit`]), a
//! zone's `mode=` ([`mode`]), `delay=`'s queue ([`delay`]) and what a
//! `charge=` finally counts ([`charge`]).

pub mod charge;
pub mod delay;
pub mod fit;
pub mod mode;
pub mod strict;
pub mod window;
