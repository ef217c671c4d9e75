-- Fixed-window rate limiter: allow at most `limit` hits per window of `window` seconds.
-- The first hit of a window creates the counter with its expiry, so windows need no cleanup.
-- @key counter  the counter of the current window (e.g. rl:{user}:minute)
-- @arg limit    hits allowed per window
-- @arg window   window length in seconds
-- @return {allowed (1 or 0), hits in this window, milliseconds until the window resets}
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local hits = redis.call('INCR', KEYS[1])
if hits == 1 then
  redis.call('EXPIRE', KEYS[1], window)
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('EXPIRE', KEYS[1], window)
  ttl = window * 1000
end
if hits > limit then
  return {0, hits, ttl}
end
return {1, hits, ttl}
