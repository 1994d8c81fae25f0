//! The rule of admission, pure integer arithmetic: the sliding window
//! counter ([`window`]) and the strict window ([`strict`]), the one answer
//! to "when does this request, whole cost included, fit?" ([`fit`]), a
//! zone's `mode=` ([`mode`]), `delay=`'s queue ([`delay`]), what a
//! `charge=` finally counts ([`charge`]) and when a shed group sheds a
//! request ([`shed`]).

pub mod calendar;
pub mod charge;
pub mod delay;
pub mod fit;
pub mod mode;
pub mod shed;
pub mod strict;
pub mod window;
