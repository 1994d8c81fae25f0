//! Build script: turns what nginx-sys learned about the nginx tree into cfgs,
//! and hands the nginx build directory to the integration tests.
//!
//! nginx-sys exports its metadata only to *direct* dependents, which is why
//! `nginx-sys` is listed in `[dependencies]` next to `ngx`.

use std::env;

/// nginx versions at which an API we use changed: (NGINX_VERSION_NUMBER, cfg name).
const VERSION_CHECKS: &[(u64, &str)] = &[(1_023_000, "nginx1_23_0"), (1_025_001, "nginx1_25_1")];

fn main() {
    println!("cargo::rerun-if-env-changed=DEP_NGINX_FEATURES_CHECK");
    println!(
        "cargo::rustc-check-cfg=cfg(ngx_feature, values({}))",
        env::var("DEP_NGINX_FEATURES_CHECK").unwrap_or_else(|_| "any()".into())
    );
    println!("cargo::rerun-if-env-changed=DEP_NGINX_FEATURES");
    if let Ok(features) = env::var("DEP_NGINX_FEATURES") {
        for feature in features.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            println!("cargo::rustc-cfg=ngx_feature=\"{feature}\"");
        }
    }

    println!("cargo::rerun-if-env-changed=DEP_NGINX_OS_CHECK");
    println!(
        "cargo::rustc-check-cfg=cfg(ngx_os, values({}))",
        env::var("DEP_NGINX_OS_CHECK").unwrap_or_else(|_| "any()".into())
    );
    println!("cargo::rerun-if-env-changed=DEP_NGINX_OS");
    if let Ok(os) = env::var("DEP_NGINX_OS") {
        println!("cargo::rustc-cfg=ngx_os=\"{os}\"");
    }

    for (_, name) in VERSION_CHECKS {
        println!("cargo::rustc-check-cfg=cfg({name})");
    }
    println!("cargo::rerun-if-env-changed=DEP_NGINX_VERSION_NUMBER");
    if let Ok(version) = env::var("DEP_NGINX_VERSION_NUMBER") {
        let version: u64 = version.parse().unwrap_or(0);
        for (min, name) in VERSION_CHECKS {
            if version >= *min {
                println!("cargo::rustc-cfg={name}");
            }
        }
    }

    request_bits();

    // The integration tests start the nginx binary this module was built
    // against; they find it through this variable (see tests/common).
    println!("cargo::rerun-if-env-changed=DEP_NGINX_BUILD_DIR");
    if let Ok(build_dir) = env::var("DEP_NGINX_BUILD_DIR") {
        println!("cargo::rustc-env=NGINX_BUILD_DIR_FOR_TESTS={build_dir}");
    }
    if let Ok(version) = env::var("DEP_NGINX_VERSION") {
        println!("cargo::rustc-env=NGINX_VERSION_FOR_TESTS={version}");
    }
}

/// Compiles `src/ffi/request_bits.c`, the request's bit-field accessors,
/// against the nginx tree nginx-sys generated its bindings from (its
/// include directories and C flags), with the C compiler: the struct laid
/// out as nginx itself was compiled (see src/ffi/request_bits.rs).
fn request_bits() {
    const SOURCE: &str = "src/ffi/request_bits.c";
    // nginx's stream functions, referred to weakly (src/ffi/stream_weak.rs).
    const STREAM: &str = "src/ffi/stream_weak.c";
    println!("cargo::rerun-if-changed={SOURCE}");
    println!("cargo::rerun-if-changed={STREAM}");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_INCLUDE");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_CFLAGS");
    let mut build = cc::Build::new();
    build.file(SOURCE).file(STREAM).warnings(false);
    let includes = env::var("DEP_NGINX_INCLUDE").unwrap_or_default();
    for dir in env::split_paths(&includes) {
        build.include(dir);
    }
    let cflags = env::var("DEP_NGINX_CFLAGS").unwrap_or_default();
    for flag in cflags.split_whitespace() {
        build.flag(flag);
    }
    build.compile("rlw_request_bits");
}
