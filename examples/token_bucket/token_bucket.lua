-- Token bucket: take `cost` tokens if the bucket holds them; it refills `rate` tokens per
-- second, up to `capacity`, from the time of its last refill.
-- @key bucket   hash: tokens, ts (the last refill, in ms)
-- @arg capacity the most tokens the bucket holds (a missing bucket starts full)
-- @arg rate     tokens added per second
-- @arg now_ms   the caller's clock in milliseconds (passed in, so every form agrees)
-- @arg cost     tokens this call takes
-- @return {1 if taken else 0, tokens left}
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(held[1]) or capacity
local ts = tonumber(held[2]) or now
local add = 0
if now > ts then
  add = math.min(capacity - tokens, math.floor((now - ts) * rate / 1000))
end
local taken = 0
if tokens + add >= cost then
  taken = 1
end
tokens = tokens + add - taken * cost
if add > 0 or held[2] == false then
  ts = now
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', ts)
return {taken, tokens}
