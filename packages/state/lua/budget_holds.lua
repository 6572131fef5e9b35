-- Live holds as a flat list: id, amount, expiry ms, id, amount, expiry, ...
prune(now_ms())
local out = {}
local entries = redis.call('ZRANGE', K_EXPIRY, 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local amount = redis.call('HGET', K_HOLDS, entries[i])
  if amount then
    out[#out + 1] = entries[i]
    out[#out + 1] = amount
    out[#out + 1] = entries[i + 1]
  end
end
return out
