-- The live lease ARGV[1], whoever holds it. Payload: {id|record} or {}.
local id = ARGV[1]
local now = now_ms()
local expired = prune(now)
local l = live(id)
if not l then return {'ok', now, {}, expired} end
return {'ok', now, {id .. '|' .. encode(l)}, expired}
