//! What comes around the limits, in one order for every request: the
//! location's shed group first (a request it sheds is counted by no
//! limit; a dry run's goes on), then the limits ([`super::decide`]'s
//! loop), then what the verdict gives back: the shed place of a request
//! that does not go on, and the hold of a request woken from `delay=` and
//! decided for good ([`Request::unhold`]), whatever decided it.

use super::shed::{self, Shed};
use super::{Ask, HostError, Request, ShedRefusal, Verdict, Woken};

/// Decides the request: its shed group, its limits, and what the verdict
/// gives back. Err: the host failed to evaluate a value; everything the
/// request took is given back.
#[inline(always)]
pub fn decide<'t, R: Request<'t>>(r: &mut R, ask: &Ask) -> Result<Verdict, HostError> {
    // A location without places or holds to end: the limits alone.
    if !R::PLACES && !ask.woken {
        return super::decide::limits(r, ask);
    }
    core::hint::cold_path();
    around(r, ask)
}

/// [`decide`] for a location with places, or a request woken from a hold.
#[cold]
#[inline(never)]
fn around<'t, R: Request<'t>>(r: &mut R, ask: &Ask) -> Result<Verdict, HostError> {
    let grouped = match R::PLACES {
        true => match shed_first(r, ask) {
            Ok(grouped) => grouped,
            Err(v) => return Ok(ended(r, ask, v)),
        },
        false => false,
    };
    let out = super::decide::limits(r, ask);
    // The common verdicts, returned without moving a refusal's fields:
    // admitted (by its group, whatever its limits made of it, too).
    if !ask.woken {
        if let Ok(Verdict::Admit) = out {
            return Ok(Verdict::Admit);
        }
        if let (Ok(Verdict::Exempt), true) = (&out, grouped) {
            return Ok(Verdict::Admit);
        }
    }
    let goes_on = matches!(
        out,
        Ok(Verdict::Admit | Verdict::Exempt | Verdict::WouldHold(_))
    ) || matches!(out, Ok(Verdict::Reject(rej)) if rej.dry_run);
    if R::PLACES && !goes_on {
        r.give_back_shed();
    }
    match out {
        // Admitted by its group, whatever its limits made of it.
        Ok(Verdict::Exempt) if grouped => Ok(ended(r, ask, Verdict::Admit)),
        Ok(v) => Ok(ended(r, ask, v)),
        Err(e) => Err(e),
    }
}

/// The location's shed group, asked before any limit. Ok: the request
/// goes on (true: its group admitted it, with a place or not, or would
/// have shed it in a dry run); Err: it is shed.
fn shed_first<'t, R: Request<'t>>(r: &mut R, ask: &Ask) -> Result<bool, Verdict> {
    let Some(s) = r.shed() else {
        return Ok(false);
    };
    match shed::decide(s.group, s.owner, s.limits, s.priority, ask.dry_run) {
        Shed::Admit(place) => r.took_shed(place),
        Shed::Untracked => {}
        Shed::WouldShed { in_flight } => r.would_shed(in_flight),
        Shed::Shed {
            in_flight,
            retry_after_s,
        } => {
            return Err(Verdict::Shed(ShedRefusal {
                in_flight,
                retry_after_s,
            }))
        }
    }
    Ok(true)
}

/// A request woken from a hold and decided for good (any verdict but
/// another hold) has the host end its hold, as the verdict says.
fn ended<'t, R: Request<'t>>(r: &mut R, ask: &Ask, v: Verdict) -> Verdict {
    if ask.woken {
        let how = match v {
            Verdict::Hold(_) => return v,
            Verdict::Admit => Woken::Admitted,
            Verdict::Exempt => Woken::Exempt,
            Verdict::Reject(_) | Verdict::WouldHold(_) => Woken::Rejected,
            Verdict::Shed(_) => Woken::Shed,
        };
        r.unhold(how);
    }
    v
}
