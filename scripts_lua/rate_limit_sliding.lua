-- Sliding-window rate limiter on a sorted set: one member per accepted hit, scored by
-- time. Refused hits are not recorded, so a client that keeps retrying is not locked out.
-- @key log      sorted set of accepted hits (member = request id, score = ms)
-- @arg now_ms   the caller's clock in milliseconds (passed in, so the script is deterministic)
-- @arg window_ms  window length in milliseconds
-- @arg limit    hits allowed per window
-- @arg member   a unique id for this hit (e.g. a UUID)
-- @return {allowed (1 or 0), hits in the window after this call}
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
  return {0, count}
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], window)
return {1, count + 1}
