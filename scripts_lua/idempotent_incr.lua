-- Idempotent counter: add `amount` once per request id, so a client that retries after a
-- timeout cannot count twice. The id is remembered for `ttl` seconds.
-- @key counter  the counter
-- @key seen     marker key for this request id (e.g. seen:{counter}:<request id>)
-- @arg amount   how much to add
-- @arg ttl      seconds to remember the request id
-- @return {counter value, 1 if applied now or 0 if this request id was already applied}
local done = redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[2]))
if not done then
  return {tonumber(redis.call('GET', KEYS[1]) or '0'), 0}
end
return {redis.call('INCRBY', KEYS[1], ARGV[1]), 1}
