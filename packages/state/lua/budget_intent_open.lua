-- Intent before a paid attempt: append it to the intents stream and make it
-- a pending entry of this router's consumer at once (XCLAIM … FORCE), so a
-- router that dies leaves it pending — and idle — for another to find with
-- XAUTOCLAIM. KEYS[1] intents stream, KEYS[2] the attempt's opened mark;
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] the intent (JSON), ARGV[4] how
-- long the mark lives (ms). Returns the entry id (its time is Redis' clock
-- at the attempt's start, next to the hold's).
--
-- Once per attempt: a client resends a command whose reply a broken
-- connection lost (ioredis does, after reconnecting), and Redis runs it
-- again. The first run's intent is the one to answer with: a second would
-- be pending on this router with no one to retire it, and finished later
-- by an orphan finisher at its hold.
local opened = redis.call('GET', KEYS[2])
if opened then return opened end
local id = redis.call('XADD', KEYS[1], '*', 'i', ARGV[3])
local ok = redis.pcall('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'FORCE', 'JUSTID')
if type(ok) == 'table' and ok.err then
  -- The group is gone (Redis restarted empty): make it and claim again.
  redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'FORCE', 'JUSTID')
end
redis.call('SET', KEYS[2], id, 'PX', ARGV[4])
return id
