/*
 * nginx's stream functions and modules the stream module uses, referred to
 * weakly, so that the .so still loads into an nginx without stream (built
 * --without-stream, or Debian's nginx with ngx_stream_module.so not loaded,
 * or loaded after this module): there each is NULL, the http module works,
 * and a stream {} block that names this module's directives fails with an
 * [emerg] (src/ffi/stream_weak.rs). Compiled by build.rs against the nginx
 * tree the module is built for.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#pragma weak ngx_stream_module
#pragma weak ngx_stream_core_module
#pragma weak ngx_stream_add_variable
#pragma weak ngx_stream_get_variable_index
#pragma weak ngx_stream_get_flushed_variable
#pragma weak ngx_stream_compile_complex_value
#pragma weak ngx_stream_complex_value

/* nginx's ngx_stream_module, or NULL when this nginx has none loaded. */
ngx_module_t *
rlw_stream_module(void)
{
    return &ngx_stream_module;
}

/* ngx_stream_core_module, or NULL. */
ngx_module_t *
rlw_stream_core_module(void)
{
    return &ngx_stream_core_module;
}

/* Whether every stream function the module calls is there. */
ngx_uint_t
rlw_stream_linked(void)
{
    return &ngx_stream_module != NULL
           && &ngx_stream_core_module != NULL
           && ngx_stream_add_variable != NULL
           && ngx_stream_get_variable_index != NULL
           && ngx_stream_get_flushed_variable != NULL
           && ngx_stream_compile_complex_value != NULL
           && ngx_stream_complex_value != NULL;
}

ngx_stream_variable_t *
rlw_stream_add_variable(ngx_conf_t *cf, ngx_str_t *name, ngx_uint_t flags)
{
    return ngx_stream_add_variable(cf, name, flags);
}

ngx_int_t
rlw_stream_get_variable_index(ngx_conf_t *cf, ngx_str_t *name)
{
    return ngx_stream_get_variable_index(cf, name);
}

ngx_stream_variable_value_t *
rlw_stream_get_flushed_variable(ngx_stream_session_t *s, ngx_uint_t index)
{
    return ngx_stream_get_flushed_variable(s, index);
}

ngx_int_t
rlw_stream_compile_complex_value(ngx_stream_compile_complex_value_t *ccv)
{
    return ngx_stream_compile_complex_value(ccv);
}

ngx_int_t
rlw_stream_complex_value(ngx_stream_session_t *s,
    ngx_stream_complex_value_t *val, ngx_str_t *value)
{
    return ngx_stream_complex_value(s, val, value);
}
