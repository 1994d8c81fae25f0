//! A zone key that is one request header, `$http_NAME` (`X-Client`,
//! `X-Api-Key`, ...): its value read from the request's header list the way
//! nginx's own variable reads it (`ngx_http_variable_unknown_header`), and
//! kept in the request's variable value as nginx keeps it, without the
//! variable machinery around it (about 190 instructions a request for a
//! 5-letter name, a third of what the module's hot path costs over none).
//!
//! Only a variable that nginx resolved to its generic request-header
//! handler (the `http_` prefix variable, [`generic_header_name`]) is read
//! here; `$http_host`, `$http_x_forwarded_for`, `$http_cookie` and the
//! other headers nginx or a module define a variable of their own for keep
//! going through that variable.

use core::ptr;

use nginx_sys::{
    ngx_array_t, ngx_http_core_main_conf_t, ngx_http_variable_t, ngx_list_part_t, ngx_str_t,
    ngx_table_elt_t, ngx_uint_t, ngx_variable_value_t, NGX_HTTP_VAR_NOCACHEABLE,
};
use ngx::http::Request;

/// The `http_` prefix, whose length nginx's handler skips in the name.
const PREFIX: &[u8] = b"http_";

/// The elements of an `ngx_array_t` of `T`.
///
/// # Safety
/// `a` holds `nelts` initialised `T`s.
unsafe fn elements<T>(a: &ngx_array_t) -> &[T] {
    if a.nelts == 0 || a.elts.is_null() {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { core::slice::from_raw_parts(a.elts.cast::<T>(), a.nelts) }
}

/// The header name (after `http_`, lowercase, `_` for `-`, as nginx
/// compares it) when the variable at `index` is nginx's generic
/// request-header variable: resolved by nginx to the handler of the
/// `http_` prefix variable, with its own name as the handler's data, and
/// cacheable. `None` for any other variable.
///
/// # Safety
/// `cmcf` is the core module's main configuration after nginx resolved its
/// variables (from `init_module` on), and `index` one of its indices.
pub unsafe fn generic_header_name(
    cmcf: &ngx_http_core_main_conf_t,
    index: ngx_uint_t,
) -> Option<ngx_str_t> {
    // SAFETY: both arrays hold their kind of element (nginx's types).
    let (vars, prefixes) = unsafe {
        (
            elements::<ngx_http_variable_t>(&cmcf.variables),
            elements::<ngx_http_variable_t>(&cmcf.prefix_variables),
        )
    };
    let v = vars.get(index)?;
    // SAFETY: a variable's name is configuration memory.
    let named = |x: &ngx_http_variable_t| unsafe { str_bytes(&x.name) } == PREFIX;
    let generic = prefixes.iter().find(|p| named(p))?;
    let handler = generic.get_handler?;
    if v.get_handler? as usize != handler as usize
        || v.data != ptr::from_ref(&v.name) as usize
        || v.flags & NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t != 0
    {
        return None;
    }
    // SAFETY: as above.
    let name = unsafe { str_bytes(&v.name) };
    let rest = name.strip_prefix(PREFIX)?;
    Some(ngx_str_t {
        len: rest.len(),
        data: rest.as_ptr().cast_mut(),
    })
}

/// The bytes of an nginx string (empty for a null one).
///
/// # Safety
/// `s` holds `len` readable bytes for as long as it lives.
unsafe fn str_bytes(s: &ngx_str_t) -> &[u8] {
    if s.len == 0 || s.data.is_null() {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { core::slice::from_raw_parts(s.data, s.len) }
}

/// The request's value of the generic header variable at `index`, whose
/// header name is `name` ([`generic_header_name`]): its cached value when
/// nginx (or an earlier call) evaluated it, else the header list read as
/// `ngx_http_variable_unknown_header` reads it, and cached the same way.
/// Empty when no header has that name; `None` on an nginx error (no memory
/// to join several headers), where `ngx_http_get_flushed_variable` would
/// return null. The bytes live as long as the request (`'p`).
///
/// # Safety
/// `r` is a valid request, `index` a variable index of its configuration
/// and `name` what [`generic_header_name`] returned for it.
#[inline(always)]
pub unsafe fn header_key<'p>(
    req: &Request,
    index: ngx_uint_t,
    name: &HeaderName,
) -> Option<&'p [u8]> {
    let r = super::req::ptr(req);
    // SAFETY: per the contract, `variables[index]` is the request's value.
    let v = unsafe { (*r).variables.add(index) };
    // SAFETY: as above.
    if unsafe { super::vars::evaluated(&*v) } {
        // SAFETY: the request and an index of its variables (the
        // contract); a non-null result is the request's value.
        let v = unsafe { super::vars::flushed_variable(req, index).as_ref() }?;
        // SAFETY: the value's data lives as long as the request.
        return Some(unsafe { super::vars::variable_bytes(v) });
    }
    // SAFETY: the request and its value, per the contract.
    unsafe { read_header(req, &mut *v, name) }
}

/// A header name's byte as nginx's handler compares it to the variable's
/// name: `A`-`Z` lowered, `-` read as `_`, every other byte as it is.
static FOLD: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = match c as u8 {
            b'A'..=b'Z' => c as u8 | 0x20,
            b'-' => b'_',
            b => b,
        };
        c += 1;
    }
    t
};

/// Whether the `name.len()` bytes at `key` are `name` as nginx's handler
/// compares them ([`FOLD`]).
///
/// # Safety
/// `key` holds `name.len()` readable bytes.
#[inline(always)]
unsafe fn same_name(key: *const u8, name: &[u8]) -> bool {
    for (i, &n) in name.iter().enumerate() {
        // SAFETY: i < name.len(), per the contract.
        if FOLD[usize::from(unsafe { *key.add(i) })] != n {
            return false;
        }
    }
    true
}

/// A key header's name as [`header_key`] compares it: `name`, as nginx
/// compares it (lowercase, `_` for `-`), and for a name of 4 to 8 bytes
/// the first and the last 4 bytes of its two usual spellings, lowercase
/// (`x-api-key`, as HTTP/2 sends every name) and capitalised
/// (`X-Api-Key`): a header spelled one of these ways is that name, found
/// without reading it byte by byte; any other spelling is folded
/// ([`same_name`]).
#[derive(Clone, Copy)]
pub struct HeaderName {
    /// The name after `http_`, as nginx compares it.
    pub name: &'static [u8],
    /// The two spellings' first 4 bytes, and last 4 bytes above them.
    spelled: Option<[u64; 2]>,
}

impl HeaderName {
    /// The header name `name` (what [`generic_header_name`] returned).
    pub fn new(name: &'static [u8]) -> Self {
        HeaderName {
            name,
            spelled: spellings(name),
        }
    }

    /// Whether the `name.len()` bytes at `key` are this name as nginx's
    /// handler compares it: one of the usual spellings, else folded.
    ///
    /// # Safety
    /// `key` holds `name.len()` readable bytes.
    #[inline(always)]
    unsafe fn matches(&self, key: *const u8) -> bool {
        // SAFETY: per the contract.
        unsafe { self.spelled_at(key) || folded_name(key, self.name) }
    }

    /// Whether the `name.len()` bytes at `key` are this name, spelled
    /// one of the usual two ways (false: maybe another way).
    ///
    /// # Safety
    /// `key` holds `name.len()` readable bytes.
    #[inline(always)]
    unsafe fn spelled_at(&self, key: *const u8) -> bool {
        let Some([a, b]) = self.spelled else {
            return false;
        };
        let n = self.name.len();
        // SAFETY: 4 <= n (`spellings`): both reads are within the n bytes.
        let (first, last) = unsafe {
            (
                key.cast::<u32>().read_unaligned(),
                key.add(n - 4).cast::<u32>().read_unaligned(),
            )
        };
        let ends = u64::from(first) | u64::from(last) << 32;
        ends == a || ends == b
    }
}

/// The first and last 4 bytes (native order) of `name`'s lowercase and
/// capitalised spellings, for a name of 4 to 8 bytes whose spellings fold
/// back to it (None otherwise).
fn spellings(name: &[u8]) -> Option<[u64; 2]> {
    if !(4..=8).contains(&name.len()) {
        return None;
    }
    let lower: Vec<u8> = name
        .iter()
        .map(|&c| if c == b'_' { b'-' } else { c })
        .collect();
    let title: Vec<u8> = lower
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let starts_word = i == 0 || lower[i - 1] == b'-';
            if starts_word {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    let folds_back = |s: &[u8]| s.iter().zip(name).all(|(&c, &n)| FOLD[usize::from(c)] == n);
    if !folds_back(&lower) || !folds_back(&title) {
        return None;
    }
    let ends = |s: &[u8]| {
        let word = |b: &[u8]| u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        word(&s[..4]) | word(&s[s.len() - 4..]) << 32
    };
    Some([ends(&lower), ends(&title)])
}

/// [`same_name`] out of line: a header of the name's length that is not
/// one of its usual spellings.
///
/// # Safety
/// As [`same_name`].
#[cold]
#[inline(never)]
unsafe fn folded_name(key: *const u8, name: &[u8]) -> bool {
    // SAFETY: per the contract.
    unsafe { same_name(key, name) }
}

/// `ngx_http_variable_unknown_header` over the request's header list, as
/// nginx before 1.23.0 reads it: the first header called `name` (a deleted
/// one, hash 0, skipped); none: not found. Returns the value set, as
/// [`header_key`].
///
/// # Safety
/// `r` is a valid request and `v` its value of the variable.
#[cfg(not(nginx1_23_0))]
#[inline(never)]
unsafe fn read_header<'p>(
    req: &Request,
    v: &mut ngx_variable_value_t,
    name: &HeaderName,
) -> Option<&'p [u8]> {
    let r = super::req::ptr(req);
    // SAFETY: the header list is the request's, each part holding `nelts`
    // headers, each with `key.len` bytes of name, alive with the request.
    unsafe {
        let mut part: *mut ngx_list_part_t = &mut (*r).headers_in.headers.part;
        while !part.is_null() {
            let elts = (*part).elts.cast::<ngx_table_elt_t>();
            for i in 0..(*part).nelts {
                let h = elts.add(i);
                if (*h).key.len == name.name.len() && (*h).hash != 0 && name.matches((*h).key.data)
                {
                    let value = (*h).value;
                    super::vars::set_found(v, value.data, value.len);
                    return Some(str_bytes(&*ptr::addr_of!((*h).value)));
                }
            }
            part = (*part).next;
        }
    }
    super::vars::set_not_found(v);
    Some(&[])
}

/// The first header called `name` (a deleted one, hash 0, skipped) at or
/// after header `i` of list part `part`: its part and index there.
///
/// # Safety
/// `part` is null or a part of a request's header list, each part holding
/// `nelts` headers, each with `key.len` bytes of name, alive with the
/// request.
#[cfg(nginx1_23_0)]
#[inline(always)]
unsafe fn find(
    mut part: *mut ngx_list_part_t,
    mut i: usize,
    name: &HeaderName,
) -> Option<(*mut ngx_list_part_t, usize)> {
    // SAFETY: per the contract.
    unsafe {
        while !part.is_null() {
            let elts = (*part).elts.cast::<ngx_table_elt_t>();
            while i < (*part).nelts {
                let h = elts.add(i);
                if (*h).key.len == name.name.len() && (*h).hash != 0 && name.matches((*h).key.data)
                {
                    return Some((part, i));
                }
                i += 1;
            }
            part = (*part).next;
            i = 0;
        }
    }
    None
}

/// `ngx_http_variable_unknown_header` over the request's header list, as
/// nginx 1.23.0 and later read it: every header called `name` (a deleted
/// one, hash 0, skipped), linked through their `next` as nginx links them;
/// none: not found; one: its value; more: their values joined with ", " in
/// the request pool ([`read_all`]). Returns the value set, as
/// [`header_key`]. The common case, one header of that name, keeps only
/// the place of the first one found while it looks for another. Inlined
/// into the phase handler, which has its registers saved already (out of
/// line, its frame cost ~20 instructions a request).
///
/// # Safety
/// `r` is a valid request and `v` its value of the variable.
#[cfg(nginx1_23_0)]
#[inline(always)]
unsafe fn read_header<'p>(
    req: &Request,
    v: &mut ngx_variable_value_t,
    name: &HeaderName,
) -> Option<&'p [u8]> {
    let r = super::req::ptr(req);
    // SAFETY: the header list is the request's (see `find`); the header
    // found and its value are the request's, alive with it.
    unsafe {
        let Some((part, i)) = find(&mut (*r).headers_in.headers.part, 0, name) else {
            super::vars::set_not_found(v);
            return Some(&[]);
        };
        if find(part, i + 1, name).is_some() {
            return read_all(req, v, name.name);
        }
        let h = (*part).elts.cast::<ngx_table_elt_t>().add(i);
        (*h).next = ptr::null_mut();
        let value = (*h).value;
        super::vars::set_found(v, value.data, value.len);
        Some(str_bytes(&*ptr::addr_of!((*h).value)))
    }
}

/// [`read_header`] for a name that several headers have: each linked
/// through their `next`, and their values joined.
///
/// # Safety
/// As [`read_header`].
#[cfg(nginx1_23_0)]
#[cold]
#[inline(never)]
unsafe fn read_all<'p>(
    req: &Request,
    v: &mut ngx_variable_value_t,
    name: &[u8],
) -> Option<&'p [u8]> {
    let r = super::req::ptr(req);
    let mut first: *mut ngx_table_elt_t = ptr::null_mut();
    let mut link: *mut *mut ngx_table_elt_t = &mut first;
    let mut len = 0usize;
    // SAFETY: the header list is the request's, each part holding `nelts`
    // headers, each with `key.len` bytes of name; `link` points at `first`
    // or at a matched header's `next`, all alive with the request.
    unsafe {
        let mut part: *mut ngx_list_part_t = &mut (*r).headers_in.headers.part;
        while !part.is_null() {
            let elts = (*part).elts.cast::<ngx_table_elt_t>();
            for i in 0..(*part).nelts {
                let h = elts.add(i);
                if (*h).key.len != name.len() || (*h).hash == 0 {
                    continue;
                }
                if !same_name((*h).key.data, name) {
                    continue;
                }
                len += (*h).value.len + 2;
                *link = h;
                link = &mut (*h).next;
            }
            part = (*part).next;
        }
        *link = ptr::null_mut();
    }
    if first.is_null() {
        super::vars::set_not_found(v);
        return Some(&[]);
    }
    // SAFETY: `first` and the headers linked from it are the request's,
    // their values in its memory.
    unsafe {
        if (*first).next.is_null() {
            let value = (*first).value;
            super::vars::set_found(v, value.data, value.len);
            return Some(str_bytes(&*ptr::addr_of!((*first).value)));
        }
        join(req, v, first, len - 2)
    }
}

/// Several headers of one name: their values joined with ", " (`len`
/// bytes in all) in the request pool, as nginx joins them.
///
/// # Safety
/// `r` is a valid request, `v` its value of the variable and `h` the first
/// of the linked headers.
#[cfg(nginx1_23_0)]
#[cold]
unsafe fn join<'p>(
    req: &Request,
    v: &mut ngx_variable_value_t,
    mut h: *mut ngx_table_elt_t,
    len: usize,
) -> Option<&'p [u8]> {
    let r = super::req::ptr(req);
    // SAFETY: the request's pool; `len` bytes are written below, the sum
    // of the linked values and their separators.
    unsafe {
        let p = nginx_sys::ngx_pnalloc((*r).pool, len).cast::<u8>();
        if p.is_null() {
            super::vars::set_failed(v);
            return None;
        }
        let mut at = p;
        loop {
            let value = str_bytes(&(*h).value);
            ptr::copy_nonoverlapping(value.as_ptr(), at, value.len());
            at = at.add(value.len());
            h = (*h).next;
            if h.is_null() {
                break;
            }
            at.write(b',');
            at.add(1).write(b' ');
            at = at.add(2);
        }
        super::vars::set_found(v, p, len);
        Some(core::slice::from_raw_parts(p, len))
    }
}
