-- wrk script: every request carries "X-Key: u<n>", n a counter that cycles
-- through NKEYS distinct values (default 1,000,000), i.e. NKEYS distinct
-- clients for a limiter keyed on $http_x_key.
--
--   wrk -t2 -c32 -d10s -s bench/keys.lua http://127.0.0.1:PORT/path -- NKEYS OFFSET
--
-- Each thread walks its own slice of the key space, starting at OFFSET (pass
-- a different one per run so that successive runs keep meeting new keys).
-- No response() callback: defining one makes wrk parse every header into Lua
-- and slows the client down; wrk's own "Non-2xx or 3xx responses" count is
-- what bench.sh checks.

local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
  thread:set("nthreads", threads)
end

local n, nkeys, prefix
local suffix = "\r\n\r\n"

function init(args)
  nkeys = tonumber(args[1]) or 1000000
  local offset = tonumber(args[2]) or 0
  local t = tid or 0
  -- spread the threads over the key space (8 slices is plenty for -t1..-t8)
  n = (offset + t * math.floor(nkeys / 8)) % nkeys
  local host = wrk.headers["Host"] or wrk.host
  prefix = "GET " .. wrk.path .. " HTTP/1.1\r\nHost: " .. host .. "\r\nX-Key: u"
end

function request()
  n = n + 1
  if n >= nkeys then n = 0 end
  return prefix .. n .. suffix
end
