-- wrk script: every request carries "X-Key: u<n>", n a counter that cycles
-- through NKEYS distinct values (default 1,000,000), i.e. NKEYS distinct
-- clients for a limiter keyed on $http_x_key.
--
--   wrk -t2 -c32 -d10s -s bench/keys.lua http://127.0.0.1:PORT/path -- NKEYS OFFSET NTHREADS
--
-- The key space is cut into NTHREADS equal slices (pass wrk's -t), and
-- thread t cycles through slice t mod NTHREADS, so that with NTHREADS = -t
-- no two threads send the same key (default 1: all threads share the whole
-- space). A thread starts OFFSET keys into its slice (pass a different one
-- per run so that successive runs keep meeting keys not seen for a while).
-- No response() callback: defining one makes wrk parse every header into Lua
-- and slows the client down; wrk's own "Non-2xx or 3xx responses" count is
-- what bench.sh checks.

local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

local n, first, last, prefix
local suffix = "\r\n\r\n"

function init(args)
  local nkeys = tonumber(args[1]) or 1000000
  local offset = tonumber(args[2]) or 0
  local nthreads = tonumber(args[3]) or 1
  local slice = math.max(1, math.floor(nkeys / nthreads))
  local t = (tid or 0) % nthreads
  first = t * slice
  last = first + slice - 1
  n = first + offset % slice
  local host = wrk.headers["Host"] or wrk.host
  prefix = "GET " .. wrk.path .. " HTTP/1.1\r\nHost: " .. host .. "\r\nX-Key: u"
end

function request()
  n = n + 1
  if n > last then n = first end
  return prefix .. n .. suffix
end
