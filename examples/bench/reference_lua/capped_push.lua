-- Hand-written reference of examples/operations/capped_push.toml: the same replies, writes
-- and errors as the generated op_capped_push.lua (every write attempted), written as a person
-- would. examples/bench/generated_vs_hand.py times one against the other.
-- @key entries the list, newest first
-- @arg entry the entry to push
-- @arg cap how many entries to keep
-- @return {entries kept, entries trimmed}
local entry, cap = ARGV[1], ARGV[2]
if entry == nil then
  return redis.error_reply('ERR argument entry is not valid')
end
if cap == nil or not (cap == '0' or string.match(cap, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument cap is not valid')
end
local n = tonumber(cap)
if n >= 9007199254740992 or n <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local last = n - 1
if last <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local length = redis.pcall('LPUSH', KEYS[1], entry)
local trimmed = redis.pcall('LTRIM', KEYS[1], '0', string.format('%d', last))
if type(length) == 'table' and length.err then
  return length
end
if type(trimmed) == 'table' and trimmed.err then
  return trimmed
end
local dropped = length - n
if dropped >= 9007199254740992 or dropped <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
return {math.min(length, n), math.max(0, dropped)}
