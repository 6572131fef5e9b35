-- Current counters after dropping expired holds: {spent, held, version}.
prune(now_ms())
local spent, held, version = counters()
return {spent, held, version}
