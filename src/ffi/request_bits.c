/*
 * The request's bit-fields the module reads or writes, compiled by the C
 * compiler against the very nginx tree the module is built for (build.rs).
 *
 * bindgen's accessors place a bit-field run that starts after a member of
 * smaller alignment as if the run were aligned: nginx 1.29 added
 * `in_port_t port` just before ngx_http_request_t's bit-fields, and from
 * `uri_changes` on its accessors are off by two bits (header_only read and
 * written as pipeline). The C compiler lays out the struct as nginx itself
 * was compiled, so these accessors are right for every version.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

/* 1 when the response has no body (HEAD, 204, 304, or set by a handler). */
ngx_uint_t
rlw_request_header_only(ngx_http_request_t *r)
{
    return r->header_only;
}

/* Marks the response as header only: no body follows the header. */
void
rlw_request_set_header_only(ngx_http_request_t *r)
{
    r->header_only = 1;
}

/* 1 after an internal redirect (or for a request that began internal). */
ngx_uint_t
rlw_request_internal(ngx_http_request_t *r)
{
    return r->internal;
}

/* 1 while the request is being answered by an error_page. */
ngx_uint_t
rlw_request_error_page(ngx_http_request_t *r)
{
    return r->error_page;
}

/*
 * The filters that may start subrequests of a main request after its own
 * last buffer went by (SSI includes, add_after_body, the next slice),
 * referred to weakly: addition and slice are not built by default.
 */
#pragma weak ngx_http_ssi_filter_module
#pragma weak ngx_http_addition_filter_module
#pragma weak ngx_http_slice_filter_module
extern ngx_module_t ngx_http_ssi_filter_module;
extern ngx_module_t ngx_http_addition_filter_module;
extern ngx_module_t ngx_http_slice_filter_module;

/*
 * The module context indexes of those filters that this nginx has (out[0..n),
 * n returned, at most 3), for a body filter that reads r->ctx itself: read
 * once at postconfiguration (a static module keeps its ctx_index for every
 * cycle).
 */
ngx_uint_t
rlw_subrequest_filter_indexes(ngx_uint_t out[3])
{
    ngx_uint_t  n = 0;

    if (&ngx_http_ssi_filter_module != NULL) {
        out[n++] = ngx_http_ssi_filter_module.ctx_index;
    }
    if (&ngx_http_addition_filter_module != NULL) {
        out[n++] = ngx_http_addition_filter_module.ctx_index;
    }
    if (&ngx_http_slice_filter_module != NULL) {
        out[n++] = ngx_http_slice_filter_module.ctx_index;
    }
    return n;
}

/*
 * ngx_http_mirror_module, referred to weakly (it can be built out); its
 * location configuration starts with the array of the location's mirror
 * URIs, NULL when the location mirrors nothing (`mirror off` or none), as
 * in every nginx since 1.13.4.
 */
#pragma weak ngx_http_mirror_module
extern ngx_module_t ngx_http_mirror_module;

/*
 * 1 when nginx still works for r's location after its answer: its
 * post_action, or its mirror subrequests (background subrequests, which
 * r->postponed does not list).
 */
ngx_uint_t
rlw_request_side_work(ngx_http_request_t *r)
{
    ngx_array_t               **mirror;
    ngx_http_core_loc_conf_t   *clcf;

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    if (clcf->post_action.data != NULL) {
        return 1;
    }

    if (&ngx_http_mirror_module == NULL) {
        return 0;
    }

    mirror = ngx_http_get_module_loc_conf(r, ngx_http_mirror_module);
    return *mirror != NULL;
}

/*
 * 1 when r's upstream goes on after a header-only answer: it still reads
 * the response's body into a cache or a store.
 */
ngx_uint_t
rlw_request_upstream_goes_on(ngx_http_request_t *r)
{
    return r->upstream != NULL && (r->upstream->cacheable || r->upstream->store);
}
