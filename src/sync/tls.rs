//! The rustls client configuration of a `redis=rediss://` zone: the CA of
//! `redis_ca=` (else the system's roots, as the crate does) and the client
//! certificate and key of `redis_cert=` and `redis_key=`. Built at each
//! connect (connects are rare), for the sync's bounded connection
//! (`raw_conn.rs`).

use std::sync::Arc;

use redis::{ClientTlsConfig, RedisError, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// A configuration error (an unreadable PEM): an I/O error whose text says
/// `certificate`, counted as `kind="tls"` by the link.
fn bad(what: &str) -> RedisError {
    std::io::Error::other(format!("TLS certificate configuration: {what}")).into()
}

/// The client configuration for `certs`.
pub fn client_config(certs: &TlsCertificates) -> Result<Arc<ClientConfig>, RedisError> {
    let roots = match &certs.root_cert {
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|_| bad("unreadable redis_ca= certificate"))?;
                roots
                    .add(cert)
                    .map_err(|_| bad("unusable redis_ca= certificate"))?;
            }
            roots
        }
        None => system_roots(),
    };
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let config = match &certs.client_tls {
        Some(ClientTlsConfig {
            client_cert,
            client_key,
        }) => {
            let chain = CertificateDer::pem_slice_iter(client_cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad("unreadable redis_cert= certificate"))?;
            let key = PrivateKeyDer::from_pem_slice(client_key)
                .map_err(|_| bad("unreadable redis_key= key"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|_| bad("unusable redis_cert= and redis_key="))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The system's trusted roots (those that load).
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}
