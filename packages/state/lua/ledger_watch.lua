-- What a router needs to know of the ledger stream to let go of the rows it
-- appended (RedisLedgerBuffer keeps each until it has left the stream):
-- which Redis this is, and where the stream starts. KEYS[1] the ledger
-- stream, KEYS[2] the ledger's mark; ARGV[1] a fresh random name, written
-- as the mark where there is none.
-- Returns {identity, length, first entry id, last generated id}; the ids
-- are '' for a stream that does not exist.
--
-- The identity is the server's run_id (new at every restart and on the
-- replica a failover promotes, whether or not it kept the data: a restart
-- from an AOF loses the last second of appends all the same) and the mark
-- (gone with the data, so a FLUSHALL or a lost Cluster shard shows too).
-- A router that sees a new identity appends again every row it still keeps.
local mark = redis.call('GET', KEYS[2])
if not mark then
  redis.call('SET', KEYS[2], ARGV[1])
  mark = ARGV[1]
end
-- INFO may be renamed away on a managed Redis: then the mark alone tells.
local ok, info = pcall(redis.call, 'INFO', 'server')
local run = ok and type(info) == 'string' and string.match(info, 'run_id:(%w+)') or ''
local identity = run .. ':' .. mark
if redis.call('EXISTS', KEYS[1]) == 0 then return {identity, 0, '', ''} end
local x = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #x, 2 do f[x[i]] = x[i + 1] end
local first = ''
if type(f['first-entry']) == 'table' then first = f['first-entry'][1] end
return {identity, f['length'], first, f['last-generated-id']}
