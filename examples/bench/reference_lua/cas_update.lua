-- Hand-written reference of examples/operations/cas_update.toml: the same replies, writes
-- and errors as the generated op_cas_update.lua, written as a person would.
-- examples/bench/generated_vs_hand.py times one against the other.
-- @key record the hash
-- @arg field the field
-- @arg expected the value it must hold
-- @arg new the value to write
-- @return {swapped (1 or 0), the old value or nil}
local field, expected, new = ARGV[1], ARGV[2], ARGV[3]
if field == nil then
  return redis.error_reply('ERR argument field is not valid')
end
if expected == nil then
  return redis.error_reply('ERR argument expected is not valid')
end
if new == nil then
  return redis.error_reply('ERR argument new is not valid')
end
local current = redis.call('HGET', KEYS[1], field)
if current ~= expected then
  return {0, current}
end
local reply = redis.pcall('HSET', KEYS[1], field, new)
if type(reply) == 'table' and reply.err then
  return reply
end
return {1, current}
