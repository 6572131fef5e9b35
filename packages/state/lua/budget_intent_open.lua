-- Intent before a paid attempt: append it to the intents stream and make it
-- a pending entry of this router's consumer at once (XCLAIM … FORCE), so a
-- router that dies leaves it pending — and idle — for another to find with
-- XAUTOCLAIM. KEYS[1] intents stream; ARGV[1] group, ARGV[2] consumer,
-- ARGV[3] the intent (JSON). Returns the entry id (its time is Redis' clock
-- at the attempt's start, next to the hold's).
local id = redis.call('XADD', KEYS[1], '*', 'i', ARGV[3])
local ok = redis.pcall('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'FORCE', 'JUSTID')
if type(ok) == 'table' and ok.err then
  -- The group is gone (Redis restarted empty): make it and claim again.
  redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'FORCE', 'JUSTID')
end
return id
