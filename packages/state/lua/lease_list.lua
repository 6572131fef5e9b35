-- Every live lease. Payload: {id|record, ...}.
-- Also, since every router polls this: forgets the fence field of each worker
-- whose last lease ended more than ARGV[1] ms ago (the fabric's
-- leases.fenceIdleS), at most 1000 a call. Without this the fence hash keeps
-- one field per worker id ever leased, and ids without --id are new at every
-- worker start. Safe because tokens come from one global sequence: a grant
-- after the prune takes a fresh token, larger than any granted before; only
-- a token taken longer than the bound ago (a router cannot hold one that
-- long: it takes a fresh one per pass of a wait) could pass where the field
-- would have refused it, and the worker still refuses it on its own.
local idle = tonumber(ARGV[1])
local now = now_ms()
local expired = prune(now)
if idle and idle > 0 then
  -- Fields written before the fenced index existed get one, from now: they
  -- age out like the rest. (Every write since sets both, so this runs once.)
  if redis.call('ZCARD', K_FENCED) < redis.call('HLEN', K_FENCE) then
    for _, w in ipairs(redis.call('HKEYS', K_FENCE)) do redis.call('ZADD', K_FENCED, 'NX', now, w) end
  end
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', K_FENCED, '-inf', now - idle, 'LIMIT', 0, 1000)) do
    local current = redis.call('HGET', K_WORKERS, w)
    local l = current and live(current)
    if l then
      -- A live lease's expiry is later than now, so its score is too; kept all the same.
      redis.call('ZADD', K_FENCED, l.expires, w)
    else
      redis.call('HDEL', K_FENCE, w)
      redis.call('ZREM', K_FENCED, w)
    end
  end
end
local out = {}
local all = redis.call('HGETALL', K_LEASES)
for i = 1, #all, 2 do
  if alive(decode(all[i + 1])) then out[#out + 1] = all[i] .. '|' .. all[i + 1] end
end
return {'ok', now, out, expired}
