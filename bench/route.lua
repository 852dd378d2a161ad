-- wrk script: POST /route (or $ROUTE_BENCH_PATH) with 2,000-token prompts from 16 families, each
-- request with a unique request_id (bookings expire via booking_ttl_s).
dofile(os.getenv("ROUTE_BENCH_DIR") .. "/bodies.lua")
local counter = 0
tid = 0
function setup(thread)
  tid = tid + 1
  thread:set("tid", tid)
end
function init(args)
  math.randomseed(tid * 7919)
end
function request()
  counter = counter + 1
  local body = string.format(bodies[math.random(#bodies)], "t" .. tid .. "-" .. counter)
  return wrk.format("POST", os.getenv("ROUTE_BENCH_PATH") or "/route", {["Content-Type"] = "application/json"}, body)
end
-- ROUTE_BENCH_DELAY_MS: each connection waits this long before its next
-- request, so the request rate is set by the client (about connections x
-- 1000 / (delay + latency) per second) and two servers compare at the same
-- rate: a server's CPU per request depends on how busy it is.
local pause = tonumber(os.getenv("ROUTE_BENCH_DELAY_MS") or "")
if pause then
  function delay()
    return pause
  end
end
local codes = {}
function response(status, headers, body)
  if status ~= 200 then
    codes[status] = (codes[status] or 0) + 1
    if (codes[status] or 0) == 1 then io.stderr:write("status " .. status .. ": " .. body .. "\n") end
  end
end
