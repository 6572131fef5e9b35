-- Every live lease. Payload: {id|record, ...}.
local now = now_ms()
local expired = prune(now)
local out = {}
local all = redis.call('HGETALL', K_LEASES)
for i = 1, #all, 2 do
  if alive(decode(all[i + 1])) then out[#out + 1] = all[i] .. '|' .. all[i + 1] end
end
return {'ok', now, out, expired}
