-- The live lease ARGV[1], whoever holds it. Payload: {id|record} or {}.
local id = ARGV[1]
local now = now_ms()
local expired = prune(now)
local rec = redis.call('HGET', K_LEASES, id)
if not rec then return {'ok', now, {}, expired} end
return {'ok', now, {id .. '|' .. rec}, expired}
