//! Files of a zone's Redis connection, read when the configuration is
//! loaded: `redis_password_file=`, `redis_ca=`, `redis_cert=`,
//! `redis_key=`.
//!
//! The master reads them while parsing, before it drops privileges, so
//! they may be readable by root only. Messages name the parameter and the
//! path, never the file's contents.

use rate_limit_window_core::conf::error::RedisFileError;
use rate_limit_window_core::conf::redis_url::{RedisMode, RedisParams, Secret};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Reads every file `r` names into it. `conf_prefix` (nginx's
/// configuration directory, ending in `/`) resolves relative paths.
pub fn load(r: &mut RedisParams, conf_prefix: &[u8]) -> Result<(), RedisFileError> {
    if let Some(path) = r.password_file.clone() {
        let password = read_password(&full(&path, conf_prefix))?;
        if r.mode == RedisMode::Sentinel {
            r.master_password = Some(password);
        } else {
            r.addr.password = Some(password);
        }
    }
    if let Some(path) = r.ca.clone() {
        let pem = read("redis_ca", &full(&path, conf_prefix))?;
        check_certs("redis_ca", &path, &pem)?;
        r.pem.ca = Some(pem);
    }
    if let Some(path) = r.cert.clone() {
        let pem = read("redis_cert", &full(&path, conf_prefix))?;
        check_certs("redis_cert", &path, &pem)?;
        r.pem.cert = Some(pem);
    }
    if let Some(path) = r.key.clone() {
        let pem = read("redis_key", &full(&path, conf_prefix))?;
        if PrivateKeyDer::from_pem_slice(&pem).is_err() {
            return Err(RedisFileError::NoKey(path));
        }
        r.pem.key = Some(Secret(pem));
    }
    Ok(())
}

/// `path`, prefixed with `conf_prefix` unless absolute.
fn full(path: &[u8], conf_prefix: &[u8]) -> Vec<u8> {
    if path.first() == Some(&b'/') {
        return path.to_vec();
    }
    let mut p = conf_prefix.to_vec();
    p.extend_from_slice(path);
    p
}

/// The whole file at `path`.
fn read(param: &'static str, path: &[u8]) -> Result<Vec<u8>, RedisFileError> {
    use std::os::unix::ffi::OsStrExt;
    let os = std::ffi::OsStr::from_bytes(path);
    // The OS error ("No such file or directory"), never the contents.
    std::fs::read(os).map_err(|e| RedisFileError::Unreadable {
        param,
        path: path.to_vec(),
        error: e.to_string(),
    })
}

/// The first line of the file at `path`: non-empty UTF-8, without NUL.
fn read_password(path: &[u8]) -> Result<Secret, RedisFileError> {
    let data = read("redis_password_file", path)?;
    let line = data.split(|&c| c == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() || line.contains(&0) || std::str::from_utf8(line).is_err() {
        return Err(RedisFileError::Password(path.to_vec()));
    }
    Ok(Secret(line.to_vec()))
}

/// At least one PEM certificate, all of them parseable.
fn check_certs(param: &'static str, path: &[u8], pem: &[u8]) -> Result<(), RedisFileError> {
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        if c.is_err() {
            n = 0;
            break;
        }
        n += 1;
    }
    if n == 0 {
        let path = path.to_vec();
        return Err(RedisFileError::NoCertificate { param, path });
    }
    Ok(())
}
